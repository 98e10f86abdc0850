# expect: workload=1p_Flash_Attention status=correct
# Own causal flash attention: online softmax in f32 VMEM scratch, KV axis "arbitrary", blocks above the diagonal
# skipped.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK = 512  # query and key block (equal, so block j is needed by query block i iff j <= i)


def _kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref, *, scale):
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def step(on_diagonal):
        q = q_ref[0, 0]
        k = k_ref[0, 0]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
        if on_diagonal:
            row = jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            col = jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(col <= row, s, -jnp.inf)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_ref[...] = alpha * l_ref[...] + p.sum(axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(
            p.astype(v_ref.dtype), v_ref[0, 0], preferred_element_type=jnp.float32
        )
        m_ref[...] = m_new

    pl.when(j < i)(lambda: step(False))
    pl.when(j == i)(lambda: step(True))

    @pl.when(j == pl.num_programs(3) - 1)
    def _finish():
        o_ref[0, 0] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def workload(query, key, value):
    B, H, S, D = query.shape
    # At least a few blocks per sequence so the causal skip is exercised at every size.
    block = min(BLOCK, max(128, S // 4)) if S % 128 == 0 else S
    n = S // block
    q_spec = pl.BlockSpec((1, 1, block, D), lambda b, h, i, j: (b, h, i, 0))
    # Clamp to the diagonal: for j > i the block index does not change, so no DMA is issued.
    kv_spec = pl.BlockSpec((1, 1, block, D), lambda b, h, i, j: (b, h, jnp.minimum(i, j), 0))
    return pl.pallas_call(
        functools.partial(_kernel, scale=D**-0.5),
        grid=(B, H, n, n),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=q_spec,
        out_shape=jax.ShapeDtypeStruct(query.shape, query.dtype),
        scratch_shapes=[
            pltpu.VMEM((block, 1), jnp.float32),
            pltpu.VMEM((block, 1), jnp.float32),
            pltpu.VMEM((block, D), jnp.float32),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(query, key, value)
