"""The frontends: the MCP server and the command line, both over jaxbench_mcp.api."""
