"""`python -m jaxbench_mcp`: the same command as `jaxbench-mcp`."""

from jaxbench_mcp.frontends.cli import main

if __name__ == "__main__":
    main()
