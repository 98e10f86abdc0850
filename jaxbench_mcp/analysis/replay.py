"""What a Pallas kernel does when it runs, replayed from what is known before it runs.

The static estimate needs, per kernel: how many grid steps run, how much of the body's code each step runs
(which pl.when branches, how many loop trips), and how many HBM bytes its DMAs move. All three often depend
on values computed at run time from the inputs: a causal kernel's number of active blocks (a grid dimension
known only at run time), a ragged kernel's group offsets (scalar-prefetch operands that index maps and loop
bounds read), a predicate on those. When those values depend only on small or constant inputs (group sizes,
a static mask's block tables) they are known before the kernel runs, and this module computes them:

1. `known_kernel_operands` replays the traced program on the values that are known (constants, and concrete
   arguments up to SMALL_ELEMENTS elements); everything computed from an abstract argument stays unknown.
2. `KernelReplay` runs the kernel body on every grid point at once (one "lane" per point): the scalar part of
   the body is evaluated (program ids, scalar-prefetch reads, loop counters, predicates), the vector part is
   only counted (MXU pushes, vector-register ops, DMA bytes). A branch runs on the lanes whose predicate picks
   it; a loop runs until its condition fails (or its counted trips); a branch whose predicate is a
   compile-time constant is one the compiler removed.

Nothing here runs the kernel's vector work, and nothing needs a TPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeGuard

import jax
import numpy as np
from jax.extend.core import Literal

from jaxbench_mcp.catalog.targets import MXU_PUSH_MACS as _MXU_PUSH_MACS, VREG_ELEMENTS as _VREG_ELEMENTS
from jaxbench_mcp.internals import jaxpr as jx
from jaxbench_mcp.internals.libtpu import COPY_BRANCH, WORK_BRANCH_KINDS, BranchKind
from jaxbench_mcp.internals.pallas import (
    KERNEL_PRIMITIVES as _KERNELS,
    axis_index_name,
    dma_source_and_target,
    grid_axis,
    run_scoped_body,
)

# Values up to this many elements are computed when their inputs are known (group sizes, block tables).
SMALL_ELEMENTS = 1 << 16
# A loop is replayed trip by trip up to this many trips per lane; beyond, the mean work of the later replayed
# trips is extrapolated when the trip count is known (a counted loop), else the loop counts as replayed so far
# (inexact).
MAX_TRIPS = 4096
# ... and while the loop has cost fewer than this many equation evaluations (a scalar bookkeeping loop runs to
# its end; a long loop of heavy trips is extrapolated after at least MIN_TRIPS).
LOOP_EVALS = 40_000
MIN_TRIPS = 16
# Grid points replayed at once; bigger grids are not replayed (their estimate falls back to counting).
MAX_LANES = 1 << 21
# Grid points replayed one by one, in order, when a kernel carries scalar state from step to step, and the
# equation evaluations such a replay may take in all: 7p's expert kernel takes 0.68 million (64 steps), 6p's
# 0.88 million (512 steps), ~10 s here; the bound keeps a hostile kernel's replay well inside the trace stage.
IN_ORDER_STEPS = 1024
IN_ORDER_EVALS = 1_500_000
# Samples drawn to decide whether two data-dependent predicates can hold at once.
EXCLUSIVITY_SAMPLES = 256

# Primitives that pass their operand through (as far as values go).
_IDENTITY = {
    "reshard",
    "sharding_constraint",
    "copy",
    "copy_p",
    "pvary",
    "optimization_barrier",
    "multiple_of",
    "stop_gradient",
    "with_memory_space_constraint",
}


class Known:
    """A value known before the kernel runs: `v` holds one value per lane (leading axis) when `lanes`, else one
    value for all; `static` when it is a compile-time constant (the compiler folds what it decides)."""

    __slots__ = ("v", "lanes", "static")

    def __init__(self, v, lanes: bool = False, static: bool = False):
        self.v, self.lanes, self.static = np.asarray(v), lanes, static


class RefBox:
    """A Ref in the kernel: its memory space and, for a small scalar-memory buffer, its known contents."""

    __slots__ = ("content", "space")

    def __init__(self, space: str, content: Known | None = None):
        self.space, self.content = space, content


# ---- the program around the kernels ----------------------------------------------------------------------


def _literal(var) -> TypeGuard[Literal]:
    return isinstance(var, Literal)


def _elements(aval) -> int:
    shape = getattr(aval, "shape", None)
    return math.prod(shape) if shape is not None else 0


def _once(table: dict[int, tuple], obj, make: Callable[[], Any]) -> Any:
    """make()'s value for `obj`, computed once: the replay meets the same equations and literals millions of times
    in a long kernel. Keyed by id (jaxpr objects need not hash); the object is kept beside its value so that a
    reused id is recomputed, and a table past 200,000 entries starts afresh."""
    found = table.get(id(obj))
    if found is None or found[0] is not obj:
        found = (obj, make())
        if len(table) > 200_000:
            table.clear()
        table[id(obj)] = found
    return found[1]


_INFO: dict[int, tuple] = {}
_LITERALS: dict[int, tuple] = {}
_DMA_VIEWS: dict[int, tuple] = {}
_BRANCH_KINDS: dict[int, tuple] = {}
# The work of matmul and vector branches is tallied per kind, and "outside" for the code outside them (copy branches'
# copies are tallied as "copies").
_TALLIED = (
    "mxu",
    "vec",
    "copies",
    *((unit, kind) for kind in (*WORK_BRANCH_KINDS, "outside") for unit in ("mxu", "vec")),
)


def _info(eqn) -> tuple:
    """(small outputs, MXU pushes, vector ops, sub-jaxprs) of an equation, computed once."""

    def make():
        subs = list(jx.sub_jaxprs(eqn))
        mxu, vec = _leaf_work(eqn) if not subs else (0.0, 0.0)
        return all(_elements(o.aval) <= 64 for o in eqn.outvars), mxu, vec, subs

    return _once(_INFO, eqn, make)


def _known_literal(var) -> Known:
    return _once(_LITERALS, var, lambda: Known(var.val, lanes=False, static=True))


def _dma_views(eqn) -> tuple:
    """dma_source_and_target of a dma_start (a paged kernel starts hundreds of thousands of copies)."""
    return _once(_DMA_VIEWS, eqn, lambda: dma_source_and_target(eqn))


def _concrete(x):
    """A concrete argument as a numpy array when it is small; None for anything abstract or large."""
    if isinstance(x, jax.ShapeDtypeStruct) or type(x).__name__.endswith("Tracer") or hasattr(x, "_trace"):
        return None
    try:
        if np.size(x) > SMALL_ELEMENTS:
            return None
        return np.asarray(x)
    except Exception:  # noqa: BLE001 -- anything that is not an array is not known
        return None


def _contains_kernel(eqn) -> bool:
    return any(e.primitive.name in _KERNELS for sub in jx.sub_jaxprs(eqn) for e in jx.walk_eqns(sub))


def known_kernel_operands(closed, args) -> dict[int, list]:
    """id(kernel equation) -> its operands, each a numpy array when known before the kernel runs, else None.

    `args` are the traced function's (non-static) arguments: ShapeDtypeStructs (unknown) or concrete arrays
    (known when at most SMALL_ELEMENTS elements). Common operations are computed with numpy; the rest by jax
    on the CPU, op by op."""
    env = {v: _concrete(c) for v, c in zip(closed.jaxpr.constvars, closed.consts, strict=True)}
    env.update({v: _concrete(a) for v, a in zip(closed.jaxpr.invars, args, strict=True)})
    found: dict[int, list] = {}
    _replay_program(closed.jaxpr.eqns, env, found)
    return found


def _numpy_program_op(eqn, ins):
    """A program equation computed with numpy, or None when it is not one we do here."""
    name, p = eqn.primitive.name, eqn.params
    dtype = eqn.outvars[0].aval.dtype if len(eqn.outvars) == 1 else None
    if name in _NUMPY:
        out = _NUMPY[name](*[np.asarray(i) for i in ins])
    elif name == "convert_element_type":
        out = np.asarray(ins[0]).astype(jx.convert_dtype(eqn))
    elif name == "select_n":
        out = np.choose(np.asarray(ins[0]).astype(np.int32), [np.asarray(i) for i in ins[1:]])
    elif name == "broadcast_in_dim":
        x = np.asarray(ins[0])
        shape = list(p["shape"])
        expanded = np.reshape(
            x,
            [
                x.shape[p["broadcast_dimensions"].index(d)] if d in p["broadcast_dimensions"] else 1
                for d in range(len(shape))
            ],
        )
        out = np.broadcast_to(expanded, shape)
    elif name in ("squeeze", "reshape"):
        out = np.reshape(np.asarray(ins[0]), eqn.outvars[0].aval.shape)
    elif name == "concatenate":
        out = np.concatenate([np.asarray(i) for i in ins], axis=p["dimension"])
    elif name == "slice":
        strides = p.get("strides") or [1] * len(p["start_indices"])
        out = np.asarray(ins[0])[
            tuple(slice(a, b, c) for a, b, c in zip(p["start_indices"], p["limit_indices"], strides, strict=True))
        ]
    elif name == "iota":
        shape = p["shape"]
        out = np.broadcast_to(
            np.arange(shape[p["dimension"]]).reshape(
                [shape[d] if d == p["dimension"] else 1 for d in range(len(shape))]
            ),
            shape,
        )
    elif name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_and", "reduce_or"):
        fn = {
            "reduce_sum": np.sum,
            "reduce_max": np.max,
            "reduce_min": np.min,
            "reduce_and": np.all,
            "reduce_or": np.any,
        }[name]
        out = fn(np.asarray(ins[0]), axis=tuple(p["axes"]))
    elif name == "cumsum":
        x = np.asarray(ins[0])
        out = (
            np.flip(np.cumsum(np.flip(x, p["axis"]), axis=p["axis"]), p["axis"])
            if p.get("reverse")
            else np.cumsum(x, axis=p["axis"])
        )
    elif name == "transpose":
        out = np.transpose(np.asarray(ins[0]), p["permutation"])
    elif name == "integer_pow":
        out = np.asarray(ins[0]) ** p["y"]
    elif name == "clamp":
        out = np.clip(np.asarray(ins[1]), np.asarray(ins[0]), np.asarray(ins[2]))
    elif name == "dynamic_slice":
        x, sizes = np.asarray(ins[0]), p["slice_sizes"]
        starts = [int(np.clip(int(np.asarray(i)), 0, d - s)) for i, d, s in zip(ins[1:], x.shape, sizes, strict=True)]
        out = x[tuple(slice(a, a + s) for a, s in zip(starts, sizes, strict=True))]
    elif name == "unstack":
        return [np.asarray(o) for o in np.moveaxis(np.asarray(ins[0]), p["axis"], 0)]
    else:
        return None
    return [np.asarray(out).astype(dtype) if dtype is not None else np.asarray(out)]


def _replay_program(eqns, env: dict, found: dict) -> None:
    for eqn in eqns:
        ins = [v.val if _literal(v) else env.get(v) for v in eqn.invars]
        name = eqn.primitive.name
        outs: list[Any] = [None] * len(eqn.outvars)
        if name in _KERNELS:
            found[id(eqn)] = list(ins)
        elif (body := jx.call_body(eqn)) is not None:
            inner_jaxpr = getattr(body, "jaxpr", body)
            inner = {v: _concrete(c) for v, c in zip(inner_jaxpr.constvars, getattr(body, "consts", []), strict=True)}
            inner.update(zip(inner_jaxpr.invars, ins, strict=True))
            _replay_program(inner_jaxpr.eqns, inner, found)
            outs = [v.val if _literal(v) else inner.get(v) for v in inner_jaxpr.outvars]
        elif name in _IDENTITY and len(ins) == len(outs):
            outs = ins
        elif (
            all(i is not None for i in ins)
            and all(_elements(o.aval) <= SMALL_ELEMENTS for o in eqn.outvars)
            and not _contains_kernel(eqn)
        ):
            try:
                outs = _numpy_program_op(eqn, ins)
                if outs is None:
                    out = eqn.primitive.bind(*ins, **jx.unsharded_params(eqn))  # the replay runs on one CPU
                    outs = [np.asarray(o) for o in (out if eqn.primitive.multiple_results else [out])]
            except Exception:  # noqa: BLE001 -- a value we cannot compute here is simply unknown
                pass
        env.update(zip(eqn.outvars, outs, strict=True))


# ---- the kernel body, all grid points at once -------------------------------------------------------------


def _space(aval) -> str:
    base = getattr(aval, "ref", aval)
    return str(
        getattr(base, "memory_space", "") or getattr(getattr(base, "inner_aval", None), "memory_space", "")
    ).lower()


def in_hbm(space: str) -> bool:
    return "any" in space or "hbm" in space


def _trunc_div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        b = np.where(b == 0, 1, b)
        q = np.abs(a) // np.abs(b)
        return (np.sign(a) * np.sign(b) * q).astype(np.result_type(a, b))
    return a / b


def _trunc_rem(a, b):
    if np.issubdtype(a.dtype, np.integer):
        b = np.where(b == 0, 1, b)
        return (a - _trunc_div(a, b) * b).astype(np.result_type(a, b))
    return np.fmod(a, b)


_NUMPY: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "div": _trunc_div,
    "rem": _trunc_rem,
    "neg": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "not": lambda a: ~a,
    "floor": np.floor,
    "ceil": np.ceil,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "shift_left": np.left_shift,
    "shift_right_arithmetic": np.right_shift,
}


class KernelReplay:
    """Replays one kernel body over `points` (grid indices, one column per lane), or, for a TensorCore mesh kernel,
    over its cores (lane i is core i: axis_index on `core_axis` reads it)."""

    def __init__(
        self, grid: list[int], points, max_trips: int = MAX_TRIPS, core_axis=None, loop_evals: int = LOOP_EVALS
    ):
        self.grid = grid
        self.loop_evals = loop_evals
        self.points = points  # (len(grid), P) int32
        self.core_axis = core_axis
        self.P = points.shape[1] if points.ndim == 2 else 1
        self.max_trips = max_trips
        self.evals = 0  # equations evaluated so far (bounds the replay of long loops)
        # Executed work per lane: MXU pushes, vector ops, and the same inside matmul and vector branches (keyed
        # (unit, kind)), copies started in copy branches, outside and inside in-kernel loops (keyed by in_loop);
        # HBM bytes the kernel's own DMAs read and write (the chip streams reads faster than writes:
        # cost_model.memory_seconds).
        self.tally: dict[Any, dict[Any, np.ndarray]] = {
            unit: {False: np.zeros(self.P), True: np.zeros(self.P)} for unit in _TALLIED
        }
        self.tally["dma"] = {"read": np.zeros(self.P), "written": np.zeros(self.P)}
        self._branch_kind: str | None = None  # the kind of the innermost kinded branch running (branch_kind)
        self.exact = True
        self.trips_exact = True
        self.loop_ids: set[int] = set()  # the in-kernel loops met (not fully unrolled)
        self.removed: dict[int, int] = {}  # id(cond eqn) -> the branch a compile-time constant picks

    @property
    def mxu(self) -> dict:
        return self.tally["mxu"]

    @property
    def vec(self) -> dict:
        return self.tally["vec"]

    @property
    def copies(self) -> dict:
        return self.tally["copies"]

    @property
    def dma(self) -> dict:
        return self.tally["dma"]

    # -- values --

    def _read(self, env: dict, var):
        if _literal(var):
            return _known_literal(var)
        return env.get(var)

    def _subset(self, value, idx):
        if isinstance(value, Known) and value.lanes:
            return Known(value.v[idx], True, value.static)
        return value

    def _eval(self, eqn, ins: list, n: int):
        """The outputs of a scalar equation from known inputs (None where unknown)."""
        name = eqn.primitive.name
        outs = eqn.outvars
        if not _info(eqn)[0]:
            return [None] * len(outs)
        if name == "program_id":
            return [Known(self.points[grid_axis(eqn)][self._lane_ids], True)]
        if name == "axis_index" and self.core_axis is not None and axis_index_name(eqn) == self.core_axis:
            return [Known(np.asarray(self._lane_ids, np.int32), True)]
        if name == "num_programs":
            return [Known(np.int32(self.grid[grid_axis(eqn)]))]
        if name in _IDENTITY and len(ins) >= 1 and len(outs) == 1:
            return [ins[0]]
        if any(i is None or isinstance(i, RefBox) for i in ins):
            return [None] * len(outs)
        lanes = any(i.lanes for i in ins)
        static = all(i.static for i in ins)
        dtype = outs[0].aval.dtype if hasattr(outs[0].aval, "dtype") else None
        try:
            if name in _NUMPY and len(outs) == 1 and all(i.v.ndim == (1 if i.lanes else 0) for i in ins):
                vals = [i.v if (i.lanes or not lanes) else np.broadcast_to(i.v, (n,)) for i in ins]
                out = np.asarray(_NUMPY[name](*vals))
                return [Known(out.astype(dtype) if dtype is not None else out, lanes, static)]
            if name == "convert_element_type" and ins[0].v.ndim == (1 if lanes else 0):
                return [Known(ins[0].v.astype(jx.convert_dtype(eqn)), lanes, static)]
            if name == "select_n" and all(i.v.ndim == (1 if i.lanes else 0) for i in ins):
                which = ins[0].v.astype(np.int32)
                cases = [np.broadcast_to(i.v, (n,)) if lanes else i.v for i in ins[1:]]
                out = np.choose(np.broadcast_to(which, (n,)) if lanes else which, cases)
                return [Known(np.asarray(out).astype(dtype), lanes, static)]
            return self._bind(eqn, ins, lanes, static, n)
        except Exception:  # noqa: BLE001 -- what cannot be computed here stays unknown
            return [None] * len(outs)

    def _bind(self, eqn, ins, lanes, static, n):
        def run(*vals):
            out = eqn.primitive.bind(*vals, **eqn.params)
            return out if eqn.primitive.multiple_results else [out]

        if not lanes:
            return [Known(np.asarray(o), False, static) for o in run(*[i.v for i in ins])]
        axes = tuple(0 if i.lanes else None for i in ins)
        outs = jax.vmap(run, in_axes=axes)(*[i.v for i in ins])
        return [Known(np.asarray(o), True, static) for o in outs]

    def _index(self, env, indexer, content: Known, n: int):
        """content[indexer] for an NDIndexer whose indices are known (None otherwise)."""
        idx: list[Any] = []  # slices and index arrays
        lanes = content.lanes
        for dim, i in zip(content.v.shape[1 if content.lanes else 0 :], indexer.indices, strict=True):
            if hasattr(i, "start") and hasattr(i, "size"):
                start, size = (
                    self._read(env, i.start) if not isinstance(i.start, (int, np.integer)) else Known(i.start),
                    i.size,
                )
                if (
                    start is None
                    or start.lanes
                    or not isinstance(size, (int, np.integer))
                    or getattr(i, "stride", 1) != 1
                ):
                    return None
                idx.append(slice(int(start.v), int(start.v) + int(size)))
            else:
                value = (
                    i
                    if isinstance(i, Known)
                    else (Known(i) if isinstance(i, (int, np.integer)) else self._read(env, i))
                )
                if value is None:
                    return None
                lanes = lanes or value.lanes
                idx.append(np.clip(value.v, 0, dim - 1))  # an out-of-range read of scalar memory: clamped
        v = content.v
        if not lanes:
            return Known(v[tuple(idx)], False, content.static)
        lane_index = np.arange(n)
        if content.lanes:
            return Known(v[(lane_index, *[np.broadcast_to(i, (n,)) if np.ndim(i) else i for i in idx])], True, False)
        if any(isinstance(i, slice) for i in idx):
            return None
        return Known(v[tuple(np.broadcast_to(i, (n,)) for i in idx)], True, False)

    # -- work --

    def _count(self, eqn, lane_ids, in_loop: bool) -> None:
        _, mxu, vec, _ = _info(eqn)
        kind = self._branch_kind if self._branch_kind in WORK_BRANCH_KINDS else "outside"
        if mxu:
            self.mxu[in_loop][lane_ids] += mxu
            self.tally["mxu", kind][in_loop][lane_ids] += mxu
        if vec:
            self.vec[in_loop][lane_ids] += vec
            self.tally["vec", kind][in_loop][lane_ids] += vec

    def _dma_bytes(self, env, eqn, n: int) -> tuple:
        """HBM bytes one dma_start moves, per lane (0 for a copy that touches no HBM), and whether it reads them
        ("read") or writes them ("written": a copy into HBM, from HBM too)."""
        src, dst = _dma_views(eqn)
        hbm = [isinstance(b, RefBox) and in_hbm(b.space) for b in (env.get(getattr(r, "ref", r)) for r in (src, dst))]
        direction = "written" if hbm[1] else "read"
        if not any(hbm):
            return 0.0, direction
        base = getattr(src, "ref", src)
        shape = list(base.aval.shape)
        dtype = base.aval.dtype
        for transform in getattr(src, "transforms", ()):
            indices = getattr(transform, "indices", None)
            if indices is None:
                continue
            new_shape = []
            # Not strict: a reshape or bitcast view before this indexer is not followed (its shape stays the
            # one before it), so the sizes are paired as far as they go.
            for dim, i in zip(shape, indices, strict=False):
                if hasattr(i, "size"):
                    size = i.size
                    if not isinstance(size, (int, np.integer)):
                        known = self._read(env, size)
                        size = known.v if known is not None else dim
                    new_shape.append(size)
            shape = new_shape
        # Static sizes multiply as Python ints; only sizes known per lane need arrays.
        static = math.prod(int(s) for s in shape if isinstance(s, (int, np.integer)))
        total = np.full(n, float(static * np.dtype(dtype).itemsize))
        for s in shape:
            if not isinstance(s, (int, np.integer)):
                total = total * np.broadcast_to(np.asarray(s, dtype=np.float64), (n,))
        return total, direction

    # -- running --

    def run(self, jaxpr, env: dict, lane_ids, in_loop: bool = False) -> None:
        """Run the equations of `jaxpr` on the lanes `lane_ids` (values in `env` are per those lanes)."""
        self._lane_ids = lane_ids
        n = len(lane_ids)
        unknown_conds = []  # (position, charged work) of conds whose predicate is not known here
        self.evals += len(jaxpr.eqns)
        for position, eqn in enumerate(jaxpr.eqns):
            self._lane_ids = lane_ids
            name = eqn.primitive.name
            ins = [self._read(env, v) for v in eqn.invars]
            if name == "cond":
                outs, charged = self._cond(eqn, env, ins, lane_ids, in_loop)
                if charged is not None:
                    unknown_conds.append((position, charged))
            elif name == "scan":
                outs = self._scan(eqn, ins, lane_ids, in_loop)
            elif name == "while":
                outs = self._while(eqn, ins, lane_ids)
            elif name == "run_scoped":
                scoped = run_scoped_body(eqn)
                inner = dict(zip(scoped.constvars, ins, strict=True))
                inner.update({v: scratch_box(v.aval) for v in scoped.invars})
                self.run(scoped, inner, lane_ids, in_loop)
                outs = [None] * len(eqn.outvars)
            elif (body := jx.call_body(eqn)) is not None:
                inner_jaxpr = getattr(body, "jaxpr", body)
                inner = {v: _const(c) for v, c in zip(inner_jaxpr.constvars, getattr(body, "consts", []), strict=True)}
                inner.update(zip(inner_jaxpr.invars, ins, strict=True))
                self.run(inner_jaxpr, inner, lane_ids, in_loop)
                outs = [self._read(inner, v) for v in inner_jaxpr.outvars]
            elif name == "get":
                outs = [self._get(eqn, env, ins, n)]
                self._count(eqn, lane_ids, in_loop)
            elif name == "swap":
                outs = [self._swap(eqn, env, ins, n)]
                self._count(eqn, lane_ids, in_loop)
            elif name == "dma_start":
                moved, direction = self._dma_bytes(env, eqn, n)
                self.dma[direction][lane_ids] += moved
                if self._branch_kind == COPY_BRANCH:
                    self.copies[in_loop][lane_ids] += 1
                outs = []
            else:
                subs = _info(eqn)[3]
                for sub in subs:  # any other body: run once where it stands, its values unknown
                    self.run(sub, {}, lane_ids, in_loop)
                if not subs:
                    self._count(eqn, lane_ids, in_loop)
                outs = self._eval(eqn, ins, n) if not subs else [None] * len(eqn.outvars)
            env.update(zip(eqn.outvars, outs, strict=True))
        self._lane_ids = lane_ids
        if len(unknown_conds) > 1:
            self._credit_exclusive(jaxpr, env, unknown_conds, lane_ids)

    def _get(self, eqn, env, ins, n, first_index: int = 1):
        box = ins[0]
        if not isinstance(box, RefBox) or box.content is None:
            return None
        transforms = jax.tree_util.tree_unflatten(jx.ref_transforms_tree(eqn), eqn.invars[first_index:])
        value = box.content
        for t in transforms:
            if not hasattr(t, "indices"):
                return None
            value = self._index(env, t, value, n)
            if value is None:
                return None
        return value

    def _swap(self, eqn, env, ins, n):
        box, new = ins[0], ins[1]
        try:
            old = self._get(eqn, env, [box], n, 2) if isinstance(box, RefBox) and box.content is not None else None
        except Exception:  # noqa: BLE001
            old = None
        if not isinstance(box, RefBox) or box.content is None:
            return old

        def single(value):
            # With one lane (a kernel without a grid) a per-lane value is just a value.
            if value is not None and value.lanes and self.P == 1 and n == 1:
                return Known(value.v[0], False, value.static)
            return value

        try:
            transforms = jax.tree_util.tree_unflatten(jx.ref_transforms_tree(eqn), eqn.invars[2:])
            new = single(new)
            if new is None or new.lanes or box.content.lanes or len(transforms) > 1 or n != self.P:
                raise ValueError("not tracked")
            idx = []
            for t in transforms:
                for i in t.indices:
                    if hasattr(i, "size"):
                        start = single(
                            self._read(env, i.start) if not isinstance(i.start, (int, np.integer)) else Known(i.start)
                        )
                        if start is None or start.lanes or not isinstance(i.size, (int, np.integer)):
                            raise ValueError("not tracked")
                        idx.append(slice(int(start.v), int(start.v) + int(i.size)))
                    else:
                        value = single(Known(i) if isinstance(i, (int, np.integer)) else self._read(env, i))
                        if value is None or value.lanes:
                            raise ValueError("not tracked")
                        idx.append(int(value.v))
            content = box.content.v.copy()
            content[tuple(idx)] = new.v
            box.content = Known(content, False, False)
        except Exception:  # noqa: BLE001 -- a write we cannot follow leaves the contents unknown
            box.content = None
        return old

    def _cond(self, eqn, env, ins, lane_ids, in_loop):
        """Run the branch each lane takes. Returns the cond's outputs (known where the taken branches compute them:
        a kernel picks its next block in a lax.cond) and the work charged when the predicate is unknown (else
        None)."""
        branches = jx.cond_branches(eqn)
        index, operands = ins[0], ins[1:]
        n = len(lane_ids)
        if index is not None and index.static and not index.lanes:
            taken = int(np.clip(index.v, 0, len(branches) - 1))
            self.removed[id(eqn)] = taken  # compiled inline: the code around it, not a branch of its own
            return self._branch(branches[taken], operands, lane_ids, np.arange(n), in_loop, inline=True), None
        if index is not None:
            picks = np.clip(np.broadcast_to(index.v, (n,)), 0, len(branches) - 1)
            taken_outs = []
            for b, branch in enumerate(branches):
                chosen = np.nonzero(picks == b)[0]
                if len(chosen):
                    taken_outs.append((chosen, self._branch(branch, operands, lane_ids, chosen, in_loop)))
            return self._join_branches(eqn, taken_outs, n), None
        # Unknown predicate: each lane is charged its heaviest branch.
        self.exact = False
        before = self._snapshot()
        works = []
        for branch in branches:
            self._restore(before)
            self._branch(branch, operands, lane_ids, np.arange(n), in_loop)
            works.append(self._diff(before))
        heaviest = max(range(len(works)), key=lambda b: works[b]["weight"].sum())
        self._restore(before)
        self._add(works[heaviest])
        return [None] * len(eqn.outvars), works[heaviest]

    def _branch(self, branch, operands, lane_ids, chosen, in_loop, inline: bool = False) -> list:
        inner = dict(zip(branch.jaxpr.constvars, [_const(c) for c in branch.consts], strict=True))
        inner.update(zip(branch.jaxpr.invars, [self._subset(o, chosen) for o in operands], strict=True))
        around = self._branch_kind
        if not inline:
            self._branch_kind = branch_kind(branch.jaxpr) or around
        try:
            self.run(branch.jaxpr, inner, lane_ids[chosen], in_loop)
        finally:
            self._branch_kind = around
        return [self._read(inner, v) for v in branch.jaxpr.outvars]

    def _join_branches(self, eqn, taken_outs, n: int) -> list:
        """A cond's outputs per lane from the branches its lanes took ([(lanes, outputs)]); an output is known only
        where every taken branch computed it (small outputs only: they are the scalars a kernel steers by)."""
        if not _info(eqn)[0]:
            return [None] * len(eqn.outvars)
        joined: list[Known | None] = []
        for k, var in enumerate(eqn.outvars):
            parts = [(chosen, outs[k]) for chosen, outs in taken_outs]
            if not all(isinstance(out, Known) for _, out in parts):
                joined.append(None)
                continue
            shape = tuple(getattr(var.aval, "shape", ()))
            values = np.empty((n, *shape), dtype=var.aval.dtype)
            try:
                for chosen, out in parts:
                    values[chosen] = out.v if out.lanes else np.broadcast_to(out.v, (len(chosen), *shape))
            except ValueError:  # a value whose shape is not the output's: left unknown
                joined.append(None)
                continue
            joined.append(Known(values, True, False))
        return joined

    def _snapshot(self):
        return {unit: {k: v.copy() for k, v in parts.items()} for unit, parts in self.tally.items()}

    def _restore(self, snap):
        self.tally = {unit: {k: v.copy() for k, v in parts.items()} for unit, parts in snap.items()}

    def _diff(self, snap):
        d: dict = {unit: {k: v - snap[unit][k] for k, v in parts.items()} for unit, parts in self.tally.items()}
        d["weight"] = sum(d["mxu"].values()) * 1e6 + sum(d["vec"].values()) + sum(d["dma"].values()) * 1e-3
        return d

    def _add(self, d, sign: float = 1.0):
        for unit, parts in self.tally.items():
            for k in parts:
                parts[k] += sign * d[unit][k]

    def _credit_exclusive(self, jaxpr, env, unknown_conds, lane_ids):
        """Conds with unknown predicates that can never both take their non-empty branch (pl.when(p) and
        pl.when(~p)) are charged the heavier of the two, not both."""
        conds = [(p, w) for p, w in unknown_conds if _one_live_branch(jaxpr.eqns[p]) is not None]
        if len(conds) < 2:
            return
        live = _sample_live(jaxpr, env, [p for p, _ in conds])
        if live is None:
            return
        credited = set()
        for a in range(len(conds)):
            for b in range(a + 1, len(conds)):
                if a in credited or b in credited:
                    continue
                if not np.any(live[a] & live[b]):
                    lighter = a if conds[a][1]["weight"].sum() <= conds[b][1]["weight"].sum() else b
                    self._add(conds[lighter][1], -1.0)
                    credited.add(lighter)

    def _scan(self, eqn, ins, lane_ids, in_loop):
        scan = jx.scan_info(eqn)
        body, length = scan.body, scan.length
        consts, carry, _xs = jx.scan_parts(eqn, ins)
        n_consts, n_carry = len(consts), len(carry)
        carry = [_dynamic(c) for c in carry]
        unrolled = _fully_unrolled(scan)
        if not unrolled:
            self.loop_ids.add(id(eqn))
        diffs = []
        start = self.evals
        trips = 0
        while trips < min(length, self.max_trips) and not (trips >= MIN_TRIPS and self.evals - start > self.loop_evals):
            trips += 1
            before = self._snapshot()
            inner = dict(zip(body.jaxpr.constvars, [_const(c) for c in body.consts], strict=True))
            xs = [None] * (len(body.jaxpr.invars) - n_consts - n_carry)
            inner.update(zip(body.jaxpr.invars, consts + carry + xs, strict=True))
            self.run(body.jaxpr, inner, lane_ids, in_loop=in_loop or not unrolled)
            carry = [_dynamic(self._read(inner, v)) for v in body.jaxpr.outvars[:n_carry]]
            diffs.append(self._diff(before))
        if length > trips and diffs:
            self._add(_mean(diffs[len(diffs) // 2 :]), float(length - trips))
            carry = [None] * n_carry
        return carry + [None] * (len(eqn.outvars) - n_carry)

    def _while(self, eqn, ins, lane_ids):
        loop = jx.while_info(eqn)
        cond, body = loop.cond, loop.body
        cond_consts = ins[: loop.cond_nconsts]
        body_consts = ins[loop.cond_nconsts : loop.cond_nconsts + loop.body_nconsts]
        carry = list(ins[loop.cond_nconsts + loop.body_nconsts :])
        self.loop_ids.add(id(eqn))
        active = np.arange(len(lane_ids))
        carry_lanes = [self._lanes(c, len(lane_ids)) for c in carry]
        diffs = []
        start = self.evals
        for trip in range(self.max_trips):
            if trip >= MIN_TRIPS and self.evals - start > self.loop_evals:
                break
            sub = [self._subset(c, active) for c in carry_lanes]
            env = dict(zip(cond.jaxpr.constvars, [_const(c) for c in cond.consts], strict=True))
            env.update(
                zip(
                    cond.jaxpr.invars,
                    [self._subset(c, active) if isinstance(c, Known) else c for c in cond_consts] + sub,
                    strict=True,
                )
            )
            self.run(cond.jaxpr, env, lane_ids[active])
            go = self._read(env, cond.jaxpr.outvars[0])
            if go is None:
                # The trip count depends on data: the body counts once for these lanes.
                self.exact = self.trips_exact = False
                inner = dict(zip(body.jaxpr.constvars, [_const(c) for c in body.consts], strict=True))
                inner.update(zip(body.jaxpr.invars, [self._subset(c, active) for c in body_consts] + sub, strict=True))
                self.run(body.jaxpr, inner, lane_ids[active], in_loop=True)
                return [None] * len(eqn.outvars)
            go = np.broadcast_to(go.v, (len(active),)).astype(bool)
            active = active[go]
            if not len(active):
                return carry_lanes
            before = self._snapshot()
            sub = [self._subset(c, active) for c in carry_lanes]
            inner = dict(zip(body.jaxpr.constvars, [_const(c) for c in body.consts], strict=True))
            inner.update(zip(body.jaxpr.invars, [self._subset(c, active) for c in body_consts] + sub, strict=True))
            self.run(body.jaxpr, inner, lane_ids[active], in_loop=True)
            new = [self._read(inner, v) for v in body.jaxpr.outvars]
            carry_lanes = [
                self._merge(old, upd, active, len(lane_ids)) for old, upd in zip(carry_lanes, new, strict=True)
            ]
            diffs.append(self._diff(before))
        # Still running after max_trips: extrapolate a counted loop (i < n, i += 1), else stop counting here.
        remaining = _remaining_trips(cond, body, carry_lanes, len(lane_ids), self, active)
        if remaining is None or not diffs:
            self.exact = self.trips_exact = False
        else:
            # Per lane: its remaining trips x the mean per-trip work of the later replayed trips (per active lane).
            mean = _mean(diffs[len(diffs) // 2 :])
            scale = np.zeros(self.P)
            scale[lane_ids[active]] = remaining
            self._add({unit: {k: v * scale for k, v in mean[unit].items()} for unit in self.tally})
        return [None] * len(eqn.outvars)

    def _lanes(self, value, n):
        if isinstance(value, Known) and not value.lanes and value.v.ndim == 0:
            return Known(np.broadcast_to(value.v, (n,)).copy(), True, False)
        return _dynamic(value)

    def _merge(self, old, new, active, n):
        if not isinstance(old, Known) or not isinstance(new, Known) or old.v.ndim != 1 or not old.lanes:
            return None if old is not new else old
        merged = old.v.copy()
        merged[active] = np.broadcast_to(new.v, (len(active),)) if not new.lanes else new.v
        return Known(merged, True, False)


def _mean(diffs: list[dict]) -> dict:
    n = len(diffs)
    units = [unit for unit in diffs[0] if unit != "weight"]
    mean: dict = {unit: {k: sum(d[unit][k] for d in diffs) / n for k in diffs[0][unit]} for unit in units}
    mean["weight"] = sum(d["weight"] for d in diffs) / n
    return mean


def replay_kernel(jaxpr, grid: list[int], points, make_env: Callable[[], dict]) -> KernelReplay:
    """Replays a kernel body over its grid points. All points at once (one lane each) unless the body writes
    scalar memory it can read back: such state carries from one grid step to the next (jax's ragged paged
    attention resumes each step at the sequence the step before stopped at, kept in a scalar-prefetch ref), so
    the points are then replayed one at a time in grid order, each starting from the scalar memory the one before
    left, where there are at most IN_ORDER_STEPS of them. `make_env` builds the body's refs afresh."""
    env = make_env()
    boxes = [box for box in env.values() if isinstance(box, RefBox) and "smem" in box.space]
    before = [box.content for box in boxes]
    replay = KernelReplay(grid, points)
    replay.run(jaxpr, env, np.arange(replay.P))
    written = any(box.content is not content for box, content in zip(boxes, before, strict=True))
    if not written or replay.P <= 1:
        return replay
    if replay.P > IN_ORDER_STEPS:
        return _approximate(replay)
    env = make_env()
    in_order = KernelReplay(grid, points)
    removed: dict[int, int] | None = None
    for point in range(replay.P):
        # One lane's loops are cheap to follow to their end: a step may loop over every sequence of a batch.
        step = KernelReplay(grid, points[:, point : point + 1], loop_evals=IN_ORDER_EVALS)
        step.run(jaxpr, env, np.arange(1))
        if in_order.evals + step.evals > IN_ORDER_EVALS:
            return _approximate(replay)
        for unit, parts in in_order.tally.items():
            for k in parts:
                parts[k][point] = step.tally[unit][k][0]
        in_order.exact = in_order.exact and step.exact
        in_order.trips_exact = in_order.trips_exact and step.trips_exact
        in_order.loop_ids |= step.loop_ids
        in_order.evals += step.evals
        # A branch counts as removed by the compiler only where every step saw its predicate constant alike.
        seen = step.removed
        removed = dict(seen) if removed is None else {k: v for k, v in removed.items() if seen.get(k) == v}
    in_order.removed = removed or {}
    return in_order


def _approximate(replay: KernelReplay) -> KernelReplay:
    """The replay of all points at once of a kernel whose scalar state could not be followed in grid order: every
    step saw the state the kernel starts with, so its counts are approximate."""
    replay.exact = replay.trips_exact = False
    return replay


def scratch_box(aval) -> RefBox:
    """A scratch buffer: scalar memory starts known (as zeros: kernels write their tables before reading them),
    so that the control values a kernel keeps there can be followed; any other memory is not followed."""
    space = _space(aval)
    if "smem" in space and getattr(aval, "shape", None) is not None and _elements(aval) <= SMALL_ELEMENTS:
        try:
            return RefBox(space, Known(np.zeros(aval.shape, aval.dtype)))
        except TypeError:
            pass
    return RefBox(space)


def _dynamic(value):
    """A loop-carried value is never a compile-time constant, whatever its first value."""
    return Known(value.v, value.lanes, False) if isinstance(value, Known) and value.static else value


def _const(c):
    size = np.size(c) if not hasattr(c, "aval") else _elements(c.aval)
    return Known(np.asarray(c), static=True) if size <= SMALL_ELEMENTS else None


def _fully_unrolled(scan: jx.Scan) -> bool:
    unroll, length = scan.unroll, scan.length
    return length > 0 and (unroll is True or (not isinstance(unroll, bool) and unroll >= length))


def unrolled_copies(scan: jx.Scan) -> int:
    """How many copies of a scan's body the compiler lays out in one stretch of code: every trip when fully
    unrolled, else its unroll factor (at least one, at most its trips)."""
    return scan.length if _fully_unrolled(scan) else max(1, min(int(scan.unroll), scan.length))


def _one_live_branch(eqn) -> int | None:
    """The one branch of a cond that does any work (pl.when: the other is empty), or None."""
    live = [b for b, branch in enumerate(jx.cond_branches(eqn)) if branch.jaxpr.eqns]
    return live[0] if len(live) == 1 else None


def _sample_live(jaxpr, env, positions, samples: int = EXCLUSIVITY_SAMPLES):
    """For the conds at `positions`: whether each takes its live branch, on random draws of the unknown scalar
    values their predicates read (a (len(positions), samples) bool array); None when a predicate reads
    anything but scalars."""
    rng = np.random.default_rng(0)
    wanted = {jaxpr.eqns[p].invars[0] for p in positions if not _literal(jaxpr.eqns[p].invars[0])}
    chain, needed = [], set(wanted)
    reads: dict = {}  # a read of a ref at constant indices -> the one draw all such reads share
    for eqn in reversed(jaxpr.eqns[: max(positions)]):
        if not any(v in needed for v in eqn.outvars):
            continue
        if eqn.primitive.name == "get" and all(_literal(v) for v in eqn.invars[1:]):
            reads[eqn.outvars[0]] = (
                eqn.invars[0],
                tuple(v.val for v in eqn.invars[1:]),
                str(jx.ref_transforms_tree(eqn)),
            )
            continue
        if (
            eqn.primitive.name not in _NUMPY
            and eqn.primitive.name not in ("convert_element_type", "select_n")
            and eqn.primitive.name not in _IDENTITY
        ):
            continue  # its output is a leaf: drawn at random
        chain.append(eqn)
        needed |= {v for v in eqn.invars if not _literal(v)}
    chain.reverse()
    produced = {v for eqn in chain for v in eqn.outvars}
    values = {}
    shared: dict = {}
    for var in needed - produced:
        if var in reads and reads[var] in shared:
            values[var] = shared[reads[var]]
            continue
        aval = var.aval
        if getattr(aval, "shape", None) != ():
            return None
        known = env.get(var)
        if isinstance(known, Known):
            v = known.v
            values[var] = v[rng.integers(0, len(v), samples)] if known.lanes else np.broadcast_to(v, (samples,))
        elif np.issubdtype(aval.dtype, np.bool_):
            values[var] = rng.integers(0, 2, samples).astype(bool)
        elif np.issubdtype(aval.dtype, np.integer):
            values[var] = rng.integers(-8, 9, samples).astype(aval.dtype)
        else:
            values[var] = rng.normal(size=samples).astype(aval.dtype)
        if var in reads:
            shared[reads[var]] = values[var]

    def read(v):
        return np.broadcast_to(np.asarray(v.val), (samples,)) if _literal(v) else values[v]

    try:
        for eqn in chain:
            ins = [read(v) for v in eqn.invars]
            name = eqn.primitive.name
            if name in _IDENTITY:
                out = ins[0]
            elif name == "convert_element_type":
                out = ins[0].astype(jx.convert_dtype(eqn))
            elif name == "select_n":
                out = np.choose(ins[0].astype(np.int32), ins[1:])
            else:
                out = _NUMPY[name](*ins)
            values[eqn.outvars[0]] = np.asarray(out)
        live = []
        for p in positions:
            index = read(jaxpr.eqns[p].invars[0])
            branches = len(jx.cond_branches(jaxpr.eqns[p]))
            live.append(np.clip(index.astype(np.int64), 0, branches - 1) == _one_live_branch(jaxpr.eqns[p]))
        return np.array(live)
    except Exception:  # noqa: BLE001 -- undecidable here: no credit
        return None


def _remaining_trips(cond, body, carry, n, replay: KernelReplay, active):
    """Trips left in a counted while loop (cond `carry[i] < carry[j]` or `< constant`, body `carry[i] + 1`)."""
    eqns = cond.jaxpr.eqns
    if not eqns or eqns[-1].primitive.name != "lt" or cond.jaxpr.outvars[0] is not eqns[-1].outvars[0]:
        return None
    lhs, rhs = eqns[-1].invars
    invars = list(cond.jaxpr.invars)
    if lhs not in invars:
        return None
    i = invars.index(lhs)
    n_consts = len(invars) - len(carry)
    if i < n_consts:
        return None
    i -= n_consts
    step = body.jaxpr.outvars[i]
    adds = [e for e in body.jaxpr.eqns if step in e.outvars and e.primitive.name == "add"]
    if not adds or body.jaxpr.invars[len(body.jaxpr.invars) - len(carry) + i] not in adds[0].invars:
        return None
    other = [v for v in adds[0].invars if v is not body.jaxpr.invars[len(body.jaxpr.invars) - len(carry) + i]]
    if not other or not _literal(other[0]) or other[0].val != 1:
        return None
    if _literal(rhs):
        bound = np.broadcast_to(np.asarray(rhs.val), (n,))
    elif rhs in invars and invars.index(rhs) >= n_consts and isinstance(carry[invars.index(rhs) - n_consts], Known):
        bound = np.broadcast_to(carry[invars.index(rhs) - n_consts].v, (n,))
    else:
        return None
    current = carry[i]
    if not isinstance(current, Known):
        return None
    now = np.broadcast_to(current.v, (n,))
    return np.maximum(0, (bound - now)[active]).astype(np.float64)


# ---- what the compiled schedule holds -----------------------------------------------------------------------


def _leaf_work(eqn) -> tuple[float, float]:
    """(MXU pushes, vector-register ops) of one leaf equation; scalar work weighs nothing."""
    if eqn.primitive.name == "dot_general":
        (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
        k = 1
        for d in lhs_contracting:
            k *= eqn.invars[0].aval.shape[d]
        return k * _elements(eqn.outvars[0].aval) / _MXU_PUSH_MACS, 0.0
    work = sum(_elements(v.aval) for v in eqn.outvars if getattr(v.aval, "shape", ()) != ())
    if eqn.primitive.name == "swap":
        work += _elements(eqn.invars[1].aval)
    return 0.0, work / _VREG_ELEMENTS


def branch_kind(jaxpr) -> BranchKind | None:
    """What the compiled region of a branch issues itself, the branches inside it aside (libtpu.BRANCH_KINDS):
    "copy" when its only work is starting copies (its other ops scalar: index arithmetic, scalar-memory reads and
    writes), "matmul" when it multiplies, "vector" for other vector work. None when it holds a rolled loop (its
    region is not straight-line code, and counts as the code around it) or no work of its own (its work counts as
    that of the branch around it). The steps that skip a branch jump over its region, so each kind runs as often as
    its work does (paged attention starts its first pages once a run; cross entropy's loss epilogue runs at the last
    of its hidden blocks, its matmul at every one)."""

    def make() -> str | None:
        if any(_rolled_loop(eqn) for eqn in jx.walk_eqns(jaxpr)):
            return None
        own = list(_own_eqns(jaxpr))
        if any(eqn.primitive.name == "dot_general" for eqn in own):
            return "matmul"
        if any(
            any(_elements(v.aval) > 1 for v in eqn.outvars)
            or (eqn.primitive.name == "swap" and _elements(eqn.invars[1].aval) > 1)
            for eqn in own
        ):
            return "vector"
        return "copy" if any(eqn.primitive.name == "dma_start" for eqn in own) else None

    return _once(_BRANCH_KINDS, jaxpr, make)


def _rolled_loop(eqn) -> bool:
    return eqn.primitive.name == "while" or (eqn.primitive.name == "scan" and not _fully_unrolled(jx.scan_info(eqn)))


def _own_eqns(jaxpr):
    """The equations of a body and of the calls in it, those of its conds' branches aside."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            continue
        yield eqn
        for sub in jx.sub_jaxprs(eqn):
            yield from _own_eqns(sub)


def scheduled_work(
    jaxpr, removed: dict[int, int], in_loop: bool = False, acc: dict | None = None, kind: str | None = None
) -> dict:
    """The work in the compiled schedule: every branch the compiler kept, once; a loop body once per unrolled
    copy (a fully unrolled loop is straight-line code). Keyed as KernelReplay.tally: {"mxu": {in_loop: pushes},
    "vec": {in_loop: ops}, ("mxu" or "vec", kind): the same inside matmul or vector branches, or "outside" them,
    "copies": {in_loop: copies started in copy branches}}. `kind`: that of the innermost kinded branch around
    `jaxpr` (branch_kind)."""
    acc = acc if acc is not None else {unit: {False: 0.0, True: 0.0} for unit in _TALLIED}
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "cond":
            branches = jx.cond_branches(eqn)
            if id(eqn) in removed:  # compiled inline, as the code around it
                scheduled_work(branches[removed[id(eqn)]].jaxpr, removed, in_loop, acc, kind)
                continue
            for branch in branches:
                scheduled_work(branch.jaxpr, removed, in_loop, acc, branch_kind(branch.jaxpr) or kind)
        elif name == "scan":
            scan = jx.scan_info(eqn)
            unrolled = _fully_unrolled(scan)
            copies = unrolled_copies(scan)
            inner = scheduled_work(scan.body.jaxpr, removed, in_loop or not unrolled, kind=kind)
            for unit, parts in inner.items():
                for k in (False, True):
                    acc[unit][k] += copies * parts[k]
        elif name == "while":
            loop = jx.while_info(eqn)
            scheduled_work(loop.cond.jaxpr, removed, True, acc, kind)
            scheduled_work(loop.body.jaxpr, removed, True, acc, kind)
        else:
            subs = list(jx.sub_jaxprs(eqn))
            for sub in subs:
                scheduled_work(sub, removed, in_loop, acc, kind)
            if not subs:
                mxu, vec = _leaf_work(eqn)
                acc["mxu"][in_loop] += mxu
                acc["vec"][in_loop] += vec
                tallied = kind if kind in WORK_BRANCH_KINDS else "outside"
                acc["mxu", tallied][in_loop] += mxu
                acc["vec", tallied][in_loop] += vec
                acc["copies"][in_loop] += kind == COPY_BRANCH and name == "dma_start"
    return acc


def _ratio(executed: float, scheduled: float) -> float:
    return executed / scheduled if scheduled > 0 else 1.0


def work_unit(sched: dict, parts: tuple[bool, ...] = (False, True)) -> str:
    """The unit a kernel's work is weighed in: MXU pushes where those parts hold matmuls (vector work mostly
    co-issues with them), else vector ops."""
    return "mxu" if sum(sched["mxu"][part] for part in parts) > 0 else "vec"


def _unbranched_ratio(replay: KernelReplay, sched: dict, part: bool) -> float | None:
    unit = ("mxu" if sched["mxu", "outside"][part] > 0 else "vec", "outside")
    scheduled = sched[unit][part]
    return _ratio(float(replay.tally[unit][part].mean()), scheduled) if scheduled > 0 and replay.P else None


def summarise(replay: KernelReplay, sched: dict) -> dict:
    """Per-step ratios of executed to scheduled work: outside in-kernel loops (`body_ratio`), inside them
    (`loop_ratio`), over all the code when loops are counted as straight-line (`run_ratio`). Each is weighed
    in work_unit's unit."""
    out: dict[str, Any] = {}
    for part, key in ((False, "body_ratio"), (True, "loop_ratio")):
        unit = work_unit(sched, (part,))
        executed = replay.tally[unit][part].mean() if replay.P else 0.0
        out[key] = _ratio(float(executed), sched[unit][part])
    unit = work_unit(sched)
    executed = sum(float(replay.tally[unit][k].mean()) for k in (False, True)) if replay.P else 0.0
    out["run_ratio"] = _ratio(executed, sched[unit][False] + sched[unit][True])
    # The same when the compiler unrolled the loops: their every trip is in the schedule.
    loop_executed = float(replay.tally[unit][True].mean()) if replay.P else 0.0
    out["flat_ratio"] = _ratio(executed, sched[unit][False] + loop_executed) if loop_executed else out["run_ratio"]
    out["in_kernel_loops"] = len(replay.loop_ids)
    # Per branch kind, outside and inside in-kernel loops, executed per scheduled work of its branches (None where
    # there are none): how often the schedule's regions of that kind run. Copy branches are weighed in the copies
    # they start, matmul branches in MXU pushes, vector branches in vector ops.
    weighed: dict[BranchKind, Any] = {"copy": "copies", "matmul": ("mxu", "matmul"), "vector": ("vec", "vector")}
    out["branch_ratios"] = {
        kind: [
            _ratio(float(replay.tally[unit][part].mean()), sched[unit][part])
            if sched[unit][part] > 0 and replay.P
            else None
            for part in (False, True)
        ]
        for kind, unit in weighed.items()
    }
    # The same for the code outside matmul and vector branches, in the unit it holds.
    out["unbranched_ratios"] = [_unbranched_ratio(replay, sched, part) for part in (False, True)]
    # MXU pushes (8 x 128 x 128 MACs) the whole run executes: the floor of the compute time at the MXUs' peak.
    out["mxu_pushes"] = float(replay.mxu[False].sum() + replay.mxu[True].sum())
    return out
