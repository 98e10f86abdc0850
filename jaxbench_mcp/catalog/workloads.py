"""The workload registry: discovers workloads/*.py, validates each module, and answers queries.

A workload module is data-like. It declares, at module level:

  ID               JAXBench id, e.g. "8p_GEMM" (number + p|k + name)
  MODEL, OPERATOR  where the workload comes from and what kind of operator it is
  DESCRIPTION      one paragraph of math: exactly what the output is
  SIZES            {"full": {...}, "small": {...}}: the keyword arguments of create_inputs/flops; where
                   the small size shortens a reduction (a GEMM's K, a vocabulary, a KV length), also
                   "full_reduction": small shapes, every reduction at its full length (CPU-tier checks
                   run one more seed there: numerics that only full-length sums reach)
  INPUT_NAMES      one name per element that create_inputs returns
  STATIC_ARGNUMS   positions of inputs that are Python values used as shapes (optional)
  SPARSE_INPUTS    names of inputs a correct kernel need not read whole (paged caches, ragged groups,
                   padding): an unread part is a warning, not a failure (optional)
  NOTES            defects of the original benchmark and other caveats (optional)
  DEGENERATE_OUTPUT  True when JAXBench's output is (near) constant, so a constant kernel passes
  create_inputs(*, seed, **size)  the inputs, bit-exact with JAXBench for seed 42 (keys from
                                  seeding.jaxbench_key, draws with seeding.normal / seeding.uniform)
  reference(*inputs)              JAXBench's baseline semantics
  flops(**size)                   the FLOP count JAXBench reports

Copy any file in workloads/ to add one: the registry finds it by itself.

Custom workloads (tier `custom`) live in the operator's own directories, named by `--workloads DIR` or the
variable JAXBENCH_MCP_WORKLOADS (several joined with os.pathsep). There the id is any identifier that is not
one of the 50 (e.g. "swiglu_softcap"), MODEL, NOTES, DEGENERATE_OUTPUT and flops are optional (FLOPs come
from XLA's cost analysis of the reference, every loop trip counted), create_inputs need not match any published
seed, and SIZES may name further input configurations besides "full" and "small" (each with full's parameters
and its divisibility). A directory may also hold tasks in other formats (formats.py: a MaxKernel task
directory, a JAXBench baseline.py). A custom entry that breaks the contract is kept aside as broken, with
the field and the problem, and never stops the registry: see broken_workloads().
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from jaxbench_mcp.catalog import expert_refs, formats as workload_formats
from jaxbench_mcp.catalog.assets import asset_dir
from jaxbench_mcp.errors import AgentError, BadRequest, WorkloadDefinitionError
from jaxbench_mcp.internals import hlo

SIZE_NAMES = ("full", "small")  # every workload has these two; more named configurations may follow
# The optional size a check also runs when its run size is smaller than full: not a held-out configuration.
FULL_REDUCTION = "full_reduction"
TIERS = ("production", "kernelbench", "custom")
CUSTOM_ENV = "JAXBENCH_MCP_WORKLOADS"
_ID_PATTERN = re.compile(r"^(\d+)([pk])_[A-Za-z0-9_]+$")
_CUSTOM_ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
# Output dtypes the check compares: the truth is computed one precision level up from these.
_CHECKED_DTYPES = ("bfloat16", "float16", "float32")
_CUSTOM_NUMBER_BASE = 1000  # custom workloads sort after the 50
# A size's name travels to the worker in the check job, which accepts these.
_CONFIG_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class UnknownWorkload(AgentError, KeyError):
    def __init__(self, workload_id: str, close_matches: list[str]):
        self.workload_id, self.close_matches = workload_id, close_matches
        hint = f" Did you mean: {', '.join(close_matches)}?" if close_matches else ""
        super().__init__(f"unknown workload {workload_id!r}.{hint} `jaxbench-mcp list` shows them all.")

    def __str__(self) -> str:
        return self.args[0]


class UnknownSize(AgentError, ValueError):
    pass


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        import numpy as np

        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class ArgSpec:
    """One positional argument of `workload(*inputs)`: an array, or a static Python value."""

    name: str
    tensor: TensorSpec | None
    static_value: Any = None


@dataclass(frozen=True)
class Workload:
    id: str
    number: int
    tier: str
    model: str
    operator: str
    description: str
    sizes: dict[str, dict[str, Any]]
    input_names: tuple[str, ...]
    static_argnums: tuple[int, ...]
    sparse_inputs: tuple[str, ...]
    notes: tuple[str, ...]
    degenerate_output: bool
    path: Path
    module: ModuleType
    # What the module's source format is ("jaxbench-mcp", "maxkernel", "jaxbench-baseline"), the format's own
    # tolerances (reported beside ours, never used to judge), and how the small size was chosen.
    source_format: str = "jaxbench-mcp"
    format_tolerances: dict[str, Any] = field(default_factory=dict)
    size_rule: str = ""
    # False where create_inputs is host code (numpy) that cannot be traced with a symbolic seed.
    jit_inputs: bool = True

    @property
    def configs(self) -> tuple[str, ...]:
        """The named input configurations besides full and small (held-out shapes)."""
        return tuple(k for k in self.sizes if k not in SIZE_NAMES and k != FULL_REDUCTION)

    def size_params(self, size: str) -> dict[str, Any]:
        if size not in self.sizes:
            raise UnknownSize(f"unknown size {size!r} for {self.id}; choose one of {', '.join(self.sizes)}")
        return dict(self.sizes[size])

    def create_inputs(self, size: str = "small", seed: int = 42) -> tuple:
        if not self.jit_inputs:
            return tuple(self.module.create_inputs(seed=seed, **self.size_params(size)))
        return _jitted_create_inputs(self.id, size)(seed)

    def reference(self, *inputs):
        return self.module.reference(*inputs)

    def jitted_reference(self) -> Callable:
        import jax

        return jax.jit(self.module.reference, static_argnums=self.static_argnums)

    def flops(self, size: str) -> int:
        """The module's FLOP formula, or (custom workloads without one) XLA's cost analysis of the reference."""
        if callable(getattr(self.module, "flops", None)):
            return int(self.module.flops(**self.size_params(size)))
        return _xla_flops(self.id, size)

    @property
    def flops_source(self) -> str:
        return "formula" if callable(getattr(self.module, "flops", None)) else "XLA cost analysis of the reference"

    def input_specs(self, size: str) -> list[ArgSpec]:
        return _input_specs(self, size)

    def output_specs(self, size: str) -> list[TensorSpec]:
        return _output_specs(self, size)

    def io_bytes(self, size: str) -> int:
        """Bytes of the array inputs plus the outputs: what any implementation must move at least once."""
        return sum(a.tensor.nbytes for a in self.input_specs(size) if a.tensor) + sum(
            t.nbytes for t in self.output_specs(size)
        )

    def reference_source(self) -> str:
        own = getattr(self.module, "REFERENCE_SOURCE", None)  # imported formats: the user's file as it is
        return own if isinstance(own, str) else inspect.getsource(self.module.reference)

    @property
    def has_expert_reference(self) -> bool:
        return expert_refs.has_expert(self.id)


def _arrays_of_inputs(w: Workload, params: dict, seed, static_values: dict[int, Any]) -> list:
    """create_inputs' arrays; its static Python values (used as shapes) are stored in `static_values`."""
    inputs = w.module.create_inputs(seed=seed, **params)
    static_values.update({i: inputs[i] for i in w.static_argnums})
    return [x for i, x in enumerate(inputs) if i not in w.static_argnums]


@functools.cache
def _jitted_create_inputs(workload_id: str, size: str) -> Callable[[int], tuple]:
    """create_inputs as one compiled program for every seed: eager jax.random compiles op by op."""
    import jax
    import jax.numpy as jnp

    w = get_workload(workload_id)
    params = w.size_params(size)
    static_values: dict[int, Any] = {}

    compiled = jax.jit(lambda seed: _arrays_of_inputs(w, params, seed, static_values))

    def create(seed: int) -> tuple:
        arrays = iter(compiled(jnp.uint32(seed)))
        return tuple(static_values[i] if i in static_values else next(arrays) for i in range(len(w.input_names)))

    return create


def _tensor_spec(x) -> TensorSpec:
    return TensorSpec(tuple(int(d) for d in x.shape), str(x.dtype))


@functools.cache
def _input_specs_cached(workload_id: str, size: str) -> tuple[ArgSpec, ...]:
    return _compute_input_specs(get_workload(workload_id), size)


def _compute_input_specs(w: Workload, size: str) -> tuple[ArgSpec, ...]:
    import jax

    params = w.size_params(size)
    static_values: dict[int, Any] = {}

    # eval_shape traces create_inputs without allocating, so full size costs nothing.
    shapes = iter(jax.eval_shape(lambda: _arrays_of_inputs(w, params, 42, static_values)))
    specs = []
    for i, name in enumerate(w.input_names):
        if i in w.static_argnums:
            specs.append(ArgSpec(name, None, static_values[i]))
        else:
            specs.append(ArgSpec(name, _tensor_spec(next(shapes))))
    return tuple(specs)


def _input_specs(w: Workload, size: str) -> list[ArgSpec]:
    return list(_input_specs_cached(w.id, size))


@functools.cache
def _output_specs_cached(workload_id: str, size: str) -> tuple[TensorSpec, ...]:
    w = get_workload(workload_id)
    return _compute_output_specs(w, abstract_inputs(w, size))


def _compute_output_specs(w: Workload, args: list) -> tuple[TensorSpec, ...]:
    import jax

    static = {i: a for i, a in enumerate(args) if i in w.static_argnums}

    def call(*dynamic):
        it = iter(dynamic)
        full = [static[i] if i in static else next(it) for i in range(len(args))]
        return w.module.reference(*full)

    out = jax.eval_shape(call, *[a for i, a in enumerate(args) if i not in static])
    return tuple(_tensor_spec(leaf) for leaf in jax.tree_util.tree_leaves(out))


def _output_specs(w: Workload, size: str) -> list[TensorSpec]:
    return list(_output_specs_cached(w.id, size))


@functools.cache
def _xla_flops(workload_id: str, size: str) -> int:
    """FLOPs of the reference as XLA's HLO cost analysis counts them (lowered only: nothing is allocated)."""
    import jax

    w = get_workload(workload_id)
    args = abstract_inputs(w, size)
    lowered = jax.jit(w.module.reference, static_argnums=w.static_argnums).lower(*args)
    cost = lowered.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    # XLA's analysis counts a loop's body once (a scan over layers or chunks): the other trips are added.
    more_flops, _ = hlo.repeated_work(hlo.outside_ops(lowered.as_text(dialect="hlo"))[0])
    return int(max(0.0, float((cost or {}).get("flops", 0.0)) + more_flops))


def abstract_inputs(w: Workload, size: str) -> list:
    """ShapeDtypeStructs for array inputs and the Python values for static ones."""
    return _abstract(w.input_specs(size))


def _abstract(specs) -> list:
    import jax

    return [a.static_value if a.tensor is None else jax.ShapeDtypeStruct(a.tensor.shape, a.tensor.dtype) for a in specs]


# ---- discovery and validation ------------------------------------------------------------------

_REQUIRED = {
    "ID": str,
    "MODEL": str,
    "OPERATOR": str,
    "DESCRIPTION": str,
    "SIZES": dict,
    "INPUT_NAMES": tuple,
}
_OPTIONAL_FOR_CUSTOM = ("MODEL",)
_FUNCTIONS = ("create_inputs", "reference", "flops")
_OPTIONAL_FUNCTIONS_FOR_CUSTOM = ("flops",)


@dataclass(frozen=True)
class BrokenWorkload:
    """A custom entry that breaks the contract: left out of the registry, with what is wrong."""

    path: Path
    field: str
    problem: str

    def message(self) -> str:
        return f"{self.path}: {self.field}: {self.problem}"


def custom_dirs() -> list[Path]:
    """The operator's workload directories (JAXBENCH_MCP_WORKLOADS, os.pathsep-separated), as absolute paths.

    The variable is the one place the choice lives: the CLI's --workloads sets it, and a check's worker
    inherits it (sandbox/jobs.py passes it through; sandbox/isolation.py mounts each directory read-only)."""
    raw = os.environ.get(CUSTOM_ENV, "")
    return [Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p.strip()]


def use_directories(dirs: list[Path | str] | None) -> None:
    """Serve the custom workloads of `dirs` (None or []: none) from now on, in this process and its workers."""
    if dirs:
        os.environ[CUSTOM_ENV] = os.pathsep.join(str(Path(d).expanduser().resolve()) for d in dirs)
    else:
        os.environ.pop(CUSTOM_ENV, None)
    reset_caches()


def reset_caches() -> None:
    for cached in (_registry, _jitted_create_inputs, _input_specs_cached, _output_specs_cached, _xla_flops):
        cached.cache_clear()


def _load_module(path: Path, package: str = "jaxbench_workloads") -> ModuleType:
    if package == "jaxbench_workloads":
        name = f"{package}.{path.stem}"
    else:  # custom files from anywhere: the path's digest keeps two `gemm.py` apart
        name = f"{package}.{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadDefinitionError(path, "module", "is not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect.getsource and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise WorkloadDefinitionError(path, "module", f"fails to import: {type(exc).__name__}: {exc}") from exc
    return module


def _validate(path: Path, module: ModuleType, custom: bool = False, number: int = 0) -> Workload:
    def fail(field: str, problem: str) -> NoReturn:
        raise WorkloadDefinitionError(path, field, problem)

    for field_, kind in _REQUIRED.items():
        if not hasattr(module, field_):
            if custom and field_ in _OPTIONAL_FOR_CUSTOM:
                continue
            fail(field_, "missing")
        if not isinstance(getattr(module, field_), kind):
            fail(field_, f"must be a {kind.__name__}, got {type(getattr(module, field_)).__name__}")
    for fn in _FUNCTIONS:
        if not callable(getattr(module, fn, None)):
            if custom and fn in _OPTIONAL_FUNCTIONS_FOR_CUSTOM and not hasattr(module, fn):
                continue
            fail(fn, "missing function")

    if custom:
        match = None
        if _ID_PATTERN.match(module.ID):
            fail("ID", f"{module.ID!r} has the form of a JAXBench id (<number><p|k>_<Name>), kept for the 50")
        if not _CUSTOM_ID_PATTERN.match(module.ID):
            fail("ID", f"{module.ID!r} must be an identifier: a letter, then letters, digits or '_' (at most 64)")
    else:
        match = _ID_PATTERN.match(module.ID)
        if not match:
            fail("ID", f"{module.ID!r} is not of the form <number><p|k>_<Name>")
    if not module.DESCRIPTION.strip():
        fail("DESCRIPTION", "empty")

    sizes = module.SIZES
    _validate_sizes(module, sizes, fail)

    static = tuple(getattr(module, "STATIC_ARGNUMS", ()))
    if any(not 0 <= i < len(module.INPUT_NAMES) for i in static):
        fail("STATIC_ARGNUMS", f"{static} out of range for {len(module.INPUT_NAMES)} inputs")
    notes = tuple(getattr(module, "NOTES", ()))
    if not all(isinstance(n, str) for n in notes):
        fail("NOTES", "must be a tuple of strings")
    sparse = tuple(getattr(module, "SPARSE_INPUTS", ()))
    if not set(sparse) <= set(module.INPUT_NAMES):
        fail("SPARSE_INPUTS", f"{sorted(set(sparse) - set(module.INPUT_NAMES))} are not in INPUT_NAMES")

    return Workload(
        id=module.ID,
        number=int(match.group(1)) if match else number,
        tier="custom" if custom else "production" if match and match.group(2) == "p" else "kernelbench",
        model=getattr(module, "MODEL", None) or f"custom workload ({path.name})",
        operator=module.OPERATOR,
        description=" ".join(module.DESCRIPTION.split()),
        sizes={k: dict(v) for k, v in sizes.items()},
        input_names=tuple(module.INPUT_NAMES),
        static_argnums=static,
        sparse_inputs=sparse,
        notes=notes,
        degenerate_output=bool(getattr(module, "DEGENERATE_OUTPUT", False)),
        path=path,
        module=module,
        source_format=str(getattr(module, "SOURCE_FORMAT", "jaxbench-mcp")),
        format_tolerances=dict(getattr(module, "FORMAT_TOLERANCES", {}) or {}),
        size_rule=str(getattr(module, "SIZE_RULE", "")),
        jit_inputs=bool(getattr(module, "JIT_INPUTS", True)),
    )


def _validate_sizes(module: ModuleType, sizes: dict, fail: Callable[[str, str], NoReturn]) -> None:
    """SIZES has `full` and `small` (and maybe more configurations), each with the parameters of `full`, and
    create_inputs (which takes a `seed`) and flops accept those parameters."""
    missing_sizes = [k for k in SIZE_NAMES if k not in sizes]
    if missing_sizes:
        fail("SIZES", f"needs the keys {SIZE_NAMES} (more named configurations may follow), lacks {missing_sizes}")
    for name, params in sizes.items():
        if not isinstance(name, str) or not _CONFIG_NAME.match(name) or name == "all":
            fail(
                "SIZES",
                f"{name!r} is not a configuration name: lowercase letters, digits and '_', a letter first, at "
                "most 32 characters, and not 'all'",
            )
        if not isinstance(params, dict):
            fail(f"SIZES[{name!r}]", f"must be a dict of size parameters, got {type(params).__name__}")
        if set(params) != set(sizes["full"]):
            fail(
                f"SIZES[{name!r}]", f"must have the parameters of 'full' {sorted(sizes['full'])}, has {sorted(params)}"
            )
    for fn in ("create_inputs", "flops"):
        if not callable(getattr(module, fn, None)):
            continue
        params = inspect.signature(getattr(module, fn)).parameters
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        missing = [k for k in sizes["full"] if k not in params and not accepts_any]
        if missing:
            fail(fn, f"does not accept the size parameters {missing}")
    create_params = inspect.signature(module.create_inputs).parameters
    if "seed" not in create_params and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in create_params.values()):
        fail("create_inputs", "must take a keyword argument `seed`")


def _trace_check(w: Workload) -> None:
    """Every size of a custom workload traces (abstractly: nothing is allocated) and its reference returns one
    floating-point array of the same dtype at every size: what the check can compare. Raises
    WorkloadDefinitionError naming the size."""
    dtypes = {}
    for size in w.sizes:
        try:
            specs = _compute_input_specs(w, size)
        except Exception as exc:
            raise WorkloadDefinitionError(
                w.path, f"SIZES[{size!r}]", f"create_inputs does not trace: {type(exc).__name__}: {exc}"
            ) from exc
        if len(specs) != len(w.input_names):
            raise WorkloadDefinitionError(
                w.path, "INPUT_NAMES", f"names {len(w.input_names)} inputs; create_inputs returns {len(specs)}"
            )
        try:
            outputs = _compute_output_specs(w, _abstract(specs))
        except Exception as exc:
            raise WorkloadDefinitionError(
                w.path, "reference", f"does not trace at size {size!r}: {type(exc).__name__}: {exc}"
            ) from exc
        if len(outputs) != 1:
            raise WorkloadDefinitionError(
                w.path,
                "reference",
                f"returns {len(outputs)} arrays at size {size!r}; the check compares one output array "
                "(return a single array, e.g. the outputs concatenated)",
            )
        dtype = outputs[0].dtype
        if dtype not in _CHECKED_DTYPES:
            raise WorkloadDefinitionError(
                w.path,
                "reference",
                f"returns {dtype} at size {size!r}; the check compares {', '.join(_CHECKED_DTYPES)} outputs "
                "against a truth one precision level up",
            )
        declared = getattr(w.module, "OUTPUT_DTYPE", None)
        if declared is not None and str(declared) != dtype:
            raise WorkloadDefinitionError(
                w.path, "reference", f"returns {dtype} at size {size!r}; OUTPUT_DTYPE declares {declared}"
            )
        dtypes[size] = dtype
    if len(set(dtypes.values())) > 1:
        raise WorkloadDefinitionError(w.path, "reference", f"returns different dtypes by size: {dtypes}")


def custom_entries(directory: Path) -> list[Path]:
    """What in `directory` is a workload: our modules (*.py not starting with '_') and task folders of the
    imported formats; `directory` itself when it is one task folder."""
    if workload_formats.format_of(directory) is not None:
        return [directory]
    entries = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith(("_", ".")):
            continue
        if path.is_file() and path.suffix == ".py":
            entries.append(path)
        elif path.is_dir() and workload_formats.format_of(path) is not None:
            entries.append(path)
    return entries


def load_custom(path: Path, number: int = _CUSTOM_NUMBER_BASE) -> Workload:
    """One custom entry, validated (not yet traced): our module, a MaxKernel task folder or a baseline.py."""
    kind = workload_formats.format_of(path)
    if kind is not None:
        module = workload_formats.adapt(path, kind)
        return _validate(workload_formats.entry_file(path, kind), module, custom=True, number=number)
    return _validate(path, _load_module(path, "jaxbench_custom_workloads"), custom=True, number=number)


_BROKEN: list[BrokenWorkload] = []


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, Workload]:
    registry: dict[str, Workload] = {}
    for path in sorted(asset_dir("workloads").glob("*.py")):
        if path.name.startswith("_"):
            continue
        workload = _validate(path, _load_module(path))
        if workload.id in registry:
            raise WorkloadDefinitionError(
                path, "ID", f"{workload.id!r} is also defined in {registry[workload.id].path.name}"
            )
        registry[workload.id] = workload
    builtin_lower = {k.lower(): k for k in registry}
    _BROKEN.clear()
    number = _CUSTOM_NUMBER_BASE
    for directory in custom_dirs():
        if not directory.is_dir():
            _BROKEN.append(BrokenWorkload(directory, "directory", "does not exist or is not a directory"))
            continue
        for entry in custom_entries(directory):
            try:
                workload = load_custom(entry, number)
                clash = registry.get(workload.id) or registry.get(builtin_lower.get(workload.id.lower(), ""))
                if clash is not None:
                    where = "one of the 50 JAXBench workloads" if clash.tier != "custom" else str(clash.path)
                    raise WorkloadDefinitionError(entry, "ID", f"{workload.id!r} is already taken by {where}")
                _trace_check(workload)
                registry[workload.id] = workload
            except WorkloadDefinitionError as exc:
                _BROKEN.append(BrokenWorkload(entry, exc.field, exc.problem))
            except Exception as exc:  # noqa: BLE001 - a user's module must never stop the registry
                _BROKEN.append(BrokenWorkload(entry, "module", f"{type(exc).__name__}: {exc}"))
            number += 1
    return dict(sorted(registry.items(), key=lambda kv: kv[1].number))


def broken_workloads() -> list[BrokenWorkload]:
    """The custom entries left out, each with the field at fault and the problem."""
    _registry()
    return list(_BROKEN)


def all_workloads() -> list[Workload]:
    return list(_registry().values())


def get_workload(workload_id: str) -> Workload:
    registry = _registry()
    if workload_id in registry:
        return registry[workload_id]
    by_lower = {k.lower(): k for k in registry}
    # Accept "8p", "8p_gemm" or "gemm" when they name exactly one workload.
    prefix = [k for k in registry if k.lower().split("_")[0] == workload_id.lower() or k.lower() == workload_id.lower()]
    if len(prefix) == 1:
        return registry[prefix[0]]
    close = difflib.get_close_matches(workload_id.lower(), list(by_lower), n=3, cutoff=0.5)
    contains = [k for k in registry if workload_id.lower() in k.lower()]
    matches = list(dict.fromkeys([by_lower[c] for c in close] + contains))[:5]
    raise UnknownWorkload(workload_id, matches)


def select(tier: str | None = None, operator: str | None = None, has_expert: bool | None = None) -> list[Workload]:
    if tier is not None and tier not in TIERS:
        raise BadRequest(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    chosen = all_workloads()
    if tier is not None:
        chosen = [w for w in chosen if w.tier == tier]
    if operator is not None:
        chosen = [w for w in chosen if operator.lower() in w.operator.lower()]
    if has_expert is not None:
        chosen = [w for w in chosen if w.has_expert_reference == has_expert]
    return chosen


def keeps_divisibility(full: int, small: int, cap: int = 2048) -> bool:
    """Whether a small-size dimension keeps what a kernel's tiling can see of its full-size dimension.

    The rule: a dimension that is 1 at full size is 1 at small size, and one that is not, is not; it is a
    power of two exactly when the full one is; and when it is not a power of two, its factor of two, capped
    at `cap` (2^11), is the full one's (128256 = 2^8 * 501 -> 2^8 * 33 = 8448, not 8192 or 768 * 2).
    Then any power-of-two block up to the cap divides the small dimension exactly when it divides the full
    one, so a kernel that floor-divides the dimension by a block that leaves a remainder at full size
    leaves one at small size too (once the small dimension is at least one block). A power-of-two
    dimension may shrink to any smaller power of two: every block that fits divides both.
    """
    if full < 1 or small < 1:
        return False
    if (full == 1) != (small == 1):
        return False
    full_pow2, small_pow2 = full & (full - 1) == 0, small & (small - 1) == 0
    if full_pow2 != small_pow2:
        return False
    if full_pow2:
        return True

    def twos(n):
        return (n & -n).bit_length() - 1  # the exponent of 2 in n

    limit = cap.bit_length() - 1
    return min(twos(full), limit) == min(twos(small), limit)
