"""The package's layout as ARCHITECTURE.md states it: no import cycles (function-level imports included), imports
that point down the rooms but for the few named there, rooms that import nothing, function-level imports only of the
four kinds named there (the light modules loading neither jax nor numpy), and a test map (tests/README.md) that names
every module. Read from the source (ast); only the light modules' test imports anything."""

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


def _named(node: ast.Import | ast.ImportFrom, modules) -> set[str]:
    """The package's modules an import statement names (a package's own name for its __init__)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    out = set()
    if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("jaxbench_mcp"):
        base = node.module.removeprefix("jaxbench_mcp").lstrip(".")
        for alias in node.names:
            out.add(known(f"{base}.{alias.name}".lstrip(".")) or known(base) or "__init__")
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith("jaxbench_mcp"):
                out.add(known(alias.name.removeprefix("jaxbench_mcp").lstrip(".")) or "__init__")
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of the package's modules."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path}: a relative import (the package imports absolutely)")
            if isinstance(node, ast.Import | ast.ImportFrom):
                out |= _named(node, modules)
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


# Modules that load neither jax nor numpy when imported: the Ray proxy and its actor's module (a driver process that
# never traces), the CLI before it picks a subcommand, inspect's entry point, the verifiers environment's outcomes.
LIGHT = {
    "campaigns.campaign", "campaigns.inspect_eval", "campaigns.outcomes", "campaigns.provenance",
    "catalog.assets", "catalog.conditions", "catalog.docs", "catalog.expert_refs", "catalog.formats",
    "catalog.targets", "catalog.workloads", "errors", "fleet.actor", "fleet.placement", "fleet.protocol",
    "fleet.proxy", "frontends.cli", "models", "requests", "store", "taxonomy",
}  # fmt: skip
# Libraries only some calls need: the fleet's Ray, charts, HTTP serving, a MaxKernel task's YAML.
ON_DEMAND = {"ray", "matplotlib", "uvicorn", "yaml"}
# Whose every import waits for the call: the package's lazy public names, and the CLI's subcommands.
LAZY = {"__init__", "frontends.cli"}


def test_a_function_level_import_is_one_of_the_four_lazy_kinds():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        functions = [
            n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for node in {n for fn in functions for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)}:
            libraries = (
                {a.name.split(".")[0] for a in node.names}
                if isinstance(node, ast.Import)
                else {(node.module or "").split(".")[0]}
            )
            named = _named(node, modules)
            heavy = bool(libraries & {"jax", "jaxlib", "numpy"}) or bool(named - LIGHT)
            if not (
                name in LAZY
                or libraries <= ON_DEMAND
                or (named and all((name, m) in UPWARD for m in named))
                or (name in LIGHT and heavy)
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not wrong, "import these at the top of the module (ARCHITECTURE.md, Imports):\n" + "\n".join(sorted(wrong))


def test_the_light_modules_load_neither_jax_nor_numpy():
    import subprocess
    import sys

    code = (
        "import importlib, sys\n"
        f"for m in {sorted(LIGHT)!r}: importlib.import_module('jaxbench_mcp.' + m)\n"
        "print(sorted(m for m in ('jax', 'jaxlib', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
