"""Workloads in the formats users already have, loaded as they are (nothing is rewritten).

Two formats, each a folder:

  MaxKernel task     `reference.py` with `get_inputs()` and `computation(*dynamic_args, *static_args)`, next
                     to `kernel_task.yaml` (task_id, description, input_gen_code, atol, rtol). get_inputs()
                     returns one `(dynamic_args, static_args)` pair, or a list of them: one per input
                     configuration.
  JAXBench baseline  `baseline.py` with a CONFIG dict (name, model, operator and the shape parameters),
                     `create_inputs(dtype=...)` that reads CONFIG, and `workload(*inputs)`.

Either may sit beside an optional `jaxbench_mcp.json` of overrides, which leaves the user's files alone:
{"id": ..., "operator": ..., "small": {NAME: VALUE, ...}}.

How the sizes are made. Neither format has a small size, and their input functions take no size or seed
arguments, so the adapter runs one private copy of the user's module per size, with its size parameters
replaced: CONFIG's integer entries (baseline.py), or the module-level integers get_inputs reads, directly or
through a CONFIG dict (reference.py). "full" is the file as written (for a list of configurations: the one
with the most input bytes; each other one is a named configuration). "small" replaces each size parameter
n > 1 by `derive_small(n)`, the rule that keeps workloads.keeps_divisibility: a power of two becomes
min(n, 256); any other n keeps its factor of two (capped at 2^11) times 3, the smallest odd factor above 1
(28672 = 2^12 * 7 -> 6144; 128256 = 2^8 * 501 -> 768), or stays n when that is not smaller. The "small" key
of jaxbench_mcp.json sets any of them instead. A file whose shapes are literals has no size parameters:
its small size is its full size, which `jaxbench-mcp workload validate` reports when it is too large for
an interpret run.

How hidden seeds vary the inputs. While the copy builds inputs for a seed other than 42, the PRNG
constructors its module-level names reach (jax.random.PRNGKey / key, numpy's default_rng / RandomState /
seed) fold that seed into the key they are given; seed 42 builds exactly the user's inputs. Helpers in
other modules are not reached: validation fails a workload whose inputs do not change with the seed.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import inspect
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

from jaxbench_mcp.errors import WorkloadDefinitionError

MAXKERNEL = "maxkernel"
BASELINE = "jaxbench-baseline"
OVERRIDES_FILE = "jaxbench_mcp.json"
SMALL_POW2_CAP = 256
# JAXBench's harness judges with np.allclose(atol=rtol=1e-2) against the bf16 baseline.
_JAXBENCH_TOLERANCES = {"atol": 1e-2, "rtol": 1e-2, "source": "JAXBench harness (np.allclose)"}

_seed: contextvars.ContextVar[int | None] = contextvars.ContextVar("jaxbench_import_seed", default=None)


def format_of(path: Path) -> str | None:
    """The imported format of a folder (or of its reference.py / baseline.py), or None."""
    folder = path if path.is_dir() else path.parent
    if path.is_file() and path.name not in ("reference.py", "baseline.py"):
        return None
    if (folder / "reference.py").is_file() and (folder / "kernel_task.yaml").is_file():
        return MAXKERNEL
    if (folder / "baseline.py").is_file():
        return BASELINE
    return None


def entry_file(path: Path, kind: str) -> Path:
    folder = path if path.is_dir() else path.parent
    return folder / ("reference.py" if kind == MAXKERNEL else "baseline.py")


def derive_small(n: int) -> int:
    """The small-size value of a full-size parameter n (see the module docstring); keeps_divisibility(n, .)."""
    if n <= 1:
        return n
    if n & (n - 1) == 0:
        return min(n, SMALL_POW2_CAP)
    twos = min((n & -n).bit_length() - 1, 11)
    return min(n, (1 << twos) * 3)


class _Fail(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(problem)
        self.field, self.problem = field, problem


class _SeededRandom:
    """jax.random with PRNGKey/key folding in the seed being built (the rest is jax.random itself)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name in ("PRNGKey", "key"):
            return _seeded_jax_constructor(attr)
        return attr


def _seeded_jax_constructor(make):
    def seeded(value, *args, **kwargs):
        key = make(value, *args, **kwargs)
        seed = _seed.get()
        if seed is None or seed == 42:
            return key
        import jax

        return jax.random.fold_in(key, seed)

    return seeded


class _SeededJax:
    def __init__(self, real):
        self._real = real
        self.random = _SeededRandom(real.random)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _numpy_seed(value):
    seed = _seed.get()
    if seed is None or seed == 42:
        return value
    return [int(value) if value is not None else 0, int(seed)]


class _SeededNumpyRandom:
    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name in ("default_rng", "RandomState", "seed"):
            return lambda value=None, *a, **k: attr(_numpy_seed(value), *a, **k)
        return attr


class _SeededNumpy:
    def __init__(self, real):
        self._real = real
        self.random = _SeededNumpyRandom(real.random)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _seed_globals(module: types.ModuleType) -> None:
    """Point the module's names for jax, jax.random and numpy (and PRNGKey/key imported bare) at seeded views."""
    import jax
    import numpy as np

    for name, value in list(vars(module).items()):
        if value is jax:
            setattr(module, name, _SeededJax(jax))
        elif value is jax.random:
            setattr(module, name, _SeededRandom(jax.random))
        elif value is np:
            setattr(module, name, _SeededNumpy(np))
        elif value is np.random:
            setattr(module, name, _SeededNumpyRandom(np.random))
        elif value is jax.random.PRNGKey or value is jax.random.key:
            setattr(module, name, _seeded_jax_constructor(value))


def _exec_copy(path: Path, tag: str, overrides: dict[str, Any], config_dict: str | None) -> types.ModuleType:
    digest = hashlib.sha256(f"{path}|{tag}".encode()).hexdigest()[:12]
    name = f"jaxbench_imported.{path.parent.name.replace('-', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _Fail("module", f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _Fail("module", f"fails to import: {type(exc).__name__}: {exc}") from exc
    for key, value in overrides.items():
        if config_dict and isinstance(getattr(module, config_dict, None), dict) and key in getattr(module, config_dict):
            getattr(module, config_dict)[key] = value
        else:
            setattr(module, key, value)
    _seed_globals(module)
    return module


def _int_entries(d: dict[str, Any]) -> dict[str, int]:
    """The entries of `d` whose values are ints (bools are not sizes)."""
    return {k: v for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool)}


def _size_params(module: types.ModuleType, kind: str) -> tuple[dict[str, int], str | None]:
    """The integer size parameters the input function reads, and the dict they live in (None: module level)."""
    config = getattr(module, "CONFIG", None)
    if kind == BASELINE:
        if not isinstance(config, dict):
            raise _Fail("CONFIG", "baseline.py defines no CONFIG dict")
        return _int_entries(config), "CONFIG"
    read = set(module.get_inputs.__code__.co_names)
    if "CONFIG" in read and isinstance(config, dict):
        return _int_entries(config), "CONFIG"
    return _int_entries({k: v for k, v in vars(module).items() if k in read and not k.startswith("_")}), None


def _overrides(folder: Path) -> dict[str, Any]:
    path = folder / OVERRIDES_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise _Fail(OVERRIDES_FILE, f"is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise _Fail(OVERRIDES_FILE, "must hold a JSON object")
    return data


def _identifier(text: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text.strip()) or "imported"
    return ident if ident[0].isalpha() else f"w_{ident}"


def _leaves_signature(inputs) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) if hasattr(x, "shape") else ("static", repr(x)) for x in inputs)


def adapt(path: Path, kind: str) -> types.ModuleType:
    """A module in our workload format over the user's folder (see the module docstring).

    Raises workloads.WorkloadDefinitionError naming the field at fault."""
    source = entry_file(path, kind)
    try:
        return _adapt(source, kind)
    except _Fail as exc:
        raise WorkloadDefinitionError(source, exc.field, exc.problem) from exc


def _read_task(folder: Path) -> dict[str, Any]:
    """A MaxKernel task's kernel_task.yaml, as a mapping."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - a dependency
        raise _Fail("kernel_task.yaml", "reading it needs PyYAML (pip install pyyaml)") from exc
    try:
        task = yaml.safe_load((folder / "kernel_task.yaml").read_text()) or {}
    except yaml.YAMLError as exc:
        raise _Fail("kernel_task.yaml", f"is not valid YAML: {exc}") from exc
    if not isinstance(task, dict):
        raise _Fail("kernel_task.yaml", "must hold a mapping (task_id, description, atol, rtol, ...)")
    return task


def _small_size(overrides: dict[str, Any], params: dict[str, int]) -> tuple[dict[str, Any], str]:
    """The small size's parameters (the overrides file's, the rest derived) and the rule that says how."""
    small_set = overrides.get("small", {})
    if not isinstance(small_set, dict) or not set(small_set) <= set(params):
        unknown = sorted(set(small_set) - set(params)) if isinstance(small_set, dict) else small_set
        raise _Fail(
            f"{OVERRIDES_FILE}: small",
            f"names no size parameter of the file: {unknown}; the size parameters are {sorted(params)}",
        )
    small = {k: small_set.get(k, derive_small(v)) for k, v in params.items()}
    if overrides.get("small"):
        rule = f"small size set in {OVERRIDES_FILE}: " + ", ".join(f"{k}={v}" for k, v in small_set.items())
        derived = {k: v for k, v in small.items() if k not in small_set and v != params[k]}
        if derived:
            rule += "; the rest derived: " + ", ".join(f"{k}={v}" for k, v in derived.items())
    elif params:
        rule = "small size derived (workload_formats.derive_small): " + (
            ", ".join(f"{k} {params[k]} -> {small[k]}" for k in params if small[k] != params[k]) or "nothing shrinks"
        )
    else:
        rule = "the file's shapes are literals (no size parameters): the small size is the full size"
    return small, rule


def _arg_names(fn: Any, total: int) -> list[str]:
    """The input names: the reference function's parameters when they are `total` plain ones, else arg0, arg1..."""
    try:
        arg_names = [p for p in inspect.signature(fn).parameters if p not in ("self",)]
    except (TypeError, ValueError):
        arg_names = []
    if len(arg_names) != total or any(
        p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for p in inspect.signature(fn).parameters.values()
    ):
        arg_names = [f"arg{i}" for i in range(total)]
    return arg_names


def _adapt(source: Path, kind: str) -> types.ModuleType:
    folder = source.parent
    overrides = _overrides(folder)
    base = _exec_copy(source, "probe", {}, None)
    fn_name = "computation" if kind == MAXKERNEL else "workload"
    inputs_name = "get_inputs" if kind == MAXKERNEL else "create_inputs"
    for name in (fn_name, inputs_name):
        if not callable(getattr(base, name, None)):
            raise _Fail(name, f"{source.name} defines no function `{name}`")
    params, config_dict = _size_params(base, kind)
    task = _read_task(folder) if kind == MAXKERNEL else {}
    small, rule = _small_size(overrides, params)

    copies: dict[tuple, types.ModuleType] = {}

    def copy_for(values: dict[str, Any]) -> types.ModuleType:
        key = tuple(sorted(values.items()))
        if key not in copies:
            copies[key] = base if values == params else _exec_copy(source, repr(key), values, config_dict)
        return copies[key]

    def raw_configs(module) -> list:
        if kind == BASELINE:
            return [(tuple(module.create_inputs()), ())]
        got = module.get_inputs()
        pairs = got if isinstance(got, list) else [got]
        for k, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise _Fail("get_inputs", f"configuration {k} is not a (dynamic_args, static_args) pair")
        return [(tuple(d), tuple(s)) for d, s in pairs]

    # The configurations as written: shapes only (jax draws trace abstractly; nothing is allocated).
    import jax

    def describe(module: types.ModuleType) -> tuple[Any, list]:
        statics: list = []

        def run():
            configs = raw_configs(module)
            statics.append([s for _, s in configs])  # Python values: read from the trace, not returned
            return [list(d) for d, _ in configs]

        return jax.eval_shape(run), statics[0]

    try:
        full_shapes, statics = describe(base)
    except _Fail:
        raise
    except Exception as exc:
        raise _Fail(inputs_name, f"does not run: {type(exc).__name__}: {exc}") from exc
    sizes_bytes = [sum(int(a.size) * a.dtype.itemsize for a in cfg) for cfg in full_shapes]
    full_index = max(range(len(full_shapes)), key=sizes_bytes.__getitem__)
    counts = {(len(d), len(s)) for d, s in zip(full_shapes, statics, strict=True)}
    if len(counts) != 1:
        raise _Fail(inputs_name, f"the configurations differ in their number of (dynamic, static) args: {counts}")
    n_dynamic, n_static = counts.pop()

    names = _config_names(base, len(full_shapes))
    sizes: dict[str, dict[str, Any]] = {
        "full": {"config": full_index, **params},
        "small": {"config": full_index, **small},
    }
    for k, name in enumerate(names):
        if k != full_index:
            sizes[name] = {"config": k, **params}

    signature_to_values: dict[tuple, dict[str, Any]] = {}

    def create_inputs(*, seed, config, **values):
        module = copy_for(values)
        token = _seed.set(int(seed) if isinstance(seed, int) or hasattr(seed, "__int__") else None)
        try:
            dynamic, static = raw_configs(module)[config]
        finally:
            _seed.reset(token)
        inputs = (*dynamic, *static)
        signature_to_values.setdefault(_leaves_signature(inputs), values)
        return inputs

    def reference(*inputs):
        values = signature_to_values.get(_leaves_signature(inputs))
        if values is None:  # shapes never built here (e.g. a truth on upcast inputs): match shapes only
            shapes = tuple(s[0] for s in _leaves_signature(inputs))
            values = next((v for sig, v in signature_to_values.items() if tuple(s[0] for s in sig) == shapes), params)
        return getattr(copy_for(values), fn_name)(*inputs)

    total = n_dynamic + n_static
    arg_names = _arg_names(getattr(base, fn_name), total)

    adapted = types.ModuleType(f"jaxbench_imported_view.{_identifier(folder.name)}")
    config = getattr(base, "CONFIG", {}) if isinstance(getattr(base, "CONFIG", None), dict) else {}
    if kind == MAXKERNEL:
        ident = overrides.get("id") or task.get("task_id") or folder.name
        description = str(task.get("description") or "").strip() or f"MaxKernel task {folder.name}"
        tolerances = {k: task[k] for k in ("atol", "rtol", "sort_outputs") if k in task} | {
            "source": "kernel_task.yaml"
        }
        operator = overrides.get("operator") or str(ident)
    else:
        ident = overrides.get("id") or config.get("name") or folder.name
        description = (inspect.getdoc(base.workload) or inspect.getdoc(base) or "").strip() or (
            f"JAXBench baseline {folder.name}"
        )
        description = f"{description} (the output of `workload` in {folder.name}/baseline.py)"
        tolerances = dict(_JAXBENCH_TOLERANCES)
        operator = overrides.get("operator") or str(config.get("operator") or ident)
    # The view's attributes go into its namespace: it is a module built here, not one imported.
    vars(adapted).update(
        ID=_identifier(str(ident)),
        MODEL=str(
            config.get("model") or f"{'MaxKernel task' if kind == MAXKERNEL else 'JAXBench baseline'} ({folder.name})"
        ),
        OPERATOR=str(operator),
        DESCRIPTION=description,
        SIZES=sizes,
        INPUT_NAMES=tuple(arg_names),
        STATIC_ARGNUMS=tuple(range(n_dynamic, total)),
        NOTES=(
            f"Imported from a {'MaxKernel task' if kind == MAXKERNEL else 'JAXBench baseline.py'} ({folder}); {rule}.",
            "The format's own tolerance (reported beside ours, not used to judge): "
            + ", ".join(f"{k}={v}" for k, v in tolerances.items() if k != "source")
            + f" ({tolerances['source']}).",
        ),
        SOURCE_FORMAT=kind,
        FORMAT_TOLERANCES=tolerances,
        SIZE_RULE=rule,
        JIT_INPUTS=False,
        REFERENCE_SOURCE=source.read_text(),
        create_inputs=create_inputs,
        reference=reference,
    )
    flops_fn = getattr(base, "get_flops", None) if kind == BASELINE else None
    if callable(flops_fn) and not inspect.signature(flops_fn).parameters:

        def flops(*, config, **values):
            return copy_for(values).get_flops()

        vars(adapted)["flops"] = flops
    return adapted


def _config_names(module: types.ModuleType, count: int) -> list[str]:
    """Names of a get_inputs list's configurations: the 'name' fields of a module-level list of dicts of the
    same length when there is one (as identifiers), else config_0, config_1, ..."""
    for value in vars(module).values():
        if (
            isinstance(value, (list, tuple))
            and len(value) == count
            and count > 1
            and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value)
        ):
            names = [_identifier(v["name"]).lower()[:32] for v in value]
            if len(set(names)) == count and not set(names) & {"full", "small", "all"}:
                return names
    return [f"config_{k}" for k in range(count)]
