# 43k_Gemm_BatchNorm_Scaling_Softmax: y = x @ W + b; z = scale * (bn_scale * (y - bn_mean) /
# sqrt(bn_var + eps) + bn_bias); out = softmax_n(z).
# The inference BatchNorm, the bias and the scalar scale fold into one per-column scale and shift (length-N
# f32 vectors computed in the wrapper). Two Pallas kernels:
#   1. tiled GEMM (grid (M/bm, N/bn, K/bk), K last and "arbitrary", f32 VMEM accumulator); the last-K
#      epilogue applies the column scale and shift and stores z in bf16 (the reference's z is bf16 too);
#   2. a row softmax over whole (rb, N) rows: max, exp, sum and the division in f32, one rounding.
# The softmax needs every column of a row; a (bm, N) GEMM tile would make each row block re-stream all
# of W with a small bm, so the row statistics are left to the second, memory-bound pass.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPI_ROWS = 128  # the GEMM epilogue walks its tile in row chunks (small f32 temporaries)
ROW_BLOCK_BYTES = 1 << 20  # bf16 bytes per block of whole rows in the softmax pass


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


# Tile targets (bm, bn, bk) by the chip's VMEM: big tiles re-read x and W less often and take fewer grid
# steps (v6e needs bm * bn / (bm + bn) above ~560 to stay compute-bound); 64 MiB chips (v5p, 7x) get a
# shorter K tile, v4's 16 MiB the tiles that fit its default scoped limit.
TILES_BY_VMEM = ((100 * 2**20, (2048, 1024, 2048)), (48 * 2**20, (2048, 1024, 1024)), (0, (512, 1024, 1024)))


def _tiles():
    """((bm, bn, bk) targets, vmem_limit_bytes) for the chip being compiled for."""
    vmem = pltpu.get_tpu_info().vmem_capacity_bytes
    tiles = next(t for least, t in TILES_BY_VMEM if vmem >= least)
    return tiles, (vmem * 3 // 4 if vmem >= 48 * 2**20 else None)


def _epilogue(acc, col_scale, col_shift):
    return acc * col_scale + col_shift


def _row_op(z):
    e = jnp.exp(z - jnp.max(z, axis=1, keepdims=True))
    return e * (1.0 / jnp.sum(e, axis=1, keepdims=True))  # one division per row, not per element


def _gemm_kernel(x_ref, w_ref, cs_ref, ct_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _():
        rows = _fit(acc_ref.shape[0], EPI_ROWS, 8)

        def chunk(r, carry):
            r0 = pl.multiple_of(r * rows, rows)
            o_ref[pl.ds(r0, rows), :] = _epilogue(acc_ref[pl.ds(r0, rows), :], cs_ref[...], ct_ref[...]).astype(
                o_ref.dtype
            )
            return carry

        jax.lax.fori_loop(0, acc_ref.shape[0] // rows, chunk, 0)


def _row_kernel(z_ref, o_ref):
    o_ref[...] = _row_op(z_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, weight, bias, bn_scale, bn_bias, bn_mean, bn_var, scale):
    def f32(v):
        return v.astype(jnp.float32)

    col_scale = f32(scale)[0] * f32(bn_scale) / jnp.sqrt(f32(bn_var) + 1e-5)
    col_shift = (f32(bias) - f32(bn_mean)) * col_scale + f32(scale)[0] * f32(bn_bias)
    m, kdim = x.shape
    n = weight.shape[1]
    (tm, tn, tk), vmem_limit = _tiles()
    bm, bn, bk = _fit(m, tm, 16), _fit(n, tn, 128), _fit(kdim, tk, 128)
    z = pl.pallas_call(
        _gemm_kernel,
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            pl.BlockSpec((1, bn), lambda i, j, k: (0, j)),
            pl.BlockSpec((1, bn), lambda i, j, k: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=vmem_limit
        ),
    )(x, weight, col_scale.reshape(1, n), col_shift.reshape(1, n))
    rb = _fit(m, max(16, ROW_BLOCK_BYTES // (n * 2)), 16)
    row_spec = pl.BlockSpec((rb, n), lambda i: (i, 0))
    return pl.pallas_call(
        _row_kernel,
        grid=(m // rb,),
        in_specs=[row_spec],
        out_specs=row_spec,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(z)
