"""Expert reference for 6p_Paged_Attention: JAX's Pallas TPU paged attention (decode, GQA).

JAXBench's optimized.py calls paged_attention(q, k_pages, v_pages, lengths, page_indices,
pages_per_compute_block=128) on its own inputs, whose pages are laid out (Hkv, total_pages,
page_size, D) and which carry no cu_q_lens. Here the workload's inputs are adapted inside
workload(): the pages are transposed to the kernel's layout, each sequence's query row is picked
with cu_q_lens, and q carries the D^-0.5 softmax scale (the kernel applies none). Imported from
jax, not vendored.
"""

import dataclasses

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

WORKLOAD_ID = "6p_Paged_Attention"
SOURCE = "jax.experimental.pallas.ops.tpu.paged_attention"


@dataclasses.dataclass(frozen=True)
class Blocks:
    pages_per_compute_block: int


# full: JAXBench's tuned value, two compute blocks of 128 pages (2048 keys) per sequence.
# small: 16 pages per sequence, again two compute blocks, so the next block's DMA is prefetched.
BLOCKS = {
    "full": Blocks(pages_per_compute_block=128),
    "small": Blocks(pages_per_compute_block=8),
}


def _blocks_for(pages_per_seq: int) -> Blocks:
    full = BLOCKS["full"]
    if pages_per_seq % full.pages_per_compute_block == 0:
        return full
    return BLOCKS["small"]


def workload(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens):
    head_dim = queries.shape[-1]
    num_seqs, pages_per_seq = page_indices.shape
    b = _blocks_for(pages_per_seq)

    # Adaptation to the kernel's interface (see the module docstring).
    q = queries[cu_q_lens[:num_seqs]] * jnp.asarray(head_dim**-0.5, queries.dtype)
    k = jnp.transpose(k_pages, (2, 0, 1, 3))  # (Hkv, total_pages, page_size, D)
    v = jnp.transpose(v_pages, (2, 0, 1, 3))
    return paged_attention(
        q,
        k,
        v,
        kv_lens,
        page_indices,
        pages_per_compute_block=b.pages_per_compute_block,
        megacore_mode=None,
        inline_seq_dim=True,
    )
