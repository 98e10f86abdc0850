"""jaxbench-mcp: workloads, docs, checking and profiling of Pallas TPU kernels for JAXBench."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `jaxbench_mcp.estimate` without importing jax when the package is imported for anything else.
    if name == "estimate":
        from jaxbench_mcp.perf.estimator import estimate

        return estimate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
