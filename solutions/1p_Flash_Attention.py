# 1p_Flash_Attention: causal multi-head flash attention (online softmax, f32 statistics in VMEM).
# Only the (q block, kv block) pairs on or below the diagonal are visited: the grid's last axis walks a
# flat list of those pairs, whose q and kv block indices come in by scalar prefetch and drive the
# index maps (no grid step is spent on masked blocks). Pairs are ordered q block by q block, kv blocks
# ascending, so the online-softmax state in scratch starts at kv block 0 and is written out at the
# last kv block of each q block. Only blocks that cross the diagonal build the iota mask.
# Blocks 1024 x 1024 (10 of the 16 pairs per head are visited at S = 4096); the running max and sum
# are (bq, 128) lane-replicated so the per-row statistics never go through narrow (bq, 1) columns.
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK = 1024  # q and kv block; at most S/4 so that even the small size walks several blocks


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
    bq, bk, d = q_ref.shape[0], k_ref.shape[0], q_ref.shape[1]

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def step(masked):
        s = (
            jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            * scale
        )
        if masked:
            row = qi * bq + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = ki * bk + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(col <= row, s, -jnp.inf)
        # m and l are kept lane-replicated, (bq, 128): no narrow (bq, 1) columns on the vector path.
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - jnp.tile(m_new, (1, bk // 128)))
        l_ref[...] = alpha * l_ref[...] + p.sum(axis=-1, keepdims=True)
        acc_ref[...] = jnp.tile(alpha, (1, d // 128)) * acc_ref[...] + jnp.dot(
            p.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32
        )
        m_ref[...] = m_new

    crosses = (ki + 1) * bk - 1 > qi * bq  # some key in the block is after some query
    pl.when(jnp.logical_not(crosses))(lambda: step(False))
    pl.when(crosses)(lambda: step(True))

    @pl.when((ki + 1) * bk >= (qi + 1) * bq)  # the last kv block this q block needs
    def _finish():
        o_ref[...] = (acc_ref[...] / jnp.tile(l_ref[...], (1, d // 128))).astype(o_ref.dtype)


def workload(query, key, value):
    B, H, S, D = query.shape
    bq = bk = _fit(S, min(BLOCK, max(128, S // 4)), 128)
    q_of, k_of = _causal_pairs(S, bq, bk)
    q_spec = pl.BlockSpec((None, None, bq, D), lambda b, h, t, qs, ks: (b, h, qs[t], 0))
    kv_spec = pl.BlockSpec((None, None, bk, D), lambda b, h, t, qs, ks: (b, h, ks[t], 0))
    return pl.pallas_call(
        functools.partial(_kernel, scale=D**-0.5),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(B, H, q_of.shape[0]),
            in_specs=[q_spec, kv_spec, kv_spec],
            out_specs=q_spec,
            scratch_shapes=[
                pltpu.VMEM((bq, 128), jnp.float32),
                pltpu.VMEM((bq, 128), jnp.float32),
                pltpu.VMEM((bq, D), jnp.float32),
            ],
        ),
        out_shape=jax.ShapeDtypeStruct(query.shape, query.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q_of, k_of, query, key, value)
