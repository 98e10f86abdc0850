"""The OpenAI Agents SDK against this server: an `Agent` whose tools are this server's, over stdio
(`MCPServerStdio` starting `.venv/bin/jaxbench-mcp serve`), reading the tools' structured content.

    python examples/openai_agents.py 12p_RMSNorm --model gpt-5.1                 # a real model (OPENAI_API_KEY)
    python examples/openai_agents.py 12p_RMSNorm --scripted tests/kernels/good_rmsnorm.py   # offline, no model

With `use_structured_content=True` the SDK hands the model each tool's structured result as JSON (the same
object the output schema declares) instead of the text rendering, so the agent, and this script after the run,
read `verdict.status`, `verdict.error_class` and the profile's numbers as fields. `--scripted FILE` plugs a
`Model` of our own into the SDK that checks FILE and then answers, the way the tests run this offline.

The run's result is summed up as one of three outcomes (jaxbench_mcp.campaigns.outcomes): correct, the candidate's
failure, or an infrastructure failure (a server_error verdict, or a check that never answered), which is not
the kernel's fault. Needs the evals extra (`pip install -e '.[evals]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from agents.items import ToolCallOutputItem
from agents.mcp import MCPServerStdio
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from jaxbench_mcp.campaigns import outcomes

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / ".venv" / "bin" / "jaxbench-mcp"


def server(context: str = "docs", command: str | Path = SERVER, env: dict[str, str] | None = None) -> MCPServerStdio:
    """This server as the SDK's stdio MCP server. A check takes seconds to a minute (the server answers within
    its call budget, then `list_attempts` collects a longer one), so the session timeout is generous."""
    return MCPServerStdio(
        params={"command": str(command), "args": ["serve", "--context", context], **({"env": env} if env else {})},
        name="jaxbench",
        cache_tools_list=True,
        client_session_timeout_seconds=180,
        use_structured_content=True,
    )


def instructions(workload_id: str) -> str:
    return (
        f"Write a fast, correct Pallas TPU kernel for JAXBench workload {workload_id}. Read its contract with "
        "get_workload, write a Python file defining workload(*inputs) with a pallas_call, and call check_kernel "
        "with its source until the verdict's status is 'correct'; then profile_kernel it. Answer with the final "
        "source in a ```python block."
    )


class ScriptedModel(Model):
    """A stand-in for a model: it calls check_kernel with a fixed source, then profile_kernel when the check
    was correct, then answers. It reads the tool outputs it was given as the JSON the SDK passes on."""

    def __init__(self, workload_id: str, source: str):
        self.workload_id, self.source = workload_id, source

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None):  # fmt: skip
        items = input if isinstance(input, list) else []
        outputs = [
            json.loads(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        names = {getattr(t, "name", None) for t in tools}
        assert {"check_kernel", "profile_kernel"} <= names, names
        args = {"workload_id": self.workload_id, "source": self.source}
        if not outputs:
            return _response(_call("check_kernel", args, len(items)))
        if len(outputs) == 1 and outputs[0].get("verdict", {}).get("status") == "correct":
            return _response(_call("profile_kernel", args, len(items)))
        return _response(_message(f"Final kernel:\n```python\n{self.source}```"))

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


def _call(name: str, arguments: dict, n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", id=f"fc_{n}", call_id=f"call_{n}", name=name, arguments=json.dumps(arguments),
        status="completed",
    )  # fmt: skip


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message", id="msg_final", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )  # fmt: skip


def _response(item: Any) -> ModelResponse:
    return ModelResponse(output=[item], usage=Usage(), response_id=None)


def summarize(new_items: list) -> dict[str, Any]:
    """The run's checks and profile, read from the structured tool outputs, and its outcome."""
    structured = []
    for item in new_items:
        if isinstance(item, ToolCallOutputItem):
            try:
                structured.append(json.loads(item.output))
            except (TypeError, ValueError):
                structured.append(None)  # an error the SDK passed on as text: no verdict came back
    verdicts = [s.get("verdict") or (s.get("profile") or {}).get("verdict") for s in structured if s]
    statuses = [v["status"] for v in verdicts if v]
    profiles = [s["profile"] for s in structured if s and s.get("profile")]
    speedups = [t.get("speedup_vs_xla") for p in profiles for t in p.get("targets", [])]
    speedup = next((s for s in speedups if isinstance(s, (int, float))), None)
    final = statuses[-1] if statuses else None
    result = outcomes.outcome(final, machinery_failed=bool(structured) and structured[-1] is None)
    return {"statuses": statuses, "final": final, "outcome": result, **outcomes.rewards(result, speedup)}


async def run(workload_id: str, model: Model | str, context: str = "docs", command: str | Path = SERVER,
              env: dict[str, str] | None = None, max_turns: int = 12) -> dict[str, Any]:  # fmt: skip
    async with server(context, command, env) as jaxbench:
        agent = Agent(name="kernel_writer", instructions=instructions(workload_id), mcp_servers=[jaxbench], model=model)
        result = await Runner.run(
            agent,
            f"Workload {workload_id}.",
            max_turns=max_turns,
            run_config=RunConfig(tracing_disabled=True),  # no trace upload: offline runs stay offline
        )
    return {"workload_id": workload_id, "answer": result.final_output, **summarize(result.new_items)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload_id")
    parser.add_argument("--model", default=None, help="a model name for the SDK's default provider")
    parser.add_argument("--scripted", type=Path, help="no model: check this kernel file, then answer")
    parser.add_argument("--context", default="docs", choices=["docs", "none"])
    args = parser.parse_args()
    if not (args.model or args.scripted):
        parser.error("give --model NAME or --scripted FILE")
    model = ScriptedModel(args.workload_id, args.scripted.read_text()) if args.scripted else args.model
    summary = asyncio.run(run(args.workload_id, model, args.context))
    summary.pop("answer", None)
    json.dump(summary, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
