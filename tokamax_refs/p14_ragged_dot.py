"""Expert reference for 14p_Ragged_Dot: tokamax's ragged_dot, Pallas Mosaic TPU implementation.

The workload's groups are all M/G rows, so x (G, M/G, K) is viewed as one (M, K) operand with
group_sizes = [M/G] * G and tokamax's grouped-matmul kernel multiplies each group's rows by its own
(K, N) weight, accumulating in float32 and writing bfloat16. JAXBench has no optimized version of
this workload. tokamax is imported lazily, inside workload().
"""

import dataclasses

from jaxbench_mcp.targets import chip_facts_visible

WORKLOAD_ID = "14p_Ragged_Dot"
SOURCE = "tokamax.ragged_dot (implementation='mosaic_tpu': PallasMosaicTpuRaggedDot)"
REQUIRES = "tokamax"


@dataclasses.dataclass(frozen=True)
class Blocks:
    tile_m: int
    tile_k: int
    tile_n: int


# tokamax's heuristic only tunes TPU7x and falls back to 128^3 tiles elsewhere, so these are ours.
# full: (M, K, N) = (8192, 4096, 14336), 1024 rows per group: 16 x 4 x 14 tiles, about 10 MiB of
# VMEM (within v5e's 16 MiB scoped default).
# small: (1024, 512, 6144), 128 rows per group: one m tile per group, 2 k tiles, 24 n tiles.
BLOCKS = {
    "full": Blocks(tile_m=512, tile_k=1024, tile_n=1024),
    "small": Blocks(tile_m=128, tile_k=256, tile_n=256),
}


def _blocks_for(rows_per_group: int, k: int, n: int) -> Blocks:
    full = BLOCKS["full"]
    if rows_per_group % full.tile_m == 0 and k % full.tile_k == 0 and n % full.tile_n == 0:
        return full
    return BLOCKS["small"]


def workload(x, weights):
    import jax.numpy as jnp
    from tokamax import config as tokamax_config
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

    groups, rows, k = x.shape
    n = weights.shape[2]
    b = _blocks_for(rows, k, n)
    config = pallas_mosaic_tpu.Config(tile_m=b.tile_m, tile_k=b.tile_k, tile_n=b.tile_n)
    op = pallas_mosaic_tpu.PallasMosaicTpuRaggedDot(config=config)
    group_sizes = jnp.full((groups,), rows, dtype=jnp.int32)
    # cross_compile: tokamax otherwise refuses a CPU default device (deviceless compiles, interpret runs).
    with chip_facts_visible(), tokamax_config.cross_compile(True):
        out = op(x.reshape(groups * rows, k), weights, group_sizes=group_sizes, preferred_element_type=x.dtype)
    return out.reshape(groups, rows, n)
