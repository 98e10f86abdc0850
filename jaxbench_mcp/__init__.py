"""jaxbench-mcp: workloads, docs, checking and profiling of Pallas TPU kernels for JAXBench.

The public Python API is the names in __all__, importable from here; everything else is internal and may move.
They load on first use: workload modules import `jaxbench_mcp.seeding` inside the sandboxed worker, and that
must not pull in the server's side (or jax before the worker has set it up).
"""

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC = {
    "JaxBench": "jaxbench_mcp.api",
    "list_workloads": "jaxbench_mcp.api",
    "get_workload": "jaxbench_mcp.api",
    "Verdict": "jaxbench_mcp.models",
    "Profile": "jaxbench_mcp.models",
    "Status": "jaxbench_mcp.taxonomy",
    "ErrorClass": "jaxbench_mcp.taxonomy",
    "AgentError": "jaxbench_mcp.errors",
    "estimate": "jaxbench_mcp.perf.estimator",
    "Tuner": "jaxbench_mcp.perf.tuning",
    "evaluate": "jaxbench_mcp.campaigns.campaign",
    "write_report": "jaxbench_mcp.campaigns.report",
    "compare": "jaxbench_mcp.campaigns.report",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
