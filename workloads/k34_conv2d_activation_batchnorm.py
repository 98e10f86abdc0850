"""34k_Conv2d_Activation_BatchNorm: KernelBench level 2, problem 52 (conv, Mish, training-mode BatchNorm)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "34k_Conv2d_Activation_BatchNorm"
MODEL = "KernelBench level 2, problem 52 (52_Conv2d_Activation_BatchNorm)"
OPERATOR = "Conv2d_Activation_BatchNorm"
DESCRIPTION = """
t = conv2d(x, conv_weight) + conv_bias (NCHW input, OIHW kernel, stride 1, VALID, so the output is
(N, Cout, H-k+1, W-k+1)); m = t * tanh(softplus(t)) (Mish); then BatchNorm in training mode: each
channel is normalised with the mean and the biased variance of m over the batch and both spatial
axes, (m - mean) / sqrt(var + 1e-5), then scaled by bn_weight and shifted by bn_bias. Everything is
bfloat16 as the JAXBench harness passes it: the conv rounds to bfloat16, the elementwise steps run in
bfloat16, and jnp.mean / jnp.var accumulate in float32 before rounding back to bfloat16. Under jit, XLA
(which allows excess precision by default) may keep a fused chain's intermediates in float32 and round
once.
"""
SIZES = {
    "full": {"batch_size": 64, "in_channels": 64, "out_channels": 128, "kernel_size": 3, "height": 128, "width": 128},
    "small": {"batch_size": 4, "in_channels": 16, "out_channels": 32, "kernel_size": 3, "height": 32, "width": 32},
    # The convolution's full in_channels (the batch statistics stay at the small batch and image). A check below full
    # size runs one seed here too.
    "full_reduction": {
        "batch_size": 4,
        "in_channels": 64,
        "out_channels": 32,
        "kernel_size": 3,
        "height": 32,
        "width": 32,
    },
}
INPUT_NAMES = ("x", "conv_weight", "conv_bias", "bn_weight", "bn_bias")
NOTES = (
    "The conv weights and bias are standard normal, not scaled by 0.02 like most KernelBench rows, so the "
    "conv outputs have a spread of several units.",
    "bn_weight is all ones and bn_bias all zeros: the BatchNorm affine step changes nothing.",
    "BatchNorm uses the statistics of the current batch (training mode); no running statistics are kept.",
)
EPS = 1e-5


def create_inputs(*, seed, batch_size, in_channels, out_channels, kernel_size, height, width, dtype=jnp.bfloat16):
    k_x, k_w, k_b = jax.random.split(jaxbench_key(seed, 0), 3)
    x = uniform(k_x, (batch_size, in_channels, height, width), dtype=dtype)
    conv_weight = normal(k_w, (out_channels, in_channels, kernel_size, kernel_size), dtype=dtype)
    conv_bias = normal(k_b, (out_channels,), dtype=dtype)
    bn_weight = jnp.ones((out_channels,), dtype=dtype)
    bn_bias = jnp.zeros((out_channels,), dtype=dtype)
    return x, conv_weight, conv_bias, bn_weight, bn_bias


def reference(x, conv_weight, conv_bias, bn_weight, bn_bias):
    t = jax.lax.conv_general_dilated(x, conv_weight, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    t = t + conv_bias[None, :, None, None]
    m = t * jnp.tanh(jax.nn.softplus(t))
    mean = jnp.mean(m, axis=(0, 2, 3), keepdims=True)
    var = jnp.var(m, axis=(0, 2, 3), keepdims=True)
    y = (m - mean) / jnp.sqrt(var + EPS)
    return y * bn_weight[None, :, None, None] + bn_bias[None, :, None, None]


def flops(*, batch_size, in_channels, out_channels, kernel_size, height, width):
    out_h, out_w = height - kernel_size + 1, width - kernel_size + 1
    return 2 * batch_size * out_channels * out_h * out_w * in_channels * kernel_size * kernel_size
