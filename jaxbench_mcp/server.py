"""`mcp run jaxbench_mcp/server.py`, a public path: the server itself is jaxbench_mcp.frontends.server."""

from jaxbench_mcp.frontends import server as _server


def __getattr__(name: str):
    # `mcp run` executes this file by path and takes its `mcp`: every name is the real module's (`mcp` built lazily).
    return getattr(_server, name)
