"""12p_RMSNorm: Llama-3.1-70B RMS normalisation over the embedding axis, bfloat16 in and out."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "12p_RMSNorm"
MODEL = "Llama-3.1-70B"
OPERATOR = "rms_norm"
DESCRIPTION = """
y = cast_bf16(x * rsqrt(mean(x^2, last axis) + EPSILON)) * scale for x of shape (batch, seq_len,
emb_dim) and scale of shape (emb_dim,), EPSILON = 1e-5. The square, the mean over emb_dim, the
rsqrt and the multiply by x are float32 (x upcast first); the normalised values are rounded to
bfloat16 and then multiplied by the bfloat16 scale in bfloat16. Output (batch, seq_len, emb_dim)
bfloat16.
"""
EPSILON = 1e-5
SIZES = {
    "full": {"batch": 8, "seq_len": 4096, "emb_dim": 8192},
    "small": {"batch": 2, "seq_len": 256, "emb_dim": 1024},
    # Held out (campaigns; check --config): fewer rows, a wider one.
    "held_out": {"batch": 4, "seq_len": 128, "emb_dim": 2048},
}
INPUT_NAMES = ("x", "scale")
NOTES = (
    "The baseline's docstring says batch 1, seq_len 2048; its CONFIG (used here) has batch 8, seq_len 4096.",
    "flops() is the baseline's get_flops(), 5*B*S*D, which the harness uses.",
)
DEGENERATE_OUTPUT = False


def create_inputs(*, seed, batch, seq_len, emb_dim):
    k_x, k_scale = jax.random.split(jaxbench_key(seed, 42), 2)
    x = normal(k_x, (batch, seq_len, emb_dim), dtype=jnp.bfloat16)
    scale = normal(k_scale, (emb_dim,), dtype=jnp.bfloat16) * 0.1 + 1.0
    return x, scale


def reference(x, scale):
    x32 = x.astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + EPSILON)
    return (x32 * inv_rms).astype(x.dtype) * scale


def flops(*, batch, seq_len, emb_dim):
    return 5 * batch * seq_len * emb_dim
