"""20k_Gemm_Multiply_LeakyReLU: KernelBench level 2, problem 12."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "20k_Gemm_Multiply_LeakyReLU"
MODEL = "KernelBench level 2, problem 12 (12_Gemm_Multiply_LeakyReLU)"
OPERATOR = "Gemm_Multiply_LeakyReLU"
DESCRIPTION = """
y = (x @ weight + bias) * 2.0, then LeakyReLU with slope 0.1: out = y where y >= 0, else 0.1 * y.
x is (B, K), weight is stored (K, N) (in, out), bias is (N,). Every step, including the matmul
(jnp.matmul of bfloat16 operands, default precision), yields bfloat16; output (B, N) bfloat16 as the
JAXBench harness runs it.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias")
MULTIPLIER = 2.0
NEGATIVE_SLOPE = 0.1


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = (jnp.matmul(x, weight) + bias) * MULTIPLIER
    return jnp.where(y >= 0, y, y * NEGATIVE_SLOPE)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
