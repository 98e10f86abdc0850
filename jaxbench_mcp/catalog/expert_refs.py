"""Expert reference kernels from tokamax_refs/: one module per workload, found by its ID."""

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from jaxbench_mcp.catalog.assets import asset_dir


@functools.lru_cache(maxsize=1)
def _by_workload() -> dict[str, ModuleType]:
    found: dict[str, ModuleType] = {}
    for path in sorted(asset_dir("tokamax_refs").glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"jaxbench_tokamax_refs.{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py file always gets a spec with a loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        found[module.WORKLOAD_ID] = module
    return found


def has_expert(workload_id: str) -> bool:
    return workload_id in _by_workload()


def expert_module(workload_id: str) -> ModuleType | None:
    return _by_workload().get(workload_id)


def expert_source(workload_id: str) -> str | None:
    module = expert_module(workload_id)
    if module is None:
        return None
    assert module.__file__ is not None  # loaded from its file by _by_workload
    return Path(module.__file__).read_text()
