"""Expert reference for 7p_Ragged_Paged_Attention: JAX's Pallas TPU ragged paged attention.

JAXBench's optimized.py calls ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens,
num_seqs, sm_scale=D^-0.5) with num_kv_pages_per_block = 64, num_queries_per_block = 64 and a
32 MiB VMEM limit; the kernel takes the workload's inputs exactly as they are. Imported from jax,
not vendored.
"""

import dataclasses

from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention

from jaxbench_mcp.targets import chip_facts_visible

WORKLOAD_ID = "7p_Ragged_Paged_Attention"
SOURCE = "jax.experimental.pallas.ops.tpu.ragged_paged_attention"


@dataclasses.dataclass(frozen=True)
class Blocks:
    num_kv_pages_per_block: int
    num_queries_per_block: int
    vmem_limit_bytes: int


# full: JAXBench's tuned blocks. Its 32 MiB VMEM limit is too small here: the kernel needs
# 38.2 MiB of scoped VMEM on v5e and 33.7 MiB on v6e, so the limit is 48 MiB (both chips have
# 128 MiB of VMEM).
# small: 16 pages per sequence in two KV blocks; 32-token query blocks split the 96-token chunks.
BLOCKS = {
    "full": Blocks(num_kv_pages_per_block=64, num_queries_per_block=64, vmem_limit_bytes=48 * 2**20),
    "small": Blocks(num_kv_pages_per_block=8, num_queries_per_block=32, vmem_limit_bytes=32 * 2**20),
}


def _blocks_for(pages_per_seq: int) -> Blocks:
    full = BLOCKS["full"]
    if pages_per_seq % full.num_kv_pages_per_block == 0:
        return full
    return BLOCKS["small"]


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    head_dim = queries.shape[-1]
    b = _blocks_for(page_indices.shape[1])
    with chip_facts_visible():
        return ragged_paged_attention(
            queries,
            kv_pages,
            kv_lens,
            page_indices,
            cu_q_lens,
            num_seqs,
            sm_scale=head_dim**-0.5,
            num_kv_pages_per_block=b.num_kv_pages_per_block,
            num_queries_per_block=b.num_queries_per_block,
            vmem_limit_bytes=b.vmem_limit_bytes,
        )
