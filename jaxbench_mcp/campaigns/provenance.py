"""What a result depends on besides the candidate, recorded with every campaign result and in server_info, so
that two runs can be compared and a stale one recognised.

    provenance(context) -> dict    the JAXBench commit our workloads mirror, the tolerance rule, the versions
                                   of jax, jaxlib, libtpu and this server, and the context condition
    workload_hash(workload_id)     a content hash of one workload module (workloads/<file>.py)
"""

from __future__ import annotations

import functools
import hashlib

from jaxbench_mcp import __version__
from jaxbench_mcp.catalog import targets, workloads

# The JAXBench sources that workloads/ mirrors. The repository's history was not recorded when workloads/ was
# written; this is the commit of JAXBench/README.md in AI-Hypercomputer/accelerator-agents that describes the
# flat layout our ids follow (50 workloads: 17 priority kernels 1p-17p and 33 KernelBench ones 18k-50k, each
# benchmark/<id>/baseline.py). Later commits regroup the suite into level1/ and level2/ with other workloads.
JAXBENCH_REPO = "https://github.com/AI-Hypercomputer/accelerator-agents"
JAXBENCH_COMMIT = "81be73a3ca33418f8e2a774d06a90298c5973917"

# The correctness rule of jaxbench_mcp.checking, in words (its factor is checking/truth's TOLERANCE_FACTOR).
TOLERANCE_RULE = (
    "per hidden seed, max |candidate - truth| <= max(2 x max |native-dtype baseline - truth|, "
    "(eps(dtype) + 2 eps(float32)) x max |truth|); truth one precision above the output (float32 for bf16, "
    "float64 for float32)"
)


def workload_hash(workload_id: str) -> str:
    """sha256 (first 16 hex digits) of the workload's module file."""
    return _hash_of(workloads.get_workload(workload_id).path.as_posix())


@functools.cache
def _hash_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def versions() -> dict[str, str]:
    import jax
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "libtpu": targets.libtpu_version() or "not installed",
        "jaxbench_mcp": __version__,
    }


def provenance(context: str = "docs") -> dict[str, str]:
    """The fields every result and summary carries (all strings, so they fit any JSON consumer)."""
    return {
        "jaxbench_repo": JAXBENCH_REPO,
        "jaxbench_commit": JAXBENCH_COMMIT,
        "tolerance_rule": TOLERANCE_RULE,
        **versions(),
        "context": context,
    }
