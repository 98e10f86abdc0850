"""Run the environment offline with a scripted model instead of a model service.

    python -m jaxbench.scripted --kernel 12p_RMSNorm=tests/kernels/good_rmsnorm.py --kernel 8p_GEMM= [--context none]

The scripted model is an OpenAI-compatible chat-completions endpoint on loopback that verifiers' own eval
client talks to, so a rollout goes through the whole machinery (interception, the per-rollout toolset
forwarding to a real server, the harness, scoring). For each workload it checks the given kernel, profiles it
when the verdict is correct, then answers with the source in a ```python block; a workload given no file
answers in words only (no kernel). It prints one JSON summary per rollout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from aiohttp import web

import jaxbench

_WORKLOAD = re.compile(r"JAXBench workload (\S+)\.")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def scripted_turn(messages: list[dict[str, Any]], kernels: dict[str, str | None]) -> dict[str, Any]:
    """The next assistant message of the script, from the conversation so far."""
    prompt = next(_text(m.get("content")) for m in messages if m.get("role") == "user")
    workload_id = _WORKLOAD.search(prompt).group(1)
    source = kernels.get(workload_id)
    called = [
        c["function"]["name"] for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []
    ]
    results = [_text(m.get("content")) for m in messages if m.get("role") == "tool"]
    args = {"workload_id": workload_id, "source": source}
    if source is None:
        return {"role": "assistant", "content": "I could not write a kernel for this workload."}
    if not called:
        return _call("check_kernel", args, 0)
    if called == ["check_kernel"] and results and results[-1].lstrip().startswith("CORRECT"):
        return _call("profile_kernel", args, 1)
    return {"role": "assistant", "content": f"Final kernel:\n```python\n{source}```"}


def _call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


async def serve_script(kernels: dict[str, str | None]) -> tuple[web.AppRunner, str]:
    """The scripted model as a chat-completions endpoint on 127.0.0.1; returns it and its base URL."""

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        message = scripted_turn(body["messages"], kernels)
        reply = {
            "id": f"chatcmpl-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        return web.json_response(reply)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/v1"


def summary(episode: vf.Episode) -> dict[str, Any]:
    trace = episode.traces[0]
    return {
        "workload_id": trace.task.data.id,
        "ok": trace.ok,
        "error": trace.last_error.type if trace.last_error else None,
        "error_message": trace.last_error.message[:500] if trace.last_error else None,
        "stop_condition": trace.stop_condition,
        "reward": trace.reward,
        "rewards": {k: (r.score if r is not None else None) for k, r in trace.rewards.items()},
        "metrics": dict(trace.metrics),
        "judged": trace.info.get("jaxbench"),
        "tools_called": [c.name for m in trace.assistant_messages for c in m.tool_calls or []],
    }


async def run(env: vf.Env, kernels: dict[str, str | None]) -> list[dict[str, Any]]:
    runner, base_url = await serve_script(kernels)
    try:
        # The key variable is a dummy: the scripted endpoint checks nothing (and no Prime config is read).
        client = vf.EvalClientConfig(base_url=base_url, api_key_var="JAXBENCH_SCRIPTED_API_KEY")
        ctx = vf.ModelContext(model="scripted", client=client)
        async with env.serving():
            slots = [slot for task in env.taskset for slot in env.slots(task, 1)]
            episodes = [await env.run_slot(slot, ctx) for slot in slots]
    finally:
        await runner.cleanup()
    return [summary(e) for e in episodes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", action="append", default=[], help="WORKLOAD=FILE (FILE empty: no kernel)")
    parser.add_argument("--context", default="docs", choices=["docs", "none"])
    parser.add_argument("--max-checks", type=int, default=8)
    parser.add_argument("--reward", default="correct", choices=["correct", "fast_1", "log_speedup"])
    parser.add_argument("--server-command", help="replaces the checkout's .venv/bin/jaxbench-mcp (before `serve`)")
    parser.add_argument("--server-env", action="append", default=[], help="NAME=VALUE for the server")
    args = parser.parse_args()
    kernels: dict[str, str | None] = {}
    for item in args.kernel:
        workload_id, _, path = item.partition("=")
        kernels[workload_id] = Path(path).read_text() if path else None
    env = jaxbench.load_environment(
        workloads=list(kernels),
        context=args.context,
        max_checks=args.max_checks,
        reward=args.reward,
        server_command=args.server_command.split() if args.server_command else None,
        server_env=dict(e.split("=", 1) for e in args.server_env),
    )
    json.dump(asyncio.run(run(env, kernels)), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
