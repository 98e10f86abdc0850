"""16p_Mamba2_SSD: Mamba-2-2.7B state-space duality in its quadratic (attention-like) form."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "16p_Mamba2_SSD"
MODEL = "Mamba-2-2.7B"
OPERATOR = "state_space_duality"
DESCRIPTION = """
query (C), key (B) and value (x) are (batch, H, S, D) bfloat16; A_log is (batch, H, S) float32.
In float32: a = sigmoid(A_log), c = cumsum over the sequence of log(a + 1e-8), and
L[i, j] = exp(c_i - c_j) for i >= j, 0 for i < j (the masked entries are exp(-1e30)). The scores
(Q @ K^T with Q, K upcast, no scale) are multiplied elementwise by L; r = the row sum of the
scores, replaced by 1 where |r| < 1e-6, and every row is divided by max(|r|, 1). The scores are
rounded to bfloat16 and multiplied by the bfloat16 V (default-precision einsum, bfloat16 result).
Output (batch, H, S, D) bfloat16.
"""
SIZES = {
    "full": {"batch": 4, "seq_len": 4096, "num_heads": 64, "head_dim": 64},
    "small": {"batch": 2, "seq_len": 256, "num_heads": 4, "head_dim": 64},
}
INPUT_NAMES = ("query", "key", "value", "A_log")
NOTES = (
    "The baseline's docstring says a = exp(A_log); the code (followed here) uses sigmoid(A_log).",
    "The baseline CONFIG's d_state (128) and d_model (2560) are not used and are left out here.",
    "A_log is float32 whatever dtype the harness asks for; the other inputs are bfloat16.",
    "With A_log ~ N(-4, 0.5), a is about 0.018, so L shrinks ~50x per step and is nearly "
    "diagonal: each output row is dominated by +-value[i] (the sign of q_i.k_i); at the small size "
    "the rest moves the output by 0.07 on average (output std ~1).",
    "flops() is the baseline benchmark() formula (4*B*H*S^2*D); the harness never reads it and "
    "reports XLA's cost analysis instead (XLA:CPU counts 1.13e12).",
)
DEGENERATE_OUTPUT = False


def create_inputs(*, seed, batch, seq_len, num_heads, head_dim):
    keys = jax.random.split(jaxbench_key(seed, 42), 5)
    shape = (batch, num_heads, seq_len, head_dim)
    query = normal(keys[0], shape, dtype=jnp.bfloat16)
    key = normal(keys[1], shape, dtype=jnp.bfloat16)
    value = normal(keys[2], shape, dtype=jnp.bfloat16)
    A_log = normal(keys[3], (batch, num_heads, seq_len), dtype=jnp.float32) * 0.5 - 4.0
    return query, key, value, A_log


def reference(query, key, value, A_log):
    seq_len = query.shape[2]
    c = jnp.cumsum(jnp.log(jax.nn.sigmoid(A_log.astype(jnp.float32)) + 1e-8), axis=-1)
    causal = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    decay = jnp.exp(jnp.where(causal, c[..., :, None] - c[..., None, :], -1e30))
    scores = jnp.einsum("bhid,bhjd->bhij", query.astype(jnp.float32), key.astype(jnp.float32)) * decay
    row_sum = jnp.sum(scores, axis=-1, keepdims=True)
    row_sum = jnp.where(jnp.abs(row_sum) < 1e-6, 1.0, row_sum)
    scores = scores / jnp.maximum(jnp.abs(row_sum), 1.0)
    return jnp.einsum("bhij,bhjd->bhid", scores.astype(query.dtype), value)


def flops(*, batch, seq_len, num_heads, head_dim):
    return 4 * batch * num_heads * seq_len**2 * head_dim
