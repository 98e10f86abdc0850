"""The MCP server: each tool adapts one library call (jaxbench_mcp.api) to MCP.

Every result is a small pydantic model (structured content) plus a short text that says the same
thing. Mistakes an agent can fix (an unknown id, a bad size) come back as ToolError with the fix.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from jaxbench_mcp import __version__, api, docs, workloads
from jaxbench_mcp import targets as tpu_targets
from jaxbench_mcp.checking import DEFAULT_SEEDS
from jaxbench_mcp.models import (AttemptList, CheckOutcome, ProfileOutcome, ServerInfo, WorkloadList, WorkloadSpec,
                                 text_of)

# A tool call returns within this many seconds; a longer check keeps running and is collected later
# with list_attempts, so that no client times out waiting.
CALL_BUDGET_SECONDS = 45.0

_AGENT_ERRORS = (workloads.UnknownWorkload, workloads.UnknownSize, tpu_targets.UnknownTarget, docs.UnknownTopic,
                 api.UnknownAttempt, ValueError)


def _result(model: Any) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text_of(model))], structured_content=model.model_dump(mode="json"))


def _agent_error(exc: Exception) -> ToolError:
    """A mistake the agent can fix: the message says what to do instead."""
    return ToolError(str(exc))


async def _run_long(ctx: Context, method, *args, **kwargs) -> tuple[int, Any]:
    """Run a check or profile on a thread, relaying its progress, until it ends or the call's time budget is
    spent. Returns (attempt id, result), the result None while the job is still running."""
    messages: list[str] = []
    done, box = method.__self__.in_background(method, *args, on_progress=messages.append, **kwargs)
    sent, deadline = 0, time.monotonic() + CALL_BUDGET_SECONDS
    while not done.is_set() and time.monotonic() < deadline:
        await anyio.sleep(0.1)
        while sent < len(messages):
            sent += 1
            await ctx.report_progress(sent, None, messages[sent - 1])
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, _AGENT_ERRORS):
            raise _agent_error(exc) from exc
        raise exc
    return box["attempt_id"], box.get("result")


def build_server(bench: api.JaxBench, show_expert_source: bool = False) -> MCPServer:
    """The MCP server; `show_expert_source` lets get_workload return the expert kernel's code (hidden by
    default, as in JAXBench, so that agents write their own)."""
    @asynccontextmanager
    async def lifespan(_server):
        bench.start()
        try:
            yield None
        finally:
            bench.close()

    mcp = MCPServer(
        name="jaxbench-mcp",
        version=__version__,
        instructions=(
            "Write Pallas TPU kernels for the 50 JAXBench workloads. Loop: get_workload (what to compute), "
            "read_docs (how), check_kernel (does it compile for TPU and compute the right thing), profile_kernel "
            "(how fast, next to XLA and the expert kernel). Every error points to the doc sections that explain the fix."
        ),
        lifespan=lifespan,
    )

    @mcp.tool()
    def server_info() -> Annotated[CallToolResult, ServerInfo]:
        """Which tier this host offers (TPU / CPU with libtpu / plain CPU), versions, compile targets and the check queue."""
        return _result(bench.server_info())

    @mcp.tool()
    def list_workloads(
        tier: Annotated[str | None, Field(description="'production' or 'kernelbench'")] = None,
        operator: Annotated[str | None, Field(description="Substring of the operator name, e.g. 'attention'")] = None,
        has_expert: Annotated[bool | None, Field(description="Only workloads with (true) or without (false) an expert kernel")] = None,
    ) -> Annotated[CallToolResult, WorkloadList]:
        """List the JAXBench workloads with their full and small sizes."""
        try:
            return _result(api.list_workloads(tier, operator, has_expert))
        except _AGENT_ERRORS as exc:
            raise _agent_error(exc) from exc

    @mcp.tool()
    def get_workload(
        workload_id: Annotated[str, Field(description="A JAXBench id such as '8p_GEMM' (the number prefix '8p' works too)")],
        size: Annotated[str, Field(description="'small' (what CPU checks run) or 'full' (production shapes)")] = "small",
    ) -> Annotated[CallToolResult, WorkloadSpec]:
        """What a workload must compute: math, inputs and output with shapes and dtypes, FLOPs, roofline bounds, reference code."""
        try:
            return _result(api.get_workload(workload_id, size, show_expert_source))
        except _AGENT_ERRORS as exc:
            raise _agent_error(exc) from exc

    @mcp.tool()
    def read_docs(
        topic: Annotated[str | None, Field(description="A topic id, or 'topic#anchor' for one section; omit to list topics")] = None,
        query: Annotated[str | None, Field(description="Search the docs, e.g. an error message")] = None,
        workload_id: Annotated[str | None, Field(description="Return the sections most relevant to this workload")] = None,
        page: Annotated[int, Field(ge=1)] = 1,
    ) -> Annotated[CallToolResult, docs.DocsPage]:
        """Curated Pallas/TPU documentation: list topics, read a section, search, or get a workload's context pack."""
        try:
            if workload_id is not None:
                return _result(docs.context_pack(workloads.get_workload(workload_id).id))
            return _result(docs.read_docs(topic=topic, query=query, page=page))
        except _AGENT_ERRORS as exc:
            raise _agent_error(exc) from exc

    @mcp.tool()
    async def check_kernel(
        workload_id: Annotated[str, Field(description="The JAXBench id the kernel implements")],
        source: Annotated[str, Field(description="Python source defining workload(*inputs)")],
        ctx: Context,
        targets: Annotated[list[str] | None, Field(description="TPU generations to compile for: v4, v5e, v5p, v6e, 7x")] = None,
        size: Annotated[str | None, Field(description="Size for the run stage; default: full on a TPU, small elsewhere")] = None,
        seeds: Annotated[int, Field(ge=1, le=16, description="How many hidden seeds to run")] = DEFAULT_SEEDS,
    ) -> Annotated[CallToolResult, CheckOutcome]:
        """Compile and check a candidate kernel: load, trace, lower for TPU, compile for the target generations at full
        size, run on hidden seeds, compare with a float32-or-better truth. Returns a verdict with the decisive error
        lines, a fix hint and the doc sections to read."""
        attempt_id, verdict = await _run_long(ctx, bench.check_kernel, workload_id, source, targets, size, seeds)
        return _result(CheckOutcome(state="done" if verdict else "running", attempt_id=attempt_id, verdict=verdict))

    @mcp.tool()
    async def profile_kernel(
        workload_id: Annotated[str, Field(description="The JAXBench id the kernel implements")],
        source: Annotated[str, Field(description="Python source defining workload(*inputs)")],
        ctx: Context,
        targets: Annotated[list[str] | None, Field(description="TPU generations: v4, v5e, v5p, v6e, 7x")] = None,
    ) -> Annotated[CallToolResult, ProfileOutcome]:
        """How fast a correct kernel is, next to the XLA baseline and the expert kernel: on a TPU host measured device
        time (median/min/spread, TFLOP/s, GB/s, % of roofline); on a CPU host with libtpu a labelled static estimate
        (bundle schedule, HBM traffic, grid overhead; bottleneck named); elsewhere the roofline bound only. The
        kernel is checked first; a failing check comes back instead of a profile."""
        attempt_id, profile = await _run_long(ctx, bench.profile_kernel, workload_id, source, targets)
        return _result(ProfileOutcome(state="done" if profile else "running", attempt_id=attempt_id, profile=profile))

    @mcp.tool()
    def list_attempts(
        workload_id: Annotated[str | None, Field(description="Only attempts at this workload")] = None,
        attempt_id: Annotated[int | None, Field(description="One attempt in full: verdict, source and log")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> Annotated[CallToolResult, AttemptList]:
        """Earlier checks and profiles, newest first; with attempt_id, that attempt's verdict (and profile) and log (also how a
        long check or profile is collected)."""
        try:
            return _result(bench.list_attempts(workload_id, attempt_id, limit))
        except _AGENT_ERRORS as exc:
            raise _agent_error(exc) from exc

    @mcp.resource("jaxbench://workloads/{workload_id}", mime_type="text/plain")
    def workload_resource(workload_id: str) -> str:
        """A workload's full specification at small and full size."""
        return "\n\n".join(api.get_workload(workload_id, size, show_expert_source).summary() for size in ("small", "full"))

    @mcp.resource("jaxbench://docs/{topic}", mime_type="text/markdown")
    def docs_resource(topic: str) -> str:
        """A documentation topic, whole."""
        first = docs.read_docs(topic=topic, page_chars=docs.MAX_PAGE_CHARS)
        rest = [docs.read_docs(topic=topic, page=n, page_chars=docs.MAX_PAGE_CHARS).text for n in range(2, first.pages + 1)]
        return "\n".join([first.text, *rest])

    @mcp.prompt()
    def optimize_workload(workload_id: str) -> str:
        """The loop that turns a workload into a fast, correct Pallas kernel."""
        w = workloads.get_workload(workload_id)
        return (
            f"Write a Pallas TPU kernel for JAXBench workload {w.id} ({w.operator}).\n"
            f"1. Call get_workload('{w.id}', size='full') and get_workload('{w.id}', size='small'): the contract and shapes.\n"
            f"2. Call read_docs(workload_id='{w.id}') and read what it returns; search read_docs(query=...) when stuck.\n"
            "3. Write workload(*inputs) with a pallas_call; derive block sizes from the input shapes.\n"
            "4. Call check_kernel with your source; fix what the verdict says, reading the doc sections it names.\n"
            "5. Once it is correct, call profile_kernel and compare with the XLA baseline and the expert kernel; "
            "tune block sizes and repeat from 4.\n"
        )

    return mcp
