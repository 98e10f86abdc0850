"""Expert reference for 1p_Flash_Attention: JAX's Pallas TPU flash attention, causal, on (B, H, S, D).

JAXBench's optimized.py calls this kernel (vendored) with causal=True, sm_scale = D^-0.5 on the
(B, H, S, D) inputs, exactly the workload's layout; here it is imported from jax.
"""

import dataclasses

from jax.experimental.pallas.ops.tpu import flash_attention as fa

WORKLOAD_ID = "1p_Flash_Attention"
SOURCE = "jax.experimental.pallas.ops.tpu.flash_attention"


@dataclasses.dataclass(frozen=True)
class Blocks:
    block_q: int
    block_k_major: int
    block_k: int
    block_b: int = 1


# full: JAXBench's tuned values are block_q = block_k_major = 2048, block_k = 1024, block_b = 1.
# With block_q = 2048 the kernel needs 19.9 MiB of scoped VMEM, over v5e's 16 MiB default (the
# kernel takes no vmem limit; a smaller block_k does not help), so block_q is halved: grid
# (4, 64, 4, 2). v6e compiles either.
# small: two q blocks and two kv blocks at S = 512, so causal block skipping still happens.
BLOCKS = {
    "full": Blocks(block_q=1024, block_k_major=2048, block_k=1024),
    "small": Blocks(block_q=256, block_k_major=256, block_k=128),
}


def _blocks_for(seq_len: int) -> Blocks:
    full = BLOCKS["full"]
    if seq_len % full.block_q == 0 and seq_len % full.block_k_major == 0:
        return full
    return BLOCKS["small"]


def workload(query, key, value):
    seq_len, head_dim = query.shape[2], query.shape[3]
    b = _blocks_for(seq_len)
    sizes = fa.BlockSizes(block_q=b.block_q, block_k_major=b.block_k_major, block_k=b.block_k, block_b=b.block_b)
    return fa.flash_attention(query, key, value, causal=True, sm_scale=head_dim**-0.5, block_sizes=sizes)
