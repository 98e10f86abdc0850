"""The jaxbench-mcp server as this environment reaches it: over stdio, started from the checkout's own venv.

The environment never imports the server (its venv has mcp 2.0.0 and no jax); it finds the checkout through
`jaxbench_mcp`, which is on this venv's path without dependencies so that `jaxbench_mcp.campaigns.outcomes`
(stdlib only) can be imported, and starts `<checkout>/.venv/bin/jaxbench-mcp serve --context ...`.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

import jaxbench_mcp
from jaxbench_mcp.campaigns import outcomes

CONTEXTS = ("docs", "none")
# Variables a started server keeps from this process: where its attempts store lives, which jax platform it
# takes and how many spare workers it keeps warm (the stdio client passes a minimal environment otherwise).
FORWARDED_ENV = ("JAXBENCH_MCP_HOME", "JAX_PLATFORMS", "JAXBENCH_MCP_SPARES", "HOME", "PATH", "TMPDIR")
# A check that outlasts the server's call budget comes back 'running'; it is then collected with list_attempts.
POLL_SECONDS = 2.0


def checkout() -> Path:
    return Path(jaxbench_mcp.__file__).resolve().parent.parent


def default_command() -> list[str]:
    """JAXBENCH_MCP_SERVER (a command line) if set, else the checkout's .venv/bin/jaxbench-mcp."""
    if os.environ.get("JAXBENCH_MCP_SERVER"):
        return os.environ["JAXBENCH_MCP_SERVER"].split()
    return [str(checkout() / ".venv" / "bin" / "jaxbench-mcp")]


def serve_args(context: str) -> list[str]:
    if context not in CONTEXTS:
        raise ValueError(f"unknown context condition {context!r}: use 'docs' (curated docs) or 'none' (no docs)")
    return ["serve", "--context", context]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**{k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}, **(extra or {})}


def parameters(command: list[str], context: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=[*command[1:], *serve_args(context)], env=server_env(env))


def workload_ids() -> list[str]:
    """The 50 JAXBench ids in the server's order, read from the workload modules without importing them (jax)."""
    found = []
    for path in sorted((checkout() / "workloads").glob("*.py")):
        if path.name.startswith("_"):
            continue
        found.extend(
            (path.name, ast.literal_eval(node.value))
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ID" for t in node.targets)
        )
    # The server numbers production workloads (p01..p17) before KernelBench ones (k18..k50).
    order = {"p": 0, "k": 1}
    found.sort(key=lambda x: (order.get(x[0][0], 2), int(re.sub(r"\D", "", x[0].split("_")[0]) or 0)))
    return [w for _, w in found]


async def _collect(client: Client, structured: dict[str, Any], key: str, timeout: float) -> dict[str, Any] | None:
    """The finished result of a check or profile: at once when 'done', else polled with list_attempts."""
    if structured.get("state") == "done":
        return structured.get(key)
    attempt_id = structured["attempt_id"]
    with anyio.fail_after(timeout):
        while True:
            await anyio.sleep(POLL_SECONDS)
            listed = await client.call_tool("list_attempts", {"attempt_id": attempt_id})
            detail = (listed.structured_content or {}).get("detail") or {}
            if detail.get("state") == "done":
                return detail.get(key) if key == "profile" else detail.get("verdict")


def summarize(profile: dict[str, Any] | None, verdict: dict[str, Any] | None, target: str | None) -> dict[str, Any]:
    """The status and speedup of one judged kernel (the speedup of `target`, else the first one reported)."""
    if profile is not None:
        verdict = profile.get("verdict") or verdict
    status = (verdict or {}).get("status")
    speedups = [
        t.get("speedup_vs_xla")
        for t in (profile or {}).get("targets", [])
        if target is None or t.get("target") == target
    ]
    speedup = next((s for s in speedups if isinstance(s, (int, float))), None)
    return {"status": status, "speedup": speedup, "error_class": (verdict or {}).get("error_class")}


def describe(exc: BaseException) -> str:
    """An error's innermost cause, through the exception groups anyio wraps it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


async def judge(
    workload_id: str,
    source: str | None,
    *,
    command: list[str],
    context: str,
    target: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """Check and profile the final kernel with a server of its own and sum it up as one outcome.

    Any failure to get a verdict (the server did not start, died, timed out, lost the connection) is the
    machinery's; a `server_error` verdict too (outcomes.outcome says so); no kernel is the candidate's."""
    if source is None:
        result = outcomes.outcome(None)
        return {"outcome": result, "status": None, "speedup": None, "detail": "no kernel", **outcomes.rewards(result)}
    try:
        with anyio.fail_after(timeout):
            async with Client(stdio_client(parameters(command, context, env))) as client:
                args: dict[str, Any] = {"workload_id": workload_id, "source": source}
                if target:
                    args["targets"] = [target]
                answer = await client.call_tool("profile_kernel", args)
                if answer.is_error or answer.structured_content is None:
                    text = " ".join(getattr(b, "text", "") for b in answer.content)
                    raise RuntimeError(f"profile_kernel answered an error: {text[:500]}")
                profile = await _collect(client, answer.structured_content, "profile", timeout)
                judged = summarize(profile, None, target)
    except Exception as exc:  # noqa: BLE001 - every way of getting no verdict is the machinery's failure
        result = outcomes.outcome(None, machinery_failed=True)
        detail = f"no verdict came back: {describe(exc)}"
        return {"outcome": result, "status": None, "speedup": None, "detail": detail, **outcomes.rewards(result)}
    result = outcomes.outcome(judged["status"])
    return {**judged, "outcome": result, "detail": judged["status"], **outcomes.rewards(result, judged["speedup"])}
