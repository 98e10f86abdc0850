"""The shipped agent configs: a Claude Code plugin (with its skill), a Gemini CLI extension and an Antigravity
workspace config. Each is checked for shape, then the server is started exactly as each one says and asked for
its tools; `claude mcp list` / `gemini mcp list` run where those clients are installed."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from jaxbench_mcp import __version__
from jaxbench_mcp.frontends.server import CALL_BUDGET_SECONDS

ROOT = Path(__file__).resolve().parent.parent
from test_mcp_contract import TOOLS  # noqa: E402 - one list of the tools, in their fixed order

# (config file, how each client expands its variables when it launches the server from this checkout)
CONFIGS = {
    # The project scope (Claude Code opened in this checkout): `.` is the cwd, this checkout.
    ".mcp.json": {"${CLAUDE_PLUGIN_ROOT:-.}": str(ROOT)},
    # The plugin, loaded from any project: Claude Code substitutes the plugin root itself.
    ".claude-plugin/plugin.json": {"${CLAUDE_PLUGIN_ROOT}": str(ROOT)},
    "gemini-extension.json": {"${extensionPath}": str(ROOT), "${/}": os.sep},
    ".agents/mcp_config.json": {"${workspaceFolder}": str(ROOT)},
}


def load(name: str) -> dict:
    return json.loads((ROOT / name).read_text())


def expand(value: str, variables: dict[str, str]) -> str:
    for var, replacement in variables.items():
        value = value.replace(var, replacement)
    assert "${" not in value, f"unexpanded variable in {value!r}"
    return value


def test_the_claude_code_plugin_manifest_and_skill():
    manifest = load(".claude-plugin/plugin.json")
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", manifest["name"])
    assert manifest["version"] == __version__ and manifest["description"]
    skill = (ROOT / "skills" / "pallas-kernel-loop" / "SKILL.md").read_text()
    front = re.match(r"---\n(.*?)\n---\n", skill, re.S)
    assert front, "SKILL.md must open with a YAML front matter block"
    fields = dict(line.split(": ", 1) for line in front.group(1).splitlines())
    assert fields["name"] == "pallas-kernel-loop" and len(fields["description"]) > 40
    for tool in ("get_workload", "read_docs", "check_kernel", "profile_kernel", "list_attempts"):
        assert f"`{tool}(" in skill, tool


def test_the_plugin_declares_its_server_with_the_plugin_root_alone():
    # `${CLAUDE_PLUGIN_ROOT:-.}` (a shell default) is not substituted for a plugin: loaded from another project it
    # named that project's scripts/dev.sh. The plugin's own manifest uses the bare variable, which is.
    (server,) = load(".claude-plugin/plugin.json")["mcpServers"].values()
    assert server["command"] == "${CLAUDE_PLUGIN_ROOT}/scripts/dev.sh" and server["args"] == ["serve"]


def test_the_marketplace_lists_this_checkout_as_the_plugin():
    market = load(".claude-plugin/marketplace.json")
    plugin = load(".claude-plugin/plugin.json")
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", market["name"]) and market["owner"]["name"]
    (entry,) = market["plugins"]
    assert entry["name"] == plugin["name"] and entry["version"] == plugin["version"] == __version__
    assert (ROOT / entry["source"] / ".claude-plugin" / "plugin.json").resolve() == (
        ROOT / ".claude-plugin" / "plugin.json"
    ).resolve()


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_mcpb_bundle_manifest_runs_the_console_script_with_uv_and_names_every_tool():
    manifest = load("manifest.json")
    assert manifest["manifest_version"] == "0.4" and manifest["version"] == __version__
    server = manifest["server"]
    assert server["type"] == "uv" and (ROOT / server["entry_point"]).is_file()
    config = server["mcp_config"]
    # uv installs pyproject.toml's dependencies into the unpacked bundle, then runs the console script.
    assert config["command"] == "uv" and config["args"] == [
        "run",
        "--directory",
        "${__dirname}",
        "jaxbench-mcp",
        "serve",
    ]
    assert "jaxbench-mcp" in _pyproject()["project"]["scripts"]
    assert [t["name"] for t in manifest["tools"]] == TOOLS and all(t["description"] for t in manifest["tools"])
    assert [p["name"] for p in manifest["prompts"]] == ["optimize_workload"]
    # The bundle keeps what the server loads at run time.
    lines = (ROOT / ".mcpbignore").read_text().splitlines()
    ignored = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert ".venv/" in ignored and "tests/" in ignored
    for needed in ("jaxbench_mcp/", "workloads/", "context_docs/", "tokamax_refs/", "pyproject.toml", "README.md"):
        assert needed not in ignored, needed


def test_the_registry_server_json_matches_the_package_and_the_readme_marker():
    server = load("server.json")
    project = _pyproject()["project"]
    assert server["version"] == project["version"] == __version__
    # The registry's limit on descriptions; and one slash between namespace and name.
    assert len(server["description"]) <= 100 and server["name"].count("/") == 1
    (package,) = server["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == project["name"]
    assert package["version"] == __version__ and package["transport"] == {"type": "stdio"}
    assert [a["value"] for a in package["packageArguments"]] == ["serve"]
    # PyPI ownership: the README (the package's long description) carries `mcp-name: <name>`.
    assert f"mcp-name: {server['name']}" in (ROOT / project["readme"]).read_text()


def test_the_gemini_extension_has_a_context_file_and_a_timeout_that_fits_a_long_check():
    ext = load("gemini-extension.json")
    assert ext["name"] == "jaxbench" and ext["version"] == __version__
    assert (ROOT / ext["contextFileName"]).is_file()
    (server,) = ext["mcpServers"].values()
    # A call returns within the call budget (then list_attempts collects it); the first one also waits for a worker.
    assert server["timeout"] >= 4 * CALL_BUDGET_SECONDS * 1000
    assert not server.get("trust"), "tool calls must keep asking for confirmation"


@pytest.mark.parametrize("name", CONFIGS)
def test_each_config_launches_the_server_through_dev_sh(name):
    (server,) = load(name)["mcpServers"].values()
    command = expand(server["command"], CONFIGS[name])
    assert Path(command).resolve() == (ROOT / "scripts" / "dev.sh").resolve() and os.access(command, os.X_OK)
    assert server["args"] == ["serve"]


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_each_config_starts_a_server_that_answers(name, tmp_path):
    """Start the server the way the config says (variables expanded as the client would) and list its tools."""
    (server,) = load(name)["mcpServers"].values()
    params = StdioServerParameters(
        command=expand(server["command"], CONFIGS[name]),
        args=server["args"],
        cwd=expand(server.get("cwd", str(ROOT)), CONFIGS[name]),
        env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path)},
    )

    async def go():
        async with Client(params) as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert anyio.run(go) == TOOLS


def _client_lists_jaxbench_as_connected(argv_add: list[str], argv_list: list[str], tmp_path: Path) -> str:
    # A throwaway HOME: registering the server must not touch the user's own client settings.
    env = {**os.environ, "HOME": str(tmp_path), "JAXBENCH_MCP_HOME": str(tmp_path / "state")}
    added = subprocess.run(argv_add, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stdout + added.stderr
    listed = subprocess.run(argv_list, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return listed.stdout + listed.stderr


@pytest.mark.slow
def test_claude_code_reports_the_server_connected(tmp_path):
    if shutil.which("claude") is None:
        pytest.skip("Claude Code (`claude`) is not installed on this host")
    out = _client_lists_jaxbench_as_connected(
        ["claude", "mcp", "add", "--scope", "local", "jaxbench", "--", str(ROOT / "scripts" / "dev.sh"), "serve"],
        ["claude", "mcp", "list"],
        tmp_path,
    )
    assert re.search(r"jaxbench.*Connected", out), out


CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"  # a release whose plugin commands were tried with this checkout


@pytest.mark.slow
def test_the_plugin_installed_from_the_marketplace_connects_from_another_project(tmp_path):
    """`claude plugin marketplace add` + `claude plugin install`, then `claude mcp list` run in an unrelated
    directory: the plugin's server starts from the plugin root, not from that directory."""
    if shutil.which("claude"):
        claude = ["claude"]
    elif shutil.which("npx"):
        claude = ["npx", "-y", "-p", CLAUDE_CODE, "--", "claude"]
    else:
        pytest.skip("neither Claude Code (`claude`) nor npx (to fetch it) is installed on this host")
    env = {**os.environ, "HOME": str(tmp_path), "JAXBENCH_MCP_HOME": str(tmp_path / "state")}
    elsewhere = tmp_path / "another-project"
    elsewhere.mkdir()

    def run(*args: str, timeout: int = 300) -> str:
        done = subprocess.run([*claude, *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    assert "passed" in run("plugin", "validate", str(ROOT))
    run("plugin", "marketplace", "add", str(ROOT))
    market, plugin = load(".claude-plugin/marketplace.json"), load(".claude-plugin/plugin.json")
    run("plugin", "install", f"{plugin['name']}@{market['name']}")
    listed = run("mcp", "list")
    line = next((row for row in listed.splitlines() if row.startswith(f"plugin:{plugin['name']}:")), "")
    assert "scripts/dev.sh serve" in line and "Connected" in line, listed
    assert str(elsewhere) not in line


@pytest.mark.slow
def test_gemini_cli_reports_the_server_connected(tmp_path):
    if shutil.which("gemini") is None:
        pytest.skip("Gemini CLI (`gemini`) is not installed on this host")
    out = _client_lists_jaxbench_as_connected(
        [
            "gemini",
            "mcp",
            "add",
            "--scope",
            "user",
            "--timeout",
            "300000",
            "jaxbench",
            str(ROOT / "scripts" / "dev.sh"),
            "serve",
        ],
        ["gemini", "mcp", "list"],
        tmp_path,
    )
    assert re.search(r"jaxbench.*Connected", out), out
