"""4p_Sparse_Attention: causal GQA with a pre-scaled query (the splash-attention baseline)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "4p_Sparse_Attention"
MODEL = "Llama-3.1-70B"
OPERATOR = "sparse_attention"
DESCRIPTION = """
Causal grouped-query attention in (B, heads, S, D) layout, all bfloat16. q already carries the
D^-0.5 softmax scale (applied when the inputs are made), so no scale is applied here. Query head h
reads KV head h // G with G = Hq/Hkv (the baseline repeats K and V G times). Per batch and head:
scores = Q @ K^T as a bfloat16 einsum, scores with key index > query index set to -1e30, softmax over
keys in bfloat16, output = probabilities @ V in bfloat16, shape (B, Hq, S, D).
"""
SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_query_heads": 64, "num_kv_heads": 8, "head_dim": 128},
    "small": {"batch": 2, "seq_len": 512, "num_query_heads": 16, "num_kv_heads": 2, "head_dim": 128},
}
INPUT_NAMES = ("q", "k", "v")
NOTES = (
    "The baseline's own benchmark() FLOP formula (4*Hq*S^2*D) omits the batch factor; the count here "
    "is the optimized file's 4*B*Hq*S^2*D, the value JAXBench's facts list.",
    "Despite the name nothing is sparse: the mask is plain causal, and the FLOP count includes the masked half.",
    "K and V are scaled by 0.02, so the output is near zero: at the small size over 99% of it is "
    "within 1e-2 of zero, and only the first ~50 query positions (few visible keys) keep an all-zero "
    "output from passing the 1e-2 check.",
)

MASK_FILL = -1e30


def create_inputs(*, seed, batch, seq_len, num_query_heads, num_kv_heads, head_dim):
    k_q, k_k, k_v = jax.random.split(jaxbench_key(seed, 42), 3)
    q = normal(k_q, (batch, num_query_heads, seq_len, head_dim), dtype=jnp.bfloat16) * head_dim**-0.5
    k = normal(k_k, (batch, num_kv_heads, seq_len, head_dim), dtype=jnp.bfloat16) * 0.02
    v = normal(k_v, (batch, num_kv_heads, seq_len, head_dim), dtype=jnp.bfloat16) * 0.02
    return q, k, v


def reference(q, k, v):
    num_query_heads, seq_len = q.shape[1], q.shape[2]
    group = num_query_heads // k.shape[1]
    k = jnp.repeat(k, group, axis=1)
    v = jnp.repeat(v, group, axis=1)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)
    keep = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    probs = jax.nn.softmax(jnp.where(keep, scores, MASK_FILL), axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v)


def flops(*, batch, seq_len, num_query_heads, num_kv_heads, head_dim):
    return 4 * batch * num_query_heads * seq_len**2 * head_dim
