"""43k_Gemm_BatchNorm_Scaling_Softmax: KernelBench level 2, problem 84 (linear, eval-mode BatchNorm, scale, softmax)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "43k_Gemm_BatchNorm_Scaling_Softmax"
MODEL = "KernelBench level 2, problem 84 (84_Gemm_BatchNorm_Scaling_Softmax)"
OPERATOR = "Gemm_BatchNorm_Scaling_Softmax"
DESCRIPTION = """
y = x @ weight + bias (x is (B, K), weight stored (K, N), bias (N,)); BatchNorm in inference mode with
the given running statistics, z = bn_scale * (y - bn_mean) / sqrt(bn_var + 1e-5) + bn_bias (per
feature); z is multiplied by the one-element scale; out = softmax over the feature axis, shape (B, N).
All bfloat16 as the JAXBench harness passes them: the matmul result rounds to bfloat16, the BatchNorm
and scaling run in bfloat16, and jax.nn.softmax runs on bfloat16 values. Under jit, XLA (which allows
excess precision by default) may keep a fused chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias", "bn_scale", "bn_bias", "bn_mean", "bn_var", "scale")
NOTES = (
    "BatchNorm uses fixed running statistics (mean 0, variance 1) instead of batch statistics; JAXBench's "
    "CONFIG momentum (0.1) is never used.",
    "bn_mean is 0 and bn_var, bn_scale and scale are 1, so (1 + 1e-5 being 1 in bfloat16) the BatchNorm "
    "and the scaling only add bn_bias: the workload is softmax(x @ weight + bias + bn_bias).",
    "Probabilities average 1/N, far below the 1e-2 absolute tolerance. At full size (N = 8192, seed 42) "
    "only 3 of the 4096 rows hold any probability above 0.0095 (the largest is 0.016), so an all-zeros "
    "output fails JAXBench's check on just a few entries; the small size is not that close to degenerate.",
)
BN_EPS = 1e-5


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b, k_bn = jax.random.split(jaxbench_key(seed, 42), 3)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    bn_scale = jnp.ones((out_features,), dtype=dtype)
    bn_bias = normal(k_bn, (out_features,), dtype=dtype) * 0.02
    bn_mean = jnp.zeros((out_features,), dtype=dtype)
    bn_var = jnp.ones((out_features,), dtype=dtype)
    scale = jnp.ones((1,), dtype=dtype)
    return x, weight, bias, bn_scale, bn_bias, bn_mean, bn_var, scale


def reference(x, weight, bias, bn_scale, bn_bias, bn_mean, bn_var, scale):
    y = jnp.matmul(x, weight) + bias
    z = bn_scale * ((y - bn_mean) / jnp.sqrt(bn_var + BN_EPS)) + bn_bias
    return jax.nn.softmax(scale * z, axis=1)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
