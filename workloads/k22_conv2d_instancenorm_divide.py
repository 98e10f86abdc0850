"""22k_Conv2d_InstanceNorm_Divide: KernelBench level 2, problem 17."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "22k_Conv2d_InstanceNorm_Divide"
MODEL = "KernelBench level 2, problem 17 (17_Conv2d_InstanceNorm_Divide)"
OPERATOR = "Conv2d_InstanceNorm_Divide"
DESCRIPTION = """
A 3x3 convolution of the NCHW input x with OIHW weights (stride 1, VALID padding) plus a
per-output-channel conv bias, then instance normalisation: for every (n, c) plane subtract its mean
and divide by sqrt(biased variance + 1e-5) over (H, W), scale by in_weight[c] and add in_bias[c];
finally divide by 2.0. Output (N, Cout, H-2, W-2). Inputs, intermediates and output are bfloat16 as
the JAXBench harness runs it (jnp.mean/jnp.var accumulate in float32 internally and round back).
"""
SIZES = {
    "full": {"batch_size": 128, "in_channels": 64, "out_channels": 128, "kernel_size": 3, "height": 128, "width": 128},
    "small": {"batch_size": 4, "in_channels": 64, "out_channels": 128, "kernel_size": 3, "height": 32, "width": 32},
}
INPUT_NAMES = ("x", "weight", "conv_bias", "in_weight", "in_bias")
NOTES = ("in_weight is all ones and in_bias all zeros, so the affine step of the instance norm is an identity.",)
EPS = 1e-5
DIVIDE_BY = 2.0


def create_inputs(*, seed, batch_size, in_channels, out_channels, kernel_size, height, width, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_channels, height, width), dtype=dtype)
    k_w, k_cb = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (out_channels, in_channels, kernel_size, kernel_size), dtype=dtype) * 0.02
    conv_bias = normal(k_cb, (out_channels,), dtype=dtype) * 0.02
    in_weight = jnp.ones((out_channels,), dtype=dtype)
    in_bias = jnp.zeros((out_channels,), dtype=dtype)
    return x, weight, conv_bias, in_weight, in_bias


def reference(x, weight, conv_bias, in_weight, in_bias):
    y = jax.lax.conv_general_dilated(x, weight, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + conv_bias[None, :, None, None]
    mean = jnp.mean(y, axis=(2, 3), keepdims=True)
    var = jnp.var(y, axis=(2, 3), keepdims=True)
    y = (y - mean) / jnp.sqrt(var + EPS)
    y = y * in_weight[None, :, None, None] + in_bias[None, :, None, None]
    return y / DIVIDE_BY


def flops(*, batch_size, in_channels, out_channels, kernel_size, height, width):
    out_h, out_w = height - kernel_size + 1, width - kernel_size + 1
    return 2 * batch_size * out_channels * out_h * out_w * in_channels * kernel_size * kernel_size
