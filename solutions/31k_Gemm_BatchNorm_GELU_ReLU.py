# 31k_Gemm_BatchNorm_GELU_ReLU: y = x @ W.T + b; BatchNorm with the batch's own statistics (biased
# variance, eps 1e-5, * bn_weight + bn_bias); out = relu(gelu_tanh(.)).
# The statistics couple all B rows, so two Pallas kernels and a tiny reduction between them:
#   1. tiled GEMM against the (N, K) weight (dot_general on both K axes), grid (M/bm, N/bn, K/bk) all
#      independent but K; the last-K epilogue stores y in bf16 (as the reference does) and writes the
#      tile's f32 column sums of y and y*y, taken from the f32 accumulator, as a (2, bn) partial;
#   2. glue adds the M/bm partials and forms a per-column scale and shift (length-N vectors); a
#      memory-bound elementwise kernel applies them, the GELU and the ReLU in f32, one rounding.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPI_ROWS = 128  # the GEMM epilogue walks its tile in row chunks (small f32 temporaries)
EW_ROWS, EW_COLS = 256, 2048  # block of the elementwise pass
EPS = 1e-5
NT_DIMS = (((1,), (1,)), ((), ()))  # x @ W.T


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


def _gemm_kernel(x_ref, w_ref, b_ref, y_ref, stats_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jax.lax.dot_general(x_ref[...], w_ref[...], NT_DIMS, preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _():
        rows = _fit(acc_ref.shape[0], EPI_ROWS, 8)

        def chunk(r, carry):
            s1, s2 = carry
            r0 = pl.multiple_of(r * rows, rows)
            y = acc_ref[pl.ds(r0, rows), :] + b_ref[...]
            y_ref[pl.ds(r0, rows), :] = y.astype(y_ref.dtype)
            return (s1 + jnp.sum(y, axis=0, keepdims=True), s2 + jnp.sum(y * y, axis=0, keepdims=True))

        zero = jnp.zeros((1, acc_ref.shape[1]), jnp.float32)
        s1, s2 = jax.lax.fori_loop(0, acc_ref.shape[0] // rows, chunk, (zero, zero))
        stats_ref[0:1, :] = s1
        stats_ref[1:2, :] = s2


def _norm_kernel(y_ref, scale_ref, shift_ref, o_ref):
    z = y_ref[...].astype(jnp.float32) * scale_ref[...] + shift_ref[...]
    o_ref[...] = jnp.maximum(jax.nn.gelu(z, approximate=True), 0.0).astype(o_ref.dtype)


def workload(x, gemm_weight, gemm_bias, bn_weight, bn_bias):
    m, kdim = x.shape
    n = gemm_weight.shape[0]
    (tm, tn, tk), vmem_limit = _tiles()
    bm, bn, bk = _fit(m, tm, 16), _fit(n, tn, 128), _fit(kdim, tk, 128)
    y, partials = pl.pallas_call(
        _gemm_kernel,
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bn, bk), lambda i, j, k: (j, k)),
            pl.BlockSpec((1, bn), lambda i, j, k: (0, j)),
        ],
        out_specs=[
            pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            pl.BlockSpec((None, 2, bn), lambda i, j, k: (i, 0, j)),
        ],
        out_shape=[jax.ShapeDtypeStruct((m, n), x.dtype), jax.ShapeDtypeStruct((m // bm, 2, n), jnp.float32)],
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=vmem_limit
        ),
    )(x, gemm_weight, gemm_bias.astype(jnp.float32).reshape(1, n))
    # Glue on (M/bm, 2, N) partials: batch mean and biased variance per column -> scale and shift.
    sums = jnp.sum(partials, axis=0)
    mean = sums[0] / m
    var = jnp.maximum(sums[1] / m - mean * mean, 0.0)
    scale = bn_weight.astype(jnp.float32) * jax.lax.rsqrt(var + EPS)
    shift = bn_bias.astype(jnp.float32) - mean * scale
    er, ec = _fit(m, EW_ROWS, 16), _fit(n, EW_COLS, 128)
    vec_spec = pl.BlockSpec((1, ec), lambda i, j: (0, j))
    return pl.pallas_call(
        _norm_kernel,
        grid=(m // er, n // ec),
        in_specs=[pl.BlockSpec((er, ec), lambda i, j: (i, j)), vec_spec, vec_spec],
        out_specs=pl.BlockSpec((er, ec), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(y, scale.reshape(1, n), shift.reshape(1, n))
