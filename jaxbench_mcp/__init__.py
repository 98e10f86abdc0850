"""jaxbench-mcp: workloads, docs, checking and profiling of Pallas TPU kernels for JAXBench."""

__version__ = "0.1.0"
