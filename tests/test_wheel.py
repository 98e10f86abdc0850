"""A non-editable install from a built wheel works outside the source tree: the CLI lists the workloads, and
`serve` started from that install (the way `uvx --from WHEEL jaxbench-mcp serve` or `pipx run --spec WHEEL
jaxbench-mcp serve` starts it: the console script of an isolated environment) answers an MCP client."""

import json
import subprocess
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from test_mcp_contract import TOOLS

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_into_a_fresh_venv_and_lists_the_workloads(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=300,
    )
    wheel = next(dist.glob("jaxbench_mcp-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # Dependencies come from this environment (read-only, through a path entry), so the test needs no
    # network; the package itself is installed from the wheel alone.
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "deps.pth").write_text(deps + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import jaxbench_mcp.catalog.assets as a; print(a.asset_dir('workloads'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=True,
    ).stdout.strip()
    assert where.startswith(purelib) and where.endswith("_bundled/workloads")
    listed = subprocess.run(
        [str(venv / "bin" / "jaxbench-mcp"), "list", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["count"] == 50

    # The isolated install's console script as an MCP server, outside the source tree: initialize + tools/list.
    params = StdioServerParameters(
        command=str(venv / "bin" / "jaxbench-mcp"),
        args=["serve"],
        cwd=str(tmp_path),
        env={**env, "JAXBENCH_MCP_HOME": str(tmp_path / "state")},
    )

    async def initialize_and_list():
        async with Client(stdio_client(params)) as client:
            return client.server_capabilities, [t.name for t in (await client.list_tools()).tools]

    capabilities, tools = anyio.run(initialize_and_list)
    assert capabilities.tools is not None and capabilities.resources is not None and capabilities.prompts is not None
    assert tools == TOOLS, tools
