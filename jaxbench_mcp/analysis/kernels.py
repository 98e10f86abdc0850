"""What a traced candidate contains: its Pallas kernels (grid, blocks, scratch), host callbacks, the HBM
traffic of its BlockSpecs, and how much of each kernel body's code a grid step runs (pl.when skips,
in-kernel loops).

Everything here reads a jaxpr; nothing runs the kernel.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
from jax.extend.core import Literal

from jaxbench_mcp.analysis import replay as kr
from jaxbench_mcp.catalog.targets import LANES, MXU_PUSH_MACS as _MXU_PUSH_MACS
from jaxbench_mcp.internals import jaxpr as jx
from jaxbench_mcp.internals.jaxpr import walk_eqns as _walk_eqns
from jaxbench_mcp.internals.libtpu import mosaic_kernel_name
from jaxbench_mcp.internals.pallas import (
    KERNEL_PRIMITIVES as _KERNELS,
    MESH_KERNEL_PRIMITIVES as _MESH_KERNELS,
    Block,
    PallasCallInfo,
    grid_axis,
    mesh_kernel_body,
    pallas_call_info,
    tensorcore_mesh,
)

HOST_CALLBACKS = {"pure_callback", "io_callback", "callback", "debug_callback"}


def _read(env: dict, var):
    return var.val if isinstance(var, Literal) else env[var]


# Relabellings: a bitcast in XLA's program when they merge or split major dimensions, as a wrapper's do.
_RELABEL = {"reshape", "squeeze", "expand_dims"}


def is_relabel(eqn) -> bool:
    """A reshape, squeeze or expand_dims, or a broadcast that only adds dimensions of size 1 (jnp.expand_dims)."""
    name = eqn.primitive.name
    if name == "broadcast_in_dim":
        return math.prod(eqn.outvars[0].aval.shape) == math.prod(eqn.invars[0].aval.shape)
    return name in _RELABEL


def _run_eqns(eqns, env: dict, grid_index=(), grid=(), on_kernel=None, relabelled: set | None = None) -> None:
    """eval_jaxpr's loop, except that plain calls (jit, custom_jvp/vjp/vmap) are inlined (binding them again
    would need a lowering platform when the jaxpr was traced under an abstract TPU mesh), program_id /
    num_programs are answered from the grid, and a Pallas kernel, if `on_kernel` is given, is replaced by
    on_kernel(eqn, inputs) -> its outputs. `relabelled`, a set of value ids, takes in the id of every relabelling
    (is_relabel) of a value already in it."""
    for eqn in eqns:
        inputs = [_read(env, v) for v in eqn.invars]
        name = eqn.primitive.name
        if name == "program_id":
            outs = [grid_index[grid_axis(eqn)]]
        elif name == "num_programs":
            outs = [grid[grid_axis(eqn)]]
        elif on_kernel is not None and name in _KERNELS:
            outs = on_kernel(eqn, inputs)
        elif (body := jx.call_body(eqn)) is not None:  # a plain call: inlined
            inner = dict(zip(body.jaxpr.constvars, body.consts, strict=True))
            inner.update(zip(body.jaxpr.invars, inputs, strict=True))
            _run_eqns(body.jaxpr.eqns, inner, grid_index, grid, on_kernel, relabelled)
            outs = [_read(inner, v) for v in body.jaxpr.outvars]
        else:
            out = eqn.primitive.bind(*inputs, **eqn.params)
            outs = out if eqn.primitive.multiple_results else [out]
            if relabelled is not None and is_relabel(eqn) and id(inputs[0]) in relabelled:
                relabelled.add(id(outs[0]))
        env.update(zip(eqn.outvars, outs, strict=True))


def _evaluate_index_map(closed, grid_index) -> list:
    env = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
    # The grid indices come first; the scalar-prefetch refs after them get no value (callers evaluate only maps
    # that do not read them).
    env |= dict(zip(closed.jaxpr.invars, grid_index, strict=False))
    _run_eqns(closed.jaxpr.eqns, env)
    return [_read(env, v) for v in closed.jaxpr.outvars]


def _nbytes(aval) -> int:
    """Bytes of a scratch buffer; semaphores and other non-array scratch count as 0."""
    try:
        return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
    except (TypeError, AttributeError):
        return 0


# What the vector registers (64 of 4 KiB) hold of a kernel's kept values: the compiler's VMEM is the values' size
# less 0.16-0.19 MiB (a 4 MiB f32 matmul result kept across a pl.when: 3.81 MiB on v6e and v5e; a staged bf16 LHS:
# its size less 0.16 MiB on v5e, tiles of 256 to 2048 rows). The rest of the register file serves the operations.
REGISTER_HELD_BYTES = 48 * 4096

# Primitives that combine a whole axis of their operand before anything downstream can use their result.
_REDUCTIONS = frozenset(
    {
        "reduce_sum",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
        "reduce_and",
        "reduce_or",
        "reduce_xor",
        "argmax",
        "argmin",
        "cumsum",
        "cumprod",
        "cummax",
        "cummin",
        "cumlogsumexp",
    }
)


def _value_vmem_bytes(aval) -> int:
    from jaxbench_mcp.perf import cost_model

    try:
        return cost_model.padded_block_bytes(list(aval.shape), str(aval.dtype))
    except (TypeError, AttributeError, ValueError):
        return 0


# Primitives that work vreg by vreg: a value read only by these streams through registers however often it is read.
_ELEMENTWISE = frozenset(
    "add sub mul div rem max min neg abs sign exp exp2 log log1p expm1 tanh logistic sqrt rsqrt cbrt pow "
    "integer_pow square erf erfc erf_inv sin cos tan atan2 floor ceil round is_finite nextafter clamp "
    "convert_element_type select_n eq ne lt le gt ge and or not xor shift_left shift_right_logical "
    "shift_right_arithmetic".split()
)


def _is_elementwise(eqn) -> bool:
    """An elementwise primitive, or a plain call of elementwise ones only (jnp's floor_divide and remainder are
    jitted functions)."""
    if eqn.primitive.name in _ELEMENTWISE:
        return True
    body = jx.call_body(eqn)
    return body is not None and _elementwise_body(body.jaxpr)


@functools.lru_cache(maxsize=256)
def _elementwise_body(jaxpr) -> bool:
    return all(_is_elementwise(inner) for inner in jaxpr.eqns)


# Besides elementwise work, what the scheduler recomputes per vreg from a value in VMEM (kept, or a ref's) rather
# than keep a second one.
_BROADCASTS = frozenset({"broadcast_in_dim", "reshape"})


def _is_region(eqn) -> bool:
    """A region of control flow (a pl.when, a loop): the scheduler does not move work across it."""
    return eqn.primitive.name in ("cond", "while", "scan")


def _is_reduction(eqn) -> bool:
    """A reduction (it needs all of its operand before anything can use its result), or a plain call (jit) holding
    one or a region."""
    if eqn.primitive.name in _REDUCTIONS or _is_region(eqn):
        return True
    body = jx.call_body(eqn)
    return body is not None and any(_is_reduction(inner) for inner in body.jaxpr.eqns)


def _last_wait(jaxpr) -> list[int]:
    """For each equation, the latest reduction or region before it that it must wait for (-1 for none): the latest
    region before it (the scheduler keeps regions in order), or a reduction whose result it reads, directly or
    through others. One pass: a hostile kernel body can be long."""
    waits: list[int] = []
    produced: dict = {}
    region = -1
    for i, eqn in enumerate(jaxpr.eqns):
        wait = max([region] + [produced.get(v, -1) for v in eqn.invars if not isinstance(v, Literal)])
        waits.append(wait)
        for v in eqn.outvars:
            produced[v] = i if _is_reduction(eqn) else wait
        if _is_region(eqn):
            region = i
    return waits


def _among(v, values: set | frozenset) -> bool:
    """Whether an equation's operand is one of `values`; a literal (a constant such as lax.cond's 2.0) never is, and
    cannot be hashed."""
    return not isinstance(v, Literal) and v in values


# Rows up to which 7x stages a matmul the small way (_dot_staging): benchmarks/vmem_sweeps.py's dots group.
SMALL_DOT_ROWS_7X = 1024


def _lhs_columns(jaxpr) -> dict:
    """For each value some 2-D matmuls read as their left operand, the columns of all their results together: two
    matmuls of one MXU tile each read it as often as one of two tiles (3p's projections of one latent block to
    keys and values)."""
    columns: dict = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "dot_general":
            continue
        (_, rhs_contract), batch = eqn.params["dimension_numbers"]
        a, b = eqn.invars[:2]
        if any(batch) or _literal_or_not_2d(a) or _literal_or_not_2d(b):
            continue
        columns[a] = columns.get(a, 0) + b.aval.shape[1 - rhs_contract[0]]
    return columns


def _literal_or_not_2d(v) -> bool:
    return isinstance(v, Literal) or len(getattr(v.aval, "shape", ())) != 2


def _dot_staging(eqn, loaded: set, mxu: int, small_rows: int = 0, lhs_columns: dict | None = None) -> int:
    """The VMEM a 2-D dot_general takes while it runs (its result streams into its consumer, the acc += dot of a
    GEMM, and is kept only when something holds it: body_values_bytes), for a chip whose MXU is `mxu` wide.
    Measured on a sweep of GEMM tiles (M 128-2048, K 256-2048, N 128-1024; NN and NT, bf16 and f32) with
    benchmarks/vmem_fidelity.py's "used" figure, the compiler's VMEM less the blocks and accumulator:
    - K above 512 splits the product: an f32 (M, mxu) partial tile of the result is staged (v6e 512 x 768 x 1024:
      0.36 MiB, modelled 0.5; v5e 512 x 640 x 1024: 0.80, modelled 0.25 + the LHS below);
    - a bf16 LHS is staged (relaid from its block's 8-row tiling to the 16-row vreg layout) when several
      MXU-wide column tiles of the result read it: on a 128-wide MXU (v4, v5e, v5p) always (8p's 1024 x 512 x 1024
      on v5e: 0.84 MiB, modelled 1.0); on a 256-wide one (v6e, 7x) only from K = 1024 (1024 x 1024 x 1024: 2.83
      MiB over, modelled 3.0; K = 512: 0 with the LHS read straight from its ref, about its size computed).
    An f32 LHS is never staged; N of one MXU tile reads it once, but the columns of every matmul that reads the
    same LHS count together (_lhs_columns: 3p's key and value projections of one latent block, one 128-wide tile
    each, stage it on v5e and v5p: 0.82 MiB, modelled 0.81). A chip that stages matmuls of up to `small_rows`
    rows the small way (7x: SMALL_DOT_ROWS_7X) stages no partial tile for them, and their LHS only when more than
    two MXU-wide column tiles read it: 7x's 1024 x 1024 x 512 and 1024 x 2048 x 512 stage nothing (v6e: 2.30 and
    4.35 MiB), its 1024 x 1024 x 1024 and 1024 x 2048 x 1024 the LHS alone (1.82 and 3.82 MiB; v6e 2.82, 4.86)."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    a, b = eqn.invars[:2]
    if lhs_batch or rhs_batch or _literal_or_not_2d(a) or _literal_or_not_2d(b):
        return 0
    depth = a.aval.shape[lhs_contract[0]]
    rows, columns = a.aval.shape[1 - lhs_contract[0]], b.aval.shape[1 - rhs_contract[0]]
    from jaxbench_mcp.perf import cost_model

    small = rows <= small_rows
    tile = cost_model.padded_block_bytes([rows, min(columns, mxu)], "float32") if depth > 512 and not small else 0
    read_by = max(columns, (lhs_columns or {}).get(a, 0))
    reread = read_by > (2 * mxu if small else mxu) and a.aval.dtype.itemsize == 2
    if mxu >= 256:
        reread = reread and (depth >= 1024 or (depth <= 512 and not _among(a, loaded)))
    return tile + (_value_vmem_bytes(a.aval) if reread else 0)


# How wide a strip of its operand a reduction over rows converts and keeps at once (lanes): benchmarks/vmem_fidelity.py
COLUMN_STRIP_LANES = 512


def _column_reduction_staging(eqn, loaded: set, whole: set) -> int:
    """The VMEM a reduction over the rows of tiles (the second-minor axis, not the lanes) takes while it runs when its
    operand is computed and not kept whole anyway: the operand is made whole a strip of COLUMN_STRIP_LANES lanes at a
    time, all its rows. Measured on column sums over (R, C) blocks (v6e, v5e), the compiler's VMEM beyond the
    blocks: sum(x.astype(f32), axis=0) of bf16 blocks 0.81 MiB for R = 512 and 1.81 for 1024, whatever C from 1024
    to 4096 (a (R, 512) f32 strip less what the registers hold); the same sum of an f32 block read from its ref: 0;
    a mean over a leading axis (17p's (C, bi, bj) slab) adds whole vregs and stages nothing."""
    if eqn.primitive.name not in _REDUCTIONS or not eqn.invars:
        return 0
    operand = eqn.invars[0]
    if _among(operand, loaded) or _among(operand, whole):
        return 0
    shape: tuple = getattr(operand.aval, "shape", ())
    axes = eqn.params.get("axes", ())
    if len(shape) < 2 or len(shape) - 2 not in axes or len(shape) - 1 in axes:
        return 0
    return _value_vmem_bytes(operand.aval.update(shape=(*shape[:-1], min(shape[-1], COLUMN_STRIP_LANES))))


# How many vregs one tile of rows of an epilogue's value must span before the scheduler keeps the epilogue's values
# whole rather than working through them a tile of rows at a time: benchmarks/vmem_sweeps.py's rows group (8192 and
# 4096 lanes kept, 2048 and fewer streamed).
EPILOGUE_ROW_TILE_VREGS = 32


def _row_tile_vregs(aval) -> int:
    """The vregs one tile of rows of a value spans: one per LANES lanes (a packed dtype's tile is taller, not wider)."""
    shape: tuple = getattr(aval, "shape", ())
    return -(-shape[-1] // LANES) if len(shape) >= 2 else 0


def _is_view(eqn, loaded: set) -> bool:
    """A reshape of a value read from a ref that keeps its (8, 128) tiles whole (it merges or splits leading
    dimensions only): Mosaic reads the ref again rather than keeping it."""
    if eqn.primitive.name != "reshape" or not _among(eqn.invars[0], loaded):
        return False
    before, after = eqn.invars[0].aval.shape, eqn.outvars[0].aval.shape
    return len(before) >= 2 and len(after) >= 2 and before[-1] == after[-1] and before[-2] % 8 == after[-2] % 8 == 0


def _loop_carry_bytes(eqn) -> int:
    """VMEM a loop's carried values take while it runs (kept from one trip to the next)."""
    name = eqn.primitive.name
    if name == "scan":
        carry = jx.scan_parts(eqn, eqn.invars)[1]
    elif name == "while":
        w = jx.while_info(eqn)
        carry = eqn.invars[w.cond_nconsts + w.body_nconsts :]
    else:
        return 0
    return sum(_value_vmem_bytes(v.aval) for v in carry if hasattr(v.aval, "shape"))


# Of the softmax-like values streamed into both a row reduction and a matmul (p = exp(s - max): recomputed vreg by
# vreg, not kept) in one stretch of unrolled code, the share the LLO scheduler keeps of each copy before the last
# (heads, batch elements, trips) while the copies after it run: half of the first, two-thirds of each later one.
# benchmarks/vmem_sweeps.py's copies group (an online-softmax step unrolled 1-8 times, f32 scores of 128-1024 rows x
# 512-2048 keys; the same whether the copies are written out or a loop unrolls them), per copy before the last:
# 2 copies 0.06-0.86 of one copy's scores (mean 0.5 on v6e, v5e and 7x), 4 and 8 copies 0.55-0.81 on v6e and 7x
# with 256 rows or more, 0.36-0.8 on v5e.
FIRST_UNROLLED_FORK_KEPT = 0.5
UNROLLED_FORK_KEPT = 0.65


def _unrolled_kept(copies_before: int, nbytes: int) -> int:
    """What the scheduler keeps of `copies_before` unrolled copies' streamed softmax-like values of `nbytes` each."""
    if copies_before < 1:
        return 0
    return round(nbytes * (FIRST_UNROLLED_FORK_KEPT + UNROLLED_FORK_KEPT * (copies_before - 1)))


def body_values_bytes(jaxpr, mxu: int = 256, loaded: frozenset = frozenset(), small_dot_rows: int = 0) -> int:
    """VMEM the intermediate values of a kernel body take at their peak, for a chip whose MXU is `mxu` wide and which
    stages matmuls of up to `small_dot_rows` rows the small way (_dot_staging; 0: none, 7x: SMALL_DOT_ROWS_7X) (before
    what the registers hold: kernel_values_bytes): a model of what Mosaic and the LLO scheduler keep in VMEM,
    compared with the compiler by benchmarks/vmem_fidelity.py. A value streams through the registers vreg by vreg
    unless
        - an equation that must wait for a later reduction or region reads it (_last_wait): softmax's logits, read
          again after their row max; RMSNorm's f32 copy of its block, read after the row mean (4 MiB for (128, 8192)
          bf16, as compiled); a matmul result computed before a pl.when and accumulated after it;
        - it is read more than once, once by an operation that is neither elementwise nor a reduction (a slice, a
          roll, a concatenate: a convolution's matmul result cut into taps). Read only elementwise (jnp's jitted //
          and % included), however often, it streams (26k's (y + b) * y, 31k's GELU: their blocks alone compiled);
        - its readers lead through elementwise chains to a matmul and to something else (_forks_into_a_matmul:
          15p's decayed scores, read by |a|.sum() and a @ v; not on a chip that stages the matmul the small way:
          _into_a_small_dot), or to two reductions (_forks_into_reductions),
          unless it is recomputed vreg by vreg from a value kept whole anyway (flash attention's exp(s - max), from
          the s its row max keeps). Recomputable from a ref alone is not enough: exp(z - max) of (512, 2048) f32
          scores read from their ref, then by a row sum and p @ v, keeps 3.02 MiB beyond the blocks on v6e
          (benchmarks/vmem_sweeps.py's scores group; modelled 3.81 now, 0.06 before);
        - it is an epilogue of a reduction: computed elementwise from the reduction's result and a value of its own
          shape that is kept whole, read by something other than a matmul, and wide (a tile of its rows spans at
          least EPILOGUE_ROW_TILE_VREGS vregs). 42k's gelu(z - max(z)) over (64, 8192) f32 keeps z - max(z) as
          well as z (4.00 MiB beyond the blocks, as compiled; 3.81 modelled); at 2048 lanes or fewer the
          scheduler works a tile of rows at a time and keeps nothing more (flash attention's exp(s - max) and
          its (bq, 128) row statistics stream);
        - it is a loop's carry (while the loop runs);
        - it is a softmax-like value streamed into a row reduction and a matmul (flash attention's p) after the
          first such value in one stretch of unrolled code: a share of it (_unrolled_kept), to the body's end (5p's four
          batch elements per step: 11.76 MiB compiled on v6e, 10.31 modelled without this rule); a loop that
          unrolls n trips counts its body's such values n times;
        - it is held and was made elementwise from another held value of its shape whose rows span one vreg (128
          lanes or fewer): half of that one stays beside it (28k's LayerNorm centres its 64-lane rows, then reads
          them after their variance: 6.96 MiB compiled on v6e, 5.81 modelled without this rule;
          benchmarks/vmem_sweeps.py's norms group).
    A value read straight from a ref (or a reshape of one that keeps its tiles) is read again instead of kept. A
    dot_general takes its staging while it runs (_dot_staging), and so does a sum over the rows of a computed value
    (_column_reduction_staging). A nested body's (pl.when branch, loop) own peak
    counts on top of what is live around it; a pl.when branch's own peak counts on top of the peak of all the
    unconditional code before it, whose room the compiler does not give the branch: 32k's last-step logsumexp over
    its accumulator (4 MiB of f32 held for the row max) after a step's two matmuls (v6e: 27.11 MiB compiled, 23.32
    modelled without this rule), benchmarks/vmem_sweeps.py's branches group (4.0 MiB more with the accumulation
    before the epilogue than with it in a branch of its own). Two branches share their room."""
    return _values_and_forks(jaxpr, mxu, loaded, small_dot_rows)[0]


def _values_and_forks(jaxpr, mxu: int, loaded: frozenset, small_dot_rows: int) -> tuple[int, int]:
    """body_values_bytes, and the bytes of the body's streamed softmax-like values (of which unrolled copies of the
    body keep a share: _unrolled_kept)."""
    nested: dict = {}  # what the nested bodies take, per equation: the same in both passes
    peak, forks = _body_values(jaxpr, mxu, loaded, small_dot_rows, frozenset(), nested)
    if len(forks) >= 2:
        # Again, now that the last copy is known: each copy before it keeps its share while those after it run.
        peak = _body_values(jaxpr, mxu, loaded, small_dot_rows, frozenset(i for i, _ in forks[:-1]), nested)[0]
    return peak, sum(b for _, b in forks)


def _body_values(
    jaxpr, mxu: int, loaded: frozenset, small_dot_rows: int, shared: frozenset, nested: dict
) -> tuple[int, list[tuple[int, int]]]:
    """body_values_bytes's pass over a body, with a share (_unrolled_kept) of the streamed softmax-like values made by
    the equations in `shared` kept to the body's end; and those values, as (equation, bytes)."""
    from_refs: set = set(loaded)  # values read straight from a ref, and views of them
    last: dict = {}
    readers: dict = {}
    waits = _last_wait(jaxpr)
    for i, eqn in enumerate(jaxpr.eqns):
        if eqn.primitive.name == "get" or _is_view(eqn, from_refs):
            from_refs.update(eqn.outvars)
        for v in eqn.invars:
            if not isinstance(v, Literal):
                last[v] = i
                readers.setdefault(v, []).append(i)
    for v in jaxpr.outvars:
        if not isinstance(v, Literal):
            last[v] = len(jaxpr.eqns)
    sinks = _sinks(jaxpr)
    lhs_columns = _lhs_columns(jaxpr)
    whole: set = set()  # values kept whole in VMEM (while live)
    off_whole: set = set()  # values recomputable vreg by vreg from those
    kept: set = set()  # those, and values recomputable vreg by vreg from them or from refs
    reduced: set = set()  # values computed from a reduction's result
    live: dict = {}
    forks: list[tuple[int, int]] = []  # the streamed softmax-like values: (equation, bytes)
    overlap = 0  # what the unrolled copies so far keep of theirs
    copies_kept = 0  # how many of them
    peak = 0
    before = 0  # the peak of the unconditional code so far (pl.when branches aside)
    for i, eqn in enumerate(jaxpr.eqns):
        staging = (
            _dot_staging(eqn, from_refs, mxu, small_dot_rows, lhs_columns) if eqn.primitive.name == "dot_general" else 0
        )
        staging += _column_reduction_staging(eqn, from_refs, whole)
        if i not in nested:
            nested[i] = _nested_values(eqn, from_refs, mxu, small_dot_rows)
        inner = nested[i]
        here = sum(live.values()) + overlap + inner + staging
        if eqn.primitive.name == "cond":
            here = max(here, before + inner)  # a branch's room comes after all the room the code before it took
        else:
            before = max(before, here)
        peak = max(peak, here)
        # A value read for the last time here leaves its room to the results (an elementwise op works in place).
        for v in [v for v in live if last.get(v, -1) <= i]:
            del live[v]
        recomputable = (_is_elementwise(eqn) or eqn.primitive.name in _BROADCASTS) and any(
            _among(u, kept) or _among(u, from_refs) for u in eqn.invars
        )
        from_whole = recomputable and any(_among(u, whole) or _among(u, off_whole) for u in eqn.invars)
        after_reduction = any(_among(u, reduced) for u in eqn.invars)
        if after_reduction or eqn.primitive.name in _REDUCTIONS:
            reduced.update(eqn.outvars)
        for v in eqn.outvars:
            if not hasattr(v.aval, "shape") or v in from_refs:
                continue
            read = readers.get(v, [])
            reshaped = len(read) > 1 and any(
                not _is_elementwise(jaxpr.eqns[j]) and jaxpr.eqns[j].primitive.name not in _REDUCTIONS for j in read
            )
            held = any(waits[j] > i for j in read)
            epilogue = (
                after_reduction
                and _is_elementwise(eqn)
                and any(_among(u, whole) and u.aval.shape == v.aval.shape for u in eqn.invars)
                and _row_tile_vregs(v.aval) >= EPILOGUE_ROW_TILE_VREGS
                and any(jaxpr.eqns[j].primitive.name != "dot_general" for j in read)
            )
            forking = _forks_into_a_matmul(v, read, jaxpr, sinks)
            if (
                epilogue
                or reshaped
                or held
                or (
                    not from_whole
                    and (
                        (forking and not _into_a_small_dot(v, jaxpr, sinks, small_dot_rows))
                        or _forks_into_reductions(v, read, jaxpr, sinks)
                    )
                )
            ):
                live[v] = _value_vmem_bytes(v.aval)
            elif forking and any(jaxpr.eqns[j].primitive.name in _REDUCTIONS for j in read):
                nbytes = _value_vmem_bytes(v.aval)
                forks.append((i, nbytes))
                if i in shared:
                    overlap += _unrolled_kept(copies_kept + 1, nbytes) - _unrolled_kept(copies_kept, nbytes)
                    copies_kept += 1
            if held and _is_elementwise(eqn) and _row_tile_vregs(v.aval) <= 1:
                # A narrow held value made from another (LayerNorm's centred rows from its rows): half of that one
                # stays beside it.
                before_it = [u for u in eqn.invars if _among(u, whole) and u.aval.shape == v.aval.shape]
                if before_it:
                    companion = object()
                    live[companion] = _value_vmem_bytes(before_it[0].aval) // 2
                    last[companion] = last.get(v, i)
            if v in live:
                whole.add(v)
            if v in live or recomputable:
                kept.add(v)
            if from_whole:
                off_whole.add(v)
        peak = max(peak, sum(live.values()) + overlap)
    return peak, forks


def _nested_values(eqn, from_refs: set, mxu: int, small_dot_rows: int) -> int:
    """The peak of the bodies an equation holds (pl.when branches, a loop's body with its carry), for
    _body_values."""
    inner = 0
    if eqn.primitive.name == "cond":  # a branch sees the values the cond passes it (after its index)
        for branch in jx.cond_branches(eqn):
            operands = zip(branch.jaxpr.invars, eqn.invars[1:], strict=True)  # the index is not passed
            passed = frozenset(b for b, v in operands if _among(v, from_refs))
            inner = max(inner, body_values_bytes(branch.jaxpr, mxu, passed, small_dot_rows))
        return inner
    copies = kr.unrolled_copies(jx.scan_info(eqn)) if eqn.primitive.name == "scan" else 1
    for sub in jx.sub_jaxprs(eqn):
        peak, forks = _values_and_forks(sub, mxu, frozenset(), small_dot_rows)
        inner = max(inner, peak + _unrolled_kept(copies - 1, forks))
    return inner + _loop_carry_bytes(eqn)


def _sinks(jaxpr) -> dict:
    """For each value, where the elementwise chains reading it end (equation indices; len(eqns) for the body's
    results), as much as _forks_into_a_matmul asks: at most two of them, a matmul among them when there is one (a
    hostile body can be long, and whole sets would grow with it)."""
    end = len(jaxpr.eqns)

    def merge(found: tuple, more: tuple) -> tuple:
        both = list(dict.fromkeys(found + more))
        dots = [j for j in both if j < end and jaxpr.eqns[j].primitive.name == "dot_general"][:1]
        return tuple(dots + [j for j in both if j not in dots][: 2 - len(dots)])

    found: dict = {v: (end,) for v in jaxpr.outvars if not isinstance(v, Literal)}
    for j in range(end - 1, -1, -1):
        eqn = jaxpr.eqns[j]
        reached: tuple = (j,)
        if _is_elementwise(eqn):
            reached = ()
            for o in eqn.outvars:
                reached = merge(reached, found.get(o, ()))
        for v in eqn.invars:
            if not isinstance(v, Literal):
                found[v] = merge(found.get(v, ()), reached)
    return found


def _forks_into_a_matmul(v, read: list, jaxpr, sinks: dict) -> bool:
    """A value whose readers lead, through elementwise chains, to a matmul and to something else (a row reduction,
    a store): the matmul reads its operand in its own order, so the value is kept whole rather than recomputed
    (15p's decayed scores, read by |a|.sum() and by a @ v)."""
    return (
        len(read) > 1
        and len(sinks.get(v, ())) > 1
        and any(e.primitive.name == "dot_general" for e in _sink_eqns(v, jaxpr, sinks))
    )


def _sink_eqns(v, jaxpr, sinks: dict) -> list:
    """The equations where the elementwise chains reading a value end (_sinks), the body's results aside."""
    return [jaxpr.eqns[j] for j in sinks.get(v, ()) if j < len(jaxpr.eqns)]


def _into_a_small_dot(v, jaxpr, sinks: dict, small_rows: int) -> bool:
    """Whether the matmul a value's elementwise chains lead to has at most `small_rows` rows, which a chip that
    stages such matmuls the small way (7x: SMALL_DOT_ROWS_7X) feeds from the registers: the value forking into it
    and into a row reduction is then not kept whole (benchmarks/vmem_sweeps.py's decay group: 7x keeps 0.08-0.36
    MiB of (512-1024, 512-2048) decayed f32 scores, v6e 3.30-3.35 of the larger ones)."""
    dots = [e for e in _sink_eqns(v, jaxpr, sinks) if e.primitive.name == "dot_general"]
    if not small_rows or not dots:
        return False
    (lhs_contract, _), _ = dots[0].params["dimension_numbers"]
    lhs = dots[0].invars[0]
    shape = getattr(lhs.aval, "shape", ())
    return len(shape) == 2 and shape[1 - lhs_contract[0]] <= small_rows


def _forks_into_reductions(v, read: list, jaxpr, sinks: dict) -> bool:
    """A value whose readers lead, through elementwise chains, to two reductions (a row sum of p and of p * p): kept
    whole rather than recomputed for the second (benchmarks/vmem_sweeps.py's scores group, (512, 2048) f32 on v6e:
    3.82 MiB beyond the blocks)."""
    return len(read) > 1 and sum(e.primitive.name in _REDUCTIONS for e in _sink_eqns(v, jaxpr, sinks)) > 1


def kernel_values_bytes(jaxpr, mxu: int = 256, small_dot_rows: int = 0) -> int:
    """VMEM a kernel body's values take beyond what the vector registers hold (body_values_bytes, less
    REGISTER_HELD_BYTES)."""
    return max(0, body_values_bytes(jaxpr, mxu, small_dot_rows=small_dot_rows) - REGISTER_HELD_BYTES)


def _block_buffers(block, grid) -> int:
    """VMEM buffers the pipeline gives a block: pl.Buffered(n)'s n; else two (the next block is fetched while the
    kernel works on this one) when its index map reads a grid axis of more than one step, one when its index is
    the same at every step. Measured (benchmarks/vmem_fidelity.py's "used" figure, v6e and v5e): a (0, 0) block
    of a (4, 4) grid, one indexed by an axis of one step, by i * 0 or by a scalar-prefetch value alone, and an
    output written at (0, 0) over the whole grid each take one buffer; blocks indexed by an axis of 4 steps two."""
    if block.buffer_count is not None:
        return max(1, block.buffer_count)
    jaxpr = block.index_map.jaxpr
    # The index map's trailing invars are scalar-prefetch refs, which no grid axis drives.
    moving = {v for v, n in zip(jaxpr.invars, grid, strict=False) if not isinstance(n, int) or n > 1}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "mul" and any(isinstance(v, Literal) and v.val == 0 for v in eqn.invars):
            continue  # i * 0: the compiler folds it
        if any(v in moving for v in eqn.invars if not isinstance(v, Literal)):
            moving.update(eqn.outvars)
    return 2 if any(v in moving for v in jaxpr.outvars if not isinstance(v, Literal)) else 1


def describe_kernels(jaxpr) -> tuple[list[dict], list[str]]:
    """The pallas_calls in a jaxpr (grid, block shapes, semantics) and any host callbacks."""
    kernels, callbacks = [], []
    for eqn in _walk_eqns(jaxpr):
        name = eqn.primitive.name
        if name in HOST_CALLBACKS:
            callbacks.append(name)
        if name in _MESH_KERNELS:
            kernels.append(
                {
                    "name": name,
                    "grid": [],
                    "blocks": [],
                    "num_scalar_prefetch": 0,
                    "num_scratch": 0,
                    "scratch_bytes": 0,
                    "dimension_semantics": [],
                }
            )
            continue
        if name != "pallas_call":
            continue
        info = pallas_call_info(eqn)
        kernel_jaxpr = info.kernel
        scratch_avals = [v.aval for v in kernel_jaxpr.invars[len(kernel_jaxpr.invars) - info.num_scratch :]]
        kernels.append(
            {
                "name": info.name,
                "grid": list(info.grid),
                "blocks": [
                    {
                        "block_shape": [d.size for d in block.block_shape],
                        "array_shape": list(block.array_shape),
                        "dtype": str(block.dtype),
                        "in_hbm": block.in_hbm,
                        "buffers": _block_buffers(block, info.grid),
                    }
                    for block in info.blocks
                ],
                "num_scalar_prefetch": info.num_scalar_prefetch,
                "num_scratch": info.num_scratch,
                "scratch_bytes": sum(_nbytes(a) for a in scratch_avals),
                "dimension_semantics": list(info.dimension_semantics),
                "vmem_limit_bytes": info.vmem_limit_bytes,
                "body_values_bytes": kernel_values_bytes(kernel_jaxpr, 256),
                "body_values_bytes_mxu128": kernel_values_bytes(kernel_jaxpr, 128),
                "body_values_bytes_7x": kernel_values_bytes(kernel_jaxpr, 256, SMALL_DOT_ROWS_7X),
                "scratch": [
                    {
                        "shape": [int(d) for d in a.shape],
                        "dtype": str(a.dtype),
                        "memory_space": str(getattr(a, "memory_space", "") or ""),
                    }
                    for a in scratch_avals
                    if hasattr(a, "shape") and hasattr(a, "dtype")
                ],
            }
        )
    return kernels, callbacks


def kernel_traffic(jaxpr, known: dict[int, list] | None = None) -> list[dict]:
    """Per Pallas kernel: grid steps, the HBM bytes it moves over the whole grid, and how much of its code a
    step runs (see kernel_replay).

    `known` (kernel_replay.known_kernel_operands) holds the operands known before each kernel runs: with them
    a grid dimension known only at run time gets its value, scalar-prefetch index maps and in-kernel loop
    bounds are followed, and predicates on scalar-prefetch values are decided. Index maps are evaluated at
    every grid point (vectorised); a BlockSpec block is fetched again whenever its index changes between
    consecutive steps; manual DMAs count the bytes each executed dma_start moves. What cannot be followed
    is said: `steps_exact` (a run-time grid dimension is bounded by the blocks its index maps address, or
    counted as 1 without such a bound), `exact` (traffic), `run_ratio_exact` (branches and loop trips).
    `kernel` is the name of the Mosaic module the kernel compiles to, which names its schedule in libtpu's dump.
    """
    results = []
    for eqn, runs, runs_exact in _walk_runs(jaxpr):
        if eqn.primitive.name in _MESH_KERNELS or eqn.primitive.name == "pallas_call":
            results.append(
                {
                    **_kernel_traffic(eqn, (known or {}).get(id(eqn))),
                    **operand_floor(eqn),
                    "kernel": _mosaic_name(eqn),
                    "call_shapes": call_shapes(eqn),
                    "runs": runs,
                    "runs_exact": runs_exact,
                }
            )
    return results


def operand_floor(eqn) -> dict:
    """The work a kernel's operands imply, whatever its grid and loops do: reading every array input and writing
    every output once (`floor_bytes`, of which `floor_written_bytes` written), and, for a kernel that does matmuls,
    a matmul of its first matrix input into its first output when they share their rows (x (.., M, K) -> out
    (.., M, N): 2 x out elements x K FLOPs, `floor_flops`; else 0). A bound for when the replay cannot follow the
    kernel (an unknown trip count)."""

    def arrays(vs):
        return [
            v.aval
            for v in vs
            if getattr(v.aval, "shape", None) is not None
            and not hasattr(v.aval, "inner_aval")
            and _elements(v) > 64
            and hasattr(v.aval, "dtype")
        ]

    ins, outs = arrays(eqn.invars), arrays(eqn.outvars)

    def nbytes(avals) -> int:
        return sum(int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize for a in avals)

    flops = 0.0
    body = mesh_kernel_body(eqn) if eqn.primitive.name in _MESH_KERNELS else pallas_call_info(eqn).kernel
    has_dot = any(e.primitive.name == "dot_general" for e in _walk_eqns(body))
    matrices = [a for a in ins if len(a.shape) >= 2 and np.issubdtype(a.dtype, np.floating)]
    if has_dot and matrices and outs and len(outs[0].shape) >= 2:
        x, out = matrices[0], outs[0]
        if x.shape[-2] == out.shape[-2] or x.shape[0] == out.shape[0]:
            flops = 2.0 * float(np.prod(out.shape, dtype=np.float64)) * x.shape[-1]
    return {"floor_bytes": nbytes(ins + outs), "floor_written_bytes": nbytes(outs), "floor_flops": flops}


def _walk_runs(jaxpr, runs: int = 1, exact: bool = True):
    """Every equation with how often it runs: a scan's body `length` times, a while loop's body its trip count
    when the loop counts from a constant to a constant (fori_loop), else once and inexact."""
    for eqn in jaxpr.eqns:
        yield eqn, runs, exact
        name = eqn.primitive.name
        if name == "scan":
            yield from _walk_runs(jx.scan_info(eqn).body.jaxpr, runs * jx.scan_info(eqn).length, exact)
        elif name == "while":
            loop = jx.while_info(eqn)
            trips = _while_trips(eqn)
            yield from _walk_runs(loop.cond.jaxpr, runs * (trips or 1), exact and trips is not None)
            yield from _walk_runs(loop.body.jaxpr, runs * (trips or 1), exact and trips is not None)
        else:
            for sub in jx.sub_jaxprs(eqn):
                yield from _walk_runs(sub, runs, exact)


def _while_trips(eqn) -> int | None:
    """The trips of a while loop `i < n` (n a constant or a loop-invariant carry), `i += 1`, whose initial carry
    is made of constants; None otherwise."""
    loop = jx.while_info(eqn)
    carry = eqn.invars[loop.cond_nconsts + loop.body_nconsts :]
    cond, body = loop.cond.jaxpr, loop.body.jaxpr
    if len(cond.eqns) != 1 or cond.eqns[0].primitive.name != "lt":
        return None
    c_carry = cond.invars[loop.cond_nconsts :]
    b_carry = body.invars[loop.body_nconsts :]

    def initial(var):
        if isinstance(var, Literal):
            return int(var.val)
        if var in c_carry:
            k = c_carry.index(var)
            if isinstance(carry[k], Literal) and body.outvars[k] is b_carry[k]:  # loop-invariant
                return int(carry[k].val)
        return None

    lhs, rhs = cond.eqns[0].invars
    if isinstance(lhs, Literal) or lhs not in c_carry:
        return None
    k = c_carry.index(lhs)
    start, stop = (int(carry[k].val) if isinstance(carry[k], Literal) else None), initial(rhs)
    step = next((e for e in body.eqns if body.outvars[k] in e.outvars), None)
    if start is None or stop is None or step is None or step.primitive.name != "add":
        return None
    a, b = step.invars
    if not any(v is b_carry[k] for v in (a, b)) or not any(isinstance(v, Literal) and v.val == 1 for v in (a, b)):
        return None
    return max(0, stop - start)


def call_shapes(eqn) -> str:
    """The kernel call's operand and result shapes, "8192x7168,7168x576->8192x576": as libtpu's dump shows the custom
    call (internals/libtpu.call_shapes), so that kernels sharing a name still find their schedules."""

    def dims(variables) -> str:
        return ",".join("x".join(str(d) for d in v.aval.shape) for v in variables)

    return f"{dims(eqn.invars)}->{dims(eqn.outvars)}"


def _mosaic_name(eqn) -> str | None:
    """The name jax gives the kernel's Mosaic module: its traced body's (pallas_call's name=, else the kernel
    function's). (A mesh kernel of several bodies shares one module named after its last body, not the first read
    here: it then pairs only when alone.)"""
    body = mesh_kernel_body(eqn) if eqn.primitive.name in _MESH_KERNELS else pallas_call_info(eqn).kernel
    func_name = getattr(getattr(body, "debug_info", None), "func_name", None)
    return mosaic_kernel_name(func_name) if func_name else None


def _dynamic_grid_bound(info: PallasCallInfo, axis: int) -> int | None:
    """An upper bound on a grid dimension known only at run time: the number of blocks an index map that
    passes that grid index straight through addresses (more steps would read out of bounds)."""
    bounds = []
    for bm in info.blocks:
        closed = bm.index_map
        invar = closed.jaxpr.invars[axis]
        for k, out in enumerate(closed.jaxpr.outvars):
            block = bm.block_shape[k].size or 1
            if out is invar and k < len(bm.array_shape):
                bounds.append(-(-bm.array_shape[k] // block))
    return min(bounds) if bounds else None


def _index_map_blocks(bm: Block, points, grid, prefetch):
    """The block index of `bm` at every grid point, shape (P, ndim), or None when it depends on unknowns."""
    closed = bm.index_map
    replay = kr.KernelReplay(grid, points)
    env = {v: kr._const(c) for v, c in zip(closed.jaxpr.constvars, closed.consts, strict=True)}
    n_grid = len(grid)
    env.update({v: kr.Known(points[d], lanes=True) for d, v in enumerate(closed.jaxpr.invars[:n_grid])})
    for v, value in zip(closed.jaxpr.invars[n_grid:], prefetch, strict=True):
        env[v] = kr.RefBox("smem", None if value is None else kr.Known(value))
    replay.run(closed.jaxpr, env, np.arange(replay.P))
    outs = [replay._read(env, v) for v in closed.jaxpr.outvars]
    if any(o is None for o in outs):
        return None
    return np.stack([np.broadcast_to(o.v, (replay.P,)) for o in outs], axis=1) if outs else np.zeros((replay.P, 0))


def block_fetches(block_indices) -> np.ndarray:
    """Per grid step, whether a pipelined BlockSpec moves its block: at the first step and at every index change."""
    idx = np.asarray(block_indices)
    if idx.ndim == 1:
        idx = idx[:, None]
    if not len(idx):
        return np.zeros(0, bool)
    return np.concatenate([[True], np.any(idx[1:] != idx[:-1], axis=1)])


def copies_in_flight(fetches: np.ndarray, written: bool) -> np.ndarray:
    """Per grid step, the copies of one BlockSpec the pipeline has in flight while the step runs: an input block is
    fetched during the step before its first (the first one before the grid starts, counted at step 0); an output
    block is written back during the step after its last (the last one after the grid, counted at the last step).
    On a v5e, 256-row blocks each held for two steps and worked on at one of them: 166 us when the work is on the
    second step (the next block's fetch runs under it), 230 us on the first (benchmarks/grid_steps.py)."""
    moving = np.zeros(len(fetches))
    if not len(fetches):
        return moving
    if written:
        moving[1:] = fetches[1:]
        moving[-1] += 1
    else:
        moving[:-1] = fetches[1:]
        moving[0] += fetches[0]
    return moving


# Steps whose work-to-bytes ratios are within 2 ** (1 / STEP_MIX_BINS_PER_OCTAVE) of each other share a group.
STEP_MIX_BINS_PER_OCTAVE = 2


def step_mix(work: np.ndarray, moved: np.ndarray) -> list[tuple[float, float, float]]:
    """The grid's steps grouped by their ratio of work to HBM bytes: per group, its share of the kernel's work, of
    its bytes and of the steps that move any; empty when every step has about the same ratio. A step's DMAs overlap
    the compute of the step beside it, not of steps far away: a decode batch whose sequences all sit in the first
    query block computes there, while the other steps only move their query and output blocks (jax's ragged paged
    attention with 8 short sequences: 331 us on a v5e, 248 estimated as max(compute, memory) of the whole grid)."""
    total_work, total_bytes = float(work.sum()), float(moved.sum())
    if len(work) < 2 or total_work <= 0 or total_bytes <= 0:
        return []
    w, b = work / total_work, moved / total_bytes
    s = (moved > 0) / max(1, int((moved > 0).sum()))
    with np.errstate(divide="ignore", invalid="ignore"):
        octaves = np.log2(w / b)
    # Steps with no work, or no bytes, form groups of their own; the rest are binned by their ratio.
    keys = np.where(b <= 0, 1 << 20, np.where(w <= 0, -(1 << 20), np.round(octaves * STEP_MIX_BINS_PER_OCTAVE)))
    keys = np.where((w <= 0) & (b <= 0), 0, keys)
    groups, where = np.unique(keys, return_inverse=True)
    if len(groups) < 2:
        return []
    shares = [np.bincount(where, weights=x, minlength=len(groups)) for x in (w, b, s)]
    return [(float(x), float(y), float(z)) for x, y, z in zip(*shares, strict=True) if x > 0 or y > 0]


def _kernel_traffic(eqn, operands: list | None) -> dict:
    if eqn.primitive.name in _MESH_KERNELS:
        body = mesh_kernel_body(eqn)
        # A TensorCore mesh's cores run the body at once, each on its own share (axis_index): one lane per core.
        core_axis, cores = tensorcore_mesh(eqn) or (None, 1)
        replay = kr.KernelReplay([], np.zeros((0, cores), np.int32), core_axis=core_axis)
        env = {}
        n_operands = len(eqn.invars) + len(eqn.outvars)
        for i, v in enumerate(body.invars):
            value = operands[i] if operands is not None and i < len(operands) else None
            space = kr._space(v.aval)
            if i >= n_operands:  # scratch
                env[v] = kr.scratch_box(v.aval)
            else:
                env[v] = kr.RefBox(space, kr.Known(value) if value is not None and "smem" in space else None)
        replay.run(body, env, np.arange(cores))
        summary = kr.summarise(replay, kr.scheduled_work(body, replay.removed))
        dma_lanes = replay.dma["read"] + replay.dma["written"]
        dma = float(dma_lanes.sum())
        if dma > 0:
            moved, written = dma, float(replay.dma["written"].sum())
        else:  # copies we could not follow: each operand read and each result written once
            moved = sum(_nbytes(v.aval) for v in (*eqn.invars, *eqn.outvars))
            written = sum(_nbytes(v.aval) for v in eqn.outvars)
        # The busiest core sets the time: its share of the matmul pushes (else of the vector ops, else of the bytes).
        loads = (replay.mxu[False] + replay.mxu[True], replay.vec[False] + replay.vec[True], dma_lanes)
        load = next((w for w in loads if w.sum() > 0), None)
        return {
            "steps": 1,
            "steps_exact": True,
            "hbm_bytes": int(moved),
            "hbm_written_bytes": int(written),
            "exact": dma > 0 and replay.trips_exact,
            "run_ratio_exact": replay.exact,
            "dma_bytes": int(dma),
            "cores": cores,
            "core_share": float(load.max() / load.sum()) if load is not None else 1.0 / cores,
            **summary,
        }

    info = pallas_call_info(eqn)
    n_refs = sum(1 for v in eqn.invars if hasattr(v.aval, "inner_aval"))
    n_dynamic = sum(1 for g in info.grid if not isinstance(g, int))
    operands = operands if operands is not None else [None] * len(eqn.invars)
    dynamic = operands[n_refs : n_refs + n_dynamic]
    prefetch = operands[n_refs + n_dynamic : n_refs + n_dynamic + info.num_scalar_prefetch]
    grid, steps_exact, dynamic_values = [], True, iter(dynamic)
    for axis, g in enumerate(info.grid):
        if isinstance(g, int):
            grid.append(g)
            continue
        value = next(dynamic_values)
        if value is not None:
            grid.append(int(np.asarray(value).reshape(-1)[0]))
            continue
        steps_exact = False
        grid.append(_dynamic_grid_bound(info, axis) or 1)
    steps = int(np.prod(grid, dtype=np.int64)) if grid else 1
    semantics = [d.lower() for d in info.dimension_semantics]
    parallel_steps = int(
        # No dimension_semantics given (an empty tuple): every axis is "arbitrary", none parallel.
        np.prod(
            [g for g, d in zip(grid, semantics, strict=False) if "parallel" in d and "core" not in d], dtype=np.int64
        )
    )
    if steps > kr.MAX_LANES:
        points = None
    else:
        points = np.indices(grid).reshape(len(grid), -1).astype(np.int32) if grid else np.zeros((0, 1), np.int32)
    total: float = 0  # bytes; the DMAs followed add a float
    written = 0.0  # of which written back to HBM (the outputs' blocks, the copies into HBM)
    exact = True
    step_bytes = np.zeros(points.shape[1] if points is not None else 0)  # what the BlockSpecs move at each step
    for position, bm in enumerate(info.blocks):
        shape = [d.size or 1 for d in bm.block_shape]
        block_bytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(bm.dtype).itemsize
        whole = int(np.prod(bm.array_shape, dtype=np.int64)) * np.dtype(bm.dtype).itemsize
        if bm.in_hbm:
            continue  # moved by the kernel's own DMAs, counted below
        indices = _index_map_blocks(bm, points, grid, prefetch) if points is not None and grid else None
        if indices is None:
            moved = block_bytes * steps if grid else whole
            exact = exact and not grid
            step_bytes += block_bytes
        else:
            fetches = block_fetches(indices)
            moved = int(fetches.sum()) * block_bytes
            step_bytes += copies_in_flight(fetches, position >= info.num_inputs) * block_bytes
        total += moved
        written += moved if position >= info.num_inputs else 0
    kernel_jaxpr = info.kernel
    if points is None:
        return {
            "steps": steps,
            "steps_exact": steps_exact,
            "hbm_bytes": int(total),
            "hbm_written_bytes": int(written),
            "exact": False,
            "run_ratio": 1.0,
            "run_ratio_exact": False,
            "body_ratio": 1.0,
            "loop_ratio": 1.0,
            "flat_ratio": 1.0,
            "in_kernel_loops": 0,
            "dma_bytes": 0,
            "parallel_steps": parallel_steps,
            "mxu_pushes": 0.0,
        }
    n_prefetch = info.num_scalar_prefetch
    kernel_operands = operands[n_refs + n_dynamic :]  # scalar prefetch, then inputs
    n_scratch = info.num_scratch

    def kernel_env() -> dict:
        env = {}
        for i, v in enumerate(kernel_jaxpr.invars):
            space = "smem" if i < n_prefetch else kr._space(v.aval)
            if i >= len(kernel_jaxpr.invars) - n_scratch:
                env[v] = kr.scratch_box(v.aval)
                continue
            value = kernel_operands[i] if i < len(kernel_operands) and ("smem" in space) else None
            env[v] = kr.RefBox(space, kr.Known(value) if value is not None else None)
        return env

    replay = kr.replay_kernel(kernel_jaxpr, grid, points, kernel_env)
    sched = kr.scheduled_work(kernel_jaxpr, replay.removed)
    summary = kr.summarise(replay, sched)
    dma = float(replay.dma["read"].sum() + replay.dma["written"].sum())
    if dma <= 0 and any(bm.in_hbm for bm in info.blocks):
        # Manual copies we could not follow: each such operand once (a lower bound), at steps unknown.
        step_bytes = np.zeros(0)
        for position, bm in enumerate(info.blocks):
            if bm.in_hbm:
                whole = int(np.prod(bm.array_shape, dtype=np.int64)) * np.dtype(bm.dtype).itemsize
                total += whole
                written += whole if position >= info.num_inputs else 0
                exact = False
    total += dma
    written += float(replay.dma["written"].sum())
    exact = exact and replay.trips_exact
    # Each step's work in the unit its run ratio is weighed in (kernel_replay.summarise), where the replay followed
    # every step: one that could not sees the same work everywhere.
    unit = kr.work_unit(sched)
    work = replay.tally[unit][False] + replay.tally[unit][True]
    mixed = replay.exact and replay.trips_exact and len(step_bytes) == len(work)
    if mixed:
        step_bytes = step_bytes + replay.dma["read"] + replay.dma["written"]
    return {
        "steps": steps,
        "steps_exact": steps_exact,
        "hbm_bytes": int(total),
        "hbm_written_bytes": int(written),
        "exact": exact,
        "run_ratio_exact": replay.exact,
        "dma_bytes": int(dma),
        "parallel_steps": parallel_steps,
        "step_mix": step_mix(work, step_bytes) if mixed else [],
        # A step whose blocks stay and that starts no copy waits on no DMA (its fixed cost is its bundles').
        "moving_steps": int((step_bytes > 0).sum()) if mixed else steps,
        **summary,
    }


def _elements(var) -> int:
    shape = getattr(getattr(var, "aval", None), "shape", None)
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def _mxu_pushes(eqn) -> float:
    if eqn.primitive.name != "dot_general":
        return 0.0
    (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
    k = 1
    for d in lhs_contracting:
        k *= eqn.invars[0].aval.shape[d]
    return k * _elements(eqn.outvars[0]) / _MXU_PUSH_MACS


def executed_work(jaxpr, unit=_mxu_pushes) -> tuple[float, bool]:
    """The work one run of a kernel body does, and whether that figure is exact (see _eqn_executed_work)."""
    total, exact = 0.0, True
    for eqn in jaxpr.eqns:
        work, eqn_exact = _eqn_executed_work(eqn, unit)
        total, exact = total + work, exact and eqn_exact
    return total, exact


def _eqn_executed_work(eqn, unit) -> tuple[float, bool]:
    """A scan runs its body `length` times; a cond runs one branch (the heaviest is assumed: inexact
    unless all weigh the same); a while loop runs an unknown number of times (once is counted: inexact)."""
    name = eqn.primitive.name
    if name == "scan":
        scan = jx.scan_info(eqn)
        work, exact = executed_work(scan.body.jaxpr, unit)
        return scan.length * work, exact
    if name == "cond":
        branches = [executed_work(b.jaxpr, unit) for b in jx.cond_branches(eqn)]
        return max(w for w, _ in branches), len({w for w, _ in branches}) == 1 and all(e for _, e in branches)
    subs = [executed_work(sub, unit) for sub in jx.sub_jaxprs(eqn)]
    if not subs:
        return unit(eqn), True
    return sum(w for w, _ in subs), name != "while" and all(e for _, e in subs)


def _kernels_in_place(jaxpr) -> list | None:
    """The Pallas kernel equations in evaluation order, looking through plain calls; None when a kernel
    sits inside a loop, a branch or any other body that does not run exactly once."""
    found = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _KERNELS:
            found.append(eqn)
        elif (body := jx.call_body(eqn)) is not None:  # a plain call runs once: its kernels are in place
            inner = _kernels_in_place(body.jaxpr)
            if inner is None:
                return None
            found += inner
        elif any(e.primitive.name in _KERNELS for sub in jx.sub_jaxprs(eqn) for e in _walk_eqns(sub)):
            return None
    return found


def outside_kernels(closed):
    """The traced program with its Pallas kernels cut out, for XLA to cost the work that remains.

    Returns (fn, kernel_output_structs): fn takes the program's (non-static) arguments followed by every
    kernel's outputs, and returns every computed value that fed a kernel plus the program's computed
    outputs, so XLA keeps (and costs) the work around the kernels but nothing inside them. Values that are
    only passed through (an argument, a kernel output, or a relabelling of one: the reshapes around a kernel) or
    known before the program runs (its constants and literals) are not returned: returning them would add copies
    that the real program does not make. None when a kernel sits inside a loop or a branch, or when no kernel is
    found.
    """
    kernels = _kernels_in_place(closed.jaxpr)
    if not kernels:
        return None
    structs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for eqn in kernels for v in eqn.outvars]
    num_args = len(closed.jaxpr.invars)

    def remaining(*values):
        passed_through = {id(v) for v in values}  # arguments and kernel outputs
        kernel_outputs = iter(values[num_args:])
        kept = []

        def cut_out(eqn, inputs):
            for x in inputs:
                # A value known before the program runs (a constant, or a literal: 7p's expert passes an i32[2]) is
                # held by the executable: nothing to compute.
                if isinstance(x, jax.core.Tracer) and id(x) not in passed_through:
                    kept.append(x)
                    passed_through.add(id(x))  # returned once, however many kernels read it
            return [next(kernel_outputs) for _ in eqn.outvars]

        env = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
        env.update(zip(closed.jaxpr.invars, values[:num_args], strict=True))
        _run_eqns(closed.jaxpr.eqns, env, on_kernel=cut_out, relabelled=passed_through)
        results = [_read(env, v) for v in closed.jaxpr.outvars]
        return kept + [r for r in results if hasattr(r, "shape") and id(r) not in passed_through]

    return remaining, structs
