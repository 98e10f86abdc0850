"""Expert reference for 2p_GQA_Attention: JAX's Pallas TPU splash attention with a causal mask.

As in JAXBench's optimized.py: the (B, S, H, D) inputs are moved to (B, H, S, D), q is multiplied
by D^-0.5 (the kernel applies no scale), K and V are repeated to the query head count, and a
multi-head splash kernel applies one causal mask per head (JAXBench vmaps it over the batch; here
the batch is folded into the head axis, see workload()). Imported from jax, not vendored.
"""

import dataclasses

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash

WORKLOAD_ID = "2p_GQA_Attention"
SOURCE = "jax.experimental.pallas.ops.tpu.splash_attention"


@dataclasses.dataclass(frozen=True)
class Blocks:
    block_q: int
    block_kv: int
    block_kv_compute: int


# full: JAXBench's tuned values are block_q = block_kv = 2048, block_kv_compute = 1024. With
# block_q = 2048 the kernel needs 19.7 MiB of scoped VMEM, over v5e's 16 MiB default (the kernel
# takes no vmem limit), so block_q is halved; v6e compiles either.
# small: S = 256 split in two q and two kv blocks, so fully masked blocks are skipped.
BLOCKS = {
    "full": Blocks(block_q=1024, block_kv=2048, block_kv_compute=1024),
    "small": Blocks(block_q=128, block_kv=128, block_kv_compute=128),
}


def _blocks_for(seq_len: int) -> Blocks:
    full = BLOCKS["full"]
    if seq_len % full.block_q == 0 and seq_len % full.block_kv == 0:
        return full
    return BLOCKS["small"]


def workload(query, key, value):
    _, seq_len, num_q_heads, head_dim = query.shape
    group = num_q_heads // key.shape[2]
    b = _blocks_for(seq_len)

    # Adaptation to the kernel's interface: head-major layout, scale folded into q, KV repeated.
    q = jnp.swapaxes(query, 1, 2) * jnp.asarray(head_dim**-0.5, query.dtype)
    k = jnp.repeat(jnp.swapaxes(key, 1, 2), group, axis=1)
    v = jnp.repeat(jnp.swapaxes(value, 1, 2), group, axis=1)

    # JAXBench vmaps the per-batch kernel over B. jax's TPU interpret mode cannot run a vmapped
    # pallas_call (the added grid axis gets no dimension semantics), so the batch is folded into
    # the head axis instead: one kernel over B * Hq causal heads, the same blocks and work.
    batch = q.shape[0]
    causal = splash.CausalMask(shape=(seq_len, seq_len))
    kernel = splash.make_splash_mha(
        mask=splash.MultiHeadMask(masks=(causal,) * (batch * num_q_heads)),
        block_sizes=splash.BlockSizes(block_q=b.block_q, block_kv=b.block_kv, block_kv_compute=b.block_kv_compute),
        head_shards=1,
        q_seq_shards=1,
    )

    def fold(t):
        return t.reshape(batch * num_q_heads, seq_len, head_dim)

    out = kernel(fold(q), fold(k), fold(v)).reshape(batch, num_q_heads, seq_len, head_dim)
    return jnp.swapaxes(out, 1, 2)
