"""39k_Conv2d_GELU_GlobalAvgPool: KernelBench level 2, problem 67 (conv, GELU, global average pool)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "39k_Conv2d_GELU_GlobalAvgPool"
MODEL = "KernelBench level 2, problem 67 (67_Conv2d_GELU_GlobalAvgPool)"
OPERATOR = "Conv2d_GELU_GlobalAvgPool"
DESCRIPTION = """
t = conv2d(x, weight) + bias (NCHW input, OIHW kernel, stride 1, VALID); g = jax.nn.gelu(t) with its
default tanh approximation; out[n, c] = mean of g[n, c] over both spatial axes, so the output is
(N, Cout). All bfloat16 as the JAXBench harness passes them: the conv rounds to bfloat16, the GELU runs
in bfloat16, and jnp.mean accumulates in float32 before rounding back to bfloat16. Under jit, XLA (which
allows excess precision by default) may keep a fused chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 128, "in_channels": 8, "out_channels": 64, "kernel_size": 3, "height": 256, "width": 256},
    "small": {"batch_size": 4, "in_channels": 8, "out_channels": 64, "kernel_size": 3, "height": 32, "width": 32},
    # The global average pool over the full image. A check below full size runs one seed here too.
    "full_reduction": {
        "batch_size": 4,
        "in_channels": 8,
        "out_channels": 64,
        "kernel_size": 3,
        "height": 256,
        "width": 256,
    },
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = ("jax.nn.gelu defaults to the tanh approximation; the PyTorch KernelBench original uses the exact erf GELU.",)


def create_inputs(*, seed, batch_size, in_channels, out_channels, kernel_size, height, width, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_channels, height, width), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (out_channels, in_channels, kernel_size, kernel_size), dtype=dtype) * 0.02
    bias = normal(k_b, (out_channels,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    t = jax.lax.conv_general_dilated(x, weight, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    t = t + bias[None, :, None, None]
    return jnp.mean(jax.nn.gelu(t, approximate=True), axis=(2, 3))


def flops(*, batch_size, in_channels, out_channels, kernel_size, height, width):
    out_h, out_w = height - kernel_size + 1, width - kernel_size + 1
    return 2 * batch_size * out_channels * out_h * out_w * in_channels * kernel_size * kernel_size
