# 17p_Triangle_Multiplication: AlphaFold2 outgoing triangle multiplicative update, three Pallas kernels.
# r[i, j, c] = sum_k left[i, k, c] right[j, k, c] is, for every channel c, an (N x N) @ (N x N)^T
# matmul, so left and right are produced channel-major, (C, N, N), and the contraction is a batched
# MXU matmul over channels:
#   1. projections: for 8 rows i of pair_act at a time, the four C x C projections run as one
#      (4C x C) x (C x bk) matmul that yields them transposed (channels on sublanes, k on lanes);
#      left = proj * sigmoid(gate) (f32), times the mask (a per-(i, k) scalar, so it commutes with the
#      projection), rounded to bf16 once and stored as the (C, i, k-block) slab of left^T / right^T.
#   2. contraction: grid (channel, i block, j block, k block), k last and "arbitrary", f32
#      accumulator; the channel is a squeezed block dimension, so each step is a plain 2-D
#      (bi, bk) x (bj, bk)^T matmul (a 3-D batched dot_general with one batch compiled to far slower
#      code); r is stored channel-major in bf16 (as the reference's einsum result is bf16).
#   3. output: per row i, the (C, bj) slab of r gets its RMS over channels (a sublane reduction),
#      center_scale, the out projection (a transposed-LHS matmul back to (bj, C)) and the output gate
#      sigmoid(pair_act @ W_og) (unmasked pair_act, as the reference), in f32, rounded once.
# Blocks fit v4's 16 MiB of VMEM; every tile's lane dimension is a multiple of 128.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = 8  # rows i per step in kernels 1 and 3
COLS = 256  # k (kernel 1) or j (kernel 3) columns per step
MM_BLOCK = 768  # i and j blocks of the contraction
MM_K = 512  # k block of the contraction


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


_TN = (((0,), (1,)), ((), ()))  # contract lhs dim 0 with rhs dim 1: W^T x^T


def _proj_kernel(act_ref, mask_ref, w_ref, l_ref, r_ref, lf_ref, rf_ref):
    C = l_ref.shape[0]
    w = w_ref[...]  # (C, 4C): [Wl | Wlg | Wr | Wrg]
    for i in range(act_ref.shape[0]):
        p = jax.lax.dot_general(w, act_ref[i], _TN, preferred_element_type=jnp.float32)  # (4C, bk)
        m = mask_ref[pl.ds(i, 1), :].astype(jnp.float32)  # (1, bk)
        lf_ref[:, i, :] = p[:C] * jax.nn.sigmoid(p[C : 2 * C]) * m
        rf_ref[:, i, :] = p[2 * C : 3 * C] * jax.nn.sigmoid(p[3 * C :]) * m
    # Rows go to f32 scratch one by one; the bf16 slabs are packed and stored whole.
    l_ref[...] = lf_ref[...].astype(l_ref.dtype)
    r_ref[...] = rf_ref[...].astype(r_ref.dtype)


def _contract_kernel(l_ref, r_ref, o_ref, acc_ref):
    k = pl.program_id(3)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jax.lax.dot_general(
        l_ref[...], r_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
    )

    @pl.when(k == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _out_kernel(r_ref, act_ref, scale_ref, wo_ref, wg_ref, o_ref, rn_ref):
    # RMS norm over channels on the whole (C, bi, bj) slab: a reduction over the leading axis.
    r = r_ref[...].astype(jnp.float32)
    rn_ref[...] = r * jax.lax.rsqrt(jnp.mean(r * r, axis=0, keepdims=True) + 1e-6) * scale_ref[...]
    for i in range(act_ref.shape[0]):
        out = jax.lax.dot_general(
            rn_ref[:, i, :].astype(wo_ref.dtype),
            wo_ref[...],
            (((0,), (0,)), ((), ())),
            preferred_element_type=jnp.float32,
        )  # (bj, C)
        gate = jnp.dot(act_ref[i], wg_ref[...], preferred_element_type=jnp.float32)
        o_ref[i] = (out * jax.nn.sigmoid(gate)).astype(o_ref.dtype)


def workload(
    pair_act, mask, left_proj_w, right_proj_w, left_gate_w, right_gate_w, center_scale, out_proj_w, out_gate_w
):
    N, _, C = pair_act.shape
    dt = pair_act.dtype
    bi, bk = _fit(N, ROWS, 8), _fit(N, COLS, 128)
    w4 = jnp.concatenate([left_proj_w, left_gate_w, right_proj_w, right_gate_w], axis=1)  # (C, 4C)
    mask2 = mask.reshape(N, N)
    slab = pl.BlockSpec((C, bi, bk), lambda i, k: (0, i, k))
    left_t, right_t = pl.pallas_call(
        _proj_kernel,
        grid=(N // bi, N // bk),
        in_specs=[
            pl.BlockSpec((bi, bk, C), lambda i, k: (i, k, 0)),
            pl.BlockSpec((bi, bk), lambda i, k: (i, k)),
            pl.BlockSpec((C, 4 * C), lambda i, k: (0, 0)),
        ],
        out_specs=[slab, slab],
        out_shape=[jax.ShapeDtypeStruct((C, N, N), dt)] * 2,
        scratch_shapes=[pltpu.VMEM((C, bi, bk), jnp.float32)] * 2,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(pair_act, mask2, w4)

    bm, bkk = _fit(N, MM_BLOCK, 128), _fit(N, MM_K, 128)
    r = pl.pallas_call(
        _contract_kernel,
        grid=(C, N // bm, N // bm, N // bkk),
        in_specs=[
            pl.BlockSpec((None, bm, bkk), lambda c, i, j, k: (c, i, k)),
            pl.BlockSpec((None, bm, bkk), lambda c, i, j, k: (c, j, k)),
        ],
        out_specs=pl.BlockSpec((None, bm, bm), lambda c, i, j, k: (c, i, j)),
        out_shape=jax.ShapeDtypeStruct((C, N, N), dt),
        scratch_shapes=[pltpu.VMEM((bm, bm), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(left_t, right_t)

    bj = _fit(N, COLS, 128)
    return pl.pallas_call(
        _out_kernel,
        grid=(N // bi, N // bj),
        in_specs=[
            pl.BlockSpec((C, bi, bj), lambda i, j: (0, i, j)),
            pl.BlockSpec((bi, bj, C), lambda i, j: (i, j, 0)),
            pl.BlockSpec((C, 1, 1), lambda i, j: (0, 0, 0)),
            pl.BlockSpec((C, C), lambda i, j: (0, 0)),
            pl.BlockSpec((C, C), lambda i, j: (0, 0)),
        ],
        out_specs=pl.BlockSpec((bi, bj, C), lambda i, j: (i, j, 0)),
        out_shape=jax.ShapeDtypeStruct(pair_act.shape, dt),
        scratch_shapes=[pltpu.VMEM((C, bi, bj), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(r, pair_act, center_scale.astype(jnp.float32).reshape(C, 1, 1), out_proj_w, out_gate_w)
