"""26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply: KernelBench level 2, problem 28."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "26k_BMM_InstanceNorm_Sum_ResidualAdd_Multiply"
MODEL = "KernelBench level 2, problem 28 (28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply)"
OPERATOR = "BMM_InstanceNorm_Sum_ResidualAdd_Multiply"
DESCRIPTION = """
h = x @ bmm_weight.T + bmm_bias (bmm_weight stored (N, K), i.e. (out, in)); h is viewed as
(B, N, 1, 1) and instance-normalised over its 1x1 spatial extent (mean and biased variance of a
single element, eps 1e-5), which makes every normalised value exactly 0; the affine step then gives
in_weight * 0 + in_bias; finally out = (in_bias + y) * y with y a second (B, N) input. All bfloat16 as
the JAXBench harness runs it. Output (B, N) bfloat16.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "y", "bmm_weight", "bmm_bias", "in_weight", "in_bias")
NOTES = (
    "The instance norm runs over a single element, so the linear layer cancels out: the output is "
    "(in_bias + y) * y whatever x, bmm_weight and bmm_bias are, and a kernel can skip the GEMM.",
    "The reported FLOPs are those of the dead GEMM.",
)
EPS = 1e-5


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    k_x, k_y = jax.random.split(jaxbench_key(seed, 0), 2)
    x = uniform(k_x, (batch_size, in_features), dtype=dtype)
    y = uniform(k_y, (batch_size, out_features), dtype=dtype)
    k_w, k_b, k_ib = jax.random.split(jaxbench_key(seed, 42), 3)
    bmm_weight = normal(k_w, (out_features, in_features), dtype=dtype) * 0.02
    bmm_bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    in_weight = jnp.ones((out_features,), dtype=dtype)
    in_bias = normal(k_ib, (out_features,), dtype=dtype) * 0.02
    return x, y, bmm_weight, bmm_bias, in_weight, in_bias


def reference(x, y, bmm_weight, bmm_bias, in_weight, in_bias):
    h = (x @ bmm_weight.T + bmm_bias)[:, :, None, None]
    mean = jnp.mean(h, axis=(2, 3), keepdims=True)
    var = jnp.var(h, axis=(2, 3), keepdims=True)
    h = (h - mean) / jnp.sqrt(var + EPS)
    h = h * in_weight[None, :, None, None] + in_bias[None, :, None, None]
    h = h[:, :, 0, 0]
    return (h + y) * y


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
