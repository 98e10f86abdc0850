"""27k_Matmul_Mish_Mish: KernelBench level 2, problem 29."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "27k_Matmul_Mish_Mish"
MODEL = "KernelBench level 2, problem 29 (29_Matmul_Mish_Mish)"
OPERATOR = "Matmul_Mish_Mish"
DESCRIPTION = """
y = x @ weight + bias with weight stored (K, N) (in, out), then mish applied twice, where
mish(t) = t * tanh(softplus(t)) and softplus is jax.nn.softplus. Every step (the matmul of bfloat16
operands at default precision included) is bfloat16; output (B, N) bfloat16 as the JAXBench harness
runs it.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias")


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = x @ weight + bias
    y = y * jnp.tanh(jax.nn.softplus(y))
    return y * jnp.tanh(jax.nn.softplus(y))


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
