"""15p_RetNet_Retention: RetNet-6.7B multi-scale retention (causal decayed linear attention)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "15p_RetNet_Retention"
MODEL = "RetNet-6.7B"
OPERATOR = "multi_scale_retention"
DESCRIPTION = """
For query, key, value of shape (B, H, S, D), head h decays with gamma_h = 1 - 2^(-5-h). In float32:
A = (Q @ K^T) with Q and K upcast and no 1/sqrt(D) scale, multiplied elementwise by the causal decay
matrix D_h[i, j] = gamma_h^(i-j) for i >= j and 0 above the diagonal (computed as
exp(log(gamma_h) * (i-j))); each row of A is then divided by max(sum_j |A[i, j]|, 1). The
normalised A is rounded to bfloat16 and multiplied by the bfloat16 V (default-precision einsum,
bfloat16 result). Output (B, H, S, D) bfloat16.
"""
SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 16, "head_dim": 256},
    "small": {"batch": 2, "seq_len": 256, "num_heads": 4, "head_dim": 256},
}
INPUT_NAMES = ("query", "key", "value")
NOTES = (
    "The baseline CONFIG's d_model (4096) is not used by the computation and is left out here.",
    "flops() is the baseline benchmark() formula (4*B*H*S^2*D); the harness never reads it and "
    "reports XLA's cost analysis instead (XLA:CPU counts 1.107e12).",
    "Small size: batch 2 (not 1: no dimension shrinks to 1, workloads.keeps_divisibility). The decays "
    "still follow 1 - 2^(-5-h), so the small run has only the four fastest-"
    "decaying heads of the sixteen.",
)
DEGENERATE_OUTPUT = False


def create_inputs(*, seed, batch, seq_len, num_heads, head_dim):
    k_q, k_k, k_v = jax.random.split(jaxbench_key(seed, 42), 3)
    shape = (batch, num_heads, seq_len, head_dim)
    query = normal(k_q, shape, dtype=jnp.bfloat16)
    key = normal(k_k, shape, dtype=jnp.bfloat16)
    value = normal(k_v, shape, dtype=jnp.bfloat16)
    return query, key, value


def reference(query, key, value):
    num_heads, seq_len = query.shape[1], query.shape[2]
    log_gamma = jnp.log(1.0 - jnp.exp2(-5.0 - jnp.arange(num_heads, dtype=jnp.float32)))
    pos = jnp.arange(seq_len, dtype=jnp.float32)
    dist = pos[:, None] - pos[None, :]
    decay = jnp.exp(log_gamma[:, None, None] * jnp.maximum(dist, 0.0)) * (dist >= 0)
    scores = jnp.einsum("bhid,bhjd->bhij", query.astype(jnp.float32), key.astype(jnp.float32)) * decay
    scores = scores / jnp.maximum(jnp.sum(jnp.abs(scores), axis=-1, keepdims=True), 1.0)
    return jnp.einsum("bhij,bhjd->bhid", scores.astype(query.dtype), value)


def flops(*, batch, seq_len, num_heads, head_dim):
    return 4 * batch * num_heads * seq_len**2 * head_dim
