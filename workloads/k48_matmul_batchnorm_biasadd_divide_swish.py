"""48k_Matmul_BatchNorm_BiasAdd_Divide_Swish: KernelBench level 2, problem 97 (GEMM, eval BatchNorm, swish)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "48k_Matmul_BatchNorm_BiasAdd_Divide_Swish"
MODEL = "KernelBench level 2, problem 97 (97_Matmul_BatchNorm_BiasAdd_Divide_Swish)"
OPERATOR = "Matmul_BatchNorm_BiasAdd_Divide_Swish"
DESCRIPTION = """
y = x @ weight + linear_bias (x is (B, K), weight stored (K, N), linear_bias (N,)); BatchNorm in
inference mode with the given running statistics, z = bn_scale * (y - bn_mean) / sqrt(bn_var + 1e-5)
+ bn_bias (per feature); z = (z + bias) / 1.0 with a one-element bias; out = z * sigmoid(z), shape
(B, N). All bfloat16 as the JAXBench harness passes them: the matmul result rounds to bfloat16 and every
later step runs in bfloat16. Under jit, XLA (which allows excess precision by default) may keep a fused
chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "linear_bias", "bn_scale", "bn_bias", "bn_mean", "bn_var", "bias")
NOTES = (
    "BatchNorm uses fixed running statistics (mean 0, variance 1) instead of batch statistics; JAXBench's "
    "CONFIG momentum (0.1) is never used.",
    "bn_scale is all ones, bn_bias and bn_mean zeros, bn_var ones (1 + 1e-5 is 1 in bfloat16), and the "
    "divisor is 1.0: the workload reduces to swish(x @ weight + linear_bias + bias).",
    "JAXBench draws the weights as bfloat16 normals, whose mean is about -0.012 rather than 0 (and x as "
    "bfloat16 uniforms averaging about 0.496); summed over K = 8192 this shifts every x @ weight entry by "
    "about -1, as much as the entries' own spread, so over 80% of the pre-activations are negative.",
)
BN_EPS = 1e-5
DIVIDE_VALUE = 1.0


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_lb, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 3)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    linear_bias = normal(k_lb, (out_features,), dtype=dtype) * 0.02
    bn_scale = jnp.ones((out_features,), dtype=dtype)
    bn_bias = jnp.zeros((out_features,), dtype=dtype)
    bn_mean = jnp.zeros((out_features,), dtype=dtype)
    bn_var = jnp.ones((out_features,), dtype=dtype)
    bias = normal(k_b, (1,), dtype=dtype) * 0.02
    return x, weight, linear_bias, bn_scale, bn_bias, bn_mean, bn_var, bias


def reference(x, weight, linear_bias, bn_scale, bn_bias, bn_mean, bn_var, bias):
    y = jnp.matmul(x, weight) + linear_bias
    z = bn_scale * ((y - bn_mean) / jnp.sqrt(bn_var + BN_EPS)) + bn_bias
    z = (z + bias) / DIVIDE_VALUE
    return z * jax.nn.sigmoid(z)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
