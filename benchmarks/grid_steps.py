"""What a grid step costs: the same work cut into 8 to 1024 grid steps, timed on a TPU beside the estimate.

Three kernels over an (8192, 1024) array in row blocks of 8 to 1024 rows: x * 2 in f32 (memory-bound), a bf16
matmul of each block by a resident (1024, 1024) weight (MXU work per step) and 48 rounds of f32 multiply-adds per
element (vector-bound); steps that move and compute nothing: one (1024, 1024) f32 block kept over 64 to 8192
steps, doubled at the first step only (what skipped steps of paged and ragged attention cost); and 16 rounds of f32
multiply-adds on 256-row blocks, one block a step or each block held for two steps and worked on at its first or
its second (where a step's copies run decides what they overlap). On an attached
TPU (--measure, which writes a JSON record such as benchmarks/data/grid_steps_v5e.json) each is timed by
perf/measuring (device time from a profiler trace); on a CPU host with libtpu each is estimated for the record's
generation and printed beside its measurement, with the model as it stands and "unsplit"
(device_record.unsplit_us: every HBM byte at the peak, every step's fixed cost added).

Measured (benchmarks/data/grid_steps_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1 and libtpu
0.0.50.1): x * 2 takes 270 us in 1024 steps and 102 us in 8, while the multiply-adds take 444 us in 1024 steps and
340 in 8, and the bundles of the schedule already hold that difference (a step's DMA issue and waits): a step's DMA
wait is hidden under a step that computes longer. x * 2 reads and writes alike, so on v5e it streams at 0.8 of the
peak (benchmarks/hbm_mix.py) and its steps cost 0.16-0.19 us each beyond that in 1024 and 512 steps, 0.11 in 256,
0.02 in 128 and nothing from 64 on: the write-back of the step before covers a step's fixed cost once it lasts
longer than that cost twice over (cost_model.pipelined_cost). Estimate / measured over the 24 cases: 0.88-1.18
(x * 2: 1.14, 1.03, 1.18 and 0.97 in 1024 to 128 steps, 1.00-1.01 beyond), 0.83-1.08 unsplit (x * 2 in 64 to 8
steps 0.83-0.92), 0.84-1.83 with a quoted 0.35 us added to every step before STEP_OVERHEAD_S (1.54 and 1.83 for the
1024-step matmul and multiply-adds). The steps that move nothing: 14.5, 34.3 and 182.5 us in 64, 1,024 and 8,192
steps, 0.021 us a step (cost_model.IDLE_STEP_S); estimated 0.97-1.01 since only steps that move bytes pay a DMA
wait, 1.76, 6.35 and 9.05 while every step paid 0.2 us. Held two steps, the same work and bytes take 166 us when
the work is on a block's second step (the next block's fetch runs under it; the write-back after it does not) and
230 us on its first (the fetch starts in the idle step before the work and shares the bandwidth with the write-back
issued right after): estimated 175 both (1.05, 0.76), since each step's copies are priced where they run
(kernel_analysis.copies_in_flight: a fetch in the step before its block's first, a write-back in the step after its
last); 226 and 124 (1.36, 0.54: the wrong order) while the copies counted at their block's first step, 124 both
when max(compute, memory) over the grid was all. Three runs of the other 24 cases agree within 1.6%; they are
0.91-1.18, the matmuls 1-3% up on the first record (0.88 -> 0.91 at 128 rows): the weight's fetch, before the first
step, has a mix of work and bytes of its own (kernel_analysis.step_mix).

Usage: python benchmarks/grid_steps.py --measure [--out FILE]   (TPU host)
       python benchmarks/grid_steps.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

ROWS, COLS = 8192, 1024
BLOCK_ROWS = (8, 16, 32, 64, 128, 256, 512, 1024)
MULTIPLY_ADDS = 48
SKIPPED_STEPS = (64, 1024, 8192)  # grids whose steps after the first move nothing and compute nothing
PAIRED_ROUNDS = 16  # multiply-adds per element where each block is held for two steps: compute about its bytes' time


def _cases():
    """(name, function, abstract arguments) per kernel and block height."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def scale(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def matmul(x_ref, w_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    def multiply_adds(x_ref, o_ref):
        x = x_ref[...].astype(jnp.float32)
        y = x
        for _ in range(MULTIPLY_ADDS):
            y = y * 1.0001 + x * 0.5 - y * y * 0.001
        o_ref[...] = y.astype(o_ref.dtype)

    def gridded(body, bm, with_weight):
        rows = pl.BlockSpec((bm, COLS), lambda i: (i, 0))
        specs = [rows, pl.BlockSpec((COLS, COLS), lambda i: (0, 0))] if with_weight else [rows]

        def call(x, *w):
            out = jax.ShapeDtypeStruct((ROWS, COLS), x.dtype)
            return pl.pallas_call(body, grid=(ROWS // bm,), in_specs=specs, out_specs=rows, out_shape=out)(x, *w)

        return call

    def first_step_only(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _scale():
            o_ref[...] = x_ref[...] * 2

    def skipping(steps):
        # One (1024, 1024) block, the same at every step: fetched once, written back once.
        whole = pl.BlockSpec((COLS, COLS), lambda i: (0, 0))

        def call(x):
            out = jax.ShapeDtypeStruct((COLS, COLS), x.dtype)
            return pl.pallas_call(first_step_only, grid=(steps,), in_specs=[whole], out_specs=whole, out_shape=out)(x)

        return call

    def paired_rounds(x_ref, o_ref):
        x = x_ref[...]
        y = x
        for _ in range(PAIRED_ROUNDS):
            y = y * 1.0001 + x * 0.5 - y * y * 0.001
        o_ref[...] = y

    def paired(computing_step):
        """256-row f32 blocks, each held for two grid steps (index i // 2); the work runs on the first or the second
        of the two. On the second, the next block's fetch (issued as that step starts) overlaps it; on the first,
        the fetch starts in the idle step after it and nothing hides it."""

        def body(x_ref, o_ref):
            @pl.when(pl.program_id(0) % 2 == computing_step)
            def _rounds():
                paired_rounds(x_ref, o_ref)

        rows = pl.BlockSpec((256, COLS), lambda i: (i // 2, 0))

        def call(x):
            out = jax.ShapeDtypeStruct((ROWS, COLS), x.dtype)
            return pl.pallas_call(body, grid=(2 * ROWS // 256,), in_specs=[rows], out_specs=rows, out_shape=out)(x)

        return call

    block = jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)
    bf16 = jax.ShapeDtypeStruct((ROWS, COLS), jnp.bfloat16)
    weight = jax.ShapeDtypeStruct((COLS, COLS), jnp.bfloat16)
    for bm in BLOCK_ROWS:
        yield f"x * 2, f32 / {bm} rows", gridded(scale, bm, False), [block]
        yield f"matmul, bf16 / {bm} rows", gridded(matmul, bm, True), [bf16, weight]
        yield f"multiply-adds, bf16 / {bm} rows", gridded(multiply_adds, bm, False), [bf16]
    for steps in SKIPPED_STEPS:
        yield f"skipped steps / {steps}", skipping(steps), [jax.ShapeDtypeStruct((COLS, COLS), jnp.float32)]
    yield f"{PAIRED_ROUNDS} rounds, f32 / 256 rows", gridded(paired_rounds, 256, False), [block]
    yield f"{PAIRED_ROUNDS} rounds on a block's 2nd step", paired(1), [block]
    yield f"{PAIRED_ROUNDS} rounds on a block's 1st step", paired(0), [block]


def estimate(record_path: Path) -> None:
    record, generation = device_record.read(record_path)
    print(f"{'case':<34} {'measured':>9} {'estimate':>9} {'ratio':>6} {'unsplit':>9} {'ratio':>6}  bottleneck")
    now_ratios, unsplit_ratios = [], []
    for name, measured, found in device_record.estimated(_cases(), record, generation):
        (k,) = found.kernels
        unsplit = device_record.unsplit_us(k, generation)
        now_ratios.append(found.total_us / measured)
        unsplit_ratios.append(unsplit / measured)
        print(
            f"{name:<34} {measured:9.1f} {found.total_us:9.1f} {now_ratios[-1]:6.2f} {unsplit:9.1f} "
            f"{unsplit_ratios[-1]:6.2f}  {k.bottleneck}",
            flush=True,
        )
    print(
        f"estimate / measured over {len(now_ratios)} cases: {min(now_ratios):.2f}-{max(now_ratios):.2f} now, "
        f"{min(unsplit_ratios):.2f}-{max(unsplit_ratios):.2f} unsplit (every byte at the peak, every step's cost added)"
    )


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "grid_steps_v5e.json")
