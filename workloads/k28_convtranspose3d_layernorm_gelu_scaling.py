"""28k_ConvTranspose3d_LayerNorm_GELU_Scaling: KernelBench level 2, problem 34."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "28k_ConvTranspose3d_LayerNorm_GELU_Scaling"
MODEL = "KernelBench level 2, problem 34 (34_ConvTranspose3d_LayerNorm_GELU_Scaling)"
OPERATOR = "ConvTranspose3d_LayerNorm_GELU_Scaling"
DESCRIPTION = """
A 3-D transposed convolution of the NCDHW input x with weights stored (Cin, Cout, k, k, k), stride 2,
padding 1, kernel 4, so each spatial size S becomes 2S: computed as a stride-1 convolution of x with
one zero inserted between neighbouring voxels and k-1-padding = 2 zeros of padding on each side,
using the spatially flipped kernel; plus a per-channel conv bias. Then LayerNorm over the LAST axis
(W_out, not channels): subtract the mean, divide by sqrt(mean squared deviation + 1e-5), multiply by
ln_weight and add ln_bias, both of length Cout broadcast along W_out (valid only because
W_out == Cout); then GELU in its tanh approximation (jax.nn.gelu default); then * 1.0. Output
(N, Cout, 2D, 2H, 2W). All bfloat16 as the JAXBench harness runs it.
"""
SIZES = {
    "full": {
        "batch_size": 32,
        "in_channels": 32,
        "out_channels": 64,
        "kernel_size": 4,
        "stride": 2,
        "padding": 1,
        "D": 16,
        "H": 32,
        "W": 32,
    },
    # W_out = 16 = out_channels keeps the LayerNorm-over-W coincidence.
    "small": {
        "batch_size": 2,
        "in_channels": 8,
        "out_channels": 16,
        "kernel_size": 4,
        "stride": 2,
        "padding": 1,
        "D": 4,
        "H": 8,
        "W": 8,
    },
    # The convolution's full in_channels. A check below full size runs one seed here too.
    "full_reduction": {
        "batch_size": 2,
        "in_channels": 32,
        "out_channels": 16,
        "kernel_size": 4,
        "stride": 2,
        "padding": 1,
        "D": 4,
        "H": 8,
        "W": 8,
    },
}
INPUT_NAMES = ("x", "conv_weight", "conv_bias", "ln_weight", "ln_bias")
NOTES = (
    "LayerNorm normalises the last (W) axis, not the channels, with affine parameters sized by "
    "out_channels; this only broadcasts because W_out == out_channels.",
    "GELU is the tanh approximation (jax.nn.gelu default), unlike PyTorch KernelBench's exact erf GELU.",
    "The transposed convolution runs over a zero-dilated input, so the reported FLOPs are about 8x the "
    "useful transposed-convolution work.",
    "conv_weight is standard normal (not scaled by 0.02); conv_bias and ln_bias are zeros, ln_weight is "
    "ones and the scaling factor is 1.0, so those steps are identities.",
    "Stride and padding are hard-coded in the original; the reference keeps them fixed (2 and 1).",
)
STRIDE = 2
PADDING = 1
EPS = 1e-5
SCALING_FACTOR = 1.0


def create_inputs(
    *, seed, batch_size, in_channels, out_channels, kernel_size, stride, padding, D, H, W, dtype=jnp.bfloat16
):
    if (stride, padding) != (STRIDE, PADDING):
        raise ValueError(f"the reference hard-codes stride={STRIDE}, padding={PADDING}")
    k_x, k_w = jax.random.split(jaxbench_key(seed, 0), 2)
    x = uniform(k_x, (batch_size, in_channels, D, H, W), dtype=dtype)
    conv_weight = normal(k_w, (in_channels, out_channels) + (kernel_size,) * 3, dtype=dtype)
    conv_bias = jnp.zeros((out_channels,), dtype=dtype)
    ln_weight = jnp.ones((out_channels,), dtype=dtype)
    ln_bias = jnp.zeros((out_channels,), dtype=dtype)
    return x, conv_weight, conv_bias, ln_weight, ln_bias


def reference(x, conv_weight, conv_bias, ln_weight, ln_bias):
    k = conv_weight.shape[2]
    edge = k - 1 - PADDING
    # Zero insertion (interior padding) plus edge padding in one lax.pad, as an explicit dilated input.
    spatial = [(edge, edge, STRIDE - 1)] * 3
    x = jax.lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), (0, 0, 0)] + spatial)
    kernel = jnp.flip(jnp.swapaxes(conv_weight, 0, 1), axis=(2, 3, 4))
    y = jax.lax.conv_general_dilated(x, kernel, (1, 1, 1), "VALID", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))
    y = y + conv_bias[None, :, None, None, None]
    mean = jnp.mean(y, axis=-1, keepdims=True)
    var = jnp.mean((y - mean) ** 2, axis=-1, keepdims=True)
    y = (y - mean) / jnp.sqrt(var + EPS) * ln_weight + ln_bias
    return jax.nn.gelu(y) * SCALING_FACTOR


def flops(*, batch_size, in_channels, out_channels, kernel_size, stride, padding, D, H, W):
    out_d, out_h, out_w = ((s - 1) * stride - 2 * padding + kernel_size for s in (D, H, W))
    return 2 * batch_size * out_channels * out_d * out_h * out_w * in_channels * kernel_size**3
