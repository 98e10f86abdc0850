"""The paths outside code relies on, kept by shims since the modules moved into rooms (issue #24): `mcp run
jaxbench_mcp/server.py`, `jaxbench_mcp.targets.chip_facts_visible`, `jaxbench_mcp.seeding`, the `jaxbench-mcp`
console script and `python -m jaxbench_mcp` (the last two run in test_mcp_contract.test_version_and_python_dash_m;
the slow test_mcp_contract.test_the_server_module_builds_its_mcp_object_lazily builds `mcp` through the shim)."""

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_old_targets_path_is_the_catalog_module():
    import jaxbench_mcp.targets
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.targets import chip_facts_visible

    assert jaxbench_mcp.targets is targets and chip_facts_visible is targets.chip_facts_visible


def test_the_old_targets_path_imported_first_in_a_fresh_process():
    # What an expert reference or a custom workload does: the old path before anything else of the package.
    code = (
        "from jaxbench_mcp.targets import chip_facts_visible\n"
        "import jaxbench_mcp.targets as old, jaxbench_mcp.catalog.targets as new\n"
        "assert old is new and chip_facts_visible is new.chip_facts_visible\n"
        "with chip_facts_visible(): pass\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_seeding_stays_where_workload_modules_import_it():
    from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

    assert all(f.__module__ == "jaxbench_mcp.seeding" for f in (jaxbench_key, normal, uniform))


def test_the_server_file_loaded_by_path_delegates_to_the_frontend_and_builds_nothing():
    from jaxbench_mcp.frontends import server

    # As `mcp run` loads it (by path, not registered in sys.modules); `mcp` itself is left unbuilt here. An earlier
    # test in the same process may have built the frontend's default server: loading the shim must not build one.
    before = server._default_server
    spec = importlib.util.spec_from_file_location("server_module", ROOT / "jaxbench_mcp" / "server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build_server is server.build_server and server._default_server is before
    assert module._default_server is before


def test_the_console_script_names_the_frontend_cli():
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="jaxbench-mcp")
    from jaxbench_mcp.frontends.cli import main

    assert script.value == "jaxbench_mcp.frontends.cli:main" and script.load() is main


def test_the_public_api_names_resolve_to_their_defining_modules():
    import importlib

    import jaxbench_mcp

    for name, module in jaxbench_mcp._PUBLIC.items():
        assert getattr(jaxbench_mcp, name) is getattr(importlib.import_module(module), name), name
    assert set(dir(jaxbench_mcp)) == set(jaxbench_mcp.__all__)


def test_importing_the_package_loads_neither_jax_nor_the_server_side():
    # A workload module imports jaxbench_mcp.seeding inside the sandboxed worker: that must stay light.
    code = (
        "import sys, jaxbench_mcp\nprint(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jaxbench_mcp.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
