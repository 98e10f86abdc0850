# expect: workload=6p_Paged_Attention status=correct
# Paged decode attention: page table, lengths and query offsets in scalar prefetch; pages DMA'd by hand,
# double-buffered.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

TOKENS_PER_BLOCK = 512  # keys processed per grid step (a whole number of pages)


def _kernel(
    lens_ref,
    pages_ref,
    cu_ref,
    q_ref,
    k_hbm,
    v_hbm,
    o_ref,
    k_buf,
    v_buf,
    sem,
    m_ref,
    l_ref,
    acc_ref,
    *,
    pages_per_block,
    pages_per_seq,
    page_size,
    num_kv_heads,
    group,
    scale,
):
    s, j = pl.program_id(0), pl.program_id(1)
    n_blocks = pl.num_programs(1)
    length = lens_ref[s]
    block_tokens = pages_per_block * page_size

    def copies(block, slot):
        out = []
        for t in range(pages_per_block):
            page = pages_ref[s * pages_per_seq + block * pages_per_block + t]
            out.append(pltpu.make_async_copy(k_hbm.at[page], k_buf.at[slot, t], sem.at[0, slot]))
            out.append(pltpu.make_async_copy(v_hbm.at[page], v_buf.at[slot, t], sem.at[1, slot]))
        return out

    def needed(block):
        return block * block_tokens < length

    @pl.when(j == 0)
    def _first():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

        @pl.when(needed(0))
        def _():
            for c in copies(0, 0):
                c.start()

    slot = j % 2

    @pl.when((j + 1 < n_blocks) & needed(j + 1))
    def _prefetch_next():
        for c in copies(j + 1, 1 - slot):
            c.start()

    @pl.when(needed(j))
    def _compute():
        for c in copies(j, slot):
            c.wait()
        q = q_ref[0]
        pos = j * block_tokens + jax.lax.broadcasted_iota(jnp.int32, (group, block_tokens), 1)
        for g in range(num_kv_heads):
            rows = slice(g * group, (g + 1) * group)
            k = k_buf[slot, :, :, g, :].reshape(block_tokens, -1)
            v = v_buf[slot, :, :, g, :].reshape(block_tokens, -1)
            sc = jax.lax.dot_general(q[rows], k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            sc = jnp.where(pos < length, sc * scale, -jnp.inf)
            m_prev = m_ref[rows, :]
            m_new = jnp.maximum(m_prev, sc.max(axis=-1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(sc - m_new)
            l_ref[rows, :] = alpha * l_ref[rows, :] + p.sum(axis=-1, keepdims=True)
            acc_ref[rows, :] = alpha * acc_ref[rows, :] + jnp.dot(
                p.astype(v.dtype), v, preferred_element_type=jnp.float32
            )
            m_ref[rows, :] = m_new

    @pl.when(j == n_blocks - 1)
    def _finish():
        o_ref[0] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def workload(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens):
    _, num_q_heads, head_dim = queries.shape
    _, page_size, num_kv_heads, _ = k_pages.shape
    num_seqs, pages_per_seq = page_indices.shape
    # At least two blocks per sequence, so the prefetch of the next block always runs.
    ppb = max(1, min(TOKENS_PER_BLOCK // page_size, pages_per_seq // 2))
    while pages_per_seq % ppb:
        ppb -= 1
    kernel = functools.partial(
        _kernel,
        pages_per_block=ppb,
        pages_per_seq=pages_per_seq,
        page_size=page_size,
        num_kv_heads=num_kv_heads,
        group=num_q_heads // num_kv_heads,
        scale=head_dim**-0.5,
    )
    q_spec = pl.BlockSpec((1, num_q_heads, head_dim), lambda s, j, lens, pages, cu: (cu[s], 0, 0))
    buf = pltpu.VMEM((2, ppb, page_size, num_kv_heads, head_dim), k_pages.dtype)
    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=3,
            grid=(num_seqs, pages_per_seq // ppb),
            in_specs=[q_spec, pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=q_spec,
            scratch_shapes=[
                buf,
                buf,
                pltpu.SemaphoreType.DMA((2, 2)),
                pltpu.VMEM((num_q_heads, 1), jnp.float32),
                pltpu.VMEM((num_q_heads, 1), jnp.float32),
                pltpu.VMEM((num_q_heads, head_dim), jnp.float32),
            ],
        ),
        out_shape=jax.ShapeDtypeStruct(queries.shape, queries.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(kv_lens, page_indices.reshape(-1), cu_q_lens, queries, k_pages, v_pages)
