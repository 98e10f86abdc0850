"""7p_Ragged_Paged_Attention: mixed prefill + decode attention over a permuted paged KV cache."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "7p_Ragged_Paged_Attention"
MODEL = "Llama-3.1-70B"
OPERATOR = "ragged_paged_attention (mixed prefill + decode)"
DESCRIPTION = """
Ragged paged attention for one continuous-batching step. queries (T, Hq, D) packs the query tokens
of the active sequences back to back: sequence i owns rows cu_q_lens[i] .. cu_q_lens[i+1]-1
(q_len_i rows) for i < num_seqs[0]. Its cache is the pages page_indices[i] of kv_pages
(total_pages, page_size, 2*Hkv, D), flattened to pages_per_seq*page_size positions; on the combined
head axis even entries are K heads and odd entries V heads, and query head h reads KV head
h // (Hq/Hkv). Query t of the chunk (0-based) sees key j iff j <= kv_len_i - q_len_i + t and
j < kv_len_i (causal, aligned to the end of the context). Scores are bfloat16 x bfloat16 dots
accumulated in float32, times D^-0.5 in float32; hidden keys get -0.7 * float32 max; softmax in
float32, rounded to bfloat16, then probabilities @ V as a bfloat16 einsum. Rows of tokens that belong
to no active sequence are zero. Output (T, Hq, D) bfloat16.
"""
_FULL_Q_LENS = (1,) * 48 + (512,) * 7 + (464,)
_FULL_KV_LENS = tuple(257 + (i * 73 % 240) * 16 for i in range(48)) + (1023, 1535, 2047, 2559, 3071, 3583, 4095, 4095)
SIZES = {
    "full": {
        "max_num_batched_tokens": 4096,
        "max_num_seqs": 64,
        "num_q_heads": 64,
        "num_kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 256,
        "ACTIVE_Q_LENS": _FULL_Q_LENS,
        "ACTIVE_KV_LENS": _FULL_KV_LENS,
        "NUM_ACTIVE_SEQS": 56,
    },
    "small": {
        "max_num_batched_tokens": 256,
        "max_num_seqs": 8,
        "num_q_heads": 16,
        "num_kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 16,
        "ACTIVE_Q_LENS": (1, 1, 1, 1, 96, 96, 60),
        "ACTIVE_KV_LENS": (17, 81, 145, 209, 127, 191, 255),
        "NUM_ACTIVE_SEQS": 7,
    },
}
INPUT_NAMES = ("queries", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs")
# Pages that no sequence's page table names are never read by a correct kernel.
SPARSE_INPUTS = ("kv_pages",)
NOTES = (
    "Small size: NUM_ACTIVE_SEQS (7 of 8 slots, 56 of 64 at full size) and the query/KV lengths are "
    "scenario data read from cu_q_lens / kv_lens / num_seqs, not array dimensions, so the divisibility "
    "rule for small sizes (workloads.keeps_divisibility) does not apply to them.",
    "One fixed serving scenario, not a distribution: at full size 48 one-token decodes (kv_len "
    "257 + ((i*73) mod 240)*16, always 1 token into a page) then seven 512-token prefill chunks and one "
    "464-token chunk (kv_len 1023 ... 4095), exactly filling the 4096-token budget; 8 of 64 slots idle.",
    "The page table is a random permutation of all pages, so every sequence's pages are scattered.",
    "JAXBench's baseline loops in Python over the active sequences with their query lengths baked in "
    "as constants, and gathers all pages_per_seq pages for every sequence. This reference instead "
    "works token by token from cu_q_lens/kv_lens/num_seqs (same math), so its speed is not the "
    "baseline's.",
    "Masked scores get -0.7 * float32 max, not -inf and not the -1e9 / -1e30 of the other attention rows.",
    "The baseline originally ran eagerly (_skip_jit); JIT was enabled later and the scenario was "
    "reworked twice (July 2026).",
)

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
TOKENS_PER_STEP = 16  # bounds the per-token cache gather (pages_per_seq pages per token)


def create_inputs(
    *,
    seed,
    max_num_batched_tokens,
    max_num_seqs,
    num_q_heads,
    num_kv_heads,
    head_dim,
    page_size,
    pages_per_seq,
    ACTIVE_Q_LENS,
    ACTIVE_KV_LENS,
    NUM_ACTIVE_SEQS,
):
    if not len(ACTIVE_Q_LENS) == len(ACTIVE_KV_LENS) == NUM_ACTIVE_SEQS <= max_num_seqs:
        raise ValueError("one q_len and one kv_len per active sequence, at most max_num_seqs of them")
    if sum(ACTIVE_Q_LENS) > max_num_batched_tokens:
        raise ValueError("the active query lengths exceed the token budget")
    k_q, k_kv, k_perm = jax.random.split(jaxbench_key(seed, 42), 3)
    total_pages = max_num_seqs * pages_per_seq
    queries = normal(k_q, (max_num_batched_tokens, num_q_heads, head_dim), dtype=jnp.bfloat16)
    kv_pages = normal(k_kv, (total_pages, page_size, 2 * num_kv_heads, head_dim), dtype=jnp.bfloat16)
    idle = max_num_seqs - NUM_ACTIVE_SEQS
    kv_lens = jnp.array(tuple(ACTIVE_KV_LENS) + (0,) * idle, dtype=jnp.int32)
    starts = jnp.cumsum(jnp.array((0,) + tuple(ACTIVE_Q_LENS), dtype=jnp.int32))
    cu_q_lens = jnp.concatenate([starts, jnp.full((idle,), starts[-1], dtype=jnp.int32)])
    page_indices = jax.random.permutation(k_perm, total_pages, independent=True)
    page_indices = page_indices.astype(jnp.int32).reshape(max_num_seqs, pages_per_seq)
    num_seqs = jnp.array([NUM_ACTIVE_SEQS], dtype=jnp.int32)
    return queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs


def reference(queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
    num_tokens, num_q_heads, head_dim = queries.shape
    _, page_size, combined_heads, _ = kv_pages.shape
    max_num_seqs, pages_per_seq = page_indices.shape
    num_kv_heads, cache_len = combined_heads // 2, pages_per_seq * page_size
    group = num_q_heads // num_kv_heads

    # Each packed token's sequence slot, from the traced cu_q_lens (idle slots have empty ranges).
    token = jnp.arange(num_tokens, dtype=jnp.int32)
    slot = jnp.sum(token[:, None] >= cu_q_lens[None, 1:], axis=1)
    active = slot < num_seqs[0]
    slot = jnp.minimum(slot, max_num_seqs - 1)
    q_start, q_len = cu_q_lens[slot], cu_q_lens[slot + 1] - cu_q_lens[slot]
    kv_len = kv_lens[slot]
    last_visible = kv_len - q_len + (token - q_start)

    def one_token(args):
        q, pages, last, length = args
        kv = kv_pages[pages].reshape(cache_len, combined_heads, head_dim)
        k, v = kv[:, 0::2], kv[:, 1::2]
        q = q.reshape(num_kv_heads, group, head_dim)
        scores = jnp.einsum("kgd,lkd->kgl", q, k, preferred_element_type=jnp.float32) * head_dim**-0.5
        position = jnp.arange(cache_len)
        scores = jnp.where((position <= last) & (position < length), scores, MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=-1).astype(kv.dtype)
        return jnp.einsum("kgl,lkd->kgd", probs, v).reshape(num_q_heads, head_dim)

    out = jax.lax.map(one_token, (queries, page_indices[slot], last_visible, kv_len), batch_size=TOKENS_PER_STEP)
    return jnp.where(active[:, None, None], out, 0).astype(queries.dtype)


def flops(
    *,
    max_num_batched_tokens,
    max_num_seqs,
    num_q_heads,
    num_kv_heads,
    head_dim,
    page_size,
    pages_per_seq,
    ACTIVE_Q_LENS,
    ACTIVE_KV_LENS,
    NUM_ACTIVE_SEQS,
):
    return num_q_heads * 4 * head_dim * sum(q * kv for q, kv in zip(ACTIVE_Q_LENS, ACTIVE_KV_LENS))
