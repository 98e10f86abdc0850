# 3p_MLA_Attention: DeepSeek-V3 multi-head latent attention as six Pallas kernels.
#   1. cq = x @ q_down, 2. kv = x @ kv_down              (tiled GEMMs, f32 accumulators, bf16 out)
#   3. q = RoPE(cq @ q_up[head])                         (per-head GEMM; RoPE fused in the epilogue)
#   4. k_nope, v = latent @ k_up[head], latent @ v_up[head]  (two GEMMs sharing the latent block)
#   5. causal flash attention per (batch, head): scores = q_nope k_nope^T + q_rope k_rope^T
#   6. out = attn @ o_proj                               (tiled GEMM)
# Kernels 3 and 4 write their outputs head-major, (B, H, S, d), straight from their out BlockSpecs,
# and kernel 5 writes (B, S, H * v_dim) token-major for kernel 6: no transposes of activations.
# q_up's columns are per-head groups of 192 (128 nope + 64 rope), not a multiple of 128, so the
# weight is regrouped once to (H, q_lora, 192) in the wrapper (a 75 MiB weight copy) and kernel 3
# takes one head's (q_lora, 192) slab per step. RoPE (rotate-half) in the epilogue: the rope columns
# are rounded to bf16 (as the reference's q is), rotated with a +-1 permutation matmul (exact) and
# combined with the bf16 cos/sin tables in f32. The shared rotary key (B, S, 64) and the tables are
# tiny and stay in jnp, as does the slice of the latent out of kv.
# Attention: online softmax, f32 m/l/acc (m, l lane-replicated), only causal block pairs visited
# (flat q-major pair list in scalar prefetch), mask built on diagonal-crossing blocks only.
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROPE_THETA = 10000
GEMM_BLOCKS = (1024, 1024, 512)
ROWS = 1024  # token rows per step in the per-head projection kernels
ATTN_BLOCK = 1024  # q and kv block; at most S/2 so that the small size walks several blocks


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


# ---- tiled GEMM --------------------------------------------------------------------------------


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _matmul(a, b):
    m, kdim = a.shape
    n = b.shape[1]
    bm, bn, bk = _fit(m, GEMM_BLOCKS[0], 8), _fit(n, GEMM_BLOCKS[1], 128), _fit(kdim, GEMM_BLOCKS[2], 128)
    return pl.pallas_call(
        _matmul_kernel,
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)


# ---- per-head q projection with RoPE -------------------------------------------------------------


def _q_kernel(cq_ref, w_ref, cos_ref, sin_ref, rot_ref, o_ref, *, nope):
    q = jnp.dot(cq_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    o_ref[:, :nope] = q[:, :nope].astype(o_ref.dtype)
    qr = q[:, nope:].astype(o_ref.dtype)  # the reference ropes the bf16 q
    rotated = jnp.dot(qr, rot_ref[...], preferred_element_type=jnp.float32)  # [a, b] -> [-b, a]
    o_ref[:, nope:] = (qr.astype(jnp.float32) * cos_ref[...] + rotated * sin_ref[...]).astype(o_ref.dtype)


def _q_proj(cq, w_heads, cos, sin, rot, nope):
    B, S, L = cq.shape
    H, _, dq = w_heads.shape
    rope = dq - nope
    bs = _fit(S, ROWS, 8)
    table = pl.BlockSpec((bs, rope), lambda b, s, h: (s, 0))
    return pl.pallas_call(
        functools.partial(_q_kernel, nope=nope),
        grid=(B, S // bs, H),
        in_specs=[
            pl.BlockSpec((None, bs, L), lambda b, s, h: (b, s, 0)),
            pl.BlockSpec((None, L, dq), lambda b, s, h: (h, 0, 0)),
            table,
            table,
            pl.BlockSpec((rope, rope), lambda b, s, h: (0, 0)),
        ],
        out_specs=pl.BlockSpec((None, None, bs, dq), lambda b, s, h: (b, h, s, 0)),
        out_shape=jax.ShapeDtypeStruct((B, H, S, dq), cq.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(cq, w_heads, cos, sin, rot)


# ---- per-head k_nope / v projections --------------------------------------------------------------


def _kv_kernel(lat_ref, wk_ref, wv_ref, k_ref, v_ref):
    lat = lat_ref[...]
    k_ref[...] = jnp.dot(lat, wk_ref[...], preferred_element_type=jnp.float32).astype(k_ref.dtype)
    v_ref[...] = jnp.dot(lat, wv_ref[...], preferred_element_type=jnp.float32).astype(v_ref.dtype)


def _kv_proj(latent, k_up, v_up, num_heads):
    B, S, L = latent.shape
    dk, dv = k_up.shape[1] // num_heads, v_up.shape[1] // num_heads
    bs = _fit(S, ROWS, 8)
    return pl.pallas_call(
        _kv_kernel,
        grid=(B, S // bs, num_heads),
        in_specs=[
            pl.BlockSpec((None, bs, L), lambda b, s, h: (b, s, 0)),
            pl.BlockSpec((L, dk), lambda b, s, h: (0, h)),
            pl.BlockSpec((L, dv), lambda b, s, h: (0, h)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, bs, dk), lambda b, s, h: (b, h, s, 0)),
            pl.BlockSpec((None, None, bs, dv), lambda b, s, h: (b, h, s, 0)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((B, num_heads, S, dk), latent.dtype),
            jax.ShapeDtypeStruct((B, num_heads, S, dv), latent.dtype),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(latent, k_up, v_up)


# ---- causal flash attention ------------------------------------------------------------------------


def _causal_pairs(seq, bq, bk):
    """(q block, kv block) pairs with some key <= some query, q-major, kv ascending."""
    qs, ks = [], []
    for qi in range(seq // bq):
        for ki in range(((qi + 1) * bq - 1) // bk + 1):
            qs.append(qi)
            ks.append(ki)
    return jnp.asarray(np.array(qs, np.int32)), jnp.asarray(np.array(ks, np.int32))


def _attn_kernel(qi_ref, ki_ref, q_ref, kn_ref, kr_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, nope, scale):
    t = pl.program_id(2)
    qi, ki = qi_ref[t], ki_ref[t]
    bq, bk, dv = q_ref.shape[0], kn_ref.shape[0], v_ref.shape[1]

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def step(masked):
        q = q_ref[...]
        nt = (((1,), (1,)), ((), ()))
        s = (
            jax.lax.dot_general(q[:, :nope], kn_ref[...], nt, preferred_element_type=jnp.float32)
            + jax.lax.dot_general(q[:, nope:], kr_ref[...], nt, preferred_element_type=jnp.float32)
        ) * scale
        if masked:
            row = qi * bq + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = ki * bk + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(col <= row, s, -jnp.inf)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - jnp.tile(m_new, (1, bk // 128)))
        l_ref[...] = alpha * l_ref[...] + p.sum(axis=-1, keepdims=True)
        acc_ref[...] = jnp.tile(alpha, (1, dv // 128)) * acc_ref[...] + jnp.dot(
            p.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32
        )
        m_ref[...] = m_new

    crosses = (ki + 1) * bk - 1 > qi * bq
    pl.when(jnp.logical_not(crosses))(lambda: step(False))
    pl.when(crosses)(lambda: step(True))

    @pl.when((ki + 1) * bk >= (qi + 1) * bq)
    def _finish():
        o_ref[...] = (acc_ref[...] / jnp.tile(l_ref[...], (1, dv // 128))).astype(o_ref.dtype)


def _attention(q, k_nope, k_rope, v, nope):
    B, H, S, dq = q.shape
    dv = v.shape[3]
    rope = dq - nope
    bq = bk = _fit(S, min(ATTN_BLOCK, max(128, S // 2)), 128)
    q_of, k_of = _causal_pairs(S, bq, bk)
    return pl.pallas_call(
        functools.partial(_attn_kernel, nope=nope, scale=dq**-0.5),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(B, H, q_of.shape[0]),
            in_specs=[
                pl.BlockSpec((None, None, bq, dq), lambda b, h, t, qs, ks: (b, h, qs[t], 0)),
                pl.BlockSpec((None, None, bk, nope), lambda b, h, t, qs, ks: (b, h, ks[t], 0)),
                pl.BlockSpec((None, bk, rope), lambda b, h, t, qs, ks: (b, ks[t], 0)),
                pl.BlockSpec((None, None, bk, dv), lambda b, h, t, qs, ks: (b, h, ks[t], 0)),
            ],
            out_specs=pl.BlockSpec((None, bq, dv), lambda b, h, t, qs, ks: (b, qs[t], h)),
            scratch_shapes=[
                pltpu.VMEM((bq, 128), jnp.float32),
                pltpu.VMEM((bq, 128), jnp.float32),
                pltpu.VMEM((bq, dv), jnp.float32),
            ],
        ),
        out_shape=jax.ShapeDtypeStruct((B, S, H * dv), q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q_of, k_of, q, k_nope, k_rope, v)


# ---- the layer ---------------------------------------------------------------------------------------


def _rotate(t, cos, sin):
    half = t.shape[-1] // 2
    a, b = t[..., :half], t[..., half:]
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def workload(x, q_down_proj, q_up_proj, kv_down_proj, k_up_proj, v_up_proj, o_proj):
    B, S, E = x.shape
    L = k_up_proj.shape[0]
    rope = kv_down_proj.shape[1] - L
    H = (q_up_proj.shape[1] - k_up_proj.shape[1]) // rope
    nope = k_up_proj.shape[1] // H
    ql = q_down_proj.shape[1]
    # RoPE tables (bf16-rounded cos/sin, as the reference) and the rotate-half permutation.
    inv_freq = 1.0 / (ROPE_THETA ** (jnp.arange(0, rope, 2, dtype=jnp.float32) / rope))
    angles = jnp.arange(S, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    cos = jnp.cos(angles).astype(x.dtype)
    sin = jnp.sin(angles).astype(x.dtype)
    cos2 = jnp.concatenate([cos, cos], axis=-1).astype(jnp.float32)
    sin2 = jnp.concatenate([sin, sin], axis=-1).astype(jnp.float32)
    half = rope // 2
    rot = np.zeros((rope, rope), np.float32)
    rot[np.arange(half) + half, np.arange(half)] = -1.0  # out[:, i] = -b_i
    rot[np.arange(half), np.arange(half) + half] = 1.0  # out[:, half + i] = a_i
    rot = jnp.asarray(rot, x.dtype)

    x2 = x.reshape(B * S, E)
    cq = _matmul(x2, q_down_proj).reshape(B, S, ql)
    kv = _matmul(x2, kv_down_proj).reshape(B, S, L + rope)
    q_heads = q_up_proj.reshape(ql, H, nope + rope).transpose(1, 0, 2)  # weight regroup (H, ql, 192)
    q = _q_proj(cq, q_heads, cos2, sin2, rot, nope)  # (B, H, S, 192), roped
    latent, k_rot = kv[..., :L], kv[..., L:]
    k_nope, v = _kv_proj(latent, k_up_proj, v_up_proj, H)  # (B, H, S, 128) each
    k_rope = _rotate(k_rot, cos, sin)  # (B, S, 64), shared by heads
    attn = _attention(q, k_nope, k_rope, v, nope)  # (B, S, H * 128)
    return _matmul(attn.reshape(B * S, -1), o_proj).reshape(B, S, -1)
