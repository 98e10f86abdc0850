"""The workload registry: discovers workloads/*.py, validates each module, and answers queries.

A workload module is data-like. It declares, at module level:

  ID               JAXBench id, e.g. "8p_GEMM" (number + p|k + name)
  MODEL, OPERATOR  where the workload comes from and what kind of operator it is
  DESCRIPTION      one paragraph of math: exactly what the output is
  SIZES            {"full": {...}, "small": {...}}: the keyword arguments of create_inputs/flops
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
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from jaxbench_mcp.assets import asset_dir

SIZE_NAMES = ("full", "small")
TIERS = ("production", "kernelbench")
_ID_PATTERN = re.compile(r"^(\d+)([pk])_[A-Za-z0-9_]+$")


class WorkloadDefinitionError(ValueError):
    """A module in workloads/ breaks the workload contract."""

    def __init__(self, path: Path, field: str, problem: str):
        super().__init__(f"{path.name}: {field}: {problem}")
        self.path, self.field, self.problem = path, field, problem


class UnknownWorkload(KeyError):
    def __init__(self, workload_id: str, close_matches: list[str]):
        self.workload_id, self.close_matches = workload_id, close_matches
        hint = f" Did you mean: {', '.join(close_matches)}?" if close_matches else ""
        super().__init__(f"unknown workload {workload_id!r}.{hint} `jaxbench-mcp list` shows all 50.")

    def __str__(self) -> str:
        return self.args[0]


class UnknownSize(ValueError):
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

    def size_params(self, size: str) -> dict[str, Any]:
        if size not in self.sizes:
            raise UnknownSize(f"unknown size {size!r} for {self.id}; choose one of {', '.join(SIZE_NAMES)}")
        return dict(self.sizes[size])

    def create_inputs(self, size: str = "small", seed: int = 42) -> tuple:
        return _jitted_create_inputs(self.id, size)(seed)

    def reference(self, *inputs):
        return self.module.reference(*inputs)

    def jitted_reference(self) -> Callable:
        import jax

        return jax.jit(self.module.reference, static_argnums=self.static_argnums)

    def flops(self, size: str) -> int:
        return int(self.module.flops(**self.size_params(size)))

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
        return inspect.getsource(self.module.reference)

    @property
    def has_expert_reference(self) -> bool:
        from jaxbench_mcp import expert_refs

        return expert_refs.has_expert(self.id)


def _arrays_of_inputs(w: Workload, params: dict, seed, static_values: dict[int, Any]) -> list:
    """create_inputs' arrays; its static Python values (used as shapes) are stored in `static_values`."""
    inputs = w.module.create_inputs(seed=seed, **params)
    static_values.update({i: inputs[i] for i in w.static_argnums})
    return [x for i, x in enumerate(inputs) if i not in w.static_argnums]


@functools.lru_cache(maxsize=None)
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


@functools.lru_cache(maxsize=None)
def _input_specs_cached(workload_id: str, size: str) -> tuple[ArgSpec, ...]:
    import jax

    w = get_workload(workload_id)
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


@functools.lru_cache(maxsize=None)
def _output_specs_cached(workload_id: str, size: str) -> tuple[TensorSpec, ...]:
    import jax

    w = get_workload(workload_id)
    args = abstract_inputs(w, size)
    static = {i: a for i, a in enumerate(args) if i in w.static_argnums}

    def call(*dynamic):
        it = iter(dynamic)
        full = [static[i] if i in static else next(it) for i in range(len(args))]
        return w.module.reference(*full)

    out = jax.eval_shape(call, *[a for i, a in enumerate(args) if i not in static])
    return tuple(_tensor_spec(leaf) for leaf in jax.tree_util.tree_leaves(out))


def _output_specs(w: Workload, size: str) -> list[TensorSpec]:
    return list(_output_specs_cached(w.id, size))


def abstract_inputs(w: Workload, size: str) -> list:
    """ShapeDtypeStructs for array inputs and the Python values for static ones."""
    import jax

    return [
        a.static_value if a.tensor is None else jax.ShapeDtypeStruct(a.tensor.shape, a.tensor.dtype)
        for a in w.input_specs(size)
    ]


# ---- discovery and validation ------------------------------------------------------------------

_REQUIRED = {
    "ID": str,
    "MODEL": str,
    "OPERATOR": str,
    "DESCRIPTION": str,
    "SIZES": dict,
    "INPUT_NAMES": tuple,
}
_FUNCTIONS = ("create_inputs", "reference", "flops")


def _load_module(path: Path) -> ModuleType:
    name = f"jaxbench_workloads.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect.getsource and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise WorkloadDefinitionError(path, "module", f"fails to import: {type(exc).__name__}: {exc}") from exc
    return module


def _validate(path: Path, module: ModuleType) -> Workload:
    def fail(field: str, problem: str):
        raise WorkloadDefinitionError(path, field, problem)

    for field, kind in _REQUIRED.items():
        if not hasattr(module, field):
            fail(field, "missing")
        if not isinstance(getattr(module, field), kind):
            fail(field, f"must be a {kind.__name__}, got {type(getattr(module, field)).__name__}")
    for fn in _FUNCTIONS:
        if not callable(getattr(module, fn, None)):
            fail(fn, "missing function")

    match = _ID_PATTERN.match(module.ID)
    if not match:
        fail("ID", f"{module.ID!r} is not of the form <number><p|k>_<Name>")
    if not module.DESCRIPTION.strip():
        fail("DESCRIPTION", "empty")

    sizes = module.SIZES
    if set(sizes) != set(SIZE_NAMES):
        fail("SIZES", f"needs exactly the keys {SIZE_NAMES}, has {tuple(sizes)}")
    if set(sizes["full"]) != set(sizes["small"]):
        fail("SIZES", "'full' and 'small' must have the same parameters")
    for fn in ("create_inputs", "flops"):
        params = inspect.signature(getattr(module, fn)).parameters
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        missing = [k for k in sizes["full"] if k not in params and not accepts_any]
        if missing:
            fail(fn, f"does not accept the size parameters {missing}")
    if "seed" not in inspect.signature(module.create_inputs).parameters:
        fail("create_inputs", "must take a keyword argument `seed`")

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
        number=int(match.group(1)),
        tier="production" if match.group(2) == "p" else "kernelbench",
        model=module.MODEL,
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
    )


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
    return dict(sorted(registry.items(), key=lambda kv: kv[1].number))


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
        raise ValueError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
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
    twos = lambda n: (n & -n).bit_length() - 1  # the exponent of 2 in n
    limit = cap.bit_length() - 1
    return min(twos(full), limit) == min(twos(small), limit)
