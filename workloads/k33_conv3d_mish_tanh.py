"""33k_Conv3d_Mish_Tanh: KernelBench level 2, problem 47."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "33k_Conv3d_Mish_Tanh"
MODEL = "KernelBench level 2, problem 47 (47_Conv3d_Mish_Tanh)"
OPERATOR = "Conv3d_Mish_Tanh"
DESCRIPTION = """
y = conv3d(x, weight) + bias: a 3x3x3 convolution of the NCDHW input x with (Cout, Cin, k, k, k)
weights, stride 1, VALID padding, plus a per-channel bias; then mish with a naive softplus,
y * tanh(log(1 + exp(y))), then tanh. Output (N, Cout, D-2, H-2, W-2). All bfloat16 as the JAXBench
harness runs it.
"""
SIZES = {
    "full": {"batch_size": 16, "in_channels": 32, "out_channels": 64, "kernel_size": 3, "D": 32, "H": 64, "W": 64},
    "small": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "kernel_size": 3, "D": 8, "H": 16, "W": 16},
    # The convolution's full in_channels. A check below full size runs one seed here too.
    "full_reduction": {
        "batch_size": 2,
        "in_channels": 32,
        "out_channels": 16,
        "kernel_size": 3,
        "D": 8,
        "H": 16,
        "W": 16,
    },
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "softplus is written as log(1 + exp(y)), which overflows for large y; harmless here because the "
    "conv outputs are small (weights scaled by 0.02).",
)


def create_inputs(*, seed, batch_size, in_channels, out_channels, kernel_size, D, H, W, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_channels, D, H, W), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (out_channels, in_channels) + (kernel_size,) * 3, dtype=dtype) * 0.02
    bias = normal(k_b, (out_channels,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = jax.lax.conv_general_dilated(x, weight, (1, 1, 1), "VALID", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))
    y = y + bias[None, :, None, None, None]
    y = y * jnp.tanh(jnp.log(1 + jnp.exp(y)))
    return jnp.tanh(y)


def flops(*, batch_size, in_channels, out_channels, kernel_size, D, H, W):
    out_d, out_h, out_w = D - kernel_size + 1, H - kernel_size + 1, W - kernel_size + 1
    return 2 * batch_size * out_channels * out_d * out_h * out_w * in_channels * kernel_size**3
