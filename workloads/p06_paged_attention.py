"""6p_Paged_Attention: one-token-per-sequence decode attention over a paged KV cache (GQA)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "6p_Paged_Attention"
MODEL = "Llama-3.1-70B"
OPERATOR = "paged_attention (decode)"
DESCRIPTION = """
Decode attention, one query token per sequence, all bfloat16. For sequence s: the query is row
cu_q_lens[s] of queries (Hq, D); its cache is the pages_per_seq pages listed in page_indices[s],
gathered from k_pages / v_pages (total_pages, page_size, Hkv, D) and flattened to
L = pages_per_seq * page_size positions. Query head h reads KV head h // (Hq/Hkv) (the baseline
repeats K and V). scores = (q @ K^T) * D^-0.5 as a bfloat16 einsum and bfloat16 scale; key positions
>= kv_lens[s] get -1e30 (a length mask only, no causal mask); softmax over the L keys in bfloat16;
output row s = probabilities @ V in bfloat16. Output (num_seqs, Hq, D).
"""
SIZES = {
    "full": {
        "num_seqs": 64,
        "max_seq_len": 4096,
        "num_query_heads": 64,
        "num_kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 256,
    },
    "small": {
        "num_seqs": 8,
        "max_seq_len": 256,
        "num_query_heads": 16,
        "num_kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 16,
    },
    # Every sequence's full KV length, for two sequences at the small head counts. A check below full size runs one seed
    # here too.
    "full_reduction": {
        "num_seqs": 2,
        "max_seq_len": 4096,
        "num_query_heads": 16,
        "num_kv_heads": 2,
        "head_dim": 128,
        "page_size": 16,
        "pages_per_seq": 256,
    },
}
INPUT_NAMES = ("queries", "k_pages", "v_pages", "kv_lens", "page_indices", "cu_q_lens")
# Pages that no sequence's page table names are never read by a correct kernel.
SPARSE_INPUTS = ("k_pages", "v_pages")
NOTES = (
    "The original docstring calls it 'Ragged Paged Attention', but the scenario is uniform decode: "
    "every kv_len is the full max_seq_len, so the length mask never masks anything, and sequence s "
    "owns the contiguous pages s*pages_per_seq ... (s+1)*pages_per_seq-1.",
    "cu_q_lens only gives each sequence's query row (one token each); the key count comes from "
    "pages_per_seq * page_size, not from max_seq_len.",
    "JAXBench's Pallas version takes a different input set (pages laid out (Hkv, pages, page_size, D), "
    "no cu_q_lens), so the harness cannot compare it against these inputs.",
    "Degenerate output: K and V are scaled by 0.02 and attention over every cached key is near-uniform, "
    "so each output is about the mean of V (at the small size |x| < 0.006 everywhere): an all-zero "
    "output passes JAXBench's 1e-2 check.",
)
DEGENERATE_OUTPUT = True

MASK_FILL = -1e30


def create_inputs(*, seed, num_seqs, max_seq_len, num_query_heads, num_kv_heads, head_dim, page_size, pages_per_seq):
    keys = jax.random.split(jaxbench_key(seed, 42), 5)  # JAXBench splits 5 and uses the first 3
    total_pages = num_seqs * pages_per_seq
    page_shape = (total_pages, page_size, num_kv_heads, head_dim)
    queries = normal(keys[0], (num_seqs, num_query_heads, head_dim), dtype=jnp.bfloat16)
    k_pages = normal(keys[1], page_shape, dtype=jnp.bfloat16) * 0.02
    v_pages = normal(keys[2], page_shape, dtype=jnp.bfloat16) * 0.02
    kv_lens = jnp.full((num_seqs,), max_seq_len, dtype=jnp.int32)
    page_indices = jnp.arange(total_pages, dtype=jnp.int32).reshape(num_seqs, pages_per_seq)
    cu_q_lens = jnp.arange(num_seqs + 1, dtype=jnp.int32)
    return queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens


def reference(queries, k_pages, v_pages, kv_lens, page_indices, cu_q_lens):
    num_query_heads, head_dim = queries.shape[1:]
    _, page_size, num_kv_heads, _ = k_pages.shape
    num_seqs, pages_per_seq = page_indices.shape
    cache_len = pages_per_seq * page_size
    group = num_query_heads // num_kv_heads

    def one_sequence(s):
        q = queries[cu_q_lens[s]]
        k = jnp.repeat(k_pages[page_indices[s]].reshape(cache_len, num_kv_heads, head_dim), group, axis=1)
        v = jnp.repeat(v_pages[page_indices[s]].reshape(cache_len, num_kv_heads, head_dim), group, axis=1)
        scores = jnp.einsum("hd,khd->hk", q, k) * head_dim**-0.5
        scores = jnp.where(jnp.arange(cache_len) < kv_lens[s], scores, MASK_FILL)
        return jnp.einsum("hk,khd->hd", jax.nn.softmax(scores, axis=-1), v)

    return jax.vmap(one_sequence)(jnp.arange(num_seqs))


def flops(*, num_seqs, max_seq_len, num_query_heads, num_kv_heads, head_dim, page_size, pages_per_seq):
    return num_seqs * num_query_heads * 4 * max_seq_len * head_dim
