"""Fewer, larger copies: jax's paged attention kernel on 6p_Paged_Attention's decode, its KV cache cut into pages of 16
to 256 tokens, timed on a TPU beside the estimate.

Every case reads the same bytes (64 sequences of 4,096 tokens, 8 KV heads of 128, bf16 K and V: 1 GiB) in blocks of
2,048 tokens, so pages_per_compute_block is 2,048 / page size: 128 copies of a 16-token page per block and head, down
to 8 of a 256-token one. The page table scatters each sequence's pages over the cache (a fixed permutation), and
the lengths, the table and the query rows are concrete, as the estimate follows them. What changes from case to case
is how many copies the kernel starts (each ~10 bundles of address arithmetic and bounds checks on v5e), not the bytes:
the estimate should rank the cases as the chip does, and name the small-page ones copy-issue-bound.

Measured (benchmarks/data/paged_copy_sizes_v5e.json: one v5e, jax 0.10.2, median of 10 runs; estimates with jax
0.12.0.1 and libtpu 0.0.50.1; the bytes alone take 1,311 us at the peak):
  page   copies a block  measured  estimate  ratio  bottleneck         before: estimate  ratio  bottleneck
   16          128       2,669 us    3,134    1.17  copy-issue-bound              5,766   2.16  vector-unit-bound
   32           64       1,707       1,821    1.07  copy-issue-bound              3,141   1.84  vector-unit-bound
   64           32       1,453       1,424    0.98  memory-bound                  1,829   1.26  vector-unit-bound
  128           16       1,433       1,424    0.99  memory-bound                  1,425   0.99  memory-bound
  256            8       1,426       1,423    1.00  memory-bound                  1,425   1.00  memory-bound
"Before" is the model until regions that only start copies were charged as often as their copies start (every
trip, in full). Both rank the cases as measured; the 16-token pages' 1.17x is paged_expert_parts.py's kernel alone.

Usage: python benchmarks/paged_copy_sizes.py --measure [--out FILE]   (TPU host)
       python benchmarks/paged_copy_sizes.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

SEQUENCES, TOKENS, KV_HEADS, Q_HEADS, HEAD_DIM = 64, 4096, 8, 64, 128
BLOCK_TOKENS = 2048
PAGE_SIZES = (16, 32, 64, 128, 256)


def _cases():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    lengths = np.full(SEQUENCES, TOKENS, np.int32)
    queries = jax.ShapeDtypeStruct((SEQUENCES, Q_HEADS, HEAD_DIM), jnp.bfloat16)
    for page in PAGE_SIZES:
        pages_per_sequence = TOKENS // page
        total_pages = SEQUENCES * pages_per_sequence
        table = np.random.default_rng(0).permutation(total_pages).astype(np.int32).reshape(SEQUENCES, -1)
        pages = jax.ShapeDtypeStruct((KV_HEADS, total_pages, page, HEAD_DIM), jnp.bfloat16)

        def decode(q, k, v, table=table, block=BLOCK_TOKENS // page):
            return paged_attention(
                q, k, v, lengths, table, pages_per_compute_block=block, megacore_mode=None, inline_seq_dim=True
            )

        yield f"pages of {page} tokens, {BLOCK_TOKENS // page} a block", decode, [queries, pages, pages]


def estimate(record_path: Path) -> None:
    record, generation = device_record.read(record_path)
    print(f"{'case':<34} {'measured':>9} {'estimate':>9} {'ratio':>6}  bottleneck")
    rows = []
    for name, measured, found in device_record.estimated(_cases(), record, generation):
        (kernel,) = found.kernels
        rows.append((measured, found.total_us))
        print(f"{name:<34} {measured:9.1f} {found.total_us:9.1f} {found.total_us / measured:6.2f}  {kernel.bottleneck}")
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    same = order == sorted(range(len(rows)), key=lambda i: rows[i][1])
    print(f"ranked as measured: {'yes' if same else 'no'}")


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "paged_copy_sizes_v5e.json")
