# 2p_GQA_Attention: causal grouped-query flash attention in (B, S, heads, D) layout.
# The G = Hq / Hkv query heads of one KV head share its keys and values, so they are stacked into one
# big matmul: a q block (bq tokens, G heads, D) is read as (bq * G, D) rows (row r = token r // G,
# head r % G; a free reshape since G = 16 is a whole bf16 sublane tile) and multiplied by the KV head's
# (bk, D) key block: one (bq*G, D) x (D, bk) MXU matmul instead of G thin ones, and K/V are read once
# per group instead of once per query head. Online softmax (f32 m/l/acc scratch, m and l lane-
# replicated (rows, 128)); the causal mask compares token r // G with the key index.
# Keys and values are transposed to (B, Hkv, S, D) in the wrapper (a 64 MiB copy, ~1% of the kernel's
# time): a BlockSpec cannot take one KV head out of (B, S, Hkv, D), since the head is the second-minor
# dimension and a block there must be a multiple of 8 or the whole axis.
# Only causal (q block, kv block) pairs are visited: the last grid axis walks a flat, q-major list of
# them (scalar prefetch), so no grid step is spent above the diagonal.
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = 1024  # query rows (tokens x heads) per block
BK = 1024  # keys per block; at most S/4 so that the small size walks several blocks


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _causal_pairs(seq, bq, bk):
    """(q block, kv block) pairs with some key <= some query, q-major, kv ascending."""
    qs, ks = [], []
    for qi in range(seq // bq):
        for ki in range(((qi + 1) * bq - 1) // bk + 1):
            qs.append(qi)
            ks.append(ki)
    return jnp.asarray(np.array(qs, np.int32)), jnp.asarray(np.array(ks, np.int32))


def _kernel(qi_ref, ki_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, scale):
    t = pl.program_id(2)
    qi, ki = qi_ref[t], ki_ref[t]
    bq, group, d = q_ref.shape
    bk = k_ref.shape[0]
    rows = bq * group

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def step(masked):
        q = q_ref[...].reshape(rows, d)
        s = jax.lax.dot_general(q, k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
        if masked:
            token = qi * bq + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0) // group
            col = ki * bk + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(col <= token, s, -jnp.inf)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - jnp.tile(m_new, (1, bk // 128)))
        l_ref[...] = alpha * l_ref[...] + p.sum(axis=-1, keepdims=True)
        acc_ref[...] = jnp.tile(alpha, (1, d // 128)) * acc_ref[...] + jnp.dot(
            p.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32
        )
        m_ref[...] = m_new

    crosses = (ki + 1) * bk - 1 > qi * bq  # some key in the block is after some query token
    pl.when(jnp.logical_not(crosses))(lambda: step(False))
    pl.when(crosses)(lambda: step(True))

    @pl.when((ki + 1) * bk >= (qi + 1) * bq)  # the last kv block this q block needs
    def _finish():
        out = acc_ref[...] / jnp.tile(l_ref[...], (1, d // 128))
        o_ref[...] = out.reshape(bq, group, d).astype(o_ref.dtype)


def workload(query, key, value):
    B, S, Hq, D = query.shape
    Hkv = key.shape[2]
    G = Hq // Hkv
    bq = _fit(S, max(8, ROWS // G), 8)
    bk = _fit(S, min(BK, max(128, S // 4)), 128)
    q_of, k_of = _causal_pairs(S, bq, bk)
    q_spec = pl.BlockSpec((None, bq, G, D), lambda b, g, t, qs, ks: (b, qs[t], g, 0))
    kv_spec = pl.BlockSpec((None, None, bk, D), lambda b, g, t, qs, ks: (b, g, ks[t], 0))
    key, value = key.transpose(0, 2, 1, 3), value.transpose(0, 2, 1, 3)
    return pl.pallas_call(
        functools.partial(_kernel, scale=D**-0.5),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(B, Hkv, q_of.shape[0]),
            in_specs=[q_spec, kv_spec, kv_spec],
            out_specs=q_spec,
            scratch_shapes=[
                pltpu.VMEM((bq * G, 128), jnp.float32),
                pltpu.VMEM((bq * G, 128), jnp.float32),
                pltpu.VMEM((bq * G, D), jnp.float32),
            ],
        ),
        out_shape=jax.ShapeDtypeStruct(query.shape, query.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q_of, k_of, query, key, value)
