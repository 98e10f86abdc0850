"""Expert reference for 11p_Megablox_GMM: the megablox grouped matmul (gmm) that ships with jax.

JAXBench's optimized.py calls gmm(lhs, rhs, group_sizes, tiling=(256, 1024, 1024)) on inputs
without max_expert_size and returns gmm's default float32 output. Here the workload's inputs are
adapted inside workload(): max_expert_size (a static window size only the baseline's scan needs)
is dropped, and gmm is asked for a bfloat16 output (preferred_element_type), which is the same
float32 accumulator rounded once, as the workload's bf16 result is. Imported from jax, not
vendored.
"""

import dataclasses

from jax.experimental.pallas.ops.tpu.megablox import gmm

WORKLOAD_ID = "11p_Megablox_GMM"
SOURCE = "jax.experimental.pallas.ops.tpu.megablox.gmm"


@dataclasses.dataclass(frozen=True)
class Blocks:
    tm: int
    tk: int
    tn: int


# full: JAXBench's tuned tiling; one 256-row m tile per group, K = 4096 in 4 tiles, N = 1536 in a
# full and a ragged (512) n tile.
# small: one 128-row m tile per group, K = 512 in 2 tiles, N = 1536 again in a full and a ragged
# (512) n tile.
BLOCKS = {
    "full": Blocks(tm=256, tk=1024, tn=1024),
    "small": Blocks(tm=128, tk=256, tn=1024),
}


def _blocks_for(m: int, k: int, n: int) -> Blocks:
    full = BLOCKS["full"]
    if m >= full.tm and k >= full.tk and n >= full.tn:
        return full
    return BLOCKS["small"]


def workload(lhs, rhs, group_sizes, max_expert_size):
    del max_expert_size  # only the baseline's fixed-size window needs it
    b = _blocks_for(lhs.shape[0], lhs.shape[1], rhs.shape[2])
    return gmm(lhs, rhs, group_sizes, preferred_element_type=lhs.dtype, tiling=(b.tm, b.tk, b.tn))
