"""6p_Paged_Attention's expert in parts: the whole, its kernel alone and its wrapper's page transposes, timed on a TPU
beside the estimate.

The expert (tokamax_refs/p06_paged_attention.py) transposes the workload's (total_pages, page_size, Hkv, D) K and V
pages into jax's paged_attention layout, then runs the kernel. Each part is timed at full size with the workload's
own lengths, page table and query rows (concrete, as the estimate follows them) and random pages.

Measured (benchmarks/data/paged_expert_parts_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1 and libtpu
0.0.50.1; the transposes hold no kernel, so the whole's XLA work is their estimate):
  case                                  measured  estimate  ratio
  expert, whole                         5,910 us    6,409    1.08
    its kernel (kernel alone)           2,669       3,131    1.17
    its XLA work (two page transposes)  3,235       3,278    1.01  (0.81 with every byte at the peak: they write as
                                                                    much as they read, at v5e's 0.8 of it)
  kernel alone                          2,669       3,134    1.17
The kernel's schedule: its loop body (7,557 bundles a trip, 2 trips a grid step) holds two predicated regions that
only issue page copies, 4,552 bundles for the first block's pages (once a run) and 2,578 for the next block's (every
trip but the last), beside a 414-bundle region with the attention's matmuls. While the whole body was scaled by the
share of its matmul work a trip runs, both regions counted on every trip: 5,763 us, 2.16x. They are now charged as
often as their copies start (cost_model.executed_bundles' copy branches), all regions of a loop at the rate of all
its copy branches' copies (1.0 a trip here): the first block's 256 copies take 17.8 bundles each (bounds checks), the
next block's 10, so the first region's bundles stand in for the next one's. Charged region by region (the first once,
the next twice a step) the kernel would come to about 2,410 us (0.90x); pairing regions with branches is not done.

Usage: python benchmarks/paged_expert_parts.py --measure [--out FILE]   (TPU host)
       python benchmarks/paged_expert_parts.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

WORKLOAD = "6p_Paged_Attention"


def _cases():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    from jaxbench_mcp.catalog import expert_refs, workloads

    expert = expert_refs.expert_module(WORKLOAD)
    queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens = workloads.get_workload(WORKLOAD).create_inputs(
        "full", seed=0
    )
    lens, table, rows = (np.asarray(a) for a in (kv_lens, page_indices, cu_q_lens))
    num_seqs, pages_per_seq = table.shape
    blocks = expert._blocks_for(pages_per_seq)

    def kernel_alone(q, k, v):
        return paged_attention(
            q,
            k,
            v,
            lens,
            table,
            pages_per_compute_block=blocks.pages_per_compute_block,
            megacore_mode=None,
            inline_seq_dim=True,
        )

    def page_transposes(k, v):
        return jnp.transpose(k, (2, 0, 1, 3)), jnp.transpose(v, (2, 0, 1, 3))

    def abstract(a, shape=None):
        return jax.ShapeDtypeStruct(shape or a.shape, a.dtype)

    heads_first = (k_pages.shape[2], k_pages.shape[0], k_pages.shape[1], k_pages.shape[3])
    q = abstract(queries, (num_seqs, *queries.shape[1:]))
    yield "expert, whole", expert.workload, [abstract(queries), abstract(k_pages), abstract(v_pages), lens, table, rows]
    yield "kernel alone", kernel_alone, [q, abstract(k_pages, heads_first), abstract(v_pages, heads_first)]
    yield "two page transposes", page_transposes, [abstract(k_pages), abstract(v_pages)]


def estimate(record_path: Path) -> None:
    record, generation = device_record.read(record_path)
    times = record["times_us"]
    # The transposes alone hold no kernel to estimate: the whole's XLA work around its kernel is their estimate.
    kernel_cases = [case for case in _cases() if case[0] != "two page transposes"]
    print(f"{'case':<36} {'measured':>9} {'estimate':>9} {'ratio':>6}")
    for name, measured, found in device_record.estimated(kernel_cases, record, generation):
        print(f"{name:<36} {measured:9.1f} {found.total_us:9.1f} {found.total_us / measured:6.2f}")
        if name == "expert, whole":
            parts = (
                ("  its kernel (kernel alone)", sum(k.estimate_us for k in found.kernels), times["kernel alone"]),
                ("  its XLA work (two page transposes)", found.outside_us or 0.0, times["two page transposes"]),
            )
            for part, estimated, timed in parts:
                print(f"{part:<36} {timed:9.1f} {estimated:9.1f} {estimated / timed:6.2f}")


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "paged_expert_parts_v5e.json")
