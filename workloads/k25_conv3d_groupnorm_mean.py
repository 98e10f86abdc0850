"""25k_Conv3d_GroupNorm_Mean: KernelBench level 2, problem 23."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "25k_Conv3d_GroupNorm_Mean"
MODEL = "KernelBench level 2, problem 23 (23_Conv3d_GroupNorm_Mean)"
OPERATOR = "Conv3d_GroupNorm_Mean"
DESCRIPTION = """
A 3x3x3 convolution of the NCDHW input x with (Cout, Cin, k, k, k) weights (stride 1, VALID padding)
plus a per-channel conv bias; then GroupNorm with 8 groups of Cout/8 consecutive channels: each
group of each sample is normalised over (channels in group, D, H, W) with its mean and biased
variance (eps 1e-5), then scaled by gamma[c] and shifted by beta[c]; finally the mean over every
non-batch axis. Output (N,). All bfloat16 as the JAXBench harness runs it (jnp.mean/jnp.var
accumulate in float32 internally and round back).
"""
SIZES = {
    "full": {
        "batch_size": 128,
        "in_channels": 3,
        "out_channels": 24,
        "kernel_size": 3,
        "num_groups": 8,
        "D": 24,
        "H": 32,
        "W": 32,
    },
    "small": {
        "batch_size": 8,
        "in_channels": 3,
        "out_channels": 24,
        "kernel_size": 3,
        "num_groups": 8,
        "D": 24,
        "H": 16,
        "W": 16,
    },
}
INPUT_NAMES = ("x", "weight", "conv_bias", "gamma", "beta")
NOTES = (
    "gamma is all ones and every group is normalised to zero mean, so each output is mean(beta) up to "
    "rounding, whatever x and the convolution are: the output is a constant (DEGENERATE_OUTPUT).",
    "Weak under our check too (degenerate-output audit): the truth's own mean everywhere passes, since "
    "the output is that mean to within 2e-8. A fixed constant does not (mean(beta) changes with the "
    "seed: the seed-42 output replayed misses by 6x the tolerance), but a kernel that returns "
    "mean(beta) and never touches x or the convolution is correct: that is the workload's math.",
    "The group count is hard-coded (8) in the original; the reference keeps it fixed, so num_groups must stay 8.",
    "Small size: D stays 24 = 2^3 * 3, the smallest depth that keeps the full one's divisibility "
    "(workloads.keeps_divisibility); H and W shrink to 16.",
)
DEGENERATE_OUTPUT = True
NUM_GROUPS = 8
EPS = 1e-5


def create_inputs(*, seed, batch_size, in_channels, out_channels, kernel_size, num_groups, D, H, W, dtype=jnp.bfloat16):
    if num_groups != NUM_GROUPS:
        raise ValueError(f"the reference hard-codes {NUM_GROUPS} groups, got num_groups={num_groups}")
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_channels, D, H, W), dtype=dtype)
    k_w, k_cb, k_beta = jax.random.split(jaxbench_key(seed, 42), 3)
    weight = normal(k_w, (out_channels, in_channels) + (kernel_size,) * 3, dtype=dtype) * 0.02
    conv_bias = normal(k_cb, (out_channels,), dtype=dtype) * 0.02
    gamma = jnp.ones((out_channels,), dtype=dtype)
    beta = normal(k_beta, (out_channels,), dtype=dtype) * 0.02
    return x, weight, conv_bias, gamma, beta


def reference(x, weight, conv_bias, gamma, beta):
    y = jax.lax.conv_general_dilated(x, weight, (1, 1, 1), "VALID", dimension_numbers=("NCDHW", "OIDHW", "NCDHW"))
    y = y + conv_bias[None, :, None, None, None]
    n, c, d, h, w = y.shape
    g = y.reshape(n, NUM_GROUPS, c // NUM_GROUPS, d, h, w)
    mean = jnp.mean(g, axis=(2, 3, 4, 5), keepdims=True)
    var = jnp.var(g, axis=(2, 3, 4, 5), keepdims=True)
    y = ((g - mean) / jnp.sqrt(var + EPS)).reshape(n, c, d, h, w)
    y = y * gamma[None, :, None, None, None] + beta[None, :, None, None, None]
    return jnp.mean(y, axis=(1, 2, 3, 4))


def flops(*, batch_size, in_channels, out_channels, kernel_size, num_groups, D, H, W):
    out_d, out_h, out_w = D - kernel_size + 1, H - kernel_size + 1, W - kernel_size + 1
    return 2 * batch_size * out_channels * out_d * out_h * out_w * in_channels * kernel_size**3
