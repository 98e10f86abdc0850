"""40k_Gemm_GroupNorm_Min_BiasAdd: KernelBench level 2, problem 75 (linear, GroupNorm, row min, broadcast bias)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "40k_Gemm_GroupNorm_Min_BiasAdd"
MODEL = "KernelBench level 2, problem 75 (75_Gemm_GroupNorm_Min_BiasAdd)"
OPERATOR = "Gemm_GroupNorm_Min_BiasAdd"
DESCRIPTION = """
y = x @ weight.T + linear_bias (x is (B, K), weight stored (N, K), output (B, N)); GroupNorm over the
N features split into contiguous groups of 16: each group is normalised with its mean and biased
variance, (y - mean) / sqrt(var + 1e-5), then multiplied by gn_weight and shifted by gn_bias; m = the
minimum over all N features of each row, (B, 1); m is reshaped to (1, 1, B, 1) and bias (1, N, 1, 1) is
added, which broadcasts to the output out[0, n, b, 0] = m[b] + bias[n] of shape (1, N, B, 1). All
bfloat16 as the JAXBench harness passes them: the matmul result rounds to bfloat16, the elementwise
steps run in bfloat16, and jnp.mean / jnp.var accumulate in float32 before rounding back to bfloat16.
Under jit, XLA (which allows excess precision by default) may keep a fused chain's intermediates in
float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192, "num_groups": 512},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024, "num_groups": 64},
}
INPUT_NAMES = ("x", "weight", "linear_bias", "gn_weight", "gn_bias", "bias")
NOTES = (
    "The output is an outer sum, out[0, n, b, 0] = min_b + bias[n]: N x B values (128 MiB in float32 at "
    "full size) built from only N + B numbers.",
    "gn_weight is all ones and gn_bias all zeros: the GroupNorm affine step changes nothing.",
    "The original hard-codes 512 groups; here the group size (16 features) is what both sizes keep, and "
    "the reference derives the group count from the feature count.",
)
EPS = 1e-5
# The group count is not visible in the input shapes; the group size is what both sizes share.
GROUP_SIZE = 16


def create_inputs(*, seed, batch_size, in_features, out_features, num_groups, dtype=jnp.bfloat16):
    if out_features != num_groups * GROUP_SIZE:
        raise ValueError(f"groups of {GROUP_SIZE} features: out_features must equal {GROUP_SIZE} * num_groups")
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_lb, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 3)
    weight = normal(k_w, (out_features, in_features), dtype=dtype) * 0.02
    linear_bias = normal(k_lb, (out_features,), dtype=dtype) * 0.02
    gn_weight = jnp.ones((out_features,), dtype=dtype)
    gn_bias = jnp.zeros((out_features,), dtype=dtype)
    bias = normal(k_b, (1, out_features, 1, 1), dtype=dtype) * 0.02
    return x, weight, linear_bias, gn_weight, gn_bias, bias


def reference(x, weight, linear_bias, gn_weight, gn_bias, bias):
    y = jnp.matmul(x, weight.T) + linear_bias
    rows, features = y.shape
    g = y.reshape(rows, features // GROUP_SIZE, GROUP_SIZE)
    mean = jnp.mean(g, axis=2, keepdims=True)
    var = jnp.var(g, axis=2, keepdims=True)
    y = ((g - mean) / jnp.sqrt(var + EPS)).reshape(rows, features) * gn_weight + gn_bias
    m = jnp.min(y, axis=1, keepdims=True)
    return m.reshape(1, 1, rows, 1) + bias


def flops(*, batch_size, in_features, out_features, num_groups):
    return 2 * batch_size * in_features * out_features
