# 7p_Ragged_Paged_Attention: mixed prefill + decode attention over a paged, permuted KV cache.
# Work list (plain jnp on cu_q_lens / kv_lens / num_seqs, "routing" glue): one item per (sequence,
# block of bq query tokens), in token order, then items covering the inactive tail rows (they are
# written as zeros), padded to a static bound (T/bq + max_num_seqs + 1) with empty items. Per item:
# the sequence, the first query row, the number of valid rows, and kv_end = the number of keys the
# item's last row can see (causal, aligned to the end of the context: key j <= kv_len - q_len + t).
# Grid (item, kv block), both "arbitrary". The q rows come in through a pl.Element BlockSpec at the
# item's row offset (clamped to stay in bounds; the kernel shifts its view by `off`); the pages of a
# kv block are DMA'd by hand from the page table (scalar prefetch), one DMA per page, double-buffered
# across kv blocks; blocks at or past kv_end are neither fetched nor computed.
# A page is (page_size, 2*Hkv, D) with K heads at even and V heads at odd positions of the head axis;
# per KV head the kernel takes the K and V rows out of the page buffer and runs an online softmax
# (f32 m/l/acc) for the G query heads of that KV head stacked with the item's tokens as the matmul
# rows: (bq*G, D) x (D, bk). Scores are f32 (bf16 x bf16 on the MXU), scaled in f32; hidden keys get
# -0.7 * f32 max as in the reference; probabilities are fed to the MXU in bf16.
# Output rows are written by per-row DMAs of only the valid rows into an output that aliases a zero
# array, so rows of other items are never touched and inactive rows stay 0.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BQ = 32  # query tokens per item
BK = 512  # keys per kv block (a whole number of pages); at most half the cache
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def _work_list(cu_q_lens, kv_lens, num_seqs, T, bq):
    S = kv_lens.shape[0]
    ql = cu_q_lens[1:] - cu_q_lens[:-1]
    active = jnp.arange(S) < num_seqs[0]
    nb = jnp.where(active, (ql + bq - 1) // bq, 0)
    tail_start = cu_q_lens[num_seqs[0]]
    nb_tail = (T - tail_start + bq - 1) // bq
    counts = jnp.concatenate([nb, nb_tail[None]])
    ends = jnp.cumsum(counts)
    n_items = ends[-1]
    max_items = T // bq + S + 1
    i = jnp.minimum(jnp.arange(max_items, dtype=jnp.int32), n_items - 1)  # padding repeats the last
    owner = jnp.searchsorted(ends, i, side="right")
    k = i - (ends[owner] - counts[owner])
    real = owner < S
    o = jnp.minimum(owner, S - 1)
    start = jnp.where(real, cu_q_lens[o] + k * bq, tail_start + k * bq)
    nrows = jnp.where(real, jnp.minimum(bq, ql[o] - k * bq), 0)
    nrows = jnp.where(jnp.arange(max_items) < n_items, nrows, 0)
    kv_end = jnp.where(nrows > 0, kv_lens[o] - ql[o] + (start - cu_q_lens[o]) + nrows, 0)
    ld = jnp.minimum(start, T - bq)

    def to32(a):
        return a.astype(jnp.int32)

    return to32(o), to32(ld), to32(start - ld), to32(nrows), to32(kv_end), to32(cu_q_lens), to32(kv_lens)


def _kernel(
    seq_ref,
    ld_ref,
    off_ref,
    nrows_ref,
    kvend_ref,
    cu_ref,
    lens_ref,
    pages_ref,
    q_ref,
    kv_hbm,
    zeros_hbm,
    o_hbm,
    kv_buf,
    sem,
    osem,
    qh_ref,
    m_ref,
    l_ref,
    acc_ref,
    o_buf,
    *,
    pages_per_block,
    pages_per_seq,
    page_size,
    num_kv_heads,
    scale,
):
    del zeros_hbm  # aliased with the output
    i, j = pl.program_id(0), pl.program_id(1)
    nj = pl.num_programs(1)
    s = seq_ref[i]
    kv_end = kvend_ref[i]
    bk = pages_per_block * page_size
    bq, hq, d = q_ref.shape
    group = hq // num_kv_heads
    rows = bq * group

    def copies(block, slot):
        return [
            pltpu.make_async_copy(
                kv_hbm.at[pages_ref[s * pages_per_seq + block * pages_per_block + t]], kv_buf.at[slot, t], sem.at[slot]
            )
            for t in range(pages_per_block)
        ]

    def needed(block):
        return block * bk < kv_end

    @pl.when(j == 0)
    def _first():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

        @pl.when(needed(0))
        def _():
            for c in copies(0, 0):
                c.start()

        for h in range(num_kv_heads):  # rows of KV head h: (token, query head of the group)
            q = q_ref[:, pl.ds(h * group, group), :].astype(jnp.float32)  # rows are tokens ld + r
            qh_ref[h] = q.reshape(rows, d).astype(qh_ref.dtype)

    slot = j % 2

    @pl.when((j + 1 < nj) & needed(j + 1))
    def _prefetch_next():
        for c in copies(j + 1, 1 - slot):
            c.start()

    @pl.when(needed(j))
    def _compute():
        for c in copies(j, slot):
            c.wait()
        ql = cu_ref[s + 1] - cu_ref[s]
        length = lens_ref[s]
        token = ld_ref[i] - cu_ref[s] + jax.lax.broadcasted_iota(jnp.int32, (rows, bk), 0) // group
        key = j * bk + jax.lax.broadcasted_iota(jnp.int32, (rows, bk), 1)
        visible = (key <= length - ql + token) & (key < length)
        for h in range(num_kv_heads):  # page buffer: (pages, page_size, 2*Hkv, D)
            k = kv_buf[slot, :, :, 2 * h, :].reshape(bk, d)
            v = kv_buf[slot, :, :, 2 * h + 1, :].reshape(bk, d)
            sc = jax.lax.dot_general(qh_ref[h], k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
            sc = jnp.where(visible, sc, MASK_VALUE)
            m_prev = m_ref[h]
            m_new = jnp.maximum(m_prev, sc.max(axis=-1, keepdims=True))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(sc - jnp.tile(m_new, (1, bk // 128)))
            l_ref[h] = alpha * l_ref[h] + p.sum(axis=-1, keepdims=True)
            acc_ref[h] = jnp.tile(alpha, (1, d // 128)) * acc_ref[h] + jnp.dot(
                p.astype(v.dtype), v, preferred_element_type=jnp.float32
            )
            m_ref[h] = m_new

    @pl.when((j == nj - 1) & (nrows_ref[i] > 0))
    def _finish():
        outs = [(acc_ref[h] / jnp.tile(l_ref[h], (1, d // 128))).reshape(bq, group, d) for h in range(num_kv_heads)]
        o_buf[...] = jnp.concatenate(outs, axis=1).astype(o_buf.dtype)
        lo, ld = off_ref[i], ld_ref[i]
        hi = lo + nrows_ref[i]

        def row_copy(r):
            return pltpu.make_async_copy(o_buf.at[r], o_hbm.at[ld + r], osem.at[0])

        def start(r, c):
            row_copy(r).start()
            return c

        def wait(r, c):
            row_copy(r).wait()
            return c

        jax.lax.fori_loop(lo, hi, start, 0)
        jax.lax.fori_loop(lo, hi, wait, 0)


def workload(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    T, hq, d = queries.shape
    _, page_size, heads2, _ = kv_pages.shape
    S, pages_per_seq = page_indices.shape
    num_kv_heads = heads2 // 2
    bq = min(BQ, T)
    ppb = max(1, min(BK, pages_per_seq * page_size // 2) // page_size)
    while pages_per_seq % ppb:
        ppb -= 1
    meta = _work_list(cu_q_lens, kv_lens, num_seqs, T, bq)
    n_items = meta[0].shape[0]
    n_scalar = len(meta) + 1
    kernel = functools.partial(
        _kernel,
        pages_per_block=ppb,
        pages_per_seq=pages_per_seq,
        page_size=page_size,
        num_kv_heads=num_kv_heads,
        scale=d**-0.5,
    )
    group = hq // num_kv_heads
    q_spec = pl.BlockSpec((pl.Element(bq), pl.Element(hq), pl.Element(d)), lambda i, j, seq, ld, *_: (ld[i], 0, 0))
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=n_scalar,
            grid=(n_items, pages_per_seq // ppb),
            in_specs=[q_spec, any_spec, any_spec],
            out_specs=any_spec,
            scratch_shapes=[
                pltpu.VMEM((2, ppb, page_size, heads2, d), kv_pages.dtype),
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SemaphoreType.DMA((1,)),
                pltpu.VMEM((num_kv_heads, bq * group, d), queries.dtype),
                pltpu.VMEM((num_kv_heads, bq * group, 128), jnp.float32),
                pltpu.VMEM((num_kv_heads, bq * group, 128), jnp.float32),
                pltpu.VMEM((num_kv_heads, bq * group, d), jnp.float32),
                pltpu.VMEM((bq, hq, d), queries.dtype),
            ],
        ),
        out_shape=jax.ShapeDtypeStruct(queries.shape, queries.dtype),
        input_output_aliases={n_scalar + 2: 0},
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
    )(*meta, page_indices.reshape(-1).astype(jnp.int32), queries, kv_pages, jnp.zeros_like(queries))
