# 24k_Matmul_Scale_ResidualAdd_Clamp_LogSumExp_Mish: z = clip(4 * (x @ W.T + b), -10, 10);
# l = logsumexp_n(z), a (B, 1) column; out = l * mish(l).
# Tiled GEMM against the (N, K) weight (dot_general contracting both operands' K axis, no transpose in
# the wrapper), grid (M/bm, N/bn, K/bk) with N and K "arbitrary". On the last K step of a tile the
# epilogue forms z in f32 and adds sum(exp(z)) per row into a (bm, 1) f32 running sum kept across the N
# axis; the clip bounds z by 10, so exp(z) <= 2.3e4 and the sum of N terms cannot overflow f32: no
# running maximum is needed. The last (j, k) step takes the log and applies l * mish(l).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPI_ROWS = 128  # the epilogue walks the tile in row chunks so its f32 temporaries stay small
NT_DIMS = (((1,), (1,)), ((), ()))  # contract x's axis 1 with W's axis 1: x @ W.T


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


def _softplus(y):
    return jnp.maximum(y, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(y)))


def _kernel(x_ref, w_ref, b_ref, o_ref, acc_ref, sum_ref):
    j, k = pl.program_id(1), pl.program_id(2)
    last_k = k == pl.num_programs(2) - 1

    @pl.when((j == 0) & (k == 0))
    def _():
        sum_ref[...] = jnp.zeros_like(sum_ref)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jax.lax.dot_general(x_ref[...], w_ref[...], NT_DIMS, preferred_element_type=jnp.float32)

    @pl.when(last_k)
    def _():
        rows = _fit(acc_ref.shape[0], EPI_ROWS, 8)

        def chunk(r, carry):
            r0 = pl.multiple_of(r * rows, rows)
            z = jnp.clip((acc_ref[pl.ds(r0, rows), :] + b_ref[...]) * 4.0, -10.0, 10.0)
            sum_ref[pl.ds(r0, rows), :] += jnp.sum(jnp.exp(z), axis=1, keepdims=True)
            return carry

        jax.lax.fori_loop(0, acc_ref.shape[0] // rows, chunk, 0)

    @pl.when(last_k & (j == pl.num_programs(1) - 1))
    def _():
        lse = jnp.log(sum_ref[...])
        o_ref[...] = (lse * (lse * jnp.tanh(_softplus(lse)))).astype(o_ref.dtype)


def workload(x, weight, bias):
    m, kdim = x.shape
    n = weight.shape[0]
    (tm, tn, tk), vmem_limit = _tiles()
    bm, bn, bk = _fit(m, tm, 16), _fit(n, tn, 128), _fit(kdim, tk, 128)
    return pl.pallas_call(
        _kernel,
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bn, bk), lambda i, j, k: (j, k)),
            pl.BlockSpec((1, bn), lambda i, j, k: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, 1), lambda i, j, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((m, 1), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32), pltpu.VMEM((bm, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary"), vmem_limit_bytes=vmem_limit
        ),
    )(x, weight, bias.astype(jnp.float32).reshape(1, n))
