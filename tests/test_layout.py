"""The package's layout as ARCHITECTURE.md states it: no import cycles (function-level imports included), imports
that point down the rooms but for the few named there, rooms that import nothing, and a test map (tests/README.md)
that names every module. Read from the source (ast); nothing is imported."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxbench_mcp"
# Bottom to top; a module may import its own level or one below. The top-level modules not named are level 0.
LEVELS = {"catalog": 0, "internals": 0, "analysis": 1, "sandbox": 1, "checking": 2, "perf": 2}
TOP = {"api", "fleet", "campaigns", "frontends", "server", "targets", "__init__", "__main__"}
# The upward imports ARCHITECTURE.md names, all inside functions.
UPWARD = {
    ("analysis.kernels", "perf.cost_model"),
    ("catalog.validation", "checking.checker"),
    ("catalog.validation", "checking.comparison"),
    ("catalog.validation", "checking.truth"),
    ("perf.tuning", "api"),
    ("sandbox.worker", "perf.cost_model"),
    ("sandbox.worker", "perf.estimator"),
    ("sandbox.worker", "perf.measuring"),
}
SHIMS = {"server", "targets"}  # public old paths (tests/test_public_paths.py); the package itself never uses them


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts or "_bundled" in path.parts:
            continue
        name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        found[name.removesuffix(".__init__") if name != "__init__" else "__init__"] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of the package's modules (a package's own name for its __init__)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("jaxbench_mcp"):
                base = node.module.removeprefix("jaxbench_mcp").lstrip(".")
                for alias in node.names:
                    out.add(known(f"{base}.{alias.name}".lstrip(".")) or known(base) or "__init__")
            elif isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path}: a relative import (the package imports absolutely)")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("jaxbench_mcp"):
                        out.add(known(alias.name.removeprefix("jaxbench_mcp").lstrip(".")) or "__init__")
        graph[name] = out - {name}
    return graph


def _level(module: str) -> int:
    head = module.split(".")[0]
    return 3 if head in TOP else LEVELS.get(head, 0)


def test_no_import_cycles():
    graph = _imports(_modules())
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            assert state.get(target) != 1, "import cycle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_imports_point_down_but_for_the_named_few():
    graph = _imports(_modules())
    upward = {(a, b) for a, targets in graph.items() for b in targets if _level(b) > _level(a)}
    assert upward == UPWARD
    users = {a for a, targets in graph.items() for b in targets if b in SHIMS and a not in SHIMS}
    assert not users, f"{users} import an old public path; use the module in its room"


def _docstring_only(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return len(body) == 1 and isinstance(body[0], ast.Expr)


def test_rooms_import_nothing():
    # A room's __init__ is only its docstring: importing one module of a room (jaxbench_mcp.campaigns.outcomes in
    # the verifiers venv, which has no jax) must not import the others.
    for init in PACKAGE.glob("*/__init__.py"):
        assert _docstring_only(init), f"{init} holds more than a docstring"


def test_the_test_map_names_every_module():
    text = (ROOT / "tests" / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w./]+)\.py`[^|]*\|", text, re.MULTILINE))
    wanted = {str(p.relative_to(PACKAGE).with_suffix("")) for p in _modules().values() if not _docstring_only(p)}
    assert listed == wanted, f"missing: {sorted(wanted - listed)}, unknown: {sorted(listed - wanted)}"
