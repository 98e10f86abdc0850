"""The MCP contract, through the official SDK client: every result reaches the agent and validates.

The SDK client (`mcp.Client`) checks every successful tool result against the tool's output schema and
raises "Invalid structured content returned by tool ..." when it does not fit; the first test proves it
does so here, so every other test that gets a result back has passed that validation. Tests drive the
server in memory, over stdio and over streamable HTTP (a real `jaxbench-mcp serve` subprocess on
127.0.0.1).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from conftest import verdict_of
from jaxbench_mcp import __version__, api
from jaxbench_mcp.catalog import docs, workloads
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.frontends import server as server_module
from jaxbench_mcp.frontends.server import RESULT_TOKEN_BUDGET, build_server
from jaxbench_mcp.models import (
    CheckOutcome,
    KernelEstimate,
    Profile,
    ProfileOutcome,
    SeedReport,
    TargetEstimate,
    Verdict,
)
from jaxbench_mcp.store import Store
from jaxbench_mcp.taxonomy import ERROR_CLASSES, ErrorClass, Status

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
TOOLS = [
    "server_info",
    "list_workloads",
    "get_workload",
    "read_docs",
    "check_kernel",
    "profile_kernel",
    "tune_kernel",
    "list_attempts",
]
READ_ONLY = {"server_info", "list_workloads", "get_workload", "read_docs", "list_attempts"}


@pytest.fixture
def bench(tmp_path):
    # No spare workers: most tests here never run a check, and those that do wait for one worker.
    return api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=Checker(spares=0, slots=1))


def run(bench, body, show_expert_source=False):
    """Run `body(client)` against a fresh in-memory server over `bench`."""

    async def go():
        async with Client(build_server(bench, show_expert_source)) as client:
            return await body(client)

    return anyio.run(go)


def tokens(result) -> float:
    """What a client holds of one result, in tokens, approximated as characters / 4."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True)) / 4


# ---- the client validates ---------------------------------------------------------------------------


def test_the_sdk_client_rejects_structured_content_that_breaks_the_output_schema():
    """A server that advertises `number` and sends null (what pydantic writes for NaN) makes call_tool raise."""
    schema = {"type": "object", "properties": {"max_abs_error": {"type": "number"}}, "required": ["max_abs_error"]}

    async def list_tools(ctx, params):
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name="t", input_schema={"type": "object"}, output_schema=schema)]
        )

    async def call_tool(ctx, params):
        value = None if params.arguments.get("bad") else 1.5
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text="x")], structured_content={"max_abs_error": value}
        )

    lowlevel = Server("schema-probe", on_list_tools=list_tools, on_call_tool=call_tool)

    async def go():
        async with Client(lowlevel) as client:
            good = await client.call_tool("t", {"bad": False})
            with pytest.raises(RuntimeError, match="Invalid structured content returned by tool t"):
                await client.call_tool("t", {"bad": True})
            return good

    assert anyio.run(go).structured_content == {"max_abs_error": 1.5}


def _verdict(status: Status, error_class: ErrorClass | None) -> Verdict:
    """A verdict carrying every kind of number an agent may meet: finite, NaN, +Inf, -Inf."""
    seed = SeedReport(
        seed_index=0,
        passed=False,
        max_abs_error=math.inf,
        max_rel_error=math.nan,
        tolerance=0.02,
        baseline_max_abs_error=0.01,
        worst_index=[0, 0],
        worst_candidate=-math.inf,
        worst_truth=0.5,
        nan_count=3,
        inf_count=1,
        jaxbench_allclose=False,
    )
    return Verdict(
        status=status,
        error_class=error_class,
        message="m",
        workload_id="8p_GEMM",
        size="small",
        targets=["v6e"],
        tier="cpu_libtpu",
        attempt_id=1,
        seeds=[seed],
        total_seconds=math.nan,
        log_tail="tail" if status is Status.SERVER_ERROR else None,
    )


def test_every_status_and_error_class_with_non_finite_numbers_fits_the_advertised_schemas(bench):
    """The vocabulary in full, with NaN and Inf in every number slot, through the SDK client's own validator
    against the schemas the server advertises for check_kernel, profile_kernel and list_attempts."""
    outcomes = [(None, Status.CORRECT)] + [(c, info.status) for c, info in ERROR_CLASSES.items()]
    estimate = TargetEstimate(
        target="v6e",
        candidate_us=math.inf,
        xla_baseline_us=math.nan,
        roofline_us=1.0,
        speedup_vs_xla=0.0,
        kernels=[
            KernelEstimate(
                name="k",
                grid_steps=1,
                bundles_per_step=1,
                slot_use={"mxu": math.nan},
                hbm_bytes=1,
                hbm_bytes_exact=True,
                compute_us=math.inf,
                memory_us=1.0,
                overhead_us=0.0,
                estimate_us=math.inf,
                bottleneck="compute",
            )
        ],
    )

    async def body(client):
        await client.list_tools()
        for error_class, status in outcomes:
            verdict = _verdict(status, error_class)
            for tool, model in (
                ("check_kernel", CheckOutcome(state="done", attempt_id=1, verdict=verdict)),
                (
                    "profile_kernel",
                    ProfileOutcome(
                        state="done",
                        attempt_id=1,
                        profile=Profile(
                            workload_id="8p_GEMM",
                            tier="cpu_libtpu",
                            kind="static estimate",
                            label="l",
                            verdict=verdict,
                            targets=[estimate],
                        ),
                    ),
                ),
            ):
                structured = model.model_dump(mode="json")
                assert json.loads(json.dumps(structured, allow_nan=False)) == structured  # standard JSON only
                await client.session.validate_tool_result(
                    tool, mcp_types.CallToolResult(content=[], structured_content=structured)
                )
        # The schema is what rejects the old encoding: NaN written as null.
        broken = CheckOutcome(
            state="done", attempt_id=1, verdict=_verdict(Status.INCORRECT, ErrorClass.NAN_OUTPUT)
        ).model_dump(mode="json")
        broken["verdict"]["seeds"][0]["max_abs_error"] = None
        with pytest.raises(RuntimeError, match="Invalid structured content"):
            await client.session.validate_tool_result(
                "check_kernel", mcp_types.CallToolResult(content=[], structured_content=broken)
            )

    run(bench, body)


def _numbers_without_non_finite(schema, path="$", defs=None):
    """Paths in a JSON schema where a plain `number` is allowed but the strings "nan"/"inf"/"-inf" are not."""
    defs = schema.get("$defs", {}) if defs is None else defs
    found = []
    if isinstance(schema, dict):
        if "$ref" in schema:
            return []  # each definition is walked once, from $defs
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = schema[key]
                if any(b.get("type") == "number" for b in branches) and not any(
                    b.get("enum") == ["nan", "inf", "-inf"] for b in branches
                ):
                    found.append(path)
                for i, b in enumerate(branches):
                    if b.get("type") != "number":
                        found += _numbers_without_non_finite(b, f"{path}.{key}[{i}]", defs)
                return found
        if schema.get("type") == "number":
            return [path]
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    found += _numbers_without_non_finite(sub, f"{path}.{name}", defs)
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                found += _numbers_without_non_finite(value, f"{path}[]", defs)
    return found


def test_every_number_in_verdicts_profiles_and_attempts_may_be_nan_or_inf(bench):
    """Any measured or computed number can be non-finite: no field of a verdict, profile or attempt may be a
    bare `number` (a new float field must use models.Real or models.OptionalReal)."""

    async def body(client):
        return {t.name: t.output_schema for t in (await client.list_tools()).tools}

    schemas = run(bench, body)
    for tool in ("check_kernel", "profile_kernel", "list_attempts"):
        assert _numbers_without_non_finite(schemas[tool]) == [], tool


# ---- real verdicts over a real transport --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_http(home: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, int, Path]:
    """A `jaxbench-mcp serve --transport http` subprocess; returns it once /health answers."""
    port = _free_port()
    log = home / f"server-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxbench_mcp", "serve", "--transport", "http", "--port", str(port), *args],
        stdin=subprocess.DEVNULL,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "JAXBENCH_MCP_HOME": str(home), **(env or {})},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, port, log
        except httpx2.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"the server did not answer /health in 120 s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def http_server():
    home = Path(tempfile.mkdtemp(prefix="jaxbench-http-"))
    proc, port, log = _serve_http(home)
    yield f"http://127.0.0.1:{port}/mcp", log
    _stop(proc)
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_a_nan_verdict_reaches_the_agent_over_http_and_list_attempts_returns_it(http_server):
    """Regression: a GEMM that never zeroes its accumulator outputs NaN; the verdict used to fail the client's
    schema validation (max_abs_error: null against `number`), so the agent got nothing, from check_kernel
    and from list_attempts alike."""
    url, _log = http_server
    source = (KERNELS / "bad_missing_acc_init.py").read_text()

    async def go():
        async with Client(url) as client:
            checked = await client.call_tool("check_kernel", {"workload_id": "8p_GEMM", "source": source, "seeds": 1})
            assert not checked.is_error, checked.content[0].text
            verdict = await verdict_of(client, checked)
            listed = await client.call_tool("list_attempts", {"attempt_id": checked.structured_content["attempt_id"]})
            return checked, verdict, listed

    checked, verdict, listed = anyio.run(go)
    assert (verdict["status"], verdict["error_class"]) == ("incorrect", "nan_output"), verdict["message"]
    seed = verdict["seeds"][0]
    assert seed["max_abs_error"] == "inf" and seed["worst_candidate"] == "nan" and seed["nan_count"] > 0
    detail = listed.structured_content["detail"]
    assert detail["verdict"] == verdict
    # The same words whichever call brought the verdict: the check's own result, or list_attempts after it.
    texts = [listed.content[0].text] + ([checked.content[0].text] if checked.structured_content["verdict"] else [])
    for text in texts:
        assert "max|err| +Inf" in text and "candidate NaN" in text and f"{seed['nan_count']:,} NaN" in text
    assert tokens(checked) < RESULT_TOKEN_BUDGET and tokens(listed) < RESULT_TOKEN_BUDGET


@pytest.mark.slow
def test_crash_verdicts_reach_the_agent_over_http(http_server):
    """A candidate that kills its process (a segfault, os._exit) leaves raw, truncated output behind: its
    verdict must still arrive whole and valid, with the status its file expects."""
    url, _log = http_server
    cases = ["bad_segfault.py", "bad_os_exit.py"]

    async def go():
        found = []
        async with Client(url) as client:
            for name in cases:
                source = (KERNELS / name).read_text()
                arguments = {"workload_id": "8p_GEMM", "seeds": 1, "source": source}
                result = await client.call_tool("check_kernel", arguments)
                assert not result.is_error, result.content[0].text
                verdict = await verdict_of(client, result)
                listed = await client.call_tool("list_attempts", {"attempt_id": verdict["attempt_id"]})
                found.append((result, verdict, listed.content[0].text))
        return found

    for name, (result, verdict, listed_text) in zip(cases, anyio.run(go), strict=True):
        expected = dict(kv.split("=", 1) for kv in (KERNELS / name).read_text().splitlines()[0].split()[2:])
        assert (verdict["status"], verdict["error_class"]) == (expected["status"], expected["error_class"]), name
        assert f"{expected['status'].upper()} [{expected['error_class']}]" in listed_text, listed_text
        if result.structured_content["verdict"]:
            assert result.content[0].text.startswith(f"{expected['status'].upper()} [{expected['error_class']}]")
        assert tokens(result) < RESULT_TOKEN_BUDGET


@pytest.mark.slow
def test_http_serves_every_tool_resource_and_prompt(libtpu_tier, http_server):
    url, log = http_server
    bad = (KERNELS / "bad_syntax.py").read_text()  # a real verdict that never waits for a compile
    calls = {
        "list_workloads": {"tier": "kernelbench"},
        "get_workload": {"workload_id": "8p_GEMM", "size": "full"},
        "read_docs": {"query": "accumulator init"},
        "check_kernel": {"workload_id": "8p_GEMM", "source": bad},
        "profile_kernel": {"workload_id": "8p_GEMM", "source": bad},
        "list_attempts": {"workload_id": "8p"},
    }

    async def go():
        async with Client(url) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            results = {tool: await client.call_tool(tool, args) for tool, args in calls.items()}
            info = await client.call_tool("server_info", {})
            spec = await client.read_resource("jaxbench://workloads/8p_GEMM")
            with pytest.raises(MCPError) as unknown:
                await client.read_resource("jaxbench://workloads/8p_GEM")
            prompt = await client.get_prompt("optimize_workload", {"workload_id": "8p"})
            return tools, results, info, spec, unknown.value, prompt

    tools, results, info, spec, unknown, prompt = anyio.run(go)
    assert tools == TOOLS
    for tool, result in results.items():
        assert not result.is_error and result.structured_content, (tool, result.content[0].text)
    assert results["check_kernel"].structured_content["verdict"]["status"] == "invalid_kernel"
    assert results["profile_kernel"].structured_content["profile"]["verdict"]["status"] == "invalid_kernel"
    assert len(results["list_attempts"].structured_content["attempts"]) >= 2
    assert info.structured_content["tier"] == "cpu_libtpu"
    assert "[8192, 28672] bfloat16" in spec.contents[0].text
    assert unknown.code == mcp_types.INVALID_PARAMS and "8p_GEMM" in unknown.message
    assert "8p_GEMM" in prompt.messages[0].content.text
    assert "Traceback" not in log.read_text()  # an agent's mistake is one log line, not a traceback


# ---- server errors ------------------------------------------------------------------------------------


class _WorkerWillNotStart(RuntimeError):
    error_class = ErrorClass.WORKER_START_FAILED


class _BrokenChecker(Checker):
    """A checker whose machinery fails: what a worker that cannot start (libtpu init) looks like from above."""

    def __init__(self, exc: Exception):
        super().__init__(spares=0, slots=1)
        self.exc = exc

    def check(self, *args, **kwargs):
        raise type(self.exc)(*self.exc.args)  # a fresh exception each time, with a traceback of its own


@pytest.mark.parametrize(
    "exc, error_class",
    [
        (RuntimeError("simulated crash in the checker\nsecond line"), "internal_error"),
        (_WorkerWillNotStart("the worker did not start: libtpu init failed"), "worker_start_failed"),
    ],
)
@pytest.mark.slow
def test_a_failure_of_the_checker_comes_back_as_a_server_error_verdict(tmp_path, exc, error_class):
    bench = api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=_BrokenChecker(exc))
    source = (KERNELS / "good_rmsnorm.py").read_text()

    async def body(client):
        checked = await client.call_tool("check_kernel", {"workload_id": "12p_RMSNorm", "source": source})
        profiled = await client.call_tool("profile_kernel", {"workload_id": "12p_RMSNorm", "source": source})
        listed = await client.call_tool("list_attempts", {"attempt_id": checked.structured_content["attempt_id"]})
        return checked, profiled, listed

    checked, profiled, listed = run(bench, body)
    first_line = str(exc).splitlines()[0]
    # A profile checks first: its verdict is that check's, recorded as an attempt of its own.
    assert profiled.structured_content["profile"]["attempt_id"] == profiled.structured_content["attempt_id"]
    assert profiled.structured_content["profile"]["verdict"]["attempt_id"] > checked.structured_content["attempt_id"]
    for result, verdict in (
        (checked, checked.structured_content["verdict"]),
        (profiled, profiled.structured_content["profile"]["verdict"]),
    ):
        assert not result.is_error, result.content[0].text  # a structured verdict, not "Error executing tool"
        assert verdict["status"] == "server_error" and verdict["error_class"] == error_class
        assert f"attempt {verdict['attempt_id']}" in result.content[0].text
        assert first_line in verdict["message"] and first_line in verdict["log_tail"]
        assert "Traceback" in verdict["log_tail"]
        text = result.content[0].text
        assert "SERVER_ERROR" in text and first_line in text and "server log (end)" in text
    assert profiled.content[0].text.startswith("NOT PROFILED: the server failed")
    detail = listed.structured_content["detail"]
    assert detail["state"] == "done" and detail["status"] == "server_error"
    assert detail["verdict"] == checked.structured_content["verdict"]
    assert first_line in detail["log_tail"]


def test_agent_mistakes_in_a_check_are_tool_errors_and_record_no_attempt(bench):
    async def body(client):
        unknown = await client.call_tool("check_kernel", {"workload_id": "8p_GEM", "source": "x"})
        bad_target = await client.call_tool(
            "check_kernel", {"workload_id": "8p_GEMM", "source": "x", "targets": ["v9"]}
        )
        listed = await client.call_tool("list_attempts", {})
        return unknown, bad_target, listed

    unknown, bad_target, listed = run(bench, body)
    assert unknown.is_error and "8p_GEMM" in unknown.content[0].text and "list_workloads" in unknown.content[0].text
    assert "jaxbench-mcp list" not in unknown.content[0].text  # over MCP, point to the tool, not the CLI
    assert bad_target.is_error and "v6e" in bad_target.content[0].text  # the enum names the allowed values
    assert listed.structured_content["attempts"] == []


# ---- JSON-RPC errors for resources and prompts ----------------------------------------------------------


def test_resource_and_prompt_mistakes_are_invalid_params_with_the_message_and_one_log_line(bench, caplog):
    mistakes = [
        (lambda c: c.read_resource("jaxbench://workloads/8p_GEM"), ["8p_GEMM", "list_workloads"]),
        (lambda c: c.read_resource("jaxbench://docs/blockspec"), ["blockspec-tiling"]),
        (lambda c: c.get_prompt("optimize_workload", {"workload_id": "8p_GEM"}), ["8p_GEMM", "list_workloads"]),
        (lambda c: c.get_prompt("optimize_workload", {}), ["workload_id"]),
        (lambda c: c.get_prompt("no_such_prompt", {}), ["no_such_prompt"]),
    ]

    async def body(client):
        errors = []
        for call, _ in mistakes:
            with pytest.raises(MCPError) as caught:
                await call(client)
            errors.append(caught.value)
        return errors

    caplog.set_level(logging.INFO)
    errors = run(bench, body)
    for error, (_, words) in zip(errors, mistakes, strict=True):
        assert error.code == mcp_types.INVALID_PARAMS, error.message
        assert all(w in error.message for w in words), error.message
        assert "jaxbench-mcp list" not in error.message
    ours = [r for r in caplog.records if r.name.startswith(("mcp.", "jaxbench_mcp")) and r.levelno >= logging.INFO]
    assert len(ours) == len(mistakes), [r.getMessage() for r in ours]
    assert all(r.exc_info is None and r.levelno == logging.INFO for r in ours)


# ---- conventions ----------------------------------------------------------------------------------------


def test_tools_have_titles_annotations_enums_and_described_parameters_in_a_fixed_order(bench):
    async def body(client):
        return (await client.list_tools()).tools, (await client.list_prompts()).prompts

    tools, prompts = run(bench, body)
    assert [t.name for t in tools] == TOOLS
    assert [t.name for t in run(bench, body)[0]] == TOOLS  # the same order on every build
    by_name = {t.name: t for t in tools}
    for t in tools:
        assert t.title and t.description and t.output_schema, t.name
        a = t.annotations
        assert a.read_only_hint is (t.name in READ_ONLY), t.name
        assert a.idempotent_hint is (t.name in READ_ONLY) and a.open_world_hint is False and a.destructive_hint is False
        for name, prop in t.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{t.name}.{name} has no description"

    def enum_of(tool, param):
        prop = by_name[tool].input_schema["properties"][param]
        for branch in [prop, *prop.get("anyOf", [])]:
            if "enum" in branch:
                return set(branch["enum"])
            if "enum" in branch.get("items", {}):
                return set(branch["items"]["enum"])
        raise AssertionError(f"{tool}.{param} has no enum: {prop}")

    assert enum_of("list_workloads", "tier") == set(workloads.TIERS)
    assert enum_of("get_workload", "size") == enum_of("check_kernel", "size") == {"small", "full"}
    assert (
        enum_of("check_kernel", "targets") == enum_of("profile_kernel", "targets") == {"v4", "v5e", "v5p", "v6e", "7x"}
    )
    # Output enums: every status and error class a verdict may carry is listed in the schema.
    check_out = by_name["check_kernel"].output_schema

    def output_enum(model, field):
        prop = check_out["$defs"][model]["properties"][field]
        for branch in [prop, *prop.get("anyOf", [])]:
            if "$ref" in branch:
                return set(check_out["$defs"][branch["$ref"].rsplit("/", 1)[1]]["enum"])
            if "enum" in branch:
                return set(branch["enum"])
        raise AssertionError(f"{model}.{field} has no enum: {prop}")

    assert output_enum("Verdict", "status") == set(Status)
    assert output_enum("Verdict", "error_class") == set(ErrorClass)
    (prompt,) = prompts
    assert prompt.name == "optimize_workload" and all(arg.description for arg in prompt.arguments)


def test_completions_offer_workload_ids_and_doc_topics(bench):
    async def body(client):
        prompt = mcp_types.PromptReference(type="ref/prompt", name="optimize_workload")
        workload = mcp_types.ResourceTemplateReference(type="ref/resource", uri="jaxbench://workloads/{workload_id}")
        topic = mcp_types.ResourceTemplateReference(type="ref/resource", uri="jaxbench://docs/{topic}")
        return (
            await client.complete(prompt, {"name": "workload_id", "value": "8p"}),
            await client.complete(workload, {"name": "workload_id", "value": "gemm"}),
            await client.complete(topic, {"name": "topic", "value": "block"}),
            await client.complete(workload, {"name": "workload_id", "value": ""}),
        )

    by_prefix, by_substring, topics, everything = run(bench, body)
    assert by_prefix.completion.values == ["8p_GEMM"]
    assert "8p_GEMM" in by_substring.completion.values
    assert "blockspec-tiling" in topics.completion.values
    assert everything.completion.total == 50 and len(everything.completion.values) == 50


def test_resources_list_names_every_workload_and_docs_topic_and_each_reads(bench):
    async def body(client):
        listed = (await client.list_resources()).resources
        gemm = await client.read_resource("jaxbench://workloads/8p_GEMM")
        topic = await client.read_resource("jaxbench://docs/blockspec-tiling")
        return listed, gemm, topic

    listed, gemm, topic = run(bench, body)
    uris = {str(r.uri) for r in listed}
    assert {f"jaxbench://workloads/{w.id}" for w in workloads.all_workloads()} <= uris
    assert {f"jaxbench://docs/{t.id}" for t in docs.all_topics()} <= uris
    assert len(uris) == 50 + len(docs.all_topics())
    text = gemm.contents[0].text
    for size in ("full", "small"):
        (out,) = api.get_workload("8p_GEMM", size).size.outputs
        assert f"at size '{size}'" in text and f"{list(out.shape)} {out.dtype}" in text
    assert text.count("def reference") == 1  # the reference once, not once per size
    assert "(8, 128)" in topic.contents[0].text


# ---- text and structure say the same things -------------------------------------------------------------


def test_a_profile_text_carries_slot_use_and_the_estimate_caveats():
    kernel = KernelEstimate(
        name="mm",
        grid_steps=8,
        grid_steps_exact=False,
        bundles_per_step=100,
        slot_use={"mxu": 0.5, "vpu": 0.25},
        hbm_bytes=2**20,
        hbm_bytes_exact=True,
        run_ratio=0.5,
        run_ratio_exact=False,
        compute_us=1.0,
        memory_us=2.0,
        overhead_us=0.1,
        estimate_us=2.1,
        bottleneck="memory",
    )
    verdict = _verdict(Status.CORRECT, None)
    profile = Profile(
        workload_id="8p_GEMM",
        tier="cpu_libtpu",
        kind="static estimate",
        label="l",
        verdict=verdict,
        targets=[
            TargetEstimate(target="v6e", candidate_us=2.1, xla_baseline_us=3.0, roofline_us=1.0, kernels=[kernel])
        ],
    )
    text = profile.summary()
    assert "mxu 50%" in text and "vpu 25%" in text
    assert "grid known only at run time" in text and "run ratio approximate" in text


def test_read_docs_and_get_workload_send_their_text_once_per_channel(bench):
    async def body(client):
        page = await client.call_tool("read_docs", {"topic": "blockspec-tiling"})
        pack = await client.call_tool("read_docs", {"workload_id": "8p_GEMM"})
        spec = await client.call_tool("get_workload", {"workload_id": "8p_GEMM"})
        return page, pack, spec

    page, pack, spec = run(bench, body)
    for result in (page, pack):
        structured = result.structured_content
        assert structured["text"] == result.content[0].text
        assert structured["sections"] and all("text" not in s for s in structured["sections"])
        # The page's longest line (some prose or code) is in the structure once: in `text`, nowhere else.
        line = max(result.content[0].text.splitlines(), key=len)
        assert json.dumps(structured).count(json.dumps(line)[1:-1]) == 1, line
    source = spec.structured_content["reference_source"]
    assert "def reference" in source
    assert spec.content[0].text.count(source.rstrip()) == 1
    assert json.dumps(spec.structured_content).count(json.dumps(source)[1:-1]) == 1


# ---- payload budget --------------------------------------------------------------------------------------


def _long_attempt(bench) -> int:
    """An attempt with the longest source a check accepts and a 2 MB log, as the store may hold."""
    source = "# filler\n" * (server_module.MAX_SOURCE_CHARS // 9)
    attempt_id = bench.store.start("check", "8p_GEMM", source[: server_module.MAX_SOURCE_CHARS])
    verdict = _verdict(Status.INCORRECT, ErrorClass.WRONG_VALUES)
    verdict.seeds = verdict.seeds * api.MAX_SEEDS
    verdict.message = "decisive line\n" * 20
    bench.store.finish(
        attempt_id, verdict.status, verdict.error_class, verdict.model_dump(mode="json"), "log line\n" * 250_000, 1.0
    )
    return attempt_id


@pytest.mark.slow
def test_every_tool_result_stays_under_the_token_budget(bench):
    attempt_id = _long_attempt(bench)
    for _ in range(199):
        bench.store.start("check", "8p_GEMM", "x")

    async def body(client):
        sizes = {}

        async def measure(tool, args):
            result = await client.call_tool(tool, args)
            assert not result.is_error, (tool, args, result.content[0].text)
            sizes[(tool, json.dumps(args))] = tokens(result)

        await measure("server_info", {})
        await measure("list_workloads", {})
        for w in workloads.all_workloads():
            for size in ("small", "full"):
                await measure("get_workload", {"workload_id": w.id, "size": size})
            await measure("read_docs", {"workload_id": w.id})
        listing = await client.call_tool("read_docs", {})
        for p in range(1, listing.structured_content["pages"] + 1):
            await measure("read_docs", {"page": p})
        for t in docs.all_topics():
            first = await client.call_tool("read_docs", {"topic": t.id})
            for p in range(1, first.structured_content["pages"] + 1):
                await measure("read_docs", {"topic": t.id, "page": p})
            for s in t.sections:
                await measure("read_docs", {"topic": s.ref})
        await measure("read_docs", {"query": "VMEM out of memory block shape accumulator"})
        await measure("list_attempts", {"attempt_id": attempt_id})
        await measure("list_attempts", {"limit": 200})
        return sizes

    sizes = run(bench, body, show_expert_source=True)  # expert sources shown: the largest get_workload there is
    worst = max(sizes, key=sizes.get)
    assert sizes[worst] < RESULT_TOKEN_BUDGET, (worst, sizes[worst])
    # The long attempt is cut to fit, and says so.
    assert sizes[("list_attempts", json.dumps({"attempt_id": attempt_id}))] < RESULT_TOKEN_BUDGET / 2


def test_a_long_attempt_is_cut_and_says_so(bench):
    attempt_id = _long_attempt(bench)

    async def body(client):
        return await client.call_tool("list_attempts", {"attempt_id": attempt_id})

    result = run(bench, body)
    detail = result.structured_content["detail"]
    assert "characters cut" in detail["source"] and len(detail["log_tail"]) == api.ATTEMPT_LOG_CHARS
    assert detail["source"] in result.content[0].text and detail["log_tail"] in result.content[0].text
    assert tokens(result) < RESULT_TOKEN_BUDGET


def test_an_oversized_source_is_refused_by_the_input_schema(bench):
    async def body(client):
        return await client.call_tool(
            "check_kernel", {"workload_id": "8p_GEMM", "source": "x" * (server_module.MAX_SOURCE_CHARS + 1)}
        )

    assert run(bench, body).is_error


# ---- entry points -----------------------------------------------------------------------------------------


def test_version_and_python_dash_m():
    for command in (["jaxbench-mcp"], [sys.executable, "-m", "jaxbench_mcp"]):
        if command == ["jaxbench-mcp"]:
            command = [str(Path(sys.executable).with_name("jaxbench-mcp"))]
        out = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == f"jaxbench-mcp {__version__}", out.stderr


@pytest.mark.slow
def test_the_server_module_builds_its_mcp_object_lazily(tmp_path, monkeypatch):
    """`mcp run jaxbench_mcp/server.py` loads the file by path and takes its `mcp` attribute."""
    import importlib.util

    from mcp.server.mcpserver import MCPServer

    monkeypatch.setenv("JAXBENCH_MCP_HOME", str(tmp_path))
    fresh = subprocess.run(
        [sys.executable, "-c", "import jaxbench_mcp.frontends.server as s; print(s._default_server)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fresh.stdout.strip() == "None", fresh.stderr  # importing builds nothing
    spec = importlib.util.spec_from_file_location("server_module", ROOT / "jaxbench_mcp" / "server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "mcp") and isinstance(module.mcp, MCPServer) and module.mcp is module.mcp


def test_mcp_run_finds_the_server_object(tmp_path, monkeypatch):
    pytest.importorskip(
        "typer", reason="`mcp run` needs the SDK's cli extra (pip install 'mcp[cli]'), not installed here"
    )
    from mcp.cli.cli import _import_server
    from mcp.server.mcpserver import MCPServer

    monkeypatch.setenv("JAXBENCH_MCP_HOME", str(tmp_path))
    found = _import_server(ROOT / "jaxbench_mcp" / "server.py")
    assert isinstance(found, MCPServer) and found.name == "jaxbench-mcp"


@pytest.mark.slow
def test_stdio_serves_tools_and_errors_without_tracebacks(tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jaxbench_mcp", "serve"],
        cwd=str(tmp_path),
        env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path)},
    )
    errlog = (tmp_path / "stderr.log").open("w+")

    async def go():
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            for tool, args in (
                ("server_info", {}),
                ("read_docs", {}),
                ("list_attempts", {}),
                ("get_workload", {"workload_id": "8p_GEMM"}),
            ):
                assert not (await client.call_tool(tool, args)).is_error, tool
            listed = await client.call_tool("list_workloads", {"tier": "production"})
            bad = await client.call_tool("get_workload", {"workload_id": "8p_GEM"})
            with pytest.raises(MCPError) as caught:
                await client.get_prompt("optimize_workload", {"workload_id": "nope"})
            return tools, listed, bad, caught.value

    tools, listed, bad, prompt_error = anyio.run(go)
    assert tools == TOOLS
    assert listed.structured_content["count"] == 17
    assert bad.is_error and "list_workloads" in bad.content[0].text
    assert prompt_error.code == mcp_types.INVALID_PARAMS
    errlog.seek(0)
    assert "Traceback" not in errlog.read()


# ---- HTTP: token, Host/Origin checks, /health ----------------------------------------------------------


def test_http_security_rules():
    from jaxbench_mcp.frontends.server import ServeRefused, http_security

    token = "t" * 32
    assert http_security("127.0.0.1", env={}).token is None  # loopback: a token is optional
    assert http_security("::1", env={}).token is None
    assert http_security("0.0.0.0", env={"JAXBENCH_MCP_TOKEN": token}).token == token
    for host in ("0.0.0.0", "::", "192.168.1.20", "example.com"):
        with pytest.raises(ServeRefused, match="--token-file"):
            http_security(host, env={})
    with pytest.raises(ServeRefused, match="shorter than 16"):
        http_security("127.0.0.1", env={"JAXBENCH_MCP_TOKEN": "short"})
    wild = http_security("0.0.0.0", allowed_hosts=["mcp.example.org", "box:8080"], env={"JAXBENCH_MCP_TOKEN": token})
    # The unspecified address is no Host name; the loopback names and the listed ones are.
    assert "0.0.0.0:*" not in wild.allowed_hosts
    assert {"127.0.0.1:*", "localhost:*", "[::1]:*", "mcp.example.org", "mcp.example.org:*", "box:8080"} <= set(
        wild.allowed_hosts
    )
    assert "box:8080:*" not in wild.allowed_hosts and "http://mcp.example.org:*" in wild.allowed_origins
    assert "10.0.0.5:*" in http_security("10.0.0.5", env={"JAXBENCH_MCP_TOKEN": token}).allowed_hosts


@pytest.mark.slow
def test_a_non_loopback_bind_without_a_token_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAXBENCH_MCP_TOKEN"}
    port = _free_port()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxbench_mcp",
            "serve",
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "JAXBENCH_MCP_HOME": str(tmp_path)},
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "--token-file" in out.stderr and "JAXBENCH_MCP_TOKEN" in out.stderr
    with socket.socket() as s:  # and it never listened
        assert s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_with_a_token_only_requests_that_carry_it_get_in(libtpu_tier, tmp_path):
    token = "s3cret-" + "x" * 30
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    # Bound to every address; the test only ever connects to 127.0.0.1.
    proc, port, log = _serve_http(
        tmp_path, "--host", "0.0.0.0", "--token-file", str(token_file), "--allowed-host", "jaxbench.test"
    )
    base = f"http://127.0.0.1:{port}"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        health = httpx2.get(f"{base}/health", timeout=10)
        assert (health.status_code, health.text) == (200, "ok")  # no token needed, nothing revealed
        for auth in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": token}):
            refused = httpx2.post(f"{base}/mcp", json=initialize, headers={**accept, **auth}, timeout=10)
            assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer"), auth
            assert token not in refused.text
        right = {**accept, "Authorization": f"Bearer {token}"}
        assert (
            httpx2.post(
                f"{base}/mcp", json=initialize, headers={**right, "Host": "evil.example"}, timeout=10
            ).status_code
            == 421
        )
        assert (
            httpx2.post(
                f"{base}/mcp", json=initialize, headers={**right, "Origin": "http://evil.example"}, timeout=10
            ).status_code
            == 403
        )
        named = httpx2.post(
            f"{base}/mcp", json=initialize, headers={**right, "Host": f"jaxbench.test:{port}"}, timeout=10
        )
        assert named.status_code == 200, named.text  # an --allowed-host name gets in

        async def go():
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)
            )
            async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                return await client.call_tool("server_info", {})

        info = anyio.run(go)
        assert not info.is_error and info.structured_content["tier"] == "cpu_libtpu"
    finally:
        _stop(proc)
    assert token not in log.read_text()  # the token never reaches the log
