# 5p_Flex_Attention: causal multi-head flash attention with an additive per-head (S, S) score bias.
# The bias (H, S, S) is the largest input (2 GiB at full size) and is shared by all batches, so each
# grid step takes one (head, q block, kv block) and loops over the batch inside the kernel: the bias
# block is read from HBM once (only its causal half, ~1 GiB), not once per batch element. q, k, v
# and the output come in as (B, bq|bk, D) blocks of one head; the online-softmax state (f32 m, l,
# acc; m and l lane-replicated (bq, 128)) has a leading batch axis. scores = (q k^T) * D^-0.5 + bias,
# in f32. Only causal (q block, kv block) pairs are visited: the last grid axis walks a flat, q-major
# list of them (scalar prefetch); only blocks that cross the diagonal build the iota mask.
# Blocks 512 x 512 keep the four batch elements' blocks, state and score temporaries inside v4's VMEM.
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK = 512  # q and kv block; at most S/4 so that the small size walks several blocks


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


def _kernel(qi_ref, ki_ref, q_ref, k_ref, v_ref, bias_ref, o_ref, m_ref, l_ref, acc_ref, *, scale):
    t = pl.program_id(1)
    qi, ki = qi_ref[t], ki_ref[t]
    nb, bq, d = q_ref.shape
    bk = k_ref.shape[1]

    @pl.when(ki == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def step(masked):
        bias = bias_ref[...].astype(jnp.float32)
        if masked:
            row = qi * bq + jax.lax.broadcasted_iota(jnp.int32, (bq, bk), 0)
            col = ki * bk + jax.lax.broadcasted_iota(jnp.int32, (bq, bk), 1)
            bias = jnp.where(col <= row, bias, -jnp.inf)
        for b in range(nb):
            s = (
                jax.lax.dot_general(q_ref[b], k_ref[b], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
                * scale
                + bias
            )
            m_prev = m_ref[b]
            m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(s - jnp.tile(m_new, (1, bk // 128)))
            l_ref[b] = alpha * l_ref[b] + p.sum(axis=-1, keepdims=True)
            acc_ref[b] = jnp.tile(alpha, (1, d // 128)) * acc_ref[b] + jnp.dot(
                p.astype(v_ref.dtype), v_ref[b], preferred_element_type=jnp.float32
            )
            m_ref[b] = m_new

    crosses = (ki + 1) * bk - 1 > qi * bq  # some key in the block is after some query
    pl.when(jnp.logical_not(crosses))(lambda: step(False))
    pl.when(crosses)(lambda: step(True))

    @pl.when((ki + 1) * bk >= (qi + 1) * bq)  # the last kv block this q block needs
    def _finish():
        for b in range(nb):
            o_ref[b] = (acc_ref[b] / jnp.tile(l_ref[b], (1, d // 128))).astype(o_ref.dtype)


def workload(q, k, v, rel_pos_bias):
    B, H, S, D = q.shape
    bq = bk = _fit(S, min(BLOCK, max(128, S // 4)), 128)
    q_of, k_of = _causal_pairs(S, bq, bk)
    q_spec = pl.BlockSpec((B, None, bq, D), lambda h, t, qs, ks: (0, h, qs[t], 0))
    kv_spec = pl.BlockSpec((B, None, bk, D), lambda h, t, qs, ks: (0, h, ks[t], 0))
    bias_spec = pl.BlockSpec((None, bq, bk), lambda h, t, qs, ks: (h, qs[t], ks[t]))
    return pl.pallas_call(
        functools.partial(_kernel, scale=D**-0.5),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(H, q_of.shape[0]),
            in_specs=[q_spec, kv_spec, kv_spec, bias_spec],
            out_specs=q_spec,
            scratch_shapes=[
                pltpu.VMEM((B, bq, 128), jnp.float32),
                pltpu.VMEM((B, bq, 128), jnp.float32),
                pltpu.VMEM((B, bq, D), jnp.float32),
            ],
        ),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(q_of, k_of, q, k, v, rel_pos_bias)
