"""23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp: KernelBench level 2, problem 18."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp"
MODEL = "KernelBench level 2, problem 18 (18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp)"
OPERATOR = "Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp"
DESCRIPTION = """
y = x @ weight.T + bias with weight stored (N, K) (out, in); s = row sum of y over its N features,
kept as a (B, 1) column; then max, mean, logsumexp and logsumexp, each over that length-1 axis, so
each returns its input unchanged and out = s. All steps in bfloat16 (the matmul of bfloat16 operands
at default precision returns bfloat16; jnp.sum accumulates in float32 and rounds back). Output (B, 1)
bfloat16, as the JAXBench harness runs it.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
    # The sum over the full out_features. A check below full size runs one seed here too.
    "full_reduction": {"batch_size": 256, "in_features": 8192, "out_features": 8192},
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "Everything after the row sum (max, mean, two logsumexps) acts on a length-1 axis and is an identity.",
    "The row sum of a linear map folds into a matrix-vector product: x @ weight.sum(0) + bias.sum().",
    "jax.random.normal drawn in bfloat16 averages about -0.012 (measured), so with the harness's "
    "bfloat16 inputs the row sums share a large negative offset (about -1065, std ~19 at the small size).",
)


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (out_features, in_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = jnp.matmul(x, weight.T) + bias
    y = jnp.sum(y, axis=1, keepdims=True)
    # The original keeps these no-ops on the (B, 1) column; kept for fidelity.
    y = jnp.max(y, axis=1, keepdims=True)
    y = jnp.mean(y, axis=1, keepdims=True)
    y = jax.scipy.special.logsumexp(y, axis=1, keepdims=True)
    return jax.scipy.special.logsumexp(y, axis=1, keepdims=True)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
