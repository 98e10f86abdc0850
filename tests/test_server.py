"""The MCP tools through the SDK's in-memory client, as an agent sees them."""

import anyio
import pytest
from mcp import Client

from conftest import verdict_of
from jaxbench_mcp import api
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.frontends import server as server_module
from jaxbench_mcp.frontends.server import build_server
from jaxbench_mcp.store import Store

KERNELS = __import__("pathlib").Path(__file__).parent / "kernels"


@pytest.fixture
def bench(tmp_path, monkeypatch):
    # Results in the call itself, not 'running' plus an attempt id, however loaded the test host is; the
    # 'running' path has a test of its own.
    monkeypatch.setattr(server_module, "CALL_BUDGET_SECONDS", 600)
    yield api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=Checker(spares=0, slots=1))


@pytest.mark.slow
def test_a_check_that_outlasts_the_call_budget_returns_running_and_list_attempts_brings_its_verdict(bench, monkeypatch):
    monkeypatch.setattr(server_module, "CALL_BUDGET_SECONDS", 0.5)  # no check compiles and runs in half a second
    source = (KERNELS / "good_rmsnorm.py").read_text()

    async def go():
        async with Client(build_server(bench)) as client:
            checked = await client.call_tool("check_kernel", {"workload_id": "12p_RMSNorm", "source": source})
            return checked, await verdict_of(client, checked)

    checked, verdict = anyio.run(go)
    outcome = checked.structured_content
    assert (outcome["state"], outcome["verdict"]) == ("running", None), checked.content[0].text
    assert f"list_attempts(attempt_id={outcome['attempt_id']})" in checked.content[0].text
    assert verdict["status"] == "correct" and verdict["attempt_id"] == outcome["attempt_id"], verdict["message"]


def call(bench, tool, arguments=None, progress=None):
    async def go():
        async with Client(build_server(bench)) as client:
            return await client.call_tool(tool, arguments or {}, progress_callback=progress)

    return anyio.run(go)


def test_tools_are_listed_with_output_schemas(bench):
    async def go():
        async with Client(build_server(bench)) as client:
            return await client.list_tools()

    tools = {t.name: t for t in anyio.run(go).tools}
    assert {"server_info", "list_workloads", "get_workload", "read_docs", "check_kernel", "list_attempts"} <= set(tools)
    assert all(tools[name].output_schema for name in ("server_info", "list_workloads", "get_workload", "check_kernel"))


def test_server_info_names_the_tier_and_targets(libtpu_tier, bench):
    result = call(bench, "server_info")
    info = result.structured_content
    assert info["tier"] == "cpu_libtpu"
    assert info["compile_targets"] == ["v4", "v5e", "v5p", "v6e", "7x"]
    assert info["workloads"] == 50
    assert "cpu_libtpu" in result.content[0].text


def test_list_workloads_returns_all_50_with_both_sizes_and_filters(bench):
    everything = call(bench, "list_workloads").structured_content
    assert everything["count"] == 50
    # Every workload has both sizes; some also name held-out configurations.
    assert all({"full", "small"} <= set(w["sizes"]) for w in everything["workloads"])
    kernelbench = call(bench, "list_workloads", {"tier": "kernelbench"}).structured_content
    assert kernelbench["count"] == 33 and all(w["id"].split("_")[0].endswith("k") for w in kernelbench["workloads"])


def test_get_workload_gives_the_contract_in_structure_and_text(bench):
    result = call(bench, "get_workload", {"workload_id": "8p_GEMM", "size": "full"})
    spec = result.structured_content
    assert [t["shape"] for t in spec["size"]["inputs"]] == [[8192, 8192], [8192, 28672]]
    assert spec["size"]["outputs"][0] == {
        "name": "",
        "shape": [8192, 28672],
        "dtype": "bfloat16",
        "bytes": 8192 * 28672 * 2,
    }
    assert {r["generation"] for r in spec["size"]["roofline"]} == {"v4", "v5e", "v5p", "v6e", "7x"}
    text = result.content[0].text
    assert "[8192, 28672] bfloat16" in text and "def reference" in text


def test_unknown_workload_is_a_tool_error_with_close_matches(bench):
    result = call(bench, "get_workload", {"workload_id": "8p_GEM"})
    assert result.is_error
    assert "8p_GEMM" in result.content[0].text


def test_bad_size_and_bad_tier_are_tool_errors_that_name_the_allowed_values(bench):
    # Sizes and tiers are enums in the input schema: the SDK refuses other values and names the allowed ones.
    bad_size = call(bench, "get_workload", {"workload_id": "8p_GEMM", "size": "huge"})
    assert bad_size.is_error and "'full' or 'small'" in bad_size.content[0].text
    bad_tier = call(bench, "list_workloads", {"tier": "gold"})
    assert bad_tier.is_error and "'production', 'kernelbench' or 'custom'" in bad_tier.content[0].text


@pytest.mark.slow
def test_check_kernel_reports_progress_and_a_verdict_then_list_attempts_has_it(bench):
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    source = (KERNELS / "good_rmsnorm.py").read_text()

    async def go():
        async with Client(build_server(bench)) as client:
            checked = await client.call_tool(
                "check_kernel",
                {"workload_id": "12p_RMSNorm", "source": source, "seeds": 3},
                progress_callback=on_progress,
            )
            listed = await client.call_tool("list_attempts", {"attempt_id": checked.structured_content["attempt_id"]})
            return checked, listed

    result, listed = anyio.run(go)
    outcome = result.structured_content
    assert outcome["state"] == "done", result.content[0].text
    assert outcome["verdict"]["status"] == "correct", result.content[0].text
    assert len(outcome["verdict"]["seeds"]) == 3
    assert any("compile v6e: done" in m for m in progress) and any("run seed 2: done" in m for m in progress)
    attempts = listed.structured_content
    assert attempts["detail"]["verdict"]["status"] == "correct"
    assert "== events ==" in attempts["detail"]["log_tail"]


def test_workload_specs_and_doc_topics_are_resources(bench):
    async def go():
        async with Client(build_server(bench)) as client:
            templates = await client.list_resource_templates()
            spec = await client.read_resource("jaxbench://workloads/8p_GEMM")
            topic = await client.read_resource("jaxbench://docs/blockspec-tiling")
            return templates, spec, topic

    templates, spec, topic = anyio.run(go)
    assert {t.uri_template for t in templates.resource_templates} == {
        "jaxbench://workloads/{workload_id}",
        "jaxbench://docs/{topic}",
    }
    for size in ("full", "small"):
        (out,) = api.get_workload("8p_GEMM", size).size.outputs
        assert f"{list(out.shape)} {out.dtype}" in spec.contents[0].text
    assert "(8, 128)" in topic.contents[0].text


def test_expert_source_is_hidden_unless_the_server_shows_it(bench):
    async def go(show):
        async with Client(build_server(bench, show_expert_source=show)) as client:
            return (await client.call_tool("get_workload", {"workload_id": "8p_GEMM"})).structured_content

    hidden, shown = anyio.run(go, False), anyio.run(go, True)
    assert hidden["has_expert_reference"] and hidden["expert_source"] is None
    assert "from jax.experimental.pallas.ops.tpu.matmul import matmul" in shown["expert_source"]


@pytest.mark.slow
def test_profile_kernel_reports_progress_and_a_labelled_estimate_that_list_attempts_keeps(bench):
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    source = (KERNELS / "good_rmsnorm.py").read_text()

    async def go():
        async with Client(build_server(bench)) as client:
            result = await client.call_tool(
                "profile_kernel", {"workload_id": "12p_RMSNorm", "source": source}, progress_callback=on_progress
            )
            attempt_id = result.structured_content["attempt_id"]
            for _ in range(600):  # past the call's time budget a profile is collected from list_attempts
                listed = await client.call_tool("list_attempts", {"attempt_id": attempt_id})
                if listed.structured_content["detail"]["state"] != "running":
                    return result.structured_content, listed
                await anyio.sleep(0.5)
            raise AssertionError("the profile did not finish")

    outcome, listed = anyio.run(go)
    profile = listed.structured_content["detail"]["profile"]
    if outcome["state"] == "done":
        assert outcome["profile"] == profile
    assert profile["kind"] == "static estimate" and profile["verdict"]["status"] == "correct"
    (v6e,) = profile["targets"]
    assert v6e["target"] == "v6e" and v6e["error"] is None, listed.content[0].text
    assert v6e["candidate_us"] > 0 and v6e["xla_baseline_us"] > 0 and v6e["expert_us"] is None  # 12p has no expert
    assert "STATIC ESTIMATE" in listed.content[0].text
    assert any("estimating the candidate for v6e" in m for m in progress), progress


@pytest.mark.slow
def test_a_check_for_every_generation_compiles_and_reports_each_even_after_a_failure(bench):
    source = (KERNELS / "bad_vmem_full_only.py").read_text()
    result = call(
        bench,
        "check_kernel",
        {"workload_id": "8p_GEMM", "source": source, "targets": ["v4", "v5e", "v5p", "v6e", "7x"], "seeds": 1},
    )
    verdict = result.structured_content["verdict"]
    assert (verdict["status"], verdict["error_class"]) == ("compile_error", "vmem_overflow")
    assert [c["target"] for c in verdict["compiles"]] == ["v4", "v5e", "v5p", "v6e", "7x"]
    assert all(not c["ok"] and c["error"].startswith("out of VMEM") for c in verdict["compiles"])
    assert verdict["message"].startswith("compile failed for v4, v5e, v5p, v6e, 7x; the first failure (v4)")
    text = result.content[0].text
    assert all(f"compile {t}: FAILED" in text for t in ("v4", "v5e", "v5p", "v6e", "7x"))


def test_a_source_holding_a_lone_surrogate_is_refused_before_any_attempt(bench):
    with pytest.raises(api.BadRequest, match=r"lone surrogate U\+D800 at line 2, column 6"):
        bench.check_kernel("12p_RMSNorm", "import jax\nx = '\ud800'\n")
    with pytest.raises(api.BadRequest, match="lone surrogate"):
        bench.profile_kernel("12p_RMSNorm", "\udfff")
    assert bench.store.recent() == []


def test_every_request_the_transport_cannot_parse_gets_an_answer():
    from jaxbench_mcp.frontends.server import unparsed_request_reply

    # JSON's escapes spell a lone surrogate; pydantic's parser refuses the line, the client still gets an answer.
    line = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"source":"x = \\ud800"}}}'
    reply = unparsed_request_reply(line)
    assert reply is not None and reply.id == 7 and reply.error.code == -32602
    assert reply.error.message.startswith("params.arguments.source holds a lone UTF-16 surrogate")
    garbage = unparsed_request_reply("{not json")
    assert garbage is not None and garbage.id is None and garbage.error.code == -32700
    not_rpc = unparsed_request_reply('{"id": "a", "method": 3}')
    assert not_rpc is not None and not_rpc.id == "a" and not_rpc.error.code == -32600
    # Nothing to answer: a blank line, a notification.
    assert unparsed_request_reply("  ") is None
    assert unparsed_request_reply('{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\\ud800"}}') is None


@pytest.mark.slow
def test_the_stdio_server_answers_a_raw_request_with_a_lone_surrogate_and_keeps_serving(tmp_path):
    import json
    import os
    import selectors
    import subprocess
    import sys

    env = {**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path)}
    server = subprocess.Popen(
        [sys.executable, "-m", "jaxbench_mcp.frontends.cli", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )

    def send(message: str) -> None:
        server.stdin.write(message.encode() + b"\n")
        server.stdin.flush()

    def answer(timeout: float) -> dict:
        with selectors.DefaultSelector() as sel:
            sel.register(server.stdout, selectors.EVENT_READ)
            assert sel.select(timeout), "no answer"
        return json.loads(server.stdout.readline())

    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
        assert answer(120)["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        call = {"name": "check_kernel", "arguments": {"workload_id": "12p_RMSNorm", "source": "x = '\ud800'"}}
        send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}))  # escapes it as \ud800
        refused = answer(60)
        assert refused["id"] == 2 and "lone UTF-16 surrogate" in refused["error"]["message"]
        send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        assert answer(60)["id"] == 3
    finally:
        server.kill()
        server.wait()
