"""What share of HBM bandwidth a streaming kernel reaches, by its mix of reads and writes: timed on a TPU beside the
estimate.

Each case streams (4096, 4096) f32 arrays (64 MiB each) through (128, 4096) blocks over a 32-step grid (and, for
three of them, 32-row and 512-row blocks: 128 and 8 steps), with no work to speak of: reads only (a sum of each
block's row groups into an (8, 4096) block, 1/16 of the bytes written), reads and writes in the ratios 3:1, 2:1, 1:1
and 1:2, and writes only. Printed beside each measurement: the estimate, the estimate as it was before reads and
writes were priced apart ("unsplit": every byte at the peak, every grid step's fixed cost added), and the bytes over
the measured time as a share of the chip's peak.

Measured (benchmarks/data/hbm_mix_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1, libtpu 0.0.50.1):
  case                          measured  estimate  ratio  unsplit  ratio  share
  reads only                     97.8 us    96.1     0.98    93.5    0.96   0.89
  3 reads : 1 write             381.6      368.7     0.97   334.2    0.88   0.86
  2 reads : 1 write             294.0      286.9     0.98   252.3    0.86   0.84
  1 read : 1 write              204.3      205.0     1.00   170.5    0.83   0.80
  1 read : 2 writes             308.1      307.7     1.00   252.7    0.82   0.80
  writes only                   102.5      102.7     1.00    88.6    0.86   0.80
  reads only, 32 / 512 rows     124.0 / 91.2         1.11 / 0.94   1.03 / 0.94   0.82 / 0.91
  1 read : 1 write, 32 / 512    204.8 / 203.0        1.00 / 1.02   0.92 / 0.82   0.80 / 0.81
  writes only, 32 / 512 rows    102.5 / 103.7        1.00 / 1.00   1.05 / 0.82   0.80 / 0.79
Whatever the block size, a stream that writes runs at 0.79-0.81 of the peak, and its time does not change from 8 to
128 steps: the steps' fixed cost hides under write-backs of 0.5 MiB. Reads alone run at 0.89-0.91 with 8 to 32
steps (0.82 with 128, where the steps' cost shows). v5e's calibration takes writes, and as many reads as there are
writes, at 0.8 of the peak, and the rest of the reads at the full peak with each step's fixed cost added
(cost_model.memory_seconds, pipelined_cost): 0.94-1.11 of the measured times, against 0.82-1.05 unsplit. The same
change took the v5e corpus's kernels that write as much as they read (12p's RMSNorm, 26k, 28k, 33k) from 0.83-0.85
of their measured times to 0.97-1.01 (benchmarks/measured_fidelity.py).

Usage: python benchmarks/hbm_mix.py --measure [--out FILE]   (TPU host)
       python benchmarks/hbm_mix.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

ROWS, COLS, BLOCK = 4096, 4096, 128


def _stream(reads: int, writes: int, op, rows: int = BLOCK):
    """A kernel reading `reads` arrays and writing `writes` in (rows, COLS) blocks (op maps the read blocks to the
    written ones)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def body(*refs):
        outs = op(*(r[...] for r in refs[:reads]))
        for o_ref, value in zip(refs[reads:], outs, strict=True):
            o_ref[...] = value

    block = pl.BlockSpec((rows, COLS), lambda i: (i, 0))
    reduced = op is _row_groups
    steps = ROWS // rows

    def call(*xs):
        out_block = pl.BlockSpec((8, COLS), lambda i: (i, 0)) if reduced else block
        out_rows = steps * 8 if reduced else ROWS
        return pl.pallas_call(
            body,
            grid=(steps,),
            in_specs=[block] * reads,
            out_specs=[out_block] * writes,
            out_shape=[jax.ShapeDtypeStruct((out_rows, COLS), jnp.float32)] * writes,
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=64 * 2**20),
        )(*xs)

    return call, [jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)] * reads


def _row_groups(x):
    return (x.reshape(x.shape[0] // 8, 8, COLS).sum(axis=0),)


def _cases():
    import jax.numpy as jnp

    yield ("reads only (row sums out)", *_stream(1, 1, _row_groups))
    yield ("3 reads : 1 write", *_stream(3, 1, lambda x, y, z: (x + y + z,)))
    yield ("2 reads : 1 write", *_stream(2, 1, lambda x, y: (x + y,)))
    yield ("1 read : 1 write", *_stream(1, 1, lambda x: (x * 2.0,)))
    yield ("1 read : 2 writes", *_stream(1, 2, lambda x: (x * 2.0, x + 1.0)))
    yield ("writes only", *_stream(0, 1, lambda: (jnp.full((BLOCK, COLS), 1.0, jnp.float32),)))
    for rows in (32, 512):  # smaller and larger DMAs (0.5 and 8 MiB blocks)
        yield (f"reads only, {rows} rows", *_stream(1, 1, _row_groups, rows))
        yield (f"1 read : 1 write, {rows} rows", *_stream(1, 1, lambda x: (x * 2.0,), rows))
        yield (
            f"writes only, {rows} rows",
            *_stream(0, 1, lambda r=rows: (jnp.full((r, COLS), 1.0, jnp.float32),), rows),
        )


def estimate(record_path: Path) -> None:
    from jaxbench_mcp.catalog import targets

    record, generation = device_record.read(record_path)
    peak = targets.chip_facts(generation).hbm_bytes_per_second
    print(
        f"{'case':<32} {'measured':>9} {'estimate':>9} {'ratio':>6} {'unsplit':>8} {'ratio':>6} "
        f"{'MB moved':>9} {'share':>6}"
    )
    for name, measured, found in device_record.estimated(_cases(), record, generation):
        k = found.kernels[0]
        unsplit = device_record.unsplit_us(k, generation)
        print(
            f"{name:<32} {measured:9.1f} {found.total_us:9.1f} {found.total_us / measured:6.2f} {unsplit:8.1f} "
            f"{unsplit / measured:6.2f} {k.hbm_bytes / 1e6:9.1f} {k.hbm_bytes / (measured * 1e-6) / peak:6.2f}"
        )


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "hbm_mix_v5e.json")
