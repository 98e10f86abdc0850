"""29k_Matmul_Swish_Sum_GroupNorm: KernelBench level 2, problem 37."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "29k_Matmul_Swish_Sum_GroupNorm"
MODEL = "KernelBench level 2, problem 37 (37_Matmul_Swish_Sum_GroupNorm)"
OPERATOR = "Matmul_Swish_Sum_GroupNorm"
DESCRIPTION = """
y = x @ weight with weight stored (K, N) (in, out) and no bias inside the matmul; swish
y = sigmoid(y) * y; then + bias; then GroupNorm over the N features in groups of 64 consecutive
features (N/64 groups): each group of each row is normalised with its mean and biased variance
(eps 1e-5), then multiplied by gn_weight and shifted by gn_bias. Output (B, N). All bfloat16 as the
JAXBench harness runs it (jnp.mean/jnp.var accumulate in float32 internally and round back).
"""
SIZES = {
    "full": {"batch_size": 8192, "in_features": 4096, "out_features": 4096, "num_groups": 64},
    "small": {"batch_size": 512, "in_features": 4096, "out_features": 512, "num_groups": 8},
}
INPUT_NAMES = ("x", "weight", "bias", "gn_weight", "gn_bias")
NOTES = (
    "The original hard-codes num_groups=64 and out_features=4096; the small size keeps the group size "
    "of 64 features, and the reference derives the group count from the feature count that way.",
    "gn_weight is ones and gn_bias zeros, so the GroupNorm affine step is an identity.",
)
GROUP_SIZE = 64
EPS = 1e-5


def create_inputs(*, seed, batch_size, in_features, out_features, num_groups, dtype=jnp.bfloat16):
    if out_features != num_groups * GROUP_SIZE:
        raise ValueError(f"groups of {GROUP_SIZE} features: out_features must equal {GROUP_SIZE} * num_groups")
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    gn_weight = jnp.ones((out_features,), dtype=dtype)
    gn_bias = jnp.zeros((out_features,), dtype=dtype)
    return x, weight, bias, gn_weight, gn_bias


def reference(x, weight, bias, gn_weight, gn_bias):
    y = jnp.matmul(x, weight)
    y = jax.nn.sigmoid(y) * y + bias
    rows, features = y.shape
    g = y.reshape(rows, features // GROUP_SIZE, GROUP_SIZE)
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.var(g, axis=-1, keepdims=True)
    y = ((g - mean) / jnp.sqrt(var + EPS)).reshape(rows, features)
    return y * gn_weight + gn_bias


def flops(*, batch_size, in_features, out_features, num_groups):
    return 2 * batch_size * in_features * out_features
