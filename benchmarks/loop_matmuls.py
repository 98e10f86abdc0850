"""What matmuls and transposes in an in-kernel loop cost: looped and unrolled, timed on a TPU beside the estimate.

Each case is STEPS grid steps, each a fori_loop over HEADS heads (or another trip count) applying one op to each
head's tiles, its results accumulated in VMEM scratch; every looped case has an unrolled twin. The first group,
16p_Mamba2_SSD's shapes one kind of op per kernel, is what the latencies are fit on (cost_model.RESULT_LATENCY_BUNDLES
on its looped cases, STRAIGHT_LATENCY_BUNDLES on their unrolled twins); the second is held out from that fit: chained
ops in one trip (the attention trip at 2, 4 and 8 heads), deeper, tinier and larger matmuls, other trip counts.

Measured (benchmarks/data/loop_matmuls_v5e.json: one v5e, jax 0.10.2; three runs on different days agree within
0.1%; estimates with jax 0.12.0.1 and libtpu 0.0.50.1):
- Looped against unrolled measures 2.3x for 64-deep keys^T queries, 2.6x for a (64, 256) transpose, 1.5x for an
  f32 state product, 2.4x for 32 trips of (8, 128) @ (128, 128), but 1.02x for 4 trips of (512, 512) products
  and 1.00x for 2 trips of (1024, 1024) @ (1024, 256).
- Why: in the schedule (libtpu's final_bundles dump) a small loop body pops its first matmul or transpose result a
  few bundles after pushing the work, so the pop stalls until the unit has it, every trip; unrolled, one head's
  results are popped while the next head's operands are pushed, where the heads are independent. No bundle count
  holds that stall.
- The estimate times it (cost_model.result_wait: in each rolled loop body, bundles issue in order and a unit's
  first result of the trip is ready its latency after the push; later results stream behind it, except the first
  of a later burst: a push into a unit whose results were all popped, as the second of two chained matmuls,
  waits again). The latencies,
  MXU 170 and XLU 150 bundle slots, make the worst ratio of the five looped fit cases that wait smallest. They are
  effective figures, not the units' own: a large matmul's schedule pops results 50-120 bundles after their pushes
  and runs at speed, so the first result's latency in a trip carries costs of the loop around it too.
- Unrolled, the waits do not vanish: a chain (a transpose into a matmul, scores into the product with values)
  stalls at each link, head after head. The estimate times straight-line code the same way, but every result
  waits (cost_model.STRAIGHT_LATENCY_BUNDLES: MXU 90, XLU 170, fit on the unrolled twins of the fit group, the MXU's
  no more than 8p_GEMM's schedule allows: it pops its results about 100 slots after their pushes at full speed).
- Fit group, looped: 0.92-1.11 of the measured time (0.88-1.11 fit, before HBM writes were priced apart from
  reads: queries keys 0.98 -> 1.06, with keys^T 0.89 -> 0.98; 0.39-0.70 before the wait was counted; the latencies
  were not refit). Unrolled: 0.73-1.04,
  with keys^T queries 0.82 -> 0.99 and the transpose 0.83 -> 0.91 once straight-line code waits (the f32 state
  product's 0.73 is not a wait, nor its matmul's passes: f32 at the default precision takes one,
  benchmarks/f32_matmuls.py; it is estimated memory-bound at all of v5e's HBM bandwidth).
- Held out, looped: 0.89-1.22 (0.32-0.95 before any wait was counted): the attention trip (a transpose, then two
  chained matmuls) 0.89-0.91 at 2, 4 and 8 heads (0.71-0.72 while only a trip's first result waited), 32 tiny trips
  1.22, the large products 0.94-0.95. Unrolled: 0.80-1.06, where straight-line code waited for nothing 0.42-1.06
  (attention 0.42 -> 0.89 at 8 heads, 0.86 and 0.88 at 2 and 4, measured after that fit; the transpose into a
  matmul 0.59 -> 0.80, the large products unchanged at 0.93-0.95). 16p_Mamba2_SSD's solution
  (benchmarks/measured_fidelity.py), a loop of 4,096 trips of chained transposes and matmuls: 0.96 (0.86 while
  only a trip's first result waited, 0.55 before any wait).
- Every looped/unrolled order is right, and the ratios are close: attention 1.22x, 1.40x and 1.52x estimated at 2,
  4 and 8 heads against 1.19x, 1.37x and 1.50x measured (0.97x, 1.11x and 1.21x while only a trip's first result
  waited: 2 heads the wrong way round; 2.59x at 8 before straight-line code waited), the transpose into a matmul
  2.80x against 2.34x (3.79x), keys^T queries 2.61x against 2.32x (3.15x), four (512, 512) products 1.03x against
  1.02x.

Usage: python benchmarks/loop_matmuls.py --measure [--out FILE]   (TPU host)
       python benchmarks/loop_matmuls.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

STEPS, HEADS, D, C = 256, 8, 64, 256


def _looped(op, operands, result_shape, unroll=False, heads=HEADS):
    """STEPS grid steps, each a loop over `heads` heads applying `op` to each head's tiles of `operands` (abstract
    arrays of STEPS * heads tiles), its results accumulated in VMEM scratch (no HBM traffic beyond the inputs)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    lanes = min(128, result_shape[1])

    def body(*refs):
        ins, o_ref, s_ref = refs[:-2], refs[-2], refs[-1]

        @pl.when(pl.program_id(0) == 0)
        def _init():
            s_ref[...] = jnp.zeros_like(s_ref)

        def head(h, carry):
            s_ref[...] = op(*(r[h] for r in ins)) + s_ref[...] * 0.5
            return carry

        jax.lax.fori_loop(0, heads, head, 0, unroll=unroll)
        o_ref[...] = s_ref[:8, :lanes]

    def call(*xs):
        return pl.pallas_call(
            body,
            grid=(STEPS,),
            in_specs=[pl.BlockSpec((heads, *x.shape[1:]), lambda i: (i, 0, 0)) for x in xs],
            out_specs=pl.BlockSpec((8, lanes), lambda i: (0, 0)),
            out_shape=jax.ShapeDtypeStruct((8, lanes), jnp.float32),
            scratch_shapes=[pltpu.VMEM(result_shape, jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(*xs)

    return call, list(operands)


def _tiles(rows, cols, heads=HEADS):
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct((STEPS * heads, rows, cols), jnp.bfloat16)


def _cases():
    """(name, function, abstract arguments) per kind of op, looped and unrolled: what the latencies are fit on."""
    import jax
    import jax.numpy as jnp

    f32 = jnp.float32

    def tn(kt, qt):  # keys^T queries, contracting the first dimension of both (16p's scores)
        return jax.lax.dot_general(kt, qt, (((0,), (0,)), ((), ())), preferred_element_type=f32)

    def nn(q, kt):  # the same product with the queries stored (C, D)
        return jnp.dot(q, kt, preferred_element_type=f32)

    def nt(q, k):  # queries times keys^T, both stored (C, D) (flash attention's form)
        return jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=f32)

    def values(vt, a):  # (D, C) @ (C, C): 16p's output product, 256 deep
        return jnp.dot(vt, a, preferred_element_type=f32)

    def state(g, q):  # f32 (D, D) @ (D, C): 16p's state product
        return jnp.dot(g.astype(f32), q.astype(f32), preferred_element_type=f32)

    def transpose(qt):
        return jnp.transpose(qt.astype(f32))

    def exp(qt):
        return jnp.exp(qt.astype(f32))

    dc, cd, cc, dd = _tiles(D, C), _tiles(C, D), _tiles(C, C), _tiles(D, D)
    yield ("keys^T queries (64 deep, both transposed)", *_looped(tn, [dc, dc], (C, C)))
    yield ("queries keys (64 deep, plain)", *_looped(nn, [cd, dc], (C, C)))
    yield ("queries keys^T (64 deep, rhs transposed)", *_looped(nt, [cd, cd], (C, C)))
    yield ("values scores (256 deep)", *_looped(values, [dc, cc], (D, C)))
    yield ("f32 state product (64 deep)", *_looped(state, [dd, dc], (D, C)))
    yield ("transpose (64, 256) f32", *_looped(transpose, [dc], (C, D)))
    yield ("exp (64, 256) f32", *_looped(exp, [dc], (D, C)))
    yield ("keys^T queries, unrolled", *_looped(tn, [dc, dc], (C, C), unroll=True))
    yield ("values scores, unrolled", *_looped(values, [dc, cc], (D, C), unroll=True))
    yield ("f32 state product, unrolled", *_looped(state, [dd, dc], (D, C), unroll=True))
    yield ("transpose, unrolled", *_looped(transpose, [dc], (C, D), unroll=True))


def _held_out_cases():
    """Loops the latencies were not fit on, looped and unrolled: chained ops in one trip, deeper and tinier matmuls,
    more trips."""
    import jax
    import jax.numpy as jnp

    f32 = jnp.float32

    def attention(kt, qt, vt):  # scores (64 deep) then values times them (256 deep): two chained matmuls
        scores = jax.lax.dot_general(kt, qt, (((0,), (0,)), ((), ())), preferred_element_type=f32)
        return jnp.dot(vt, scores.astype(jnp.bfloat16), preferred_element_type=f32)

    def deep(q, kt):  # (256, 128) @ (128, 256)
        return jnp.dot(q, kt, preferred_element_type=f32)

    def transposed_product(qt, g):  # an f32 transpose feeding a matmul
        return jnp.dot(jnp.transpose(qt.astype(f32)), g.astype(f32), preferred_element_type=f32)

    def product(x, w):  # any shapes, bf16 operands
        return jnp.dot(x, w, preferred_element_type=f32)

    dc, dd = _tiles(D, C), _tiles(D, D)
    wide, tall = _tiles(C, 128), _tiles(128, C)
    rows, square = _tiles(8, 128, heads=32), _tiles(128, 128, heads=32)
    big, tall_k, wide_n = _tiles(512, 512, heads=4), _tiles(1024, 1024, heads=2), _tiles(1024, 256, heads=2)
    for unroll in (False, True):
        twin = ", unrolled" if unroll else ""
        yield (f"attention trip (64 then 256 deep){twin}", *_looped(attention, [dc, dc, dc], (D, C), unroll))
        yield (f"(256, 128) @ (128, 256){twin}", *_looped(deep, [wide, tall], (C, C), unroll))
        yield (f"f32 transpose into a matmul{twin}", *_looped(transposed_product, [dc, dd], (C, D), unroll))
        yield (f"32 trips of (8, 128) @ (128, 128){twin}", *_looped(product, [rows, square], (8, 128), unroll, 32))
        yield (f"4 trips of (512, 512) @ (512, 512){twin}", *_looped(product, [big, big], (512, 512), unroll, 4))
        yield (
            f"2 trips of (1024, 1024) @ (1024, 256){twin}",
            *_looped(product, [tall_k, wide_n], (1024, 256), unroll, 2),
        )
        for heads in (2, 4):  # fewer heads: shorter chains to overlap once unrolled
            few = _tiles(D, C, heads=heads)
            yield (f"attention trip, {heads} heads{twin}", *_looped(attention, [few] * 3, (D, C), unroll, heads))


def _all_cases():
    yield from _cases()
    yield from _held_out_cases()


def estimate(record_path: Path) -> None:
    record, generation = device_record.read(record_path)
    times, estimates = record["times_us"], {}
    print(f"{'case':<44} {'measured':>9} {'estimate':>9} {'ratio':>6} {'waits us':>9}  bottleneck")
    first_held_out = next(_held_out_cases())[0]
    for name, measured, found in device_record.estimated(_all_cases(), record, generation):
        if name == first_held_out:
            print("held out from the fit:")
        (k,) = found.kernels
        estimates[name] = found.total_us
        print(
            f"{name:<44} {measured:9.1f} {found.total_us:9.1f} {found.total_us / measured:6.2f} "
            f"{k.loop_wait_us:9.1f}  {k.bottleneck}",
            flush=True,
        )
    for name in estimates:
        if name.endswith(", unrolled"):
            base = name.removesuffix(", unrolled")
            looped = base if base in estimates else next(n for n in estimates if n.startswith(base + " ("))
            print(
                f"looped / unrolled: measured {times[looped] / times[name]:4.2f}x, estimated "
                f"{estimates[looped] / estimates[name]:4.2f}x  ({looped})"
            )


if __name__ == "__main__":
    device_record.main(__doc__, _all_cases, estimate, ROOT / "benchmarks" / "data" / "loop_matmuls_v5e.json")
