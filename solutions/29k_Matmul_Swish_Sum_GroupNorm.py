# 29k_Matmul_Swish_Sum_GroupNorm: y = x @ W (no bias); y = swish(y) + bias; GroupNorm over groups of 64
# consecutive features, then * gn_weight + gn_bias.
# Tiled GEMM (grid (M/bm, N/bn, K/bk), f32 VMEM accumulator). bn is a multiple of the group size, so every
# group lies inside one tile and the whole GroupNorm runs in the last-K epilogue. Group statistics use the
# MXU instead of a lane relayout: the sums over each group's 64 lanes are y @ P with P the (bn, bn/64) 0/1
# group matrix, and the per-group scale and shift go back to the lanes with P.T. To keep f32 accuracy on a
# bf16 MXU each f32 operand is split into a bf16 high part and a bf16 remainder (two passes; P is exact).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPI_ROWS = 128  # the epilogue walks the tile in row chunks so its f32 temporaries stay small
GROUP = 64
EPS = 1e-5


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


def _dot_f32(a, p):
    """a (f32) @ p (exact 0/1 bf16) to ~16 bits: two bf16 MXU passes, a high part and the remainder.

    The high part keeps the top 16 bits of each f32 (a bit mask, so it is exactly a bf16 value) and the
    remainder a - hi is exact in f32. Splitting with a round trip through bf16 instead,
    hi = a.astype(bf16); lo = a - hi.astype(f32), gives the same split (interpret mode
    too: checked on 29k); the mask states the split without relying on how a compiler treats converts.
    """
    bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & jnp.uint32(0xFFFF0000)
    hi = jax.lax.bitcast_convert_type(bits, jnp.float32)
    return jnp.dot(hi.astype(jnp.bfloat16), p, preferred_element_type=jnp.float32) + jnp.dot(
        (a - hi).astype(jnp.bfloat16), p, preferred_element_type=jnp.float32
    )


def _group_norm(y, p_ref, pt_ref):
    """Normalise each run of GROUP consecutive lanes of y (rows, bn) to zero mean and unit variance."""
    mean = _dot_f32(y, p_ref[...]) * (1.0 / GROUP)  # (rows, groups)
    var = jnp.maximum(_dot_f32(y * y, p_ref[...]) * (1.0 / GROUP) - mean * mean, 0.0)
    rstd = jax.lax.rsqrt(var + EPS)
    scale = _dot_f32(rstd, pt_ref[...])  # back to (rows, bn)
    shift = _dot_f32(-mean * rstd, pt_ref[...])
    return y * scale + shift


def _epilogue(acc, p_ref, pt_ref, b, gw, gb):
    y = acc * jax.nn.sigmoid(acc) + b
    return _group_norm(y, p_ref, pt_ref) * gw + gb


def _kernel(x_ref, w_ref, p_ref, pt_ref, b_ref, gw_ref, gb_ref, o_ref, acc_ref):
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
            y = _epilogue(acc_ref[pl.ds(r0, rows), :], p_ref, pt_ref, b_ref[...], gw_ref[...], gb_ref[...])
            o_ref[pl.ds(r0, rows), :] = y.astype(o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, acc_ref.shape[0] // rows, chunk, 0)


def workload(x, weight, bias, gn_weight, gn_bias):
    m, kdim = x.shape
    n = weight.shape[1]
    (tm, tn, tk), vmem_limit = _tiles()
    bm, bn, bk = _fit(m, tm, 16), _fit(n, tn, max(128, GROUP)), _fit(kdim, tk, 128)
    groups = bn // GROUP
    # P[c, g] = 1 when lane c of a tile belongs to group g (the same for every tile).
    p = (jnp.arange(bn)[:, None] // GROUP == jnp.arange(groups)[None, :]).astype(jnp.bfloat16)

    def vec(v):
        return v.astype(jnp.float32).reshape(1, n)

    vec_spec = pl.BlockSpec((1, bn), lambda i, j, k: (0, j))
    return pl.pallas_call(
        _kernel,
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            pl.BlockSpec((bn, groups), lambda i, j, k: (0, 0)),
            pl.BlockSpec((groups, bn), lambda i, j, k: (0, 0)),
        ]
        + [vec_spec] * 3,
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"), vmem_limit_bytes=vmem_limit
        ),
    )(x, weight, p, p.T, vec(bias), vec(gn_weight), vec(gn_bias))
