"""What small matmuls and transposes in an in-kernel loop cost: 16p's shapes, one kind of op per kernel, looped and
unrolled, timed on a TPU beside the estimate.

16p_Mamba2_SSD's solution is estimated at about half its measured time on a v5e (0.55x). Its loop over heads holds
64-deep matmuls (one contracting the first dimension of both operands: keys^T queries), f32 state matmuls and
transposes. Each case here is STEPS grid steps, each a fori_loop over HEADS heads applying one such op to (64, 256)
tiles, its results accumulated in VMEM scratch; the unrolled twins run the same ops with the loop unrolled.

Measured (benchmarks/data/loop_matmuls_v5e.json: one v5e, jax 0.10.2, repeat runs within 0.1%; estimates with jax
0.12.0.1 and libtpu 0.0.50.1):
- Looped, the estimate is 0.39-0.70 of the measured time wherever the loop body waits on a matmul or a transpose:
  keys^T queries 0.41, transpose 0.39, f32 state product 0.49. Unrolled, the same work is estimated at 0.73-0.83.
- Looped against unrolled measures 2.3x (keys^T queries), 2.6x (transpose) and 1.5x (f32 state product); the
  estimate sees 1.18x, 1.20x and 1.00x. Per loop trip the looped form loses 170, 123 and 59 ns (about 255, 185 and
  90 cycles at 1.5 GHz); 4 ns for the 256-deep product, whose loop is memory-bound (its DMAs hide the wait).
- Why: in the schedule (libtpu's final_bundles dump) the loop body pops its first matmul result (vpop ... mrf) in
  the bundle after its last vmatmul, so the pop stalls until the MXU has the result; the static bundle count holds
  no such wait. Unrolled, one head's results are popped while the next head's operands are pushed.
- 16p's loop runs 4,096 trips (512 steps x 8 heads), each with chained matmul and transpose results: ~1.3 ms of
  such waits would explain its 0.55x.
Next: model the wait from the schedule (per loop body, time each result pop against its push plus the unit's
latency, one number per unit and generation, fitted on this record) and add it to every trip. The
estimate_fidelity cache keeps parsed counts, not dumps, so checking the tokamax groups after that change means
compiling them again (~40 min on 2 cores).

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


def _cases():
    """(name, function, abstract arguments) per kind of op, looped and unrolled."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    f32 = jnp.float32

    def looped(op, operands, result_shape, unroll=False):
        """STEPS grid steps, each a loop over HEADS heads applying `op` to each head's tiles of `operands`, its
        results accumulated in VMEM scratch (no HBM traffic beyond the inputs)."""
        lanes = min(128, result_shape[1])

        def body(*refs):
            ins, o_ref, s_ref = refs[:-2], refs[-2], refs[-1]

            @pl.when(pl.program_id(0) == 0)
            def _init():
                s_ref[...] = jnp.zeros_like(s_ref)

            def head(h, carry):
                s_ref[...] = op(*(r[h] for r in ins)) + s_ref[...] * 0.5
                return carry

            jax.lax.fori_loop(0, HEADS, head, 0, unroll=unroll)
            o_ref[...] = s_ref[:8, :lanes]

        def call(*xs):
            return pl.pallas_call(
                body,
                grid=(STEPS,),
                in_specs=[pl.BlockSpec((HEADS, *x.shape[1:]), lambda i: (i, 0, 0)) for x in xs],
                out_specs=pl.BlockSpec((8, lanes), lambda i: (0, 0)),
                out_shape=jax.ShapeDtypeStruct((8, lanes), f32),
                scratch_shapes=[pltpu.VMEM(result_shape, f32)],
                compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
            )(*xs)

        return call, list(operands)

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

    def tiles(rows, cols):
        return jax.ShapeDtypeStruct((STEPS * HEADS, rows, cols), jnp.bfloat16)

    dc, cd, cc, dd = tiles(D, C), tiles(C, D), tiles(C, C), tiles(D, D)
    yield ("keys^T queries (64 deep, both transposed)", *looped(tn, [dc, dc], (C, C)))
    yield ("queries keys (64 deep, plain)", *looped(nn, [cd, dc], (C, C)))
    yield ("queries keys^T (64 deep, rhs transposed)", *looped(nt, [cd, cd], (C, C)))
    yield ("values scores (256 deep)", *looped(values, [dc, cc], (D, C)))
    yield ("f32 state product (64 deep)", *looped(state, [dd, dc], (D, C)))
    yield ("transpose (64, 256) f32", *looped(transpose, [dc], (C, D)))
    yield ("exp (64, 256) f32", *looped(exp, [dc], (D, C)))
    yield ("keys^T queries, unrolled", *looped(tn, [dc, dc], (C, C), unroll=True))
    yield ("values scores, unrolled", *looped(values, [dc, cc], (D, C), unroll=True))
    yield ("f32 state product, unrolled", *looped(state, [dd, dc], (D, C), unroll=True))
    yield ("transpose, unrolled", *looped(transpose, [dc], (C, D), unroll=True))


def estimate(record_path: Path) -> None:
    import jaxbench_mcp

    record, generation = device_record.read(record_path)
    times = record["times_us"]
    print(f"{'case':<44} {'measured':>9} {'estimate':>9} {'ratio':>6} {'bundles us':>10}  bottleneck")
    for name, fn, abstract in _cases():
        if name not in times:
            continue
        found = jaxbench_mcp.estimate(fn, *abstract, target=generation)
        (k,) = found.kernels
        print(
            f"{name:<44} {times[name]:9.1f} {found.total_us:9.1f} {found.total_us / times[name]:6.2f} "
            f"{k.compute_us:10.1f}  {k.bottleneck}",
            flush=True,
        )
    trips = STEPS * HEADS
    for name in times:
        if name.endswith(", unrolled"):
            looped = next(n for n in times if n.startswith(name.removesuffix(", unrolled") + " ("))
            print(f"looped - unrolled, per trip: {(times[looped] - times[name]) * 1e3 / trips:6.1f} ns  ({looped})")


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "loop_matmuls_v5e.json")
