"""31k_Gemm_BatchNorm_GELU_ReLU: KernelBench level 2, problem 41."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "31k_Gemm_BatchNorm_GELU_ReLU"
MODEL = "KernelBench level 2, problem 41 (41_Gemm_BatchNorm_GELU_ReLU)"
OPERATOR = "Gemm_BatchNorm_GELU_ReLU"
DESCRIPTION = """
y = x @ gemm_weight.T + gemm_bias with gemm_weight stored (N, K) (out, in); BatchNorm in training
mode: per feature, subtract the mean over the batch axis and divide by sqrt(mean squared deviation
over the batch + 1e-5), then multiply by bn_weight and add bn_bias; GELU in its tanh approximation
(jax.nn.gelu default); ReLU. Output (B, N). All bfloat16 as the JAXBench harness runs it (the
means accumulate in float32 inside jnp.mean and round back).
"""
SIZES = {
    "full": {"batch_size": 16384, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 512, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "gemm_weight", "gemm_bias", "bn_weight", "bn_bias")
NOTES = (
    "GELU is the tanh approximation (jax.nn.gelu default), unlike PyTorch KernelBench's exact erf GELU.",
    "Batch statistics couple all rows: a kernel cannot tile the batch independently, and a small size "
    "needs a reasonably large batch (512 here).",
    "gemm_weight and gemm_bias are standard normal (not scaled by 0.02), so the GEMM output is large "
    "before the normalisation; bn_weight is ones and bn_bias zeros (identity affine step).",
)
EPS = 1e-5


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    k_x, k_w, k_b = jax.random.split(jaxbench_key(seed, 0), 3)
    x = uniform(k_x, (batch_size, in_features), dtype=dtype)
    gemm_weight = normal(k_w, (out_features, in_features), dtype=dtype)
    gemm_bias = normal(k_b, (out_features,), dtype=dtype)
    bn_weight = jnp.ones((out_features,), dtype=dtype)
    bn_bias = jnp.zeros((out_features,), dtype=dtype)
    return x, gemm_weight, gemm_bias, bn_weight, bn_bias


def reference(x, gemm_weight, gemm_bias, bn_weight, bn_bias):
    y = jnp.matmul(x, gemm_weight.T) + gemm_bias
    mean = jnp.mean(y, axis=0, keepdims=True)
    var = jnp.mean((y - mean) ** 2, axis=0, keepdims=True)
    y = (y - mean) / jnp.sqrt(var + EPS) * bn_weight + bn_bias
    return jax.nn.relu(jax.nn.gelu(y))


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
