# expect: workload=1p_Flash_Attention status=correct
# Calls JAX's own Pallas flash attention (imported, not copied) with causal=True and block sizes chosen from the shape.
from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention


def workload(query, key, value):
    _, _, seq_len, head_dim = query.shape
    # 1024-row blocks at full size; at least two blocks per sequence so causal block skipping happens.
    block_q = block_k_major = min(1024, max(128, seq_len // 2))
    block_k = block_k_major // 2
    sizes = BlockSizes(block_q=block_q, block_k_major=block_k_major, block_k=block_k, block_b=1)
    return flash_attention(query, key, value, causal=True, sm_scale=head_dim**-0.5, block_sizes=sizes)
