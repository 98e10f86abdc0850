"""A small tool-calling agent loop for the jaxbench tools, run in-process (no program to install).

verifiers' built-in harnesses launch a program in the rollout's runtime, prepared with uv (which they may
fetch from the network). This loop needs neither: it lists the rollout's MCP tools, then asks the model at the
interception endpoint (OpenAI chat completions, the rollout's bearer secret) and runs the tool calls it makes
until it answers without one or spends its turns; every model call goes through the interception, so the
trace records the whole exchange as with any harness.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import verifiers.v1 as vf
from openai import APIStatusError, AsyncOpenAI
from verifiers.v1.harnesses.utils.mcp import MCPConnection, mcp_content_to_chat_content

SYSTEM_PROMPT = (
    "You write Pallas TPU kernels. You have the jaxbench tools: read the workload's contract, write a Python "
    "file defining workload(*inputs) with a pallas_call, check it with check_kernel until the verdict is "
    "correct, then profile_kernel it. Finish with the final source in a ```python block."
)


class JaxbenchHarnessConfig(vf.HarnessConfig):
    id: str = "jaxbench"
    max_turns: int = 24
    """Model calls in one rollout at most."""


class JaxbenchHarness(vf.Harness[JaxbenchHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    # The model's kernels run in the server's sandboxed worker, never in this runtime.
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system or SYSTEM_PROMPT}]
        messages.append({"role": "user", "content": prompt if isinstance(prompt, str) else data.prompt_text})
        async with AsyncExitStack() as stack:
            tools, dispatch = [], {}
            for url in mcp_urls.values():
                connection = MCPConnection({"url": url, "timeout": self.config.tool_timeout})
                stack.push_async_callback(connection.aclose)
                listed = await connection.run(lambda client: client.list_tools())
                for tool in listed.tools:
                    if tool.name in dispatch:
                        raise ValueError(f"two tool servers offer {tool.name!r}")
                    dispatch[tool.name] = connection
                    schema = {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema}
                    tools.append({"type": "function", "function": schema})
            model = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
            stack.push_async_callback(model.close)
            for _ in range(self.config.max_turns):
                try:
                    reply = await model.chat.completions.create(model=ctx.model, messages=messages, tools=tools or None)
                except APIStatusError:
                    if trace.stop_condition is not None:
                        break  # a @stop (the check budget) refused the turn: the rollout ends here, as planned
                    raise
                message = reply.choices[0].message
                calls = message.tool_calls or []
                messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
                if not calls:
                    break
                # A list, not a generator: the awaits run here, one call after another.
                messages.extend(
                    [{"role": "tool", "tool_call_id": call.id, "content": await _run(dispatch, call)} for call in calls]
                )
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


async def _run(dispatch: dict[str, MCPConnection], call: Any) -> Any:
    name = call.function.name
    if name not in dispatch:
        return f"no tool named {name!r}"
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError as exc:
        return f"the arguments are not JSON: {exc}"
    try:
        result = await dispatch[name].run(lambda client: client.call_tool(name, arguments))
    except Exception as exc:  # noqa: BLE001 - the model sees the failure; the reward judges the kernel itself
        return f"the tool call failed: {type(exc).__name__}: {exc}"
    return mcp_content_to_chat_content(result.content)
