# 26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply: out = (in_bias + y) * y.
# The reference instance-normalises each GEMM output over a 1x1 spatial extent: the mean of one element
# is the element itself and the variance is 0, so every normalised value is exactly 0 and the affine step
# leaves in_bias (see the workload notes). x, bmm_weight, bmm_bias and in_weight therefore cannot affect
# the output, and the kernel is the elementwise (in_bias + y) * y over (B, N), in f32, rounded once:
# a memory-bound pass with lane-dense (bm, N) blocks.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK_BYTES = 2 * 1024 * 1024  # bytes of y per block


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _kernel(y_ref, ib_ref, o_ref):
    y = y_ref[...].astype(jnp.float32)
    o_ref[...] = ((ib_ref[...] + y) * y).astype(o_ref.dtype)


def workload(x, y, bmm_weight, bmm_bias, in_weight, in_bias):
    b, n = y.shape
    bn = _fit(n, 4096, 128)
    bm = _fit(b, max(16, BLOCK_BYTES // (bn * y.dtype.itemsize)), 16)
    return pl.pallas_call(
        _kernel,
        grid=(b // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j)), pl.BlockSpec((1, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((b, n), y.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(y, in_bias.astype(jnp.float32).reshape(1, n))
