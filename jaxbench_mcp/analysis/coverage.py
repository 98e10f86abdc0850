"""Facts about a traced candidate that hold at the production size, found without running it.

- full_size_coverage: which output elements no grid step writes and which input elements no grid step
  reads, from each pallas_call's grid and BlockSpec index maps (evaluated over the whole grid at once).
- program_structure: the shape-free outline of a program, to tell whether the small and the full size run the
  same program (checking/rules compares two outlines).
- kernel_work / program_work / outside_work: the FLOPs and HBM bytes of a program's Pallas kernels and of the
  XLA work around them (checking/rules judges the share).

Everything returns plain data (dicts, lists, strings). Nothing here runs a kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from jaxbench_mcp.analysis import kernels as ka
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.catalog.targets import MXU_PUSH_MACS
from jaxbench_mcp.internals import jaxpr as jx
from jaxbench_mcp.internals.pallas import (
    KERNEL_PRIMITIVES,
    MESH_KERNEL_PRIMITIVES,
    Block,
    mesh_kernel_body,
    pallas_call_info,
)

# ---- full-size coverage -------------------------------------------------------------------------

# Primitives that only relabel elements: every element of the result is one element of the operand and
# vice versa. An operand reached from a workload input through these alone is still "that input" (all of
# it is read exactly when all of the operand is), though a region is then named in the operand's layout.
_RELABEL = {"reshape", "squeeze", "expand_dims", "transpose", "convert_element_type", "copy", "copy_p", "reshard"}

# Primitives whose result depends on every element of every array operand (elementwise maps, reductions,
# contractions, layout changes, concatenation). Garbage in any operand element can reach the result, so a
# kernel output that reaches the program's output only through these must be written everywhere.
# Deliberately absent: slicing, gathers, dynamic_update_slice, scatter, select_n, pad and anything else
# that may drop or overwrite elements (a kernel may legitimately leave a region that is later sliced
# away or overwritten unwritten).
_DENSE = _RELABEL | {
    "transpose",
    "broadcast_in_dim",
    "concatenate",
    "rev",
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "argmax",
    "argmin",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "dot_general",
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "tanh",
    "logistic",
    "sqrt",
    "rsqrt",
    "cbrt",
    "sin",
    "cos",
    "tan",
    "erf",
    "erfc",
    "erf_inv",
    "square",
    "integer_pow",
    "pow",
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "max",
    "min",
    "atan2",
    "nextafter",
    "is_finite",
    "not",
    "and",
    "or",
    "xor",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "clamp",
    "stop_gradient",
    "optimization_barrier",
}

# A coverage lattice larger than this (cells) is not analysed: the operand is reported as unknown.
_MAX_LATTICE_CELLS = 20_000_000
# How many uncovered boxes a finding spells out.
_MAX_BOXES = 4


@dataclass
class _Use:
    """One BlockSpec'd operand (or result) of one pallas_call."""

    kernel: str
    kernel_index: int
    operand_index: int  # position among the kernel's inputs, or among its outputs
    grid: list
    block_shape: list
    lo: list | None = None  # per array dim: start of each grid step's block (element index), clipped
    hi: list | None = None
    unknown: str | None = None  # why the blocks could not be followed
    # Outputs only: grid axes marked "parallel" (more than one step) along which the block never changes.
    parallel_revisits: list = field(default_factory=list)


@dataclass
class _Source:
    var: object
    view: tuple  # the shape the kernels see it as
    relabelled: bool  # reached through reshapes / converts
    uses: list = field(default_factory=list)
    other_reader: str | None = None


class _Flat:
    """A jaxpr with plain calls (jit, custom_jvp/vjp/vmap) inlined; variables are canonicalised so that a
    call's inner variables and the outer ones they stand for compare equal."""

    def __init__(self, closed):
        self.alias: dict = {}
        self.eqns: list = []  # (eqn, canonical invars, canonical outvars)
        self.in_loop_kernels = 0
        self._inline(closed.jaxpr)
        self.invars = [self.canon(v) for v in closed.jaxpr.invars]
        self.outvars = [self.canon(v) for v in closed.jaxpr.outvars]

    def canon(self, v):
        if isinstance(v, Literal):
            return v
        while v in self.alias:
            v = self.alias[v]
        return v

    def _inline(self, jaxpr):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            call = jx.call_body(eqn)
            if call is not None:
                body = call.jaxpr
                for inner, outer in zip(body.invars, eqn.invars, strict=False):
                    outer = self.canon(outer)
                    if not hasattr(outer, "val"):  # a Literal operand has nothing to alias
                        self.alias[inner] = outer
                self._inline(body)
                for outer, inner in zip(eqn.outvars, body.outvars, strict=False):
                    inner = self.canon(inner)
                    if not hasattr(inner, "val"):
                        self.alias[outer] = inner
                continue
            if name not in KERNEL_PRIMITIVES and any(
                e.primitive.name in KERNEL_PRIMITIVES for sub in jx.sub_jaxprs(eqn) for e in jx.walk_eqns(sub)
            ):
                self.in_loop_kernels += 1
            self.eqns.append((eqn, [self.canon(v) for v in eqn.invars], [self.canon(v) for v in eqn.outvars]))


def _is_var(v) -> bool:
    return not hasattr(v, "val")


def _index_map_reads_prefetch(block: Block, num_grid: int) -> bool:
    """Whether an index map uses its scalar-prefetch arguments (then it cannot be evaluated without data)."""
    jaxpr = block.index_map.jaxpr
    prefetch = set(jaxpr.invars[num_grid:])
    if not prefetch:
        return False
    return any(v in prefetch for e in jx.walk_eqns(jaxpr) for v in e.invars if _is_var(v)) or any(
        v in prefetch for v in jaxpr.outvars if _is_var(v)
    )


def _block_starts(block: Block, grid: list, points) -> list:
    """The index map's outputs at every grid point, as int64 arrays of length n_steps."""
    closed = block.index_map
    n = points.shape[1]
    if not closed.jaxpr.eqns:  # (i, 0)-style maps, most of them: read off the jaxpr, no jax dispatch (~2 ms each)
        values = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True)) | dict(
            zip(closed.jaxpr.invars, points, strict=False)
        )
        outs = [values[v] if _is_var(v) else v.val for v in closed.jaxpr.outvars]  # type: ignore[union-attr,index]
    elif grid:
        outs = jax.vmap(lambda *idx: ka._evaluate_index_map(closed, idx))(*points)
    else:
        outs = ka._evaluate_index_map(closed, ())
    return [np.broadcast_to(np.asarray(o, dtype=np.int64).reshape(-1), (n,)) for o in outs]


def _element_ranges(block: Block, indices: list) -> tuple[list, list] | str:
    """Per array dimension, the [lo, hi) element range each grid step's block covers (clipped to the
    array: a block hanging over the end of a pl.cdiv grid covers up to the end), or why it cannot be
    said."""
    lo, hi = [], []
    for dim, bd, idx in zip(block.array_shape, block.block_shape, indices, strict=False):
        if bd.kind == "Blocked":
            start, size = idx * bd.size, bd.size
        elif bd.kind == "Squeezed":
            start, size = idx, 1  # the index map returns the element index of a squeezed dimension
        elif bd.kind == "Element":
            # pl.Element indexes elements of the array padded by `padding` on each side.
            start, size = idx - bd.padding, bd.size
        else:
            return f"{bd.kind} block dimensions are not followed"
        lo.append(np.clip(start, 0, dim))
        hi.append(np.clip(start + size, 0, dim))
    return lo, hi


def _uses_of_kernel(eqn, kernel_index: int) -> tuple[list[_Use], list[_Use]]:
    """The BlockSpec'd inputs and outputs of one pallas_call, with their blocks over the whole grid."""
    info = pallas_call_info(eqn)
    grid = [g if isinstance(g, int) else None for g in info.grid]
    nin = info.num_inputs
    ins: list[_Use] = []
    outs: list[_Use] = []
    dynamic = any(g is None for g in grid)
    points = None
    if not dynamic:
        static = [g for g in grid if g is not None]  # all of them: the grid is not dynamic
        points = np.indices(static).reshape(len(grid), -1).astype(np.int32) if grid else np.zeros((0, 1), np.int32)
    for k, block in enumerate(info.blocks):
        use = _Use(
            kernel=info.name,
            kernel_index=kernel_index,
            operand_index=k if k < nin else k - nin,
            grid=[g if g is not None else "dynamic" for g in grid],
            block_shape=[d.size for d in block.block_shape],
        )
        (ins if k < nin else outs).append(use)
        if block.in_hbm:
            use.unknown = "stays in HBM (memory_space=ANY): the kernel copies it by hand"
        elif dynamic:
            use.unknown = "the grid's size is known only at run time"
        elif _index_map_reads_prefetch(block, len(grid)):
            use.unknown = "its index map reads scalar-prefetch data"
        else:
            starts = _block_starts(block, grid, points)
            if k >= nin:
                use.parallel_revisits = _parallel_revisits(starts, grid, info.dimension_semantics)
            ranges = _element_ranges(block, starts)
            if isinstance(ranges, str):
                use.unknown = ranges
            else:
                use.lo, use.hi = ranges
    return ins, outs


def _parallel_revisits(starts: list, grid: list, semantics: tuple[str, ...]) -> list[int]:
    """Grid axes marked "parallel" (or core-parallel) with more than one step along which an output's block index
    never changes: its steps write one block in turn, a reduction, which a chip that splits parallel axes across
    TensorCores (v4, v5p megacore) computes in halves that overwrite each other."""
    parallel = [
        axis
        for axis, label in enumerate(semantics)
        if "parallel" in label.lower() and axis < len(grid) and grid[axis] >= 2
    ]
    if not parallel:
        return []
    on_grid = [np.asarray(s).reshape(grid) for s in starts]
    return [
        axis
        for axis in parallel
        if all(np.array_equal(a, np.broadcast_to(np.take(a, [0], axis=axis), a.shape)) for a in on_grid)
    ]


def _coverage(shape: tuple, uses: list[_Use]):
    """Union of all the uses' blocks over an array of `shape`: (uncovered boxes, uncovered elements,
    boxes left out) or a string saying why it was not computed.

    Block edges are compressed per dimension (only the distinct start/end positions matter), so the
    lattice has one cell per run of elements that every block either fully covers or misses; a block
    then marks a box of cells through an n-dimensional difference array.
    """
    nd = len(shape)
    if nd == 0:
        covered = any(u.lo is not None and len(u.lo) == 0 for u in uses)
        return ([], 0, 0) if covered else ([((), ())], 1, 0)
    # Uses whose blocks could not be followed (u.unknown, no ranges) never reach here.
    lo = [np.concatenate([u.lo[d] for u in uses]) for d in range(nd)]  # type: ignore[index]
    hi = [np.concatenate([u.hi[d] for u in uses]) for d in range(nd)]  # type: ignore[index]
    keep = np.ones(lo[0].shape, bool)
    for d in range(nd):
        keep &= hi[d] > lo[d]  # a block entirely past the end covers nothing
    lo, hi = [x[keep] for x in lo], [x[keep] for x in hi]
    breaks = [np.unique(np.concatenate([[0, shape[d]], lo[d], hi[d]])) for d in range(nd)]
    cells = [len(b) - 1 for b in breaks]
    if math.prod(c + 1 for c in cells) > _MAX_LATTICE_CELLS:
        return f"its blocks cut it into more than {_MAX_LATTICE_CELLS} pieces"
    a = [np.searchsorted(breaks[d], lo[d]) for d in range(nd)]
    b = [np.searchsorted(breaks[d], hi[d]) for d in range(nd)]
    if all(np.all(b[d] - a[d] == 1) for d in range(nd)):
        lattice = np.zeros(cells, bool)
        lattice[tuple(a)] = True
    else:
        ext = [c + 1 for c in cells]
        counts = np.zeros(math.prod(ext), np.float64)
        for corner in range(1 << nd):
            pick = [b[d] if corner >> d & 1 else a[d] for d in range(nd)]
            sign = -1.0 if corner.bit_count() % 2 else 1.0
            counts += np.bincount(np.ravel_multi_index(pick, ext), minlength=counts.size) * sign
        counts = counts.reshape(ext)
        for d in range(nd):
            counts = np.cumsum(counts, axis=d)
        lattice = counts[tuple(slice(0, c) for c in cells)] > 0.5
    missing = ~lattice
    if not missing.any():
        return [], 0, 0
    lengths = [np.diff(br) for br in breaks]
    weight = lengths[0].astype(np.float64)
    for d in range(1, nd):
        weight = np.multiply.outer(weight, lengths[d])
    uncovered = round(float(weight[missing].sum()))
    boxes, left = _boxes(missing, breaks)
    return boxes, uncovered, left


def _boxes(missing: np.ndarray, breaks: list) -> tuple[list, int]:
    """Greedy cover of the uncovered cells by boxes (grown along the last dimension first), in element
    coordinates; returns up to _MAX_BOXES boxes and how many more boxes the rest would need at least."""
    mask = missing.copy()
    nd = mask.ndim
    boxes: list[tuple[tuple, tuple]] = []
    while mask.any() and len(boxes) < _MAX_BOXES:
        start = list(np.unravel_index(int(np.argmax(mask)), mask.shape))
        end = [s + 1 for s in start]
        for d in reversed(range(nd)):
            region = tuple(slice(start[k], end[k]) if k != d else slice(start[d], None) for k in range(nd))
            run = mask[region]
            other = tuple(k for k in range(nd) if k != d)
            full = run.all(axis=other) if other else run
            stop = int(np.argmin(full)) if not full.all() else full.size
            end[d] = start[d] + max(stop, 1)
        mask[tuple(slice(s, e) for s, e in zip(start, end, strict=True))] = False
        boxes.append(
            (tuple(int(breaks[d][start[d]]) for d in range(nd)), tuple(int(breaks[d][end[d]]) for d in range(nd)))
        )
    return boxes, int(mask.any())


def _region_text(name: str, shape: tuple, box) -> str:
    lo, hi = box
    parts = [
        ":" if (low, high) == (0, n) else (str(low) if high == low + 1 else f"{low}:{high}")
        for low, high, n in zip(lo, hi, shape, strict=True)
    ]
    return f"{name}[{', '.join(parts)}]" if parts else name


def _finding(kind: str, name: str, shape: tuple, uses: list[_Use], result) -> dict:
    boxes, uncovered, more = result
    total = math.prod(shape) if shape else 1
    regions = [_region_text(name, shape, box) for box in boxes]
    return {
        "kind": kind,
        "operand": name,
        "shape": list(shape),
        "regions": regions,
        "region": "; ".join(regions) + (" and more" if more else ""),
        "uncovered_elements": uncovered,
        "fraction_uncovered": uncovered / total if total else 0.0,
        "kernels": [
            {
                "kernel": u.kernel,
                "kernel_index": u.kernel_index,
                "operand_index": u.operand_index,
                "grid": u.grid,
                "block_shape": u.block_shape,
            }
            for u in uses
        ],
        # the first use, for a one-line message
        "kernel": uses[0].kernel,
        "operand_index": uses[0].operand_index,
        "grid": uses[0].grid,
        "block_shape": uses[0].block_shape,
    }


def _view_name(base: str, source_shape: tuple, view: tuple, relabelled: bool) -> str:
    if relabelled and tuple(view) != tuple(source_shape):
        return f"{base} (as {list(view)})"
    return base


def full_size_coverage(closed, input_names=None, output_names=None) -> dict:  # noqa: C901 - one pass, split by comments
    """Which elements of the program's outputs no grid step writes, and which elements of its inputs no
    grid step reads, judged from the pallas_calls' grids and BlockSpec index maps alone.

    `closed` is a ClosedJaxpr traced at full size (jax.make_jaxpr of the candidate on abstract inputs,
    static arguments given as static_argnums, so the jaxpr's invars are the array inputs in order).
    `input_names` names those invars (default "input 0", ...), `output_names` the outputs.

    Returns {"findings": [...], "unknown": [...], "kernels": n}. A finding is a dict:
      kind               "unwritten_output" | "unread_input"
      operand            the input/output name ("weight", "output", "x (as [32768, 8192])", ...)
      shape              the operand's shape as the kernels see it
      region, regions    e.g. "weight[:, 128000:128256]" (up to 4 boxes; "and more" when cut short)
      uncovered_elements, fraction_uncovered
      kernel, operand_index, grid, block_shape   of the first kernel that uses it;
      kernels            the same for every use
    "unknown" lists {"operand", "kernel", "reason"} for operands whose coverage could not be followed
    (scalar-prefetch index maps, memory_space=ANY with manual DMA, dynamic grids); they are never
    findings. "not_judged" lists {"operand", "reason"} for kernel operands that are not judged by design
    (an input also read outside its kernels, a kernel output that is sliced or aliased).
    "parallel_revisits" lists {"kernel", "output_index", "axis", "steps"} for every kernel output whose block stays
    the same along a grid axis marked "parallel" (see _parallel_revisits).

    What counts:
    - An input is judged only when every reader of it (through reshapes and dtype converts) is a
      BlockSpec'd pallas_call operand seen the same way, or a static slice: any other reader (an XLA op,
      a kernel that DMAs it by hand) may read the rest. Reads by all its kernels are unioned.
    - A kernel output is judged when it reaches a program output only through operations that use every
      element (elementwise maps, reductions, contractions, reshapes, converts, concatenation); one that
      is sliced, gathered, overwritten in place or selected from may legitimately leave regions unwritten.
      Outputs aliased to an input (input_output_aliases) keep the input's values where unwritten and are
      not judged.
    - pl.kernel / core_map kernels have no BlockSpecs and are not judged; a pallas_call inside a loop or a
      branch is not judged either (its operands are not the program's arrays).
    - An element covered by at least one grid step counts as covered; a block that extends past the end of
      the array (the last block of a pl.cdiv grid) covers up to the end.
    """
    flat = _Flat(closed)
    in_names = list(input_names) if input_names is not None else [f"input {i}" for i in range(len(flat.invars))]
    out_names = (
        list(output_names)
        if output_names is not None
        else (["output"] if len(flat.outvars) == 1 else [f"output {i}" for i in range(len(flat.outvars))])
    )
    findings, unknown, not_judged = [], [], []
    if flat.in_loop_kernels:
        unknown.append(
            {
                "operand": None,
                "kernel": None,
                "reason": f"{flat.in_loop_kernels} kernel call(s) inside a loop or a branch are not judged",
            }
        )

    # Where each value comes from (a workload input, possibly relabelled) and who reads each value.
    origin: dict = {}
    for i, v in enumerate(flat.invars):
        if _is_var(v):
            origin.setdefault(v, (i, False))
    producer: dict = {}
    readers: dict = {}
    for position, (eqn, ins, outs) in enumerate(flat.eqns):
        for o in outs:
            producer[o] = position
        for v in ins:
            if _is_var(v):
                readers.setdefault(v, []).append(position)
        if eqn.primitive.name in _RELABEL and _is_var(ins[0]) and ins[0] in origin:
            origin[outs[0]] = (origin[ins[0]][0], True)

    kernel_uses = {}
    kernel_count = 0
    for position, (eqn, _ins, _outs) in enumerate(flat.eqns):
        name = eqn.primitive.name
        if name in MESH_KERNEL_PRIMITIVES:
            kernel_count += 1
            unknown.append(
                {"operand": None, "kernel": name, "reason": "a pl.kernel / core_map kernel has no BlockSpecs"}
            )
        elif name == "pallas_call":
            kernel_count += 1
            kernel_uses[position] = _uses_of_kernel(eqn, kernel_count - 1)

    # ---- inputs
    def reads_of(v):
        """Every (position, variable read there) for the reads of v, following relabelling ops."""
        for position in readers.get(v, []):
            eqn, _, outs = flat.eqns[position]
            if eqn.primitive.name in _RELABEL:
                yield from reads_of(outs[0])
            else:
                yield position, v

    for i, v in enumerate(flat.invars):
        if not _is_var(v) or not hasattr(v.aval, "shape"):
            continue
        src = None
        other = None
        slices = []
        for position, var in reads_of(v):
            eqn, ins, outs = flat.eqns[position]
            if eqn.primitive.name == "pallas_call" and position in kernel_uses:
                first = len(ins) - pallas_call_info(eqn).num_inputs  # dynamic grid sizes and scalar prefetch come first
                for slot, operand in enumerate(ins[first:]):
                    if operand is not var:
                        continue
                    use = kernel_uses[position][0][slot]
                    view = tuple(var.aval.shape)
                    if src is None:
                        src = _Source(var=v, view=view, relabelled=origin.get(var, (i, False))[1])
                    if view != src.view:
                        other = other or "it is read through different reshapes"
                    src.uses.append(use)
                if any(operand is var for operand in ins[:first]):
                    other = other or "it is also a scalar-prefetch operand"
            elif eqn.primitive.name == "slice" and all(s in (None, 1) for s in (eqn.params.get("strides") or [None])):
                slices.append((var, eqn.params["start_indices"], eqn.params["limit_indices"]))
            else:
                other = other or f"it is also read by {eqn.primitive.name}"
        if src is None:
            continue
        for var, start, limit in slices:
            if tuple(var.aval.shape) != src.view:
                other = other or "it is read through different reshapes"
                continue
            src.uses.append(
                _Use(
                    kernel="slice",
                    kernel_index=-1,
                    operand_index=0,
                    grid=[],
                    block_shape=[],
                    lo=[np.array([s]) for s in start],
                    hi=[np.array([e]) for e in limit],
                )
            )
        base = in_names[i] if i < len(in_names) else f"input {i}"
        name = _view_name(base, tuple(v.aval.shape), src.view, src.relabelled)
        blocked = [u for u in src.uses if u.unknown]
        if other:
            # Read elsewhere too: nothing to say about what its kernels skip.
            not_judged.append({"operand": name, "reason": other})
            continue
        if blocked:
            unknown.extend({"operand": name, "kernel": u.kernel, "reason": u.unknown} for u in blocked)
            continue
        result = _coverage(src.view, src.uses)
        if isinstance(result, str):
            unknown.append({"operand": name, "kernel": src.uses[0].kernel, "reason": result})
        elif result[1]:
            findings.append(
                _finding(
                    "unread_input", name, src.view, [u for u in src.uses if u.kernel_index >= 0] or src.uses, result
                )
            )

    # ---- outputs: which values reach a program output through dense operations only
    # var -> (the program output it reaches, reached through relabelling only?)
    needed: dict = {}
    for k, v in enumerate(flat.outvars):
        if _is_var(v):
            needed.setdefault(v, (out_names[k] if k < len(out_names) else f"output {k}", True))
    for position in reversed(range(len(flat.eqns))):
        eqn, ins, outs = flat.eqns[position]
        hit = [needed[o] for o in outs if o in needed]
        if not hit or eqn.primitive.name not in _DENSE:
            continue
        name, direct = hit[0]
        for v in ins:
            if _is_var(v) and hasattr(v.aval, "shape"):
                needed.setdefault(v, (name, direct and eqn.primitive.name in _RELABEL))
    out_shapes = {v: tuple(v.aval.shape) for v in flat.outvars if _is_var(v)}

    for position, (_in_uses, out_uses) in kernel_uses.items():
        eqn, ins, outs = flat.eqns[position]
        aliased = {o for _, o in pallas_call_info(eqn).input_output_aliases}
        for k, (var, use) in enumerate(zip(outs, out_uses, strict=False)):
            if var not in needed or k in aliased:
                not_judged.append(
                    {
                        "operand": f"{use.kernel} output {k}",
                        "reason": "aliased to an input"
                        if k in aliased
                        else "it does not reach a program output through operations that use every element",
                    }
                )
                continue
            reached, direct = needed[var]
            if not direct:
                name = f"{use.kernel} output {k} (feeds {reached})"
            else:
                reached_shape = next((s for v, s in out_shapes.items() if needed.get(v, (None,))[0] == reached), ())
                name = _view_name(reached, reached_shape, tuple(var.aval.shape), True)
            if use.unknown:
                unknown.append({"operand": name, "kernel": use.kernel, "reason": use.unknown})
                continue
            result = _coverage(tuple(var.aval.shape), [use])
            if isinstance(result, str):
                unknown.append({"operand": name, "kernel": use.kernel, "reason": result})
            elif result[1]:
                findings.append(_finding("unwritten_output", name, tuple(var.aval.shape), [use], result))
    findings.sort(key=lambda f: f["kind"] != "unwritten_output")  # the more direct error first
    revisits = [
        {"kernel": use.kernel, "output_index": use.operand_index, "axis": axis, "steps": use.grid[axis]}
        for _, out_uses in kernel_uses.values()
        for use in out_uses
        for axis in use.parallel_revisits
    ]
    return {
        "findings": findings,
        "unknown": unknown,
        "not_judged": not_judged,
        "kernels": kernel_count,
        "parallel_revisits": revisits,
    }


# ---- low-precision accumulation ------------------------------------------------------------------


def low_precision_accumulators(closed) -> list[dict]:
    """Refs a kernel accumulates into in a 16-bit float type across its grid steps: an output or scratch ref that
    the body updates from its own value (acc[...] = acc[...] + x, or addupdate) in a kernel whose grid runs more
    than one step along an "arbitrary" axis at this size. Each rounding to bfloat16 loses ~3 significant digits, so
    the error grows with the number of steps: at a small size with one reduction step it rounds once, like the
    baseline, and only the full size shows it. [{"kernel", "ref", "dtype", "steps"}]."""
    found = []
    for eqn in jx.walk_eqns(getattr(closed, "jaxpr", closed)):
        if eqn.primitive.name != "pallas_call":
            continue
        info = pallas_call_info(eqn)
        steps = [
            g
            for g, sem in zip(info.grid, info.dimension_semantics or ("arbitrary",) * len(info.grid), strict=True)
            if isinstance(g, int) and g > 1 and "arbitrary" in sem.lower()
        ]
        if not steps:
            continue
        body = info.kernel
        first_output = info.num_scalar_prefetch + info.num_inputs
        for position in sorted(_updated_from_themselves(body)):
            if position < first_output:
                continue
            aval = body.invars[position].aval
            inner: Any = getattr(aval, "inner_aval", aval)  # a ref's aval wraps the value's
            dtype = np.dtype(inner.dtype)
            if _floating_dtype(dtype) and dtype.itemsize <= 2:
                kind = "scratch" if position >= len(body.invars) - info.num_scratch else "output"
                found.append(
                    {
                        "kernel": info.name,
                        "ref": f"{kind} ref {position}",
                        "dtype": str(dtype),
                        "steps": math.prod(steps),
                    }
                )
    return found


# The operations that make a running sum: a value read from a ref and added to is accumulated into it.
_ACCUMULATING = {"add", "sub", "add_any"}


def _updated_from_themselves(body) -> set[int]:
    """Positions (in the body's invars) of the refs that some swap or addupdate writes with a running sum of their
    own value (read, then added to: acc[...] = acc[...] + x), following refs and values into branches, loops and
    calls. A masked write that keeps the old value elsewhere (jnp.where(mask, new, ref[...])) is no sum."""
    updated: set[int] = set()

    def walk(jaxpr, refs: dict, read: dict, summed: dict) -> None:
        def of(table, v) -> frozenset:
            return table.get(v, frozenset()) if _is_var(v) else frozenset()

        def ref_of(v) -> int | None:
            return refs.get(v) if _is_var(v) else None

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            ins = list(eqn.invars)
            ref = ref_of(ins[0]) if ins else None
            if name == "get" and ref is not None:
                for out in eqn.outvars:
                    read[out] = frozenset({ref})
                continue
            if name in ("swap", "addupdate") and ref is not None:
                if name == "addupdate" or len(ins) > 1 and ref in of(summed, ins[1]):
                    updated.add(ref)
            reads = frozenset().union(*(of(read, v) for v in ins))
            sums = frozenset().union(*(of(summed, v) for v in ins)) | (reads if name in _ACCUMULATING else frozenset())
            for sub in jx.sub_jaxprs(eqn):
                # A branch, loop or call body takes the equation's last operands (a cond's index, a while's
                # condition consts come first).
                operands = ins[len(ins) - len(sub.invars) :] if len(sub.invars) <= len(ins) else ins
                pairs = list(zip(sub.invars, operands, strict=False))
                walk(
                    sub,
                    {inner: ref_of(outer) for inner, outer in pairs if ref_of(outer) is not None},
                    {inner: of(read, outer) for inner, outer in pairs},
                    {inner: of(summed, outer) for inner, outer in pairs},
                )
            for out in eqn.outvars:
                read[out], summed[out] = reads, sums

    walk(body, {v: i for i, v in enumerate(body.invars)}, {}, {})
    return updated


def describe_accumulator(a: dict) -> str:
    return (
        f"kernel {a['kernel']} accumulates into its {a['ref']} in {a['dtype']} across {a['steps']:,} grid steps at "
        "full size, and in at most one step at the size the run uses: every step rounds the running sum to 16 "
        "bits, so the error grows with the reduction length and the run never saw it; accumulate in a float32 "
        "scratch and cast once at the end"
    )


def describe_revisit(r: dict) -> str:
    """One sentence for a parallel_revisits entry of full_size_coverage."""
    return (
        f'kernel {r["kernel"]} marks grid axis {r["axis"]} "parallel" ({r["steps"]} steps at full size), but the '
        f"block of its output {r['output_index']} does not change along that axis: its steps accumulate into one "
        "block, so they are not independent"
    )


def describe_finding(f: dict) -> str:
    """One sentence for a finding, e.g. "weight[:, 128000:128256] is never read at full size ..."."""
    verb = "written" if f["kind"] == "unwritten_output" else "read"
    share = f["fraction_uncovered"]
    return (
        f"{f['region']} is never {verb} at full size ({f['uncovered_elements']} elements, "
        f"{share:.3%} of {f['operand'].split(' (')[0]}): kernel {f['kernel']} has grid {f['grid']} and "
        f"block shape {f['block_shape']} over shape {f['shape']}"
    )


# ---- the same program at every size ------------------------------------------------------------

# Primitives that only move or relabel data. Whether jax emits them can depend on shapes alone (a
# broadcast or reshape to the shape an operand already has is elided), so they are left out of the
# outline rather than reported as a size-dependent program.
_LAYOUT_ONLY = {
    "reshape",
    "squeeze",
    "expand_dims",
    "broadcast_in_dim",
    "convert_element_type",
    "copy",
    "copy_p",
    "reshard",
    "transpose",
}


def program_structure(closed) -> list[str]:
    """The outline of a traced program with shapes left out: its primitives in evaluation order (the bodies of
    loops and branches included, each opened by its primitive's name), with every Pallas kernel as
    "pallas_call:<kernel name>" followed by its body's signature (kernel_signature), and every floating-point
    literal as a token after its primitive's (constant_token). Layout-only primitives (reshape, broadcast,
    transpose, dtype converts) and call wrappers (jit, custom_jvp/vjp) are left out.

    Two traces of one candidate at different sizes have equal outlines unless the candidate branches on shapes
    into a different computation, adds or drops a branch or a kind of arithmetic in a kernel body, or scales by
    a constant that changes with the size and derives from no shape.
    """
    jaxpr = getattr(closed, "jaxpr", closed)
    shapes = _ShapeValues(jaxpr)
    tokens: list[str] = []

    def walk(j):
        for eqn in j.eqns:
            name = eqn.primitive.name
            if name == "pallas_call":
                tokens.append(f"pallas_call:{pallas_call_info(eqn).name}")
                tokens.append(kernel_signature(pallas_call_info(eqn).kernel, shapes))
            elif name in MESH_KERNEL_PRIMITIVES:
                tokens.append(name)
                tokens.append(kernel_signature(mesh_kernel_body(eqn), shapes))
            elif (body := jx.call_body(eqn)) is not None:  # jnp helpers trace as jit calls of their own
                walk(body.jaxpr)
            else:
                if name not in _LAYOUT_ONLY:
                    tokens.append(name)
                    tokens.extend(shapes.constant_token(v) for v in eqn.invars if _is_float_literal(v))
                for sub in jx.sub_jaxprs(eqn):
                    walk(sub)
                    if name in ("cond", "while", "scan"):
                        tokens.append(f"end {name}")

    walk(jaxpr)
    return tokens


# Kernel-body primitives a signature leaves out, besides layout and data movement (_LAYOUT_ONLY, _NO_FLOPS):
# what selects or masks data, whose use legitimately changes with the block shapes (an edge mask at one size).
_MASKING = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "select_n"}
_CONTROL = {"cond", "while", "scan"}


def kernel_signature(body, shapes: _ShapeValues) -> str:
    """What a kernel body computes, independent of how often its code repeats: the kinds of floating-point
    arithmetic it does, each with the control flow it sits in ("dot_general@cond": inside a pl.when), the control
    flow it has, and its floating-point constants (constant_token; epsilons under 1e-3 left out), as one token
    "body:ARITHMETIC|CONTROL|CONSTANTS", each part sorted. Moving a kernel's matmul under a pl.when at one size
    only changes it; unrolling a loop more or fewer times does not."""
    arithmetic: set[str] = set()
    control: set[str] = set()
    constants: set[str] = set()

    def walk(jaxpr, where: str) -> None:
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            inner = where
            if name in _CONTROL:
                inner = f"{where}/{name}" if where else name
                control.add(inner)
            elif (
                name not in _LAYOUT_ONLY | _NO_FLOPS | _MASKING
                and not name.startswith(("dma", "semaphore", "barrier"))
                and any(_is_floating(v) for v in eqn.outvars)  # integer arithmetic is index arithmetic
            ):
                arithmetic.add(f"{name}@{where}" if where else name)
            constants.update(
                shapes.constant_token(v)
                for v in eqn.invars
                if _is_float_literal(v) and not 0 < abs(float(v.val)) < 1e-3
            )
            for sub in jx.sub_jaxprs(eqn):
                walk(sub, inner)

    walk(body, "")
    return "body:" + "|".join(",".join(sorted(part)) for part in (arithmetic, control, constants))


def _floating_dtype(dtype) -> bool:
    """A floating-point dtype, bfloat16 included (numpy does not count ml_dtypes' bfloat16 as floating)."""
    return bool(jnp.issubdtype(dtype, jnp.floating))


def _is_floating(var) -> bool:
    dtype = getattr(getattr(var, "aval", None), "dtype", None)
    return dtype is not None and _floating_dtype(dtype)


def _is_float_literal(var) -> bool:
    return isinstance(var, Literal) and _floating_dtype(getattr(var.aval, "dtype", None)) and np.ndim(var.val) == 0


class _ShapeValues:
    """The dimensions of every value a program holds (its kernels' refs and grids included), to tell a constant
    that derives from shapes (a mean's 1/n, an attention scale 1/sqrt(d), a Bessel n-1) from one that does not."""

    def __init__(self, jaxpr):
        self._jaxpr = jaxpr
        self._near: set[int] | None = None

    def _collect(self) -> set[int]:
        dims: set[int] = set()

        def add(shape):
            dims.update(d for d in shape if isinstance(d, int) and d > 1)

        for v in [*self._jaxpr.invars, *self._jaxpr.outvars]:
            add(getattr(getattr(v, "aval", None), "shape", ()))
        for eqn in jx.walk_eqns(self._jaxpr):
            for v in [*eqn.invars, *eqn.outvars]:
                aval = getattr(v, "aval", None)
                add(getattr(getattr(aval, "inner_aval", aval), "shape", ()))
            if eqn.primitive.name == "pallas_call":
                add(pallas_call_info(eqn).grid)
        return dims

    def _product_of_dims(self, x: float, tolerance: float) -> bool:
        """x is (nearly) a product of at most three of the program's dimensions, each up to _OFFSET away (a
        convolution's output is its input less the kernel's width, a padded axis longer than the data)."""
        n = round(x)
        if n < 2 or abs(x - n) > tolerance * n:
            return False
        near = self._near
        assert near is not None  # constant_token fills it before the first call
        if n in near:
            return True
        for a in near:
            if n % a == 0:
                rest = n // a
                if rest in near or any(rest % b == 0 and rest // b in near for b in near if b <= rest):
                    return True
        return False

    def constant_token(self, var) -> str:
        """ "const~VALUE" for a literal that is n, 1/n, sqrt(n), 1/sqrt(n), n-1 or 1/(n-1) of a product n of up to
        three of the program's dimensions (_product_of_dims); else "const=VALUE" (0, 1 and -1 always)."""
        value = float(var.val)
        if math.isfinite(value) and value not in (0.0, 1.0, -1.0):
            if self._near is None:
                self._near = {d + o for d in self._collect() for o in range(-_OFFSET, _OFFSET + 1) if d + o > 1}
            tolerance = 1e-2 if np.dtype(var.aval.dtype).itemsize <= 2 else 1e-5
            c = abs(value)
            candidates = (c, 1.0 / c, c * c, 1.0 / (c * c), c + 1.0, 1.0 / c + 1.0)
            if any(self._product_of_dims(x, tolerance) for x in candidates if x < 2**40):
                return f"const~{value!r}"
        return f"const={value!r}"


# How far from a dimension a factor of a shape-derived constant may be (see _ShapeValues._product_of_dims).
_OFFSET = 4


# ---- the Pallas kernels must do the work -------------------------------------------------------

_NO_FLOPS = {
    "get",
    "swap",
    "load",
    "store",
    "masked_load",
    "masked_swap",
    "addupdate",
    "iota",
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "transpose",
    "convert_element_type",
    "bitcast_convert_type",
    "slice",
    "dynamic_slice",
    "dynamic_update_slice",
    "concatenate",
    "pad",
    "select_n",
    "copy",
    "copy_p",
    "program_id",
    "num_programs",
    "dma_start",
    "dma_wait",
    "semaphore_signal",
    "semaphore_wait",
    "semaphore_read",
    "delay",
    "run_scoped",
    "reshard",
    "gather",
    "scatter",
    "multiple_of",
    "rev",
}


def _flops(eqn) -> float:
    """FLOPs of one equation, counted as XLA's cost analysis does: a multiply-add in a contraction or a
    convolution is 2, a reduction 1 per input element, any other arithmetic 1 per output element."""
    name = eqn.primitive.name
    if name == "dot_general":
        return 2.0 * ka._mxu_pushes(eqn) * MXU_PUSH_MACS
    if name == "conv_general_dilated":
        rhs = eqn.invars[1].aval.shape
        out_features = rhs[eqn.params["dimension_numbers"].rhs_spec[0]]
        return 2.0 * ka._elements(eqn.outvars[0]) * (math.prod(rhs) / max(1, out_features))
    if name in _NO_FLOPS or name.startswith(("dma", "semaphore", "barrier")):
        return 0.0
    if name.startswith(("reduce_", "arg", "cum")):
        return float(sum(ka._elements(v) for v in eqn.invars if hasattr(v, "aval")))
    return float(sum(ka._elements(v) for v in eqn.outvars))


def kernel_work(closed) -> dict:
    """The FLOPs and HBM bytes of a program's Pallas kernels: {"flops", "bytes", "kernels", "exact"}.

    FLOPs: one run of each kernel body (the heaviest branch of a cond, a loop body times its trips) times
    its grid steps. Bytes: what its BlockSpecs move over the whole grid (kernel_analysis.kernel_traffic;
    a manually copied operand counts once). A kernel inside a loop counts once; such a loop, a dynamic
    grid, a data-dependent branch or index map make the figures inexact (exact=False), not wrong in kind.
    """
    jaxpr = getattr(closed, "jaxpr", closed)
    traffic = ka.kernel_traffic(jaxpr)
    flops, exact, bodies = 0.0, True, []
    for eqn in jx.walk_eqns(jaxpr):
        name = eqn.primitive.name
        if name == "pallas_call":
            info = pallas_call_info(eqn)
            steps = math.prod(g if isinstance(g, int) else 1 for g in info.grid)
            body = info.kernel
        elif name in MESH_KERNEL_PRIMITIVES:
            steps = 1
            body = mesh_kernel_body(eqn)
        else:
            continue
        work, body_exact = ka.executed_work(body, _flops)
        flops += work * steps
        exact = exact and body_exact
        bodies.append(eqn)
    in_place = ka._kernels_in_place(jaxpr)
    exact = exact and in_place is not None and all(t["exact"] and t["steps_exact"] for t in traffic)
    return {
        "flops": flops,
        "bytes": float(sum(t["hbm_bytes"] for t in traffic)),
        "kernels": len(bodies),
        "exact": exact,
    }


def _bytes(eqn) -> float:
    """HBM bytes one equation outside the kernels reads and writes at most (XLA's fusions move less)."""
    if ka.is_relabel(eqn):
        return 0.0
    return float(
        sum(
            ka._elements(v) * np.dtype(v.aval.dtype).itemsize for v in [*eqn.invars, *eqn.outvars] if hasattr(v, "aval")
        )
    )


def program_work(closed) -> dict:
    """The FLOPs of a whole program inside and outside its Pallas kernels, and the bytes outside them, with every
    loop body counted once per trip (a kernel or a matmul inside a scan or fori_loop runs `length` times):
    {"kernel_flops", "outside_flops", "outside_bytes", "outside_known"}. A cond counts its heaviest branch; a
    kernel body is counted as kernel_work counts it. A while loop outside the kernels (trips unknown before it
    runs) that does any work makes the outside figures unknown (outside_known=False), its body counted once."""

    def kernel_flops(eqn) -> float:
        if eqn.primitive.name == "pallas_call":
            info = pallas_call_info(eqn)
            work, _ = ka.executed_work(info.kernel, _flops)
            return work * math.prod(g if isinstance(g, int) else 1 for g in info.grid)
        return ka.executed_work(mesh_kernel_body(eqn), _flops)[0]

    def walk(jaxpr) -> tuple[float, float, float, bool]:
        kf = of = ob = 0.0
        known = True
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "pallas_call" or name in MESH_KERNEL_PRIMITIVES:
                kf += kernel_flops(eqn)
                continue
            trips = 1
            if (body := jx.call_body(eqn)) is not None:
                parts = [walk(body.jaxpr)]
            elif name == "scan":
                scan = jx.scan_info(eqn)
                parts, trips = [walk(scan.body.jaxpr)], scan.length
            elif name == "cond":
                parts = [max((walk(b.jaxpr) for b in jx.cond_branches(eqn)), key=lambda p: p[0] + p[1])]
            elif subs := list(jx.sub_jaxprs(eqn)):
                parts = [walk(sub) for sub in subs]
                if name == "while" and any(p[0] + p[1] > 0 for p in parts):
                    known = False
            else:
                of, ob = of + _flops(eqn), ob + _bytes(eqn)
                continue
            for pk, po, pb, pknown in parts:
                kf, of, ob, known = kf + trips * pk, of + trips * po, ob + trips * pb, known and pknown
        return kf, of, ob, known

    kf, of, ob, known = walk(getattr(closed, "jaxpr", closed))
    return {"kernel_flops": kf, "outside_flops": of, "outside_bytes": ob, "outside_known": known}


def outside_work(closed, args, generation: str | None = None) -> dict | None:
    """XLA's cost analysis of the work around a program's Pallas kernels (kernel_analysis.outside_kernels):
    {"flops", "bytes"}; None when the kernels cannot be cut out (a kernel inside a loop, or no kernel).

    `args` are the program's non-static arguments (ShapeDtypeStructs do). With a TPU generation (libtpu
    needed) XLA:TPU costs it deviceless; without one XLA:CPU does (its FLOP counts agree; its byte
    counts are of the same order).
    """
    outside = ka.outside_kernels(closed)
    if outside is None:
        return None
    fn, kernel_outputs = outside
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args] + list(kernel_outputs)
    around = jax.make_jaxpr(fn)(*structs).jaxpr
    if not around.outvars:  # nothing computed around the kernels: no compile needed to say so
        return {"flops": 0.0, "bytes": 0.0}
    if generation is not None:
        compiled = targets.deviceless_compile(fn, structs, generation, kernel_facts=False)
    else:
        compiled = jax.jit(fn).trace(*structs).lower(lowering_platforms=("cpu",)).compile()
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, list):  # older jax returned one dict per computation
        cost = cost[0] if cost else {}
    return {"flops": float(cost.get("flops", 0.0)), "bytes": float(cost.get("bytes accessed", 0.0))}
