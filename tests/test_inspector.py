"""The MCP Inspector's CLI (a second, independent client: the TypeScript SDK) against the server.

tools/list over stdio, then over streamable HTTP one tools/call per tool, resources/list, a resource read,
prompts/get and the error paths. The Inspector 2.x needs Node >= 22; where the host's node is older, npx
fetches node@22 alongside it (both cached by npm after the first run). The test skips, saying why, only
where npx or those packages cannot be had.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.test_mcp_contract import TOOLS, _serve_http, _stop

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
# The major version named: unpinned, npm on a node older than 22 resolves Inspector 0.15 (the newest release
# without an engines field), whose CLI is another program.
PACKAGE = "@modelcontextprotocol/inspector@2"
FETCH_TIMEOUT = 300


def _node_major() -> int:
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


@pytest.fixture(scope="module")
def inspector() -> list[str]:
    """The command that runs the Inspector CLI, with node >= 22 on its PATH."""
    if shutil.which("npx") is None:
        pytest.skip("npx (Node.js) is not installed; the Inspector test needs it")
    if _node_major() >= 22:
        command = ["npx", "-y", "-p", PACKAGE, "--", "mcp-inspector"]
    else:
        # npx puts the bin of every -p package on PATH, so the Inspector's `#!/usr/bin/env node` finds node 22.
        command = ["npx", "-y", "-p", "node@22", "-p", PACKAGE, "--", "mcp-inspector"]
    try:
        probe = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=FETCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.skip(f"fetching {PACKAGE} (and node@22) took over {FETCH_TIMEOUT} s")
    if probe.returncode != 0 or "--cli" not in probe.stdout:
        pytest.skip(f"could not get {PACKAGE} with node >= 22 through npx: {(probe.stderr or probe.stdout)[-500:]}")
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=FETCH_TIMEOUT)
    assert version.stdout.strip().startswith("2."), f"npx ran Inspector {version.stdout.strip()!r}, not 2.x"
    return command


@pytest.fixture(scope="module")
def http_url():
    home = Path(tempfile.mkdtemp(prefix="jaxbench-inspector-"))
    proc, port, log = _serve_http(home)
    yield f"http://127.0.0.1:{port}/mcp"
    _stop(proc)
    shutil.rmtree(home, ignore_errors=True)


def _cli(inspector, target: list[str], *args: str, ok: bool = True) -> dict | str:
    with tempfile.TemporaryDirectory(prefix="jaxbench-inspector-", ignore_cleanup_errors=True) as home:
        out = subprocess.run(
            [*inspector, "--cli", *target, *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env={**os.environ, "JAXBENCH_MCP_HOME": home},
        )
    if not ok:
        assert out.returncode != 0, out.stdout
        return out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_inspector_lists_the_tools_over_stdio(inspector):
    listed = _cli(inspector, [sys.executable, "-m", "jaxbench_mcp", "serve"], "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == TOOLS


@pytest.mark.slow
def test_inspector_calls_every_tool_and_reads_resources_and_prompts_over_http(libtpu_tier, inspector, http_url):
    target = [http_url, "--transport", "http"]

    def call(tool: str, **args: str) -> dict:
        flags = [x for k, v in args.items() for x in ("--tool-arg", f"{k}={v}")]
        result = _cli(inspector, target, "--method", "tools/call", "--tool-name", tool, *flags)
        assert not result.get("isError"), result
        assert result["structuredContent"] and result["content"][0]["text"], result
        return result["structuredContent"]

    listed = _cli(inspector, target, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == TOOLS
    assert call("server_info")["tier"] == "cpu_libtpu"
    assert call("list_workloads", tier="production")["count"] == 17
    assert call("get_workload", workload_id="8p_GEMM")["id"] == "8p_GEMM"
    assert call("read_docs", topic="blockspec-tiling")["kind"] == "topic"
    # A kernel that does not parse: a real verdict, fast (it never reaches a compile).
    bad = (KERNELS / "bad_syntax.py").read_text()
    checked = call("check_kernel", workload_id="8p_GEMM", source=bad)
    assert checked["verdict"]["status"] == "invalid_kernel"
    profiled = call("profile_kernel", workload_id="8p_GEMM", source=bad)
    assert profiled["profile"]["verdict"]["status"] == "invalid_kernel"
    attempt = call("list_attempts", attempt_id=str(checked["attempt_id"]))
    assert attempt["detail"]["verdict"] == checked["verdict"]

    resources = _cli(inspector, target, "--method", "resources/list")["resources"]
    assert {"jaxbench://workloads/8p_GEMM", "jaxbench://docs/blockspec-tiling"} <= {r["uri"] for r in resources}
    spec = _cli(inspector, target, "--method", "resources/read", "--uri", "jaxbench://workloads/8p_GEMM")
    assert "def reference" in spec["contents"][0]["text"]
    prompt = _cli(
        inspector,
        target,
        "--method",
        "prompts/get",
        "--prompt-name",
        "optimize_workload",
        "--prompt-args",
        "workload_id=8p",
    )
    assert "8p_GEMM" in prompt["messages"][0]["content"]["text"]

    # Mistakes: a tool error that names the fix, and invalid-params (-32602) with the message for the others.
    # Inspector 2.x exits non-zero for a tool result with isError (0.15 exited 0); the result is still printed.
    wrong = _cli(
        inspector,
        target,
        "--method",
        "tools/call",
        "--tool-name",
        "get_workload",
        "--tool-arg",
        "workload_id=8p_GEM",
        ok=False,
    )
    assert '"isError": true' in wrong and "Did you mean: 8p_GEMM?" in wrong
    unknown = _cli(inspector, target, "--method", "resources/read", "--uri", "jaxbench://workloads/8p_GEM", ok=False)
    # Inspector 2.x prints a request's error without its JSON-RPC code (-32602 is checked through the SDK client in
    # test_mcp_contract.py); the message must still name the fix.
    assert '{"error":' in unknown and "Did you mean: 8p_GEMM?" in unknown
    bad_prompt = _cli(
        inspector,
        target,
        "--method",
        "prompts/get",
        "--prompt-name",
        "optimize_workload",
        "--prompt-args",
        "workload_id=nope",
        ok=False,
    )
    assert '{"error":' in bad_prompt and "list_workloads" in bad_prompt
