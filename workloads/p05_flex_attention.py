"""5p_Flex_Attention: causal multi-head attention with a learned per-head additive score bias."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "5p_Flex_Attention"
MODEL = "Llama-3.1-70B"
OPERATOR = "flex_attention"
DESCRIPTION = """
Causal multi-head attention with a score modifier, layout (B, H, S, D), all bfloat16. Per batch b
and head h: scores = (Q @ K^T) * D^-0.5 (bfloat16 einsum, bfloat16 scale) plus rel_pos_bias[h], an
(S, S) bfloat16 bias shared by all batches; scores with key index > query index set to -1e30; softmax
over keys in bfloat16; output = probabilities @ V in bfloat16, shape (B, H, S, D).
"""
SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 64, "head_dim": 128},
    "small": {"batch": 2, "seq_len": 512, "num_heads": 4, "head_dim": 128},
}
INPUT_NAMES = ("q", "k", "v", "rel_pos_bias")
NOTES = (
    "The bias tensor alone is 2 GiB in bfloat16 at full size (H x S x S).",
    "The FLOP count (benchmark(): 4*B*H*S^2*D + B*H*S^2 for the bias add) counts the masked half.",
    "K and V are scaled by 0.02, so the output is near zero: at the small size over 99% of it is "
    "within 1e-2 of zero, and only the first ~50 query positions (few visible keys) keep an all-zero "
    "output from passing the 1e-2 check.",
)

MASK_FILL = -1e30


def create_inputs(*, seed, batch, seq_len, num_heads, head_dim):
    k_q, k_k, k_v, k_b = jax.random.split(jaxbench_key(seed, 42), 4)
    shape = (batch, num_heads, seq_len, head_dim)
    q = normal(k_q, shape, dtype=jnp.bfloat16)
    k = normal(k_k, shape, dtype=jnp.bfloat16) * 0.02
    v = normal(k_v, shape, dtype=jnp.bfloat16) * 0.02
    rel_pos_bias = normal(k_b, (num_heads, seq_len, seq_len), dtype=jnp.bfloat16) * 0.01
    return q, k, v, rel_pos_bias


def reference(q, k, v, rel_pos_bias):
    seq_len, head_dim = q.shape[2], q.shape[3]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * head_dim**-0.5 + rel_pos_bias[None]
    keep = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    probs = jax.nn.softmax(jnp.where(keep, scores, MASK_FILL), axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v)


def flops(*, batch, seq_len, num_heads, head_dim):
    return 4 * batch * num_heads * seq_len**2 * head_dim + batch * num_heads * seq_len**2
