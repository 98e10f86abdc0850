"""9p_SwiGLU_MLP: the Llama-3.1-70B feed-forward block (gated SiLU MLP) in bfloat16."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "9p_SwiGLU_MLP"
MODEL = "Llama-3.1-70B"
OPERATOR = "swiglu_mlp"
DESCRIPTION = """
out = (silu(x @ gate_kernel) * (x @ up_kernel)) @ down_kernel, with silu(z) = z * sigmoid(z).
x is (batch, seq_len, emb_dim), gate_kernel and up_kernel are (emb_dim, mlp_dim), down_kernel is
(mlp_dim, emb_dim); the output is (batch, seq_len, emb_dim). Everything is bfloat16: each of the
three matmuls is a default-precision jnp.dot that returns bfloat16, and the SiLU and the
elementwise product are evaluated on those bfloat16 values.
"""
SIZES = {
    "full": {"batch": 2, "seq_len": 4096, "emb_dim": 8192, "mlp_dim": 28672},
    # mlp_dim = 2^11 * 3 keeps the full 28672 = 2^12 * 7 up to the 2048 cap (see NOTES).
    "small": {"batch": 2, "seq_len": 128, "emb_dim": 512, "mlp_dim": 6144},
    # The down projection's full length (mlp_dim); emb_dim stays small: both at full would be 1.4 GB of weights. A check
    # below full size runs one seed here too.
    "full_reduction": {"batch": 2, "seq_len": 128, "emb_dim": 512, "mlp_dim": 28672},
}
INPUT_NAMES = ("x", "gate_kernel", "up_kernel", "down_kernel")
NOTES = (
    "flops() is the formula of the baseline's own benchmark() (6*B*S*E*M); the JAXBench harness "
    "never reads it and reports XLA's cost analysis instead (XLA:CPU counts 1.155e13).",
    "Small size: mlp_dim = 6144 = 2^11 * 3 keeps what tiling sees of 28672 = 2^12 * 7 (divisible by "
    "every power of two up to 2048, not a power of two; workloads.keeps_divisibility), so the 3.5 ratio "
    "of mlp_dim to emb_dim becomes 12; with emb_dim 512 instead of 8192 the hidden activations are "
    "about 4x smaller than at full size. batch stays 2 so that no dimension shrinks to 1.",
)
DEGENERATE_OUTPUT = False


def create_inputs(*, seed, batch, seq_len, emb_dim, mlp_dim):
    k_x, k_gate, k_up, k_down = jax.random.split(jaxbench_key(seed, 42), 4)
    x = normal(k_x, (batch, seq_len, emb_dim), dtype=jnp.bfloat16)
    gate_kernel = normal(k_gate, (emb_dim, mlp_dim), dtype=jnp.bfloat16) * 0.02
    up_kernel = normal(k_up, (emb_dim, mlp_dim), dtype=jnp.bfloat16) * 0.02
    down_kernel = normal(k_down, (mlp_dim, emb_dim), dtype=jnp.bfloat16) * 0.02
    return x, gate_kernel, up_kernel, down_kernel


def reference(x, gate_kernel, up_kernel, down_kernel):
    hidden = jax.nn.silu(jnp.dot(x, gate_kernel)) * jnp.dot(x, up_kernel)
    return jnp.dot(hidden, down_kernel)


def flops(*, batch, seq_len, emb_dim, mlp_dim):
    return 6 * batch * seq_len * emb_dim * mlp_dim
