"""37k_Matmul_Swish_Scaling: KernelBench level 2, problem 59 (linear, swish, times 2)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "37k_Matmul_Swish_Scaling"
MODEL = "KernelBench level 2, problem 59 (59_Matmul_Swish_Scaling)"
OPERATOR = "Matmul_Swish_Scaling"
DESCRIPTION = """
y = x @ weight + bias, out = (y * sigmoid(y)) * 2.0: x is (B, K), weight is stored (K, N), bias is
(N,), and the output is (B, N). All bfloat16 as the JAXBench harness passes them: the matmul result
rounds to bfloat16 and the swish and the scaling run in bfloat16. Under jit, XLA (which allows excess
precision by default) may keep a fused chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "JAXBench draws the weights as bfloat16 normals, whose mean is about -0.012 rather than 0 (and x as "
    "bfloat16 uniforms averaging about 0.496); summed over K = 8192 this shifts every x @ weight entry by "
    "about -1, as much as the entries' own spread, so over 80% of the pre-activations are negative.",
)
SCALING_FACTOR = 2.0


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = jnp.matmul(x, weight) + bias
    return y * jax.nn.sigmoid(y) * SCALING_FACTOR


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
