"""What share of HBM bandwidth a streaming kernel reaches, by its mix of reads and writes: timed on a TPU beside the
estimate.

Each case streams (4096, 4096) f32 arrays (64 MiB each) through (128, 4096) blocks over a 32-step grid, with no
work to speak of: reads only (a sum of each block's row groups into an (8, 4096) block, 1/16 of the bytes written),
reads and writes in the ratios 3:1, 2:1, 1:1 and 1:2, and writes only. The estimate prices every byte at the same
bandwidth; the printed share is the bytes over the measured time, against the chip's peak.

Measured (benchmarks/data/hbm_mix_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1, libtpu 0.0.50.1,
v5e's raw model: all of the peak, plus each grid step's STEP_OVERHEAD_S):
  case                        measured  estimate  ratio  share of peak
  reads only (row sums out)    97.8 us    93.5     0.96     0.89
  3 reads : 1 write           381.6      334.2     0.88     0.86
  2 reads : 1 write           294.1      252.3     0.86     0.83
  1 read : 1 write            204.3      170.5     0.83     0.80
  1 read : 2 writes           307.7      252.7     0.82     0.80
  writes only                 102.5       88.6     0.86     0.80
Set the 32 steps' fixed cost aside and reads stream at 0.95 of the peak, writes at 0.85, and a mix below the two
combined (3:1 0.87, 2:1 0.85, 1:1 0.83, 1:2 0.82, where 0.95 for reads and 0.85 for writes would give 0.92, 0.91,
0.90 and 0.88). This is why one HBM efficiency
for v5e did not fit the corpus (benchmarks/f32_matmuls.py): kernels that mostly read (21k's and 23k's sums, 6p,
11p) are estimated at 0.92-1.01 of their measured time, those that write as much as they read (12p's RMSNorm, 26k,
28k, 33k) at 0.83-0.85. Not modelled yet: the estimate's memory term prices every byte alike.

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
STEPS = ROWS // BLOCK


def _stream(reads: int, writes: int, op):
    """A kernel reading `reads` arrays and writing `writes` (op maps the read blocks to the written ones)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def body(*refs):
        outs = op(*(r[...] for r in refs[:reads]))
        for o_ref, value in zip(refs[reads:], outs, strict=True):
            o_ref[...] = value

    block = pl.BlockSpec((BLOCK, COLS), lambda i: (i, 0))
    reduced = op is _row_groups

    def call(*xs):
        out_block = pl.BlockSpec((8, COLS), lambda i: (i, 0)) if reduced else block
        out_rows = STEPS * 8 if reduced else ROWS
        return pl.pallas_call(
            body,
            grid=(STEPS,),
            in_specs=[block] * reads,
            out_specs=[out_block] * writes,
            out_shape=[jax.ShapeDtypeStruct((out_rows, COLS), jnp.float32)] * writes,
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=64 * 2**20),
        )(*xs)

    return call, [jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)] * reads


def _row_groups(x):
    return (x.reshape(BLOCK // 8, 8, COLS).sum(axis=0),)


def _cases():
    import jax.numpy as jnp

    yield ("reads only (row sums out)", *_stream(1, 1, _row_groups))
    yield ("3 reads : 1 write", *_stream(3, 1, lambda x, y, z: (x + y + z,)))
    yield ("2 reads : 1 write", *_stream(2, 1, lambda x, y: (x + y,)))
    yield ("1 read : 1 write", *_stream(1, 1, lambda x: (x * 2.0,)))
    yield ("1 read : 2 writes", *_stream(1, 2, lambda x: (x * 2.0, x + 1.0)))
    yield ("writes only", *_stream(0, 1, lambda: (jnp.full((BLOCK, COLS), 1.0, jnp.float32),)))


def estimate(record_path: Path) -> None:
    import jaxbench_mcp
    from jaxbench_mcp.catalog import targets

    record, generation = device_record.read(record_path)
    times = record["times_us"]
    peak = targets.chip_facts(generation).hbm_bytes_per_second
    print(f"{'case':<28} {'measured':>9} {'estimate':>9} {'ratio':>6} {'MB moved':>9} {'share of peak':>14}")
    for name, fn, abstract in _cases():
        if name not in times:
            continue
        found = jaxbench_mcp.estimate(fn, *abstract, target=generation)
        (k,) = found.kernels
        share = k.hbm_bytes / (times[name] * 1e-6) / peak
        print(
            f"{name:<28} {times[name]:9.1f} {found.total_us:9.1f} {found.total_us / times[name]:6.2f} "
            f"{k.hbm_bytes / 1e6:9.1f} {share:14.2f}"
        )


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "hbm_mix_v5e.json")
