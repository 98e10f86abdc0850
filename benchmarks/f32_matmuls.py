"""What an f32 matmul costs in a Pallas kernel beside a bf16 one: timed on a TPU, beside the estimate.

Each case is a GEMM of STEPS grid steps, each an (M, K) block of the LHS times one resident (K, N) block into an f32
(M, N) output block: bf16 operands, f32 operands (cast to bf16 in the kernel, at the default precision, at
precision=HIGHEST), and K = 512 twins whose compute and HBM time are close.

Measured (benchmarks/data/f32_matmuls_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1, libtpu 0.0.50.1,
v5e's raw model):
  case                                       measured  estimate  ratio
  bf16 operands                               189.8 us   183.2    0.97
  f32 operands cast to bf16 in the kernel     220.2      185.9    0.84
  f32 operands, default precision             220.1      186.9    0.85
  bf16 operands, K 512                        134.7      112.2    0.83
  f32 operands, default precision, K 512      159.6      134.0    0.84
  f32 operands, HIGHEST precision            1239.7     1043.0    0.84
- At the default precision f32 operands take the MXU's one bf16 pass: the same time as the same operands cast to
  bf16 in the kernel (220.1 and 220.2 us), more than bf16 inputs only by their bytes. HIGHEST takes about six
  passes (6.5x). The compiled schedules say the same on every generation (bundles per step, default f32 against
  HIGHEST: v5e 15,264 / 89,436, v6e 4,427 / 25,586, 7x 3,861 / 21,524), so the estimate prices passes from them.
- The cases whose HBM time is close to their compute time come out at 0.83-0.85: the raw model gives v5e all of
  its HBM bandwidth (no tokamax measurement fits v5e's calibration); 80% of it puts those four at 1.02-1.04, as
  benchmarks/grid_steps.py's streaming x * 2 in 1024-row blocks (67 MB in 102 us) suggests. Tried on the corpus
  (benchmarks/measured_fidelity.py with v5e's HBM efficiency at 0.8): the candidates' mean |log(estimate /
  measured)| 0.076 -> 0.072 (12p's RMSNorm 0.83 -> 1.03, 26k, 28k and 33k 0.84-0.85 -> 0.98-1.04), but 21k and
  23k 1.01 -> 1.24, 11p 0.95 -> 1.18, and the experts' 0.078 -> 0.105 (6p's 1.41 -> 1.52, 11p's 1.04 -> 1.29):
  kernels reach different shares of the bandwidth (benchmarks/hbm_mix.py: reads more than writes), and one share
  for all does not fit them better. v5e keeps the raw model.

Usage: python benchmarks/f32_matmuls.py --measure [--out FILE]   (TPU host)
       python benchmarks/f32_matmuls.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

STEPS, M, K, N = 16, 1024, 1024, 1024


def _gemm(dtype, precision=None, cast=None, k=K):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def body(a_ref, b_ref, o_ref):
        a, b = a_ref[...], b_ref[...]
        if cast is not None:
            a, b = a.astype(cast), b.astype(cast)
        o_ref[...] = jnp.dot(a, b, precision=precision, preferred_element_type=jnp.float32)

    def call(a, b):
        return pl.pallas_call(
            body,
            grid=(STEPS,),
            in_specs=[pl.BlockSpec((M, k), lambda i: (i, 0)), pl.BlockSpec((k, N), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((M, N), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((STEPS * M, N), jnp.float32),
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=64 * 2**20),
        )(a, b)

    return call, [jax.ShapeDtypeStruct((STEPS * M, k), dtype), jax.ShapeDtypeStruct((k, N), dtype)]


def _cases():
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    yield ("bf16 operands", *_gemm(jnp.bfloat16))
    yield ("f32 operands cast to bf16 in the kernel", *_gemm(jnp.float32, cast=jnp.bfloat16))
    yield ("f32 operands, default precision", *_gemm(jnp.float32))
    yield ("bf16 operands, K 512", *_gemm(jnp.bfloat16, k=512))
    yield ("f32 operands, default precision, K 512", *_gemm(jnp.float32, k=512))
    yield ("f32 operands, HIGHEST precision", *_gemm(jnp.float32, precision=hi))


def estimate(record_path: Path) -> None:
    record, generation = device_record.read(record_path)
    print(f"{'case':<44} {'measured':>9} {'estimate':>9} {'ratio':>6}  bottleneck")
    for name, measured, found in device_record.estimated(_cases(), record, generation):
        ratio = found.total_us / measured
        print(f"{name:<44} {measured:9.1f} {found.total_us:9.1f} {ratio:6.2f}  {found.kernels[0].bottleneck}")


if __name__ == "__main__":
    device_record.main(__doc__, _cases, estimate, ROOT / "benchmarks" / "data" / "f32_matmuls_v5e.json")
