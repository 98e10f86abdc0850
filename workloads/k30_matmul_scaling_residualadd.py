"""30k_Matmul_Scaling_ResidualAdd: KernelBench level 2, problem 40."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "30k_Matmul_Scaling_ResidualAdd"
MODEL = "KernelBench level 2, problem 40 (40_Matmul_Scaling_ResidualAdd)"
OPERATOR = "Matmul_Scaling_ResidualAdd"
DESCRIPTION = """
y = x @ weight + bias with weight stored (K, N) (in, out); out = y * 0.5 + y (a residual add of the
scaled copy, i.e. 1.5 * y up to rounding). The matmul of bfloat16 operands (default precision), the
scaling and the add are bfloat16; output (B, N) bfloat16 as the JAXBench harness runs it.
"""
SIZES = {
    "full": {"batch_size": 16384, "in_features": 4096, "out_features": 4096},
    "small": {"batch_size": 1024, "in_features": 4096, "out_features": 512},
}
INPUT_NAMES = ("x", "weight", "bias")
SCALING_FACTOR = 0.5


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = jnp.matmul(x, weight) + bias
    return y * SCALING_FACTOR + y


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
