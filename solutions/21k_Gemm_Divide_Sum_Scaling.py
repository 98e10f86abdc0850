# 21k_Gemm_Divide_Sum_Scaling: out = 1.5 * sum_j (x @ W.T)[:, j] / 2, a (B, 1) column.
# The row sum of a linear map is a matrix-vector product: sum_j (x @ W.T)[b, j] = x[b] . colsum(W),
# with colsum(W)[k] = sum_j W[j, k]. Two Pallas kernels, both memory-bound and reading each operand once:
#   1. column sums of W (f32, accumulated over an "arbitrary" row-block axis straight into the output);
#   2. the matvec x . colsum(W) on the VPU in f32 (multiply, then a lane reduction per row), scaled by 0.75.
# This replaces a 2*B*K*H-FLOP GEMM by ~3*K*H + 2*B*K FLOPs; the math is exact, only the rounding differs.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

COLSUM_ROWS, COLSUM_COLS = 512, 2048  # (rows, cols) block of W: 2 MiB of bf16
MATVEC_ROWS, MATVEC_COLS = 256, 2048  # (rows, cols) block of x


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _colsum_kernel(w_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.sum(w_ref[...].astype(jnp.float32), axis=0, keepdims=True)


def column_sums(w):
    """(R, C) -> (1, C) f32 sums over the rows."""
    r, c = w.shape
    br, bc = _fit(r, COLSUM_ROWS, 16), _fit(c, COLSUM_COLS, 128)
    return pl.pallas_call(
        _colsum_kernel,
        grid=(c // bc, r // br),
        in_specs=[pl.BlockSpec((br, bc), lambda j, i: (i, j))],
        out_specs=pl.BlockSpec((1, bc), lambda j, i: (0, j)),
        out_shape=jax.ShapeDtypeStruct((1, c), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(w)


def _matvec_kernel(x_ref, v_ref, o_ref, acc_ref, *, scale):
    k = pl.program_id(1)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.sum(x_ref[...].astype(jnp.float32) * v_ref[...], axis=1, keepdims=True)

    @pl.when(k == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = (acc_ref[...] * scale).astype(o_ref.dtype)


def workload(x, weight):
    b, kdim = x.shape
    colsum = column_sums(weight)  # (1, K) f32
    bm, bk = _fit(b, MATVEC_ROWS, 16), _fit(kdim, MATVEC_COLS, 128)
    return pl.pallas_call(
        functools.partial(_matvec_kernel, scale=1.5 / 2.0),
        grid=(b // bm, kdim // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, k: (i, k)), pl.BlockSpec((1, bk), lambda i, k: (0, k))],
        out_specs=pl.BlockSpec((bm, 1), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((b, 1), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x, colsum)
