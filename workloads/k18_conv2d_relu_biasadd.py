"""18k_Conv2D_ReLU_BiasAdd: KernelBench level 2, problem 1."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "18k_Conv2D_ReLU_BiasAdd"
MODEL = "KernelBench level 2, problem 1 (1_Conv2D_ReLU_BiasAdd)"
OPERATOR = "Conv2D_ReLU_BiasAdd"
DESCRIPTION = """
y = relu(conv2d(x, weight) + conv_bias) + bias: a 3x3 convolution of the NCHW input x with OIHW
weights, stride 1, VALID padding, plus a per-output-channel conv bias, then ReLU, then a second
per-channel bias of shape (C, 1, 1). Output (N, Cout, H-2, W-2). All arrays bfloat16, as the
JAXBench harness passes them.
"""
SIZES = {
    "full": {"batch_size": 128, "in_channels": 64, "out_channels": 128, "kernel_size": 3, "height": 128, "width": 128},
    "small": {"batch_size": 4, "in_channels": 64, "out_channels": 128, "kernel_size": 3, "height": 32, "width": 32},
    # Held out (campaigns; check --config): a non-square image (outputs 62 x 14 = 2 * 31 x 2 * 7).
    "held_out": {
        "batch_size": 2,
        "in_channels": 64,
        "out_channels": 128,
        "kernel_size": 3,
        "height": 64,
        "width": 16,
    },
}
INPUT_NAMES = ("x", "weight", "conv_bias", "bias")


def create_inputs(*, seed, batch_size, in_channels, out_channels, kernel_size, height, width, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_channels, height, width), dtype=dtype)
    k_w, k_cb, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 3)
    weight = normal(k_w, (out_channels, in_channels, kernel_size, kernel_size), dtype=dtype) * 0.02
    conv_bias = normal(k_cb, (out_channels,), dtype=dtype) * 0.02
    bias = normal(k_b, (out_channels, 1, 1), dtype=dtype) * 0.02
    return x, weight, conv_bias, bias


def reference(x, weight, conv_bias, bias):
    y = jax.lax.conv_general_dilated(x, weight, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + conv_bias[None, :, None, None]
    return jnp.maximum(y, 0.0) + bias[None]


def flops(*, batch_size, in_channels, out_channels, kernel_size, height, width):
    out_h, out_w = height - kernel_size + 1, width - kernel_size + 1
    return 2 * batch_size * out_channels * out_h * out_w * in_channels * kernel_size * kernel_size
