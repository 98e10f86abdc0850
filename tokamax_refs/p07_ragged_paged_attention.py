"""Expert reference for 7p_Ragged_Paged_Attention: JAX's Pallas TPU ragged paged attention.

JAXBench's optimized.py calls ragged_paged_attention(q, kv_pages, kv_lens, page_indices, cu_q_lens,
num_seqs, sm_scale=D^-0.5) with num_kv_pages_per_block = 64, num_queries_per_block = 64 and a
32 MiB VMEM limit; the kernel takes the workload's inputs exactly as they are. Imported from jax,
not vendored.

Known limit: jax's TPU interpret mode cannot run this kernel (it views its VMEM scratch through
ref.reshape / ref.bitcast, and the interpreter's loads reject a ReshapeTransform with
"AttributeError: 'ReshapeTransform' object has no attribute 'indices'"), so on a host without a
TPU it compiles but cannot be run.
"""

import contextlib
import dataclasses

import jax
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention

WORKLOAD_ID = "7p_Ragged_Paged_Attention"
SOURCE = "jax.experimental.pallas.ops.tpu.ragged_paged_attention"

# The kernel's Mosaic lowering (lax.sign) asks pltpu.get_tpu_info() for the chip generation, which
# needs a TPU device or an abstract mesh naming one. On a host without a TPU it is told this chip;
# v5e and v6e lower the same way here (only "generation >= 4" is asked).
FALLBACK_DEVICE_KIND = "TPU v6 lite"


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


def _tpu_facts_available() -> contextlib.AbstractContextManager:
    try:
        pltpu.get_tpu_info()
        return contextlib.nullcontext()
    except ValueError:
        device = jax.sharding.AbstractDevice(device_kind=FALLBACK_DEVICE_KIND, num_cores=1, platform="tpu")
        return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("chip",), abstract_device=device))


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    head_dim = queries.shape[-1]
    b = _blocks_for(page_indices.shape[1])
    with _tpu_facts_available():
        return ragged_paged_attention(
            queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
            sm_scale=head_dim**-0.5,
            num_kv_pages_per_block=b.num_kv_pages_per_block,
            num_queries_per_block=b.num_queries_per_block,
            vmem_limit_bytes=b.vmem_limit_bytes,
        )
