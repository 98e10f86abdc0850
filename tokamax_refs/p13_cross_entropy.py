"""Expert reference for 13p_Cross_Entropy: tokamax's fused linear softmax cross-entropy TPU kernel.

tokamax.linear_softmax_cross_entropy_loss(x, labels, w, reduction="mean") computes
mean_t(logsumexp(x_t @ W) - (x_t @ W)[label_t]) without materialising the (T, V) logits: a Pallas
Mosaic TPU kernel tiles T, H and V and keeps an online log-sum-exp in float32. JAXBench has no
optimized version of this workload. tokamax is imported lazily, inside workload().

The kernel is written with pl.kernel (a TensorCoreMesh kernel), which jax 0.12 traces as an
`mpmd_map` primitive, not as a `pallas_call`.
"""

import dataclasses

from jaxbench_mcp.targets import chip_facts_visible

WORKLOAD_ID = "13p_Cross_Entropy"
SOURCE = "tokamax.linear_softmax_cross_entropy_loss (implementation='mosaic_tpu')"
REQUIRES = "tokamax"


@dataclasses.dataclass(frozen=True)
class Blocks:
    b_block_size: int
    h_block_size: int
    v_block_size: int


# full: tokamax's own heuristic for (T, H, V) = (8192, 4096, 128256) on v5e/v6e: 8 x 8 x 167 tiles.
# small: (256, 256, 8448) in one T tile, one H tile and 11 V tiles of 768 (8448 = 2^8 * 33, like
# 128256 = 2^8 * 501, is not a multiple of 1024), so the online log-sum-exp runs.
BLOCKS = {
    "full": Blocks(b_block_size=1024, h_block_size=512, v_block_size=768),
    "small": Blocks(b_block_size=256, h_block_size=256, v_block_size=768),
}


def _blocks_for(tokens: int, hidden: int, vocab: int) -> Blocks:
    full = BLOCKS["full"]
    if tokens % full.b_block_size == 0 and hidden % full.h_block_size == 0 and vocab % full.v_block_size == 0:
        return full
    return BLOCKS["small"]


def workload(hidden, weight, labels):
    from tokamax import config as tokamax_config
    from tokamax._src.ops.linear_softmax_cross_entropy_loss import pallas_mosaic_tpu

    b = _blocks_for(hidden.shape[0], hidden.shape[1], weight.shape[1])
    config = pallas_mosaic_tpu.Config(
        b_block_size=b.b_block_size, h_block_size=b.h_block_size, v_block_size=b.v_block_size
    )
    op = pallas_mosaic_tpu.PallasMosaicTpuLinearSoftmaxCrossEntropyLoss(config=config)
    # cross_compile: tokamax otherwise refuses a CPU default device (deviceless compiles, interpret runs).
    with chip_facts_visible(), tokamax_config.cross_compile(True):
        return op(hidden, labels, weight, reduction="mean")
