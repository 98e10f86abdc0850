"""A recorded program (a closed jaxpr) as bytes, and back: how the trace job hands the judge what to run.

The candidate's process traces `workload()` and writes the program with `encode`; the judging process, where
the candidate's Python never ran, rebuilds it with `decode` and derives every analysis, the lowering, the compile
and the run from it. The bytes are a pickle, read by Python's documented way of restricting what a pickle may
build (an Unpickler whose find_class answers from an allowlist):
- classes: only those named in _CLASSES (jax's own types for avals, effects, kernel settings; numpy dtypes), and
  the rebuild functions of this module; anything else is refused by name, so no function of the candidate, nor
  any other callable, is reachable from the bytes;
- primitives travel by name and are rebound to jax's own primitive objects; host callbacks, prebuilt Mosaic
  kernels, foreign calls and exported modules are refused (RefusedPrimitive names them all), as is any primitive
  jax does not define (one the candidate made runs the candidate's Python);
- what jax keeps for tracebacks and debugging (source locations, argument names) is not carried: the rebuilt
  program has neutral ones; custom_jvp / custom_vjp / custom_vmap calls keep their forward body as a plain jit
  (their rules are functions of the candidate, and a forward run never needs them);
- avals are rebuilt through their constructors (jax interns them: one made field by field lowers differently),
  arrays from dtype, shape and bytes (never an object array), and the result is type-checked by jax
  (`type_check`, once the judge knows the program is not too large to walk).

What decode can raise is CodecError (or its RefusedPrimitive): whatever is wrong with the bytes, the program
they hold is refused, never run.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax._src import (
    core,
    debugging,
    layout,
    linear_util as lu,
    literals,
    mesh as mesh_lib,
    named_sharding,
    partition_spec,
    source_info_util,
    tree_util,
)
from jax._src.pallas import core as pallas_core
from jax._src.random import prng
from jax.experimental import pallas as _pallas  # noqa: F401 - the kernel primitives a program may hold
from jax.experimental.pallas import tpu as _pltpu  # noqa: F401

MAX_BYTES = 256 << 20  # a program file larger than this is refused unread
MAX_NAME_CHARS = 200  # a traced function's name, as it travels with its jaxpr
_MAX_EQNS = 2_000_000  # equations at all depths (the largest corpus program has ~30,000)
_MAX_DEPTH = 64  # jaxprs nested in jaxprs (the corpus goes 6 deep)
_FORMAT = "jaxbench-program/1"

# Refused primitives: each runs something no program carries (host Python, a prebuilt kernel, a foreign function,
# a module exported elsewhere), so the judge could neither run nor inspect what it does.
_REFUSED = frozenset(
    {
        "pure_callback",
        "io_callback",
        "debug_callback",
        "callback",
        "tpu_custom_call",
        "ffi_call",
        "call_exported",
    }
)
# Calls whose rules are the candidate's functions: a forward run needs only the body (the parameter named).
_CALL_AS_JIT = {"custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vmap_call": "call"}

# The classes a program's parameters, avals and effects are made of (found on the 50 solutions, the test kernels
# and the expert kernels), by module and name as pickle names them.
_CLASSES = frozenset(
    {
        ("builtins", "complex"),
        ("builtins", "frozenset"),
        ("builtins", "set"),
        ("builtins", "slice"),
        ("jax", "P"),
        ("jax._src.api", "Inline"),
        ("jax._src.core", "ManualAxisType"),
        ("jax._src.core", "MemorySpace"),
        ("jax._src.core", "NamedAxisEffect"),
        ("jax._src.flattree", "FTFiltered"),
        ("jax._src.frozen_dict", "FrozenDict"),
        ("jax._src.flattree", "FTSingleton"),
        ("jax._src.flattree", "FTTuple"),
        ("jax._src.indexing", "Slice"),
        ("jax._src.lax.convolution", "ConvDimensionNumbers"),
        ("jax._src.lax.lax", "DotAlgorithmPreset"),
        ("jax._src.lax.lax", "Precision"),
        ("jax._src.lax.slicing", "GatherDimensionNumbers"),
        ("jax._src.lax.slicing", "GatherScatterMode"),
        ("jax._src.lax.slicing", "ScatterDimensionNumbers"),
        ("jax._src.layout", "AutoLayoutSingleton"),
        ("jax._src.literals", "TypedComplex"),
        ("jax._src.literals", "TypedFloat"),
        ("jax._src.literals", "TypedInt"),
        ("jax._src.mesh", "AbstractDevice"),
        ("jax._src.mesh", "AbstractMesh"),
        ("jax._src.mesh", "AxisType"),
        ("jax._src.named_sharding", "UnspecifiedValue"),
        ("jax._src.numpy.hijax", "SearchSorted"),
        ("jax._src.pallas.core", "BlockMapping"),
        ("jax._src.pallas.core", "Blocked"),
        ("jax._src.pallas.core", "Buffered"),
        ("jax._src.pallas.core", "CostEstimate"),
        ("jax._src.pallas.core", "DynamicGridDim"),
        ("jax._src.pallas.core", "Element"),
        ("jax._src.pallas.core", "GridMapping"),
        ("jax._src.pallas.core", "MemorySpace"),
        ("jax._src.pallas.core", "Squeezed"),
        ("jax._src.pallas.mosaic.core", "CompilerParams"),
        ("jax._src.pallas.mosaic.core", "DMASemaphore"),
        ("jax._src.pallas.mosaic.core", "MemorySpace"),
        ("jax._src.pallas.mosaic.core", "TensorCoreMesh"),
        ("jax._src.pallas.mosaic.core", "SemaphoreType"),
        ("jax._src.pallas.primitives", "DeviceIdType"),
        ("jax._src.state.indexing", "NDIndexer"),
        ("jax._src.state.types", "AbstractRef"),
        ("jax._src.state.types", "BitcastTransform"),
        ("jax._src.state.types", "AccumEffect"),
        ("jax._src.state.types", "ReadEffect"),
        ("jax._src.state.types", "ReshapeTransform"),
        ("jax._src.state.types", "TransformedRef"),
        ("jax._src.state.types", "WriteEffect"),
        ("jax._src.util", "Either"),
    }
)
# jax's own rebuild functions that its types pickle through (each calls one constructor).
_JAX_FUNCTIONS = frozenset({("jax._src.named_sharding", "_unpickle_named_sharding")})


class CodecError(Exception):
    """The bytes hold no program the judge will run (the message says why)."""


class RefusedPrimitive(CodecError):
    """The program binds primitives the judge does not run; `names` lists every one, in order of appearance."""

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(
            "the program uses "
            + ", ".join(names)
            + ", which the judge does not run (a host callback, a prebuilt kernel, a foreign call or a primitive "
            "jax does not define: its code would run outside the recorded program)"
        )


# ---- rebuild functions: the only callables the bytes may name besides the classes -----------------------------


def _var(aval):
    return core.Var(aval)


def _literal(val, aval):
    return core.Literal(val, aval)


def _shaped(shape, dtype, weak_type, sharding, manual_axis_type, memory_space, layout):
    return core.ShapedArray(
        shape,
        dtype,
        weak_type,
        sharding=sharding,
        manual_axis_type=manual_axis_type,
        memory_space=memory_space,
        layout=layout,
    )


def _dtype(name):
    return np.dtype(jax.numpy.dtype(name))


def _array(dtype, shape, data):
    if dtype.kind not in "biufcV" or dtype.hasobject:
        raise CodecError(f"an array of dtype {dtype} holds objects, not numbers")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _scalar(dtype, data):
    return _array(dtype, (), data)[()]


def _typed_ndarray(array, aval):
    return literals.TypedNdArray(array, aval)


def _ctx(compute_type, threefry_partitionable, mesh, layout_mode, remove_size_one_axis, no_collectives, metadata):
    return core.JaxprEqnContext._create(
        compute_type, threefry_partitionable, mesh, layout_mode, remove_size_one_axis, no_collectives, metadata
    )


def _singletons() -> dict[str, Any]:
    """jax's objects that its code compares by identity, by a name of ours."""
    return {
        "dynamic_grid_dim": pallas_core.dynamic_grid_dim,
        "unspecified": named_sharding.UNSPECIFIED,
        "auto_layout": layout.AutoLayout,
        "unconstrained": partition_spec.PartitionSpec.UNCONSTRAINED,
        "empty_manual_axis_type": core.empty_mat,
        "debug_effect": debugging.debug_effect,
        "ordered_debug_effect": debugging.ordered_debug_effect,
    }


def _singleton(name):
    if not isinstance(name, str) or name not in _singletons():
        raise CodecError(f"jax has no object the judge knows as {name!r:.60}")
    return _singletons()[name]


def _prng_impl(name):
    if not isinstance(name, str) or name not in prng.prngs:
        raise CodecError(f"jax registers no random number generator named {name!r:.60}")
    return prng.prngs[name]


def _key_type(name):
    return prng.KeyTy(_prng_impl(name))


def _key_array(name, data):
    return jax.random.wrap_key_data(data, impl=_prng_impl(name))


def _empty_mesh():
    return mesh_lib.empty_concrete_mesh


def _layout_mode(name):
    return core.LayoutMode[name]


def _eqn(invars, outvars, primitive, params, effects, ctx):
    return core.new_jaxpr_eqn(invars, outvars, primitive, params, effects, source_info_util.new_source_info(), ctx)


def _jaxpr(constvars, invars, outvars, eqns, effects, is_high, consts, name):
    # The traced function's name travels: jax names a kernel's Mosaic module after its body's, and the estimate pairs
    # each compiled schedule with its traced kernel by that name (two kernels both called "program" were paired
    # crosswise: 50k's row kernel priced with its GEMM's matmuls).
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        raise CodecError(f"a jaxpr's name must be a string of at most {MAX_NAME_CHARS} characters")
    debug = lu.DebugInfo("recorded", name or "program", None, None)
    return core.Jaxpr(constvars, invars, outvars, eqns, effects, debug, is_high, consts)


def _dataclass(cls, fields):
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise CodecError(f"{cls!r:.80} is not a dataclass")
    return cls(**fields)


class _Leaf:
    """A stand-in for a leaf, to carry a tree structure as an example tree."""


def _registries() -> dict:
    """jax's pytree registries by name: a tree structure is only meaningful with the registry it was made in (the
    ref transforms of a kernel's reads are nodes of the tracing registry alone)."""
    names = ("default_registry", "tracing_registry", "none_leaf_registry", "dispatch_registry")
    return {name: getattr(tree_util, name) for name in names}


def _treedef(example, registry):
    if registry not in _registries():
        raise CodecError(f"no pytree registry is named {registry!r:.60}")
    return _registries()[registry].flatten(example, lambda x: isinstance(x, _Leaf))[1]


_FUNCTIONS = {
    f.__name__: f
    for f in (
        _var,
        _literal,
        _shaped,
        _dtype,
        _array,
        _scalar,
        _typed_ndarray,
        _ctx,
        _layout_mode,
        _singleton,
        _prng_impl,
        _key_type,
        _key_array,
        _empty_mesh,
        _eqn,
        _jaxpr,
        _dataclass,
        _treedef,
    )
}


# ---- encode ----------------------------------------------------------------------------------------------------


def _as_jit(body, name: str, mesh) -> tuple:
    """The primitive and parameters of a plain jit of `body` (a closed jaxpr) under `mesh` (the abstract mesh of
    the call it stands for), as jax makes them."""
    eqn = jax.make_jaxpr(jax.jit(lambda x: x))(np.float32(0)).eqns[0]
    template = eqn.params
    n_in, n_out = len(body.invars), len(body.outvars)
    return eqn.primitive, {
        **template,
        "jaxpr": body,
        "in_shardings": template["in_shardings"][:1] * n_in,
        "out_shardings": template["out_shardings"][:1] * n_out,
        "in_layouts": template["in_layouts"][:1] * n_in,
        "out_layouts": template["out_layouts"][:1] * n_out,
        "donated_invars": (False,) * n_in,
        "name": name,
        "ctx_mesh": mesh,
    }


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, core.Primitive):
            return ("primitive", obj.name, *(_primitive_home(obj) if _replayable(obj) else ("", "")))
        return None

    def reducer_override(self, obj):
        for name, singleton in _singletons().items():
            if obj is singleton:
                return _singleton, (name,)
        if isinstance(obj, core.Var):
            return _var, (obj.aval,)
        if isinstance(obj, core.Literal):
            return _literal, (obj.val, obj.aval)
        if isinstance(obj, core.JaxprEqn):
            primitive, params = obj.primitive, obj.params
            if not _replayable(primitive):  # its parameters hold the host code it runs: the name is enough
                params = {}
            elif primitive.name in _CALL_AS_JIT:
                body = params[_CALL_AS_JIT[primitive.name]]
                primitive, params = _as_jit(body, primitive.name, obj.ctx.cur_abstract_mesh)
            return _eqn, (list(obj.invars), list(obj.outvars), primitive, params, obj.effects, obj.ctx)
        if isinstance(obj, core.Jaxpr):
            consts = obj._consts if obj._consts is None else list(obj._consts)
            if consts and any(isinstance(c, core.Tracer) for c in consts):
                # An inner body traced with values of the enclosing trace (run_scoped's): the equation that holds it
                # passes them as operands, and the tracers themselves are dead. Stand-ins keep the count (without
                # consts, jax's constructor would take the constvars for inputs).
                consts = [None] * len(consts)
            return _jaxpr, (
                list(obj.constvars),
                list(obj.invars),
                list(obj.outvars),
                list(obj.eqns),
                obj.effects,
                obj.is_high,
                consts,
                _func_name(obj),
            )
        return _reduce_value(obj)


def _func_name(jaxpr) -> str:
    name = getattr(getattr(jaxpr, "debug_info", None), "func_name", None)
    return name[:MAX_NAME_CHARS] if isinstance(name, str) else ""


def _reduce_value(obj):  # noqa: PLR0911 - one branch per kind of value a program's avals and parameters hold
    """How the pickler writes one of jax's values, or NotImplemented for pickle's own way (allowlisted classes)."""
    if type(obj) is core.ShapedArray:
        return _shaped, (
            obj.shape,
            obj.dtype,
            obj.weak_type,
            obj.sharding,
            obj.manual_axis_type,
            obj.memory_space,
            obj.layout,
        )
    if isinstance(obj, np.dtype):
        return _dtype, (obj.name,)
    if isinstance(obj, literals.TypedNdArray):
        return _typed_ndarray, (np.asarray(obj).view(np.ndarray), obj.aval)
    if isinstance(obj, prng.PRNGImpl):  # its functions are jax's, found again by the name it is registered as
        return _prng_impl, (obj.name,)
    if isinstance(obj, prng.KeyTy):
        return _key_type, (obj._impl.name,)
    if isinstance(obj, prng.PRNGKeyArray):
        return _key_array, (obj._impl.name, np.asarray(jax.random.key_data(obj)))
    if isinstance(obj, np.generic):
        return _scalar, (obj.dtype, obj.tobytes())
    if isinstance(obj, (np.ndarray, jax.Array)):
        array = np.asarray(obj)
        if array.dtype.hasobject:
            raise CodecError(f"the program holds an array of Python objects: {type(obj)}")
        return _array, (array.dtype, array.shape, array.tobytes())
    if isinstance(obj, core.JaxprEqnContext):
        return _ctx, (
            obj.compute_type,
            obj.threefry_partitionable,
            obj.cur_abstract_mesh,
            obj.cur_layout_mode,
            obj.remove_size_one_mesh_axis,
            obj.no_collectives,
            None if obj.xla_metadata is None else tuple(sorted(obj.xla_metadata.items())),  # as jax interns it
        )
    if isinstance(obj, mesh_lib.Mesh):
        if not obj.empty:
            raise CodecError(f"the program is tied to a mesh of devices ({obj}); trace it without one")
        return _empty_mesh, ()
    if isinstance(obj, core.LayoutMode):
        return _layout_mode, (obj.name,)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # through its constructor, as jax makes it
        return _dataclass, (type(obj), {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, jax.tree_util.PyTreeDef):  # as an example tree with stand-ins for leaves
        example = obj.unflatten([_Leaf() for _ in range(obj.num_leaves)])
        for name in _registries():
            if _treedef(example, name) == obj:
                return _treedef, (example, name)
        raise CodecError(f"a tree structure of the program belongs to no registry of jax: {obj}")
    return NotImplemented


def encode(closed) -> bytes:
    """The recorded program as bytes (raises CodecError naming what it holds that no program may carry)."""
    out = io.BytesIO()
    try:
        _Pickler(out, protocol=5).dump((_FORMAT, jax.__version__, closed))
    except CodecError:
        raise
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise CodecError(f"the program holds something that cannot be recorded: {exc}") from exc
    return out.getvalue()


# ---- decode ----------------------------------------------------------------------------------------------------

_where: dict[int, tuple[str, str]] = {}


def _primitive_home(primitive: core.Primitive) -> tuple[str, str]:
    """The jax module and global name under which `primitive` is defined (names alone are ambiguous: jax defines
    more than one primitive called "swap"). Raises CodecError for a primitive jax does not define."""
    if id(primitive) not in _where:
        for name, module in list(sys.modules.items()):
            if (name == "jax" or name.startswith("jax.")) and module is not None:
                for attr, value in list(vars(module).items()):
                    if isinstance(value, core.Primitive):
                        _where.setdefault(id(value), (name, attr))
    if id(primitive) not in _where:
        raise _Unplaced(primitive.name)
    return _where[id(primitive)]


class _Unplaced(Exception):
    """A primitive that no jax module defines (made by the candidate): written by name only, to be refused."""


def _replayable(primitive: core.Primitive) -> bool:
    try:
        return primitive.name not in _REFUSED and bool(_primitive_home(primitive))
    except _Unplaced:
        return False


def _is_jax_module(name: str) -> bool:
    return name.startswith(("jax._src.", "jax.experimental.")) and all(p.isidentifier() for p in name.split("."))


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.refused: list[str] = []

    def find_class(self, module: str, name: str):
        if module == __name__ and name in _FUNCTIONS:
            return _FUNCTIONS[name]
        if module == __name__ and name == "_Leaf":
            return _Leaf
        if (module, name) in _CLASSES or (module, name) in _JAX_FUNCTIONS:
            found = getattr(sys.modules.get(module) or __import__(module, fromlist=[name]), name, None)
            if isinstance(found, type) or (module, name) in _JAX_FUNCTIONS:
                return found
        raise CodecError(f"the program names {module}.{name}, which the judge does not rebuild")

    def persistent_load(self, pid):
        if not (
            isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "primitive" and all(isinstance(p, str) for p in pid)
        ):
            raise CodecError("the program refers to an object that is not a primitive")
        _, name, module, attr = pid
        primitive = None
        if name not in _REFUSED and _is_jax_module(module):
            try:
                found = getattr(importlib.import_module(module), attr, None)
            except ImportError:
                found = None
            if isinstance(found, core.Primitive) and found.name == name:
                primitive = found
        if primitive is None:
            if name not in self.refused:
                self.refused.append(name)
            return core.Primitive(name)  # a stand-in: the whole program is refused once read
        return primitive


def _jaxprs(closed) -> Iterator[tuple[core.Jaxpr, int]]:
    """Every jaxpr of the program with its depth, each once, without recursion."""
    seen: set[int] = set()
    stack = [(closed, 0)]
    while stack:
        jaxpr, depth = stack.pop()
        if id(jaxpr) in seen:
            continue
        seen.add(id(jaxpr))
        yield jaxpr, depth
        for eqn in jaxpr.eqns:
            stack.extend((sub, depth + 1) for sub in _params_jaxprs(eqn.params.values()))


def _params_jaxprs(values) -> Iterator[core.Jaxpr]:
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, core.Jaxpr):
            yield value
        elif isinstance(value, (tuple, list)):
            stack.extend(value)
        elif hasattr(value, "__dataclass_fields__"):  # kernel settings hold the index maps' jaxprs
            stack.extend(getattr(value, f, None) for f in value.__dataclass_fields__)


def _check(closed) -> None:
    """A program as jax would have recorded it: of the kinds of objects jax makes, not too large, type-correct."""
    if not isinstance(closed, core.Jaxpr):
        raise CodecError(f"the file holds a {type(closed).__name__}, not a program")
    eqns = 0
    for jaxpr, depth in _jaxprs(closed):
        if depth > _MAX_DEPTH:
            raise CodecError(f"the program nests jaxprs more than {_MAX_DEPTH} deep")
        for eqn in jaxpr.eqns:
            if not isinstance(eqn, core.JaxprEqn) or not isinstance(eqn.params, dict):
                raise CodecError("the program holds an equation jax did not make")
            for atom in [*eqn.invars, *eqn.outvars]:
                if not isinstance(atom, (core.Var, core.Literal)):
                    raise CodecError(f"an equation of {eqn.primitive.name} takes a {type(atom).__name__}")
        for var in [*jaxpr.constvars, *jaxpr.invars]:
            if not isinstance(var, core.Var):
                raise CodecError("a program's inputs must be variables")
        eqns += len(jaxpr.eqns)
        if eqns > _MAX_EQNS:
            raise CodecError(f"the program holds more than {_MAX_EQNS:,} equations")
    consts = closed.consts or []
    if len(consts) != len(closed.constvars):
        raise CodecError("the program's constants do not match its constant inputs")
    for const in consts:
        if not isinstance(const, (np.ndarray, np.generic, int, float, bool, complex, jax.Array)):
            raise CodecError(f"a constant of the program is a {type(const).__name__}, not an array")


def decode(data: bytes):
    """The program `encode` wrote. Raises CodecError (RefusedPrimitive) for anything else: too large, naming a class
    or a primitive the judge does not rebuild, or not made of what jax makes. jax's type check is `type_check`'s,
    to run once the program is known not to be too large: it visits a body once per call of it."""
    if not isinstance(data, (bytes, bytearray)):
        raise CodecError("a program is bytes")
    if len(data) > MAX_BYTES:
        raise CodecError(f"the program file holds {len(data):,} bytes, more than {MAX_BYTES:,}")
    unpickler = _Unpickler(bytes(data))
    try:
        loaded = unpickler.load()
    except CodecError:
        raise
    except (Exception, RecursionError, MemoryError) as exc:  # noqa: BLE001 - any failure to read is a refusal
        raise CodecError(f"the program file cannot be read: {type(exc).__name__}: {str(exc)[:300]}") from None
    if unpickler.refused:
        raise RefusedPrimitive(unpickler.refused)
    if not (isinstance(loaded, tuple) and len(loaded) == 3 and loaded[0] == _FORMAT):
        raise CodecError(f"the file is not a {_FORMAT} program")
    if loaded[1] != jax.__version__:
        raise CodecError(f"the program was recorded with jax {loaded[1]!s:.40}; this judge runs jax {jax.__version__}")
    closed = loaded[2]
    try:
        _check(closed)
    except CodecError:
        raise
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - a malformed object the walk met
        raise CodecError(f"the program is malformed: {type(exc).__name__}: {str(exc)[:300]}") from None
    return closed


def type_check(closed) -> None:
    """jax's type check of a decoded program (every equation's operands and results against its rule); CodecError
    if it fails."""
    try:
        core.check_jaxpr(closed)
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - whatever jax's check raises on a forged program
        raise CodecError(f"the program fails jax's type check: {type(exc).__name__}: {str(exc)[:300]}") from None
