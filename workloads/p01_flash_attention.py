"""1p_Flash_Attention: causal multi-head attention computed entirely in bfloat16."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "1p_Flash_Attention"
MODEL = "Baseline-MHA"
OPERATOR = "causal_mha"
DESCRIPTION = """
Causal self-attention, one independent head per (batch, head), layout (B, H, S, D) for query, key,
value and output, all bfloat16. For each batch b and head h: scores = (Q @ K^T) * D^-0.5 as a
bfloat16 einsum followed by a bfloat16 scale; every score whose key index is greater than its query
index is replaced by -1e9 (lower-triangular keep mask); softmax over the key axis in bfloat16; the
output is probabilities @ V as a bfloat16 einsum. No GQA, bias, soft-cap or dropout.
"""
SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 64, "head_dim": 128},
    "small": {"batch": 2, "seq_len": 512, "num_heads": 4, "head_dim": 128},
    # Held out (campaigns; check --config): a longer sequence over fewer heads.
    "held_out": {"batch": 2, "seq_len": 1024, "num_heads": 2, "head_dim": 128},
    # The softmax over the full sequence, on two heads (the sequence is both the rows and the reduction). A check below
    # full size runs one seed here too.
    "full_reduction": {"batch": 2, "seq_len": 4096, "num_heads": 2, "head_dim": 128},
}
INPUT_NAMES = ("query", "key", "value")
NOTES = (
    "The original module docstring says seq=2048, but its CONFIG (and this workload) uses 4096.",
    "The FLOP count is the baseline benchmark() formula 4*B*H*S^2*D, which counts the masked upper "
    "triangle too; the JAXBench harness itself would fall back to XLA's cost analysis.",
    "Scores, mask fill (-1e9) and softmax all stay in bfloat16, so the baseline is itself only bfloat16-accurate.",
)

MASK_FILL = -1e9


def create_inputs(*, seed, batch, seq_len, num_heads, head_dim):
    k_q, k_k, k_v = jax.random.split(jaxbench_key(seed, 42), 3)
    shape = (batch, num_heads, seq_len, head_dim)
    query = normal(k_q, shape, dtype=jnp.bfloat16)
    key = normal(k_k, shape, dtype=jnp.bfloat16)
    value = normal(k_v, shape, dtype=jnp.bfloat16)
    return query, key, value


def reference(query, key, value):
    seq_len, head_dim = query.shape[2], query.shape[3]
    scores = jnp.einsum("bhqd,bhkd->bhqk", query, key) * head_dim**-0.5
    keep = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    scores = jnp.where(keep, scores, MASK_FILL)
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, value)


def flops(*, batch, seq_len, num_heads, head_dim):
    return 4 * batch * num_heads * seq_len**2 * head_dim
