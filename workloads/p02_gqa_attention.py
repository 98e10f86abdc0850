"""2p_GQA_Attention: causal grouped-query attention (Llama-3.1-405B shape) in bfloat16."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "2p_GQA_Attention"
MODEL = "Llama-3.1-405B"
OPERATOR = "gqa_attention"
DESCRIPTION = """
Causal grouped-query attention in (B, S, heads, D) layout, all bfloat16. The Hkv key/value heads are
shared by groups of G = Hq/Hkv consecutive query heads (query head h reads KV head h // G; the
baseline materialises this by repeating K and V G times). Per batch and query head:
scores = (Q @ K^T) * D^-0.5 as a bfloat16 einsum and bfloat16 scale, scores with key index > query
index set to -1e9, softmax over keys in bfloat16, output = probabilities @ V in bfloat16, returned in
(B, S, Hq, D) layout.
"""
SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_query_heads": 128, "num_kv_heads": 8, "head_dim": 128},
    "small": {"batch": 2, "seq_len": 256, "num_query_heads": 32, "num_kv_heads": 2, "head_dim": 128},
}
INPUT_NAMES = ("query", "key", "value")
NOTES = (
    "The original CONFIG also carries emb_dim=16384, which the workload never uses.",
    "The FLOP count (4*B*Hq*S^2*D, from benchmark()) counts the masked upper triangle; the harness "
    "itself would use XLA's cost analysis.",
    "Scores, the -1e9 mask fill and the softmax stay in bfloat16.",
)

MASK_FILL = -1e9


def create_inputs(*, seed, batch, seq_len, num_query_heads, num_kv_heads, head_dim):
    k_q, k_k, k_v = jax.random.split(jaxbench_key(seed, 42), 3)
    query = normal(k_q, (batch, seq_len, num_query_heads, head_dim), dtype=jnp.bfloat16)
    key = normal(k_k, (batch, seq_len, num_kv_heads, head_dim), dtype=jnp.bfloat16)
    value = normal(k_v, (batch, seq_len, num_kv_heads, head_dim), dtype=jnp.bfloat16)
    return query, key, value


def reference(query, key, value):
    seq_len, num_query_heads, head_dim = query.shape[1:]
    group = num_query_heads // key.shape[2]
    key = jnp.repeat(key, group, axis=2)
    value = jnp.repeat(value, group, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", query, key) * head_dim**-0.5
    keep = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    scores = jnp.where(keep, scores, MASK_FILL)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, value)


def flops(*, batch, seq_len, num_query_heads, num_kv_heads, head_dim):
    return 4 * batch * num_query_heads * seq_len**2 * head_dim
