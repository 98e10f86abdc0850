"""The MCP server: each tool adapts one library call (jaxbench_mcp.api) to MCP.

Every result is a small pydantic model (structured content, validated against the tool's output schema)
plus a text that says the same thing: some clients read only the structure, others only the text.
Mistakes an agent can fix come back as a tool error (tools) or a JSON-RPC invalid-params error
(resources, prompts) whose message says what to do instead, with one log line each; a failure of the
server's own machinery during a check comes back as a `server_error` verdict.

`jaxbench-mcp serve` builds the server; `mcp run jaxbench_mcp/server.py` finds the module-level `mcp`
object (built on first access). Over HTTP, `serve_http` adds a bearer token, Host/Origin checks and
`/health`.
"""

# No `from __future__ import annotations`: `mcp run` may execute this file by path too (as it does the shim
# jaxbench_mcp/server.py), without registering it in sys.modules, and string annotations (dataclasses, pydantic)
# are then resolved against a module that is not there.
import functools
import hmac
import ipaddress
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    Completion,
    ErrorData,
    JSONRPCError,
    PromptReference,
    ResourceTemplateReference,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field, ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from jaxbench_mcp import __version__, api, store
from jaxbench_mcp.catalog import conditions, docs, targets as tpu_targets, workloads
from jaxbench_mcp.errors import AgentError
from jaxbench_mcp.models import (
    AttemptList,
    CheckOutcome,
    ProfileOutcome,
    ServerInfo,
    WorkloadList,
    WorkloadSpec,
    text_of,
)
from jaxbench_mcp.perf import tuning

logger = logging.getLogger("jaxbench_mcp.server")

# A tool call returns within this many seconds; a longer check keeps running and is collected later
# with list_attempts, so that no client times out waiting.
CALL_BUDGET_SECONDS = 45.0
# Claude Code's default cap on one tool result, in tokens; every result must stay below it.
RESULT_TOKEN_BUDGET = 25_000
# A candidate file far beyond any real kernel is refused (it would also overflow list_attempts' budget).
MAX_SOURCE_CHARS = 60_000

# Closed vocabularies, as enums in the input schemas (the library accepts a few aliases; the schema
# offers only the canonical names). Literal over a tuple read at import: pydantic expands it into the schema's
# enum, and mypy, which cannot, is told so.
Tier = Literal[workloads.TIERS]  # type: ignore[valid-type]
Size = Literal[workloads.SIZE_NAMES]  # type: ignore[valid-type]
Target = Literal[tpu_targets.GENERATIONS]  # type: ignore[valid-type]

_READ_ONLY = {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True, "open_world_hint": False}
# A check or profile records an attempt (so it is not read-only or idempotent) but changes nothing else.
_RECORDS_ATTEMPT = {
    "read_only_hint": False,
    "destructive_hint": False,
    "idempotent_hint": False,
    "open_world_hint": False,
}


def _agent_message(exc: Exception) -> str:
    """The message of an agent mistake, pointing to MCP tools rather than to the CLI."""
    if isinstance(exc, workloads.UnknownWorkload):
        hint = f" Did you mean: {', '.join(exc.close_matches)}?" if exc.close_matches else ""
        return f"unknown workload {exc.workload_id!r}.{hint} The list_workloads tool lists all 50."
    return str(exc)


def _plain_result(model: BaseModel) -> CallToolResult:
    # mode="json": NaN and Inf become the strings the output schema declares (models.Real), never null.
    return CallToolResult(
        content=[TextContent(type="text", text=text_of(model))], structured_content=model.model_dump(mode="json")
    )


# ---- read_docs: one copy of the page per channel --------------------------------------------------


class DocSectionRef(BaseModel):
    ref: str = Field(description="read it whole with read_docs(topic=ref)")
    topic: str
    title: str
    part: str | None = Field(None, description="'k/n' when a long section is split across pages")
    abridged: bool = Field(False, description="runnable examples left out (read the ref for them)")
    chars: int = Field(description="characters of this section on this page")


class DocsResult(docs.DocsPage):
    """A docs page as read_docs returns it: the page's text once, in `text`; `sections` names the sections
    it holds (their text is in `text`, not repeated)."""

    sections: list[DocSectionRef] = Field(default_factory=list)  # type: ignore[assignment]

    @classmethod
    def of(cls, page: docs.DocsPage) -> "DocsResult":
        fields = page.model_dump(exclude={"sections"})
        refs = [
            DocSectionRef(ref=s.ref, topic=s.topic, title=s.title, part=s.part, abridged=s.abridged, chars=len(s.text))
            for s in page.sections
        ]
        return cls(**fields, sections=refs)


# ---- long jobs ------------------------------------------------------------------------------------


async def _run_long(ctx: Context, submit: Callable[[Callable[[str], None]], api.BackgroundJob]) -> tuple[int, Any]:
    """Run a check, profile or tune as a background job (`submit(on_progress)` starts it), relaying its progress,
    until it ends or the call's time budget is spent. Returns (attempt id, result), the result None while the job
    is still running."""
    messages: list[str] = []
    job = submit(messages.append)
    sent, deadline = 0, time.monotonic() + CALL_BUDGET_SECONDS
    try:
        while not job.done() and time.monotonic() < deadline:
            await anyio.sleep(0.1)
            while sent < len(messages):
                sent += 1
                await ctx.report_progress(sent, None, messages[sent - 1])
    except anyio.get_cancelled_exc_class():
        # notifications/cancelled (or the session ending): the job's worker is killed and the attempt recorded
        # as cancelled, rather than running on to its stage limits.
        job.cancel()
        raise
    failure = job.future.exception() if job.done() else None
    if failure is not None or job.attempt_id is None:
        exc = failure or RuntimeError("the job ended with neither an attempt nor an error")
        if isinstance(exc, AgentError):
            raise ToolError(_agent_message(exc)) from exc
        # The library turns every failure after the attempt is recorded into a server_error verdict; what
        # reaches here failed before there was an attempt (e.g. the attempts store), so there is no verdict.
        logger.error("%s failed before an attempt was recorded", job.name, exc_info=exc)
        raise ToolError(
            f"server error (not caused by the kernel) before the attempt was recorded: "
            f"{type(exc).__name__}: {exc}. Call again; server_info shows the host's state."
        ) from exc
    return job.attempt_id, job.future.result() if job.done() else None


# ---- requests the transport cannot parse ----------------------------------------------------------


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """The path of the first string in a parsed JSON value that holds a lone surrogate, or None."""
    if isinstance(value, str):
        return (path or "the request") if store.text_problem(value) else None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _lone_surrogate(key, path) or _lone_surrogate(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def unparsed_request_reply(raw: str) -> JSONRPCError | None:
    """The answer to a line the transport could not parse as a JSON-RPC message, or None for a line that needs
    none (blank, a notification, a response).

    JSON's \\u escapes can spell a lone UTF-16 surrogate, which pydantic's JSON parser refuses (Python's accepts
    it): such a request gets invalid-params naming the field, which the agent can fix (send UTF-8 text). Anything
    else that is not JSON gets a parse error with no id, a JSON object that is not a valid request an
    invalid-request error with its id."""
    if not raw.strip():
        return None
    try:
        message = json.loads(raw)
    except ValueError as exc:
        return JSONRPCError(
            jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message=f"the line is not JSON: {exc}")
        )
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    request_id = (
        message["id"] if isinstance(message["id"], (int, str)) and not isinstance(message["id"], bool) else None
    )
    if isinstance(request_id, str) and store.text_problem(request_id):
        request_id = None
    where = _lone_surrogate(message)
    if where:
        text = (
            f"{where} holds a lone UTF-16 surrogate (a \\udXXX escape with no partner): it is not valid Unicode. "
            "Send the text as UTF-8; a character beyond U+FFFF must be one surrogate pair"
        )
        return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=INVALID_PARAMS, message=text))
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(code=INVALID_REQUEST, message="the message is JSON but not a valid JSON-RPC 2.0 request"),
    )


class AnsweringReadStream:
    """A transport's read stream, with an answer for every request it could not parse.

    The SDK hands a line that fails to parse to the session as an exception, which the session only logs, so the
    client waits for an answer that never comes (a check_kernel source holding a lone surrogate did). Here such an
    item is answered on the write stream (unparsed_request_reply) and not passed on; everything else is."""

    def __init__(self, inner, write_stream):
        self._inner, self._write = inner, write_stream

    @property
    def last_context(self):
        return getattr(self._inner, "last_context", None)

    async def receive(self):
        while True:
            item = await self._inner.receive()
            reply = None
            if isinstance(item, ValidationError):
                raw = next((e.get("input") for e in item.errors() if e.get("type") == "json_invalid"), None)
                reply = unparsed_request_reply(raw) if isinstance(raw, str) else None
            if reply is None:
                return item
            logger.info("answered an unparsable request: %s", reply.error.message[:200])
            await self._write.send(SessionMessage(reply))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def serve_stdio(server: MCPServer) -> None:
    """MCP over stdin/stdout, as `server.run("stdio")`, with every request answered (AnsweringReadStream)."""

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            lowlevel = server._lowlevel_server
            await lowlevel.run(
                AnsweringReadStream(read_stream, write_stream), write_stream, lowlevel.create_initialization_options()
            )

    anyio.run(run)


# ---- prompts/get errors ---------------------------------------------------------------------------


async def _prompt_errors(ctx, call_next):
    """Give prompts/get mistakes the invalid-params code, with their message and one log line.

    The SDK raises a plain ValueError for an unknown prompt name or a missing argument (the client would get
    code 0 and the server log a traceback). It wraps both as ValueError-from-ValueError; a crash inside a
    prompt function is wrapped one level deeper (ValueError from ValueError from the crash), and stays an
    internal error with its traceback logged.
    """
    if ctx.method != "prompts/get":
        return await call_next(ctx)
    try:
        return await call_next(ctx)
    except (MCPError, ValidationError):
        raise
    except ValueError as exc:
        name = (ctx.params or {}).get("name")
        cause = exc.__cause__
        if isinstance(cause, ValueError) and cause.__cause__ is None:
            logger.info("prompts/get %r: %s", name, exc)
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
        logger.error("prompts/get %r crashed", name, exc_info=exc)
        raise MCPError(code=INTERNAL_ERROR, message=f"the prompt {name!r} failed on the server") from exc


# ---- the server -----------------------------------------------------------------------------------


def build_server(bench: api.JaxBench, show_expert_source: bool = False, context: str | None = None) -> MCPServer:  # noqa: C901 - one nested function per MCP tool
    """The MCP server; `show_expert_source` lets get_workload return the expert kernel's code (hidden by
    default, as in JAXBench, so that agents write their own). `context` is the docs ablation's condition
    (default: the bench's): 'none' serves no docs and strips every doc pointer from results
    (jaxbench_mcp.catalog.conditions)."""
    condition = conditions.check_context(context or bench.context)
    bench.context = condition  # what the bench records with every attempt

    def _result(model: BaseModel) -> CallToolResult:
        return _plain_result(conditions.for_context(model, condition))

    @asynccontextmanager
    async def lifespan(_server):
        bench.start()
        try:
            yield None
        finally:
            bench.close()

    mcp = MCPServer(
        name="jaxbench-mcp",
        title="JAXBench Pallas kernels",
        version=__version__,
        instructions=_instructions(condition),
        lifespan=lifespan,
        middleware=[_prompt_errors],
    )

    # Tools, in the order an agent uses them (tools/list keeps this order).

    @mcp.tool(title="Server info", annotations=ToolAnnotations(title="Server info", **_READ_ONLY))
    def server_info() -> Annotated[CallToolResult, ServerInfo]:
        """Which tier this host offers (TPU / CPU with libtpu / plain CPU), versions, compile targets and the check queue."""  # noqa: E501 - a tool description is one line
        return _result(bench.server_info())

    @mcp.tool(title="List workloads", annotations=ToolAnnotations(title="List workloads", **_READ_ONLY))
    def list_workloads(
        tier: Annotated[Tier | None, Field(description="Only this JAXBench tier")] = None,
        operator: Annotated[str | None, Field(description="Substring of the operator name, e.g. 'attention'")] = None,
        has_expert: Annotated[
            bool | None, Field(description="Only workloads with (true) or without (false) an expert kernel")
        ] = None,
    ) -> Annotated[CallToolResult, WorkloadList]:
        """List the JAXBench workloads with their full and small sizes."""
        try:
            return _result(api.list_workloads(tier, operator, has_expert))
        except AgentError as exc:
            raise ToolError(_agent_message(exc)) from exc

    @mcp.tool(title="Get workload", annotations=ToolAnnotations(title="Get workload", **_READ_ONLY))
    def get_workload(
        workload_id: Annotated[
            str, Field(description="A JAXBench id such as '8p_GEMM' (the number prefix '8p' works too)")
        ],
        size: Annotated[
            Size, Field(description="'small' (what CPU checks run) or 'full' (production shapes)")
        ] = "small",
    ) -> Annotated[CallToolResult, WorkloadSpec]:
        """What a workload must compute: math, inputs and output with shapes and dtypes, FLOPs, roofline bounds, reference code."""  # noqa: E501 - a tool description is one line
        try:
            return _result(api.get_workload(workload_id, size, show_expert_source))
        except AgentError as exc:
            raise ToolError(_agent_message(exc)) from exc

    @mcp.tool(title="Read docs", annotations=ToolAnnotations(title="Read docs", **_READ_ONLY))
    def read_docs(
        topic: Annotated[
            str | None, Field(description="A topic id, or 'topic#anchor' for one section; omit to list topics")
        ] = None,
        query: Annotated[str | None, Field(description="Search the docs, e.g. an error message")] = None,
        workload_id: Annotated[
            str | None, Field(description="Return the sections most relevant to this workload")
        ] = None,
        page: Annotated[
            int, Field(ge=1, description="Page of a long result, from 1; the text ends with the call for the next page")
        ] = 1,
    ) -> Annotated[CallToolResult, DocsResult]:
        """Curated Pallas/TPU documentation: list topics, read a section, search, or get a workload's context pack."""
        try:
            if workload_id is not None:
                page_ = docs.context_pack(workloads.get_workload(workload_id).id)
            else:
                page_ = docs.read_docs(topic=topic, query=query, page=page)
        except AgentError as exc:
            raise ToolError(_agent_message(exc)) from exc
        return _result(DocsResult.of(page_))

    @mcp.tool(title="Check kernel", annotations=ToolAnnotations(title="Check kernel", **_RECORDS_ATTEMPT))
    async def check_kernel(
        workload_id: Annotated[str, Field(description="The JAXBench id the kernel implements")],
        source: Annotated[
            str, Field(max_length=MAX_SOURCE_CHARS, description="Python source defining workload(*inputs)")
        ],
        ctx: Context,
        targets: Annotated[
            list[Target] | None, Field(description="TPU generations to compile for (default: the host's)")
        ] = None,
        size: Annotated[
            Size | None, Field(description="Size for the run stage; default: full on a TPU, small elsewhere")
        ] = None,
        seeds: Annotated[
            int, Field(ge=1, le=api.MAX_SEEDS, description="How many hidden seeds to run")
        ] = api.DEFAULT_SEEDS,
        config: Annotated[
            str | None,
            Field(
                description="A named input configuration to run at instead of size (get_workload lists them "
                "in other_sizes), or 'all': one check per configuration this host can run, combined"
            ),
        ] = None,
    ) -> Annotated[CallToolResult, CheckOutcome]:
        """Compile and check a candidate kernel: load, trace, lower for TPU, compile for the target generations at full
        size, run on hidden seeds, compare with a float32-or-better truth. Returns a verdict with the decisive error
        lines, a fix hint and the doc sections to read. A check that outlasts about 45 s returns state 'running' and
        an attempt id: collect the verdict with list_attempts(attempt_id=...)."""
        attempt_id, verdict = await _run_long(
            ctx,
            lambda on_progress: bench.submit_check(
                workload_id, source, targets, size, seeds, on_progress=on_progress, config=config
            ),
        )
        return _result(CheckOutcome(state="done" if verdict else "running", attempt_id=attempt_id, verdict=verdict))

    @mcp.tool(title="Profile kernel", annotations=ToolAnnotations(title="Profile kernel", **_RECORDS_ATTEMPT))
    async def profile_kernel(
        workload_id: Annotated[str, Field(description="The JAXBench id the kernel implements")],
        source: Annotated[
            str, Field(max_length=MAX_SOURCE_CHARS, description="Python source defining workload(*inputs)")
        ],
        ctx: Context,
        targets: Annotated[
            list[Target] | None, Field(description="TPU generations to profile for (default: the host's)")
        ] = None,
    ) -> Annotated[CallToolResult, ProfileOutcome]:
        """How fast a correct kernel is, next to the XLA baseline and the expert kernel: on a TPU host measured device
        time (median/min/spread, TFLOP/s, GB/s, % of roofline); on a CPU host with libtpu a labelled static estimate
        (bundle schedule, HBM traffic, grid overhead; bottleneck named); elsewhere the roofline bound only. The
        kernel is checked first; a failing check comes back instead of a profile."""
        attempt_id, profile = await _run_long(
            ctx, lambda on_progress: bench.submit_profile(workload_id, source, targets, on_progress=on_progress)
        )
        return _result(ProfileOutcome(state="done" if profile else "running", attempt_id=attempt_id, profile=profile))

    tuner = tuning.Tuner(bench)

    @mcp.tool(title="Tune kernel", annotations=ToolAnnotations(title="Tune kernel", **_RECORDS_ATTEMPT))
    async def tune_kernel(
        workload_id: Annotated[str, Field(description="The JAXBench id the kernel implements")],
        source: Annotated[
            str,
            Field(
                max_length=MAX_SOURCE_CHARS,
                description="Python source defining workload(*inputs) "
                "whose block sizes are module-level assignments, e.g. `BM = 512`",
            ),
        ],
        params: Annotated[
            dict[str, list[int | float | str | bool]],
            Field(
                description='Each tunable name and the values to try, e.g. {"BM": [256, 512, 1024], "BK": [512, 1024]}'
            ),
        ],
        ctx: Context,
        target: Annotated[
            Target | None, Field(description="The TPU generation to estimate for (default: the host's)")
        ] = None,
        check_top: Annotated[
            int, Field(ge=0, le=5, description="How many of the best variants to check for correctness")
        ] = 3,
        max_variants: Annotated[
            int, Field(ge=1, le=tuning.MAX_VARIANTS, description="At most this many variants")
        ] = 24,
    ) -> Annotated[CallToolResult, tuning.TuneOutcome]:
        """Try block sizes: compile every variant deviceless for the target (variants that do not fit VMEM are
        reported as such), rank them by the static estimate, check the best few for correctness, return the ranked
        table and the best passing source. A tune that outlasts about 45 s returns state 'running': collect its table
        with list_attempts(attempt_id=...)."""
        attempt_id, result = await _run_long(
            ctx,
            lambda on_progress: tuner.submit_tune(
                workload_id, source, params, target, check_top, max_variants, on_progress=on_progress
            ),
        )
        return _result(tuning.TuneOutcome(state="done" if result else "running", attempt_id=attempt_id, result=result))

    @mcp.tool(title="List attempts", annotations=ToolAnnotations(title="List attempts", **_READ_ONLY))
    def list_attempts(
        workload_id: Annotated[str | None, Field(description="Only attempts at this workload")] = None,
        attempt_id: Annotated[int | None, Field(description="One attempt in full: verdict, source and log")] = None,
        limit: Annotated[
            int, Field(ge=1, le=200, description="How many recent attempts to list (without attempt_id)")
        ] = 20,
    ) -> Annotated[CallToolResult, AttemptList]:
        """Earlier checks and profiles, newest first; with attempt_id, that attempt's verdict (and profile) and log
        (also how a long check or profile is collected)."""
        try:
            return _result(bench.list_attempts(workload_id, attempt_id, limit))
        except AgentError as exc:
            raise ToolError(_agent_message(exc)) from exc

    # Resources: every workload and docs topic is listed (resources/list), and the templates read any id.

    def workload_text(workload_id: str) -> str:
        try:
            full = api.get_workload(workload_id, "full", show_expert_source)
            small = api.get_workload(full.id, "small", show_expert_source)
        except workloads.UnknownWorkload as exc:
            raise ResourceNotFoundError(
                _agent_message(exc).replace("The list_workloads tool", "resources/list (or the list_workloads tool)")
            ) from exc
        # The reference (and expert) source once: the small size repeats only what differs.
        small = small.model_copy(update={"reference_source": "(the same reference as above)", "expert_source": None})
        return f"{full.summary()}\n\n{small.summary()}"

    def docs_text(topic: str) -> str:
        try:
            first = docs.read_docs(topic=topic, page_chars=docs.MAX_PAGE_CHARS)
        except docs.DocsError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        rest = [
            docs.read_docs(topic=topic, page=n, page_chars=docs.MAX_PAGE_CHARS).text for n in range(2, first.pages + 1)
        ]
        return "\n".join([first.text, *rest])

    @mcp.resource(
        "jaxbench://workloads/{workload_id}", name="workload", title="Workload specification", mime_type="text/plain"
    )
    def workload_resource(workload_id: str) -> str:
        """A workload's full specification at full and small size."""
        return workload_text(workload_id)

    def docs_resource(topic: str) -> str:
        """A documentation topic, whole."""
        return docs_text(topic)

    if condition == "docs":
        mcp.resource("jaxbench://docs/{topic}", name="docs-topic", title="Docs topic", mime_type="text/markdown")(
            docs_resource
        )

    for w in workloads.all_workloads():
        mcp.add_resource(
            FunctionResource(
                uri=f"jaxbench://workloads/{w.id}",
                name=w.id,
                title=f"{w.id}: {w.operator}",
                mime_type="text/plain",
                description=f"What {w.id} ({w.tier}; {w.model}; {w.operator}) must compute, at full and small size",
                fn=functools.partial(workload_text, w.id),
            )
        )
    for t in docs.all_topics() if condition == "docs" else []:
        mcp.add_resource(
            FunctionResource(
                uri=f"jaxbench://docs/{t.id}",
                name=t.id,
                title=t.title,
                mime_type="text/markdown",
                description=f"Pallas/TPU docs: {t.title} ({len(t.sections)} sections)",
                fn=functools.partial(docs_text, t.id),
            )
        )

    @mcp.prompt(title="Optimize a workload")
    def optimize_workload(
        workload_id: Annotated[str, Field(description="The JAXBench id to write a kernel for, e.g. '8p_GEMM'")],
    ) -> str:
        """The loop that turns a workload into a fast, correct Pallas kernel."""
        try:
            w = workloads.get_workload(workload_id)
        except workloads.UnknownWorkload as exc:
            message = _agent_message(exc)
            logger.info("prompts/get 'optimize_workload': %s", message)
            raise MCPError(code=INVALID_PARAMS, message=message) from exc
        steps = [
            f"Call get_workload('{w.id}', size='full') and get_workload('{w.id}', size='small'): "
            "the contract and shapes.",
            *(
                [
                    f"Call read_docs(workload_id='{w.id}') and read what it returns; "
                    "search read_docs(query=...) when stuck."
                ]
                if condition == "docs"
                else []
            ),
            "Write workload(*inputs) with a pallas_call; derive block sizes from the input shapes.",
            "Call check_kernel with your source; fix what the verdict says"
            + (", reading the doc sections it names." if condition == "docs" else "."),
            "Once it is correct, call profile_kernel and compare with the XLA baseline and the expert kernel; "
            "try block sizes with tune_kernel and repeat the check.",
        ]
        return f"Write a Pallas TPU kernel for JAXBench workload {w.id} ({w.operator}).\n" + "".join(
            f"{n}. {step}\n" for n, step in enumerate(steps, 1)
        )

    @mcp.completion()
    async def complete(ref, argument, context) -> Completion | None:
        """Workload ids for `workload_id`, doc topics and sections for `topic`."""
        if argument.name == "workload_id" and isinstance(ref, PromptReference | ResourceTemplateReference):
            choices = [w.id for w in workloads.all_workloads()]
        elif argument.name == "topic" and isinstance(ref, ResourceTemplateReference) and condition == "docs":
            choices = [t.id for t in docs.all_topics()]
        else:
            return None
        typed = argument.value.lower()
        found = [c for c in choices if c.lower().startswith(typed)] + [
            c for c in choices if typed in c.lower() and not c.lower().startswith(typed)
        ]
        # The protocol allows at most 100 values per completion.
        return Completion(values=found[:100], total=len(found), has_more=len(found) > 100)

    @mcp.custom_route("/health", methods=["GET"], include_in_schema=False)
    async def health(_request: Request) -> Response:
        # Needs no token and says nothing about the host: a liveness probe only.
        return PlainTextResponse("ok")

    if condition == "none":
        _remove_docs(mcp)
    return mcp


def _instructions(context: str) -> str:
    how = "read_docs (how), " if context == "docs" else ""
    return (
        "Write Pallas TPU kernels for the 50 JAXBench workloads (list_workloads lists them). Loop: get_workload "
        "(what to compute), "
        f"{how}check_kernel (does it compile for TPU and compute the right thing), profile_kernel "
        "(how fast, next to XLA and the expert kernel), tune_kernel (try block sizes: compile, estimate and check "
        "the variants), list_attempts (earlier results; collects a check still running). server_info says what "
        "this host can do."
        + (" Every error points to the doc sections that explain the fix." if context == "docs" else "")
    )


def _remove_docs(mcp: MCPServer) -> None:
    """The `none` condition: no read_docs tool, and no tool description or output schema that points to it."""
    mcp.remove_tool("read_docs")
    # The SDK keeps registered tools in its tool manager; their descriptions and output schemas are plain
    # strings and dicts, so the doc pointers in them are cut in place (a schema keeps its structure).
    for tool in mcp._tool_manager.list_tools():
        tool.description = conditions.scrub_text(tool.description)
        tool.description = tool.description.replace(" and the doc sections to read", "")
        if tool.fn_metadata.output_schema is not None:
            tool.fn_metadata.output_schema = _scrub_schema(tool.fn_metadata.output_schema)


def _scrub_schema(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: conditions.scrub_text(v) if k == "description" and isinstance(v, str) else _scrub_schema(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_scrub_schema(v) for v in node]
    return node


# ---- `mcp run jaxbench_mcp/server.py` ---------------------------------------------------------------

_default_server: MCPServer | None = None


def __getattr__(name: str) -> Any:
    """`mcp` (what `mcp run` looks for) is built on first access, so importing this module starts nothing."""
    global _default_server
    if name == "mcp":
        if _default_server is None:
            # As in the CLI: the server process never takes a TPU, only a check's worker may.
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
            _default_server = build_server(api.JaxBench())
        return _default_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- HTTP -----------------------------------------------------------------------------------------

TOKEN_ENV = "JAXBENCH_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_OPEN_PATHS = frozenset({"/health"})


class ServeRefused(Exception):
    """The server must not start as asked (the message says what to change)."""


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


@dataclass(frozen=True)
class HttpSecurity:
    token: str | None
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)


def http_security(
    host: str,
    token_file: Path | None = None,
    allowed_hosts: list[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> HttpSecurity:
    """Decide how an HTTP server bound to `host` is protected, or refuse.

    A token (from `token_file`, else the JAXBENCH_MCP_TOKEN variable) is required whenever the bind address is
    not loopback: check_kernel runs arbitrary Python. Host and Origin checks (against DNS rebinding) stay on for
    every bind address; the loopback names, a specific bind address and each `allowed_hosts` entry are allowed.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ServeRefused(f"cannot read the token file {token_file}: {exc.strerror}") from exc
        if not token:
            raise ServeRefused(f"the token file {token_file} is empty")
    elif environ.get(TOKEN_ENV, "").strip():
        token = environ[TOKEN_ENV].strip()
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ServeRefused(
            f"the bearer token is shorter than {MIN_TOKEN_CHARS} characters; make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if token is None and not is_loopback(host):
        raise ServeRefused(
            f"refusing to serve HTTP on {host} without a bearer token: anyone who reaches the port could run code "
            f"through check_kernel. Pass --token-file PATH or set {TOKEN_ENV} (at least {MIN_TOKEN_CHARS} characters), "
            "or bind 127.0.0.1."
        )
    names = list(_LOOPBACK_HOSTS)
    bind = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
    unspecified = host.strip("[]") in ("0.0.0.0", "::", "")
    if not unspecified and bind not in names:
        names.append(bind)
    for entry in allowed_hosts or []:
        entry = entry.strip()
        if entry and entry not in names:
            names.append(entry)
    hosts, origins = [], []
    for name in names:
        has_port = name.rsplit(":", 1)[-1].isdigit() and not name.endswith("]")
        hosts += [name] if has_port else [name, f"{name}:*"]
        for scheme in ("http", "https"):
            origins += [f"{scheme}://{name}"] if has_port else [f"{scheme}://{name}", f"{scheme}://{name}:*"]
    return HttpSecurity(token=token, allowed_hosts=hosts, allowed_origins=origins)


class RequireBearerToken:
    """ASGI middleware: every HTTP request but /health must carry `Authorization: Bearer <token>`."""

    def __init__(self, app, token: str):
        self.app, self._token = app, token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] not in _OPEN_PATHS:
            scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
            # compare_digest: the time taken does not tell how much of a guess was right.
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
                logger.info("HTTP %s %s refused: missing or wrong bearer token", scope.get("method"), scope["path"])
                response = PlainTextResponse(
                    "unauthorized: send Authorization: Bearer <token>",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="jaxbench-mcp"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, host: str, security: HttpSecurity):
    """The streamable-HTTP ASGI app at /mcp, with the Host/Origin checks and (when set) the token."""
    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=security.allowed_hosts,
            allowed_origins=security.allowed_origins,
        ),
        host=host,
    )
    return RequireBearerToken(app, security.token) if security.token else app


def serve_http(server: MCPServer, host: str, port: int, security: HttpSecurity) -> None:
    import uvicorn

    sys.stderr.write(
        f"jaxbench-mcp: MCP over streamable HTTP at http://{host}:{port}/mcp "
        f"({'bearer token required' if security.token else 'no token: loopback only'}; "
        f"allowed Host names: {', '.join(h for h in security.allowed_hosts if not h.endswith(':*'))}); "
        f"GET /health answers 'ok'\n"
    )
    uvicorn.run(http_app(server, host, security), host=host, port=port, log_level="warning")
