"""The server's tools in a rollout: a verifiers Toolset that forwards list_tools and call_tool to a
jaxbench-mcp server it starts over stdio (as verifiers' own Harbor toolset forwards an external server).

verifiers serves each rollout's toolset as a process of its own (`python -m jaxbench.toolset`, streamable HTTP
on loopback); this one starts `jaxbench-mcp serve --context ...` from the checkout's venv and hands its
catalogue and schemas on unchanged, so the agent sees the same tools, descriptions and structured results as
any other MCP client. A call that gets no answer from the server (it died, timed out, lost its host) comes
back as a tool error that says so: the reward tells that apart from the candidate's failures.
"""

from __future__ import annotations

from typing import Any, cast

import anyio
import verifiers.v1 as vf
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool

from jaxbench import server

# Marks a call the machinery failed (no verdict at all), in the text the agent and the trace see.
NO_ANSWER = "jaxbench-mcp gave no answer (infrastructure failure, not the kernel's fault)"


class JaxbenchToolsetConfig(vf.ToolsetConfig):
    command: list[str] = []
    """The server's command line before `serve` (default: the checkout's .venv/bin/jaxbench-mcp)."""
    context: str = "docs"
    """The docs ablation's arm: docs (curated docs, read_docs) or none."""
    env: dict[str, str] = {}
    """Extra variables for the server (JAXBENCH_MCP_HOME, JAX_PLATFORMS ...)."""
    call_timeout: float = 600.0
    """Seconds one forwarded call may take before it counts as lost."""


class JaxbenchToolset(vf.Toolset[JaxbenchToolsetConfig]):
    TOOL_PREFIX = "jaxbench"

    async def setup(self) -> None:
        command = self.config.command or server.default_command()
        params = server.parameters(command, self.config.context, self.config.env)
        self.client = await self._exit_stack.enter_async_context(Client(stdio_client(params)))

    def register(self, mcp: MCPServer) -> None:
        # MCPServer answers tools/list and tools/call through these two methods: hand on the real ones.
        forwarded = cast(Any, mcp)
        forwarded.list_tools = self.list_tools
        forwarded.call_tool = self.call_tool

    async def list_tools(self) -> list[Tool]:
        tools: list[Tool] = []
        cursor = None
        while True:
            page = await self.client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> CallToolResult:
        try:
            with anyio.fail_after(self.config.call_timeout):
                return await self.client.call_tool(name, arguments)
        except Exception as exc:  # noqa: BLE001 - any call without an answer is the machinery's failure
            text = f"{NO_ANSWER}: {server.describe(exc)}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


if __name__ == "__main__":
    JaxbenchToolset.run()
