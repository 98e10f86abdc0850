# 49k_Matmul_AvgPool_GELU_Scale_Max: y = x @ W + b; p = avgpool_16(y) over the features; out[r] =
# max_g(2 * gelu_tanh(p[r, g])), shape (B,).
# Average pooling over columns is linear, so it folds into the weight: avgpool_16(x @ W + b) =
# x @ Wp + bp with Wp[:, g] = mean of W's columns 16g..16g+15 (and bp likewise). Two Pallas kernels:
#   1. pool W: each (bk, bn) tile times the (bn, bn/16) 0/1 window matrix on the MXU (exact: bf16 inputs,
#      f32 sums of 16 terms), scaled by 1/16 and stored in bf16 (a memory-bound pass over W);
#   2. the 16x narrower GEMM x @ Wp, grid (M/bm, K/bk) with the whole N/16 width per tile, whose last-K
#      epilogue adds bp, applies 2 * GELU in f32 and takes the row max.
# This is 1/16 of the reference's GEMM FLOPs; the math is exact, only the rounding differs (Wp is rounded
# to bf16 once instead of y being rounded per element).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

POOL = 16
BM, BK = 512, 1024
POOL_ROWS, POOL_COLS = 512, 2048  # W tile for the pooling kernel; POOL_COLS / 16 is lane-dense (128)


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _pool_kernel(w_ref, p_ref, o_ref):
    s = jnp.dot(w_ref[...], p_ref[...], preferred_element_type=jnp.float32)
    o_ref[...] = (s * (1.0 / POOL)).astype(o_ref.dtype)


def _gemm_kernel(x_ref, wp_ref, bp_ref, o_ref, acc_ref):
    k = pl.program_id(1)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], wp_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(1) - 1)
    def _():
        p = jax.nn.gelu(acc_ref[...] + bp_ref[...], approximate=True) * 2.0
        o_ref[...] = jnp.max(p, axis=1, keepdims=True).astype(o_ref.dtype)


def workload(x, weight, bias):
    m, kdim = x.shape
    n = weight.shape[1]
    g = n // POOL
    # Pool W's columns: tiles of POOL_COLS columns (a multiple of 16 * 128 so the pooled tile is
    # lane-dense), or all of them when that does not divide N.
    br, bc = _fit(kdim, POOL_ROWS, 16), _fit(n, POOL_COLS, POOL * 128)
    window = (jnp.arange(bc)[:, None] // POOL == jnp.arange(bc // POOL)[None, :]).astype(weight.dtype)
    wp = pl.pallas_call(
        _pool_kernel,
        grid=(kdim // br, n // bc),
        in_specs=[pl.BlockSpec((br, bc), lambda i, j: (i, j)), pl.BlockSpec((bc, bc // POOL), lambda i, j: (0, 0))],
        out_specs=pl.BlockSpec((br, bc // POOL), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((kdim, g), weight.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(weight, window)
    bp = bias.astype(jnp.float32).reshape(g, POOL).mean(axis=1).reshape(1, g)  # N-element glue
    bm, bk = _fit(m, BM, 16), _fit(kdim, BK, 128)
    out = pl.pallas_call(
        _gemm_kernel,
        grid=(m // bm, kdim // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, k: (i, k)),
            pl.BlockSpec((bk, g), lambda i, k: (k, 0)),
            pl.BlockSpec((1, g), lambda i, k: (0, 0)),
        ],
        out_specs=pl.BlockSpec((bm, 1), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, 1), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, g), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x, wp, bp)
    return out.reshape(m)
