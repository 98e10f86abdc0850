"""21k_Gemm_Divide_Sum_Scaling: KernelBench level 2, problem 14."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "21k_Gemm_Divide_Sum_Scaling"
MODEL = "KernelBench level 2, problem 14 (14_Gemm_Divide_Sum_Scaling)"
OPERATOR = "Gemm_Divide_Sum_Scaling"
DESCRIPTION = """
out = 1.5 * sum_j((x @ weight.T)[:, j] / 2.0), kept as a (B, 1) column. x is (B, K); weight is
stored (hidden, K) and has no bias. The product is a lax.dot_general contracting x's axis 1 with
weight.T's axis 0 at Precision.HIGHEST, giving bfloat16 for the harness's bfloat16 operands; the
halving, the row sum over the hidden axis (jnp.sum, which accumulates bfloat16 in float32 and rounds
back) and the scaling are bfloat16. Output (B, 1) bfloat16.
"""
SIZES = {
    "full": {"batch_size": 4096, "input_size": 8192, "hidden_size": 8192},
    "small": {"batch_size": 256, "input_size": 8192, "hidden_size": 1024},
    # The sum over the full hidden_size. A check below full size runs one seed here too.
    "full_reduction": {"batch_size": 256, "input_size": 8192, "hidden_size": 8192},
}
INPUT_NAMES = ("x", "weight")
NOTES = (
    "weight is standard normal (not scaled by 0.02), so the outputs are large and the 1e-2 tolerance is "
    "mostly relative.",
    "jax.random.normal drawn in bfloat16 averages about -0.012 (measured); summed over K * hidden terms "
    "that bias dominates: with the harness's bfloat16 inputs the small-size outputs are about -3.8e4 "
    "(std ~730), against hundreds to thousands with float32 inputs.",
    "The only workload that asks for Precision.HIGHEST; that request changes the arithmetic only for "
    "float32 operands, not for the bfloat16 ones the harness passes.",
    "Summing over the hidden axis right after a linear map means the GEMM can be folded into a "
    "matrix-vector product (x @ weight.sum(0)).",
)
DIVISOR = 2.0
SCALING_FACTOR = 1.5


def create_inputs(*, seed, batch_size, input_size, hidden_size, dtype=jnp.bfloat16):
    k_x, k_w = jax.random.split(jaxbench_key(seed, 0), 2)
    x = uniform(k_x, (batch_size, input_size), dtype=dtype)
    weight = normal(k_w, (hidden_size, input_size), dtype=dtype)
    return x, weight


def reference(x, weight):
    y = jax.lax.dot_general(x, weight.T, (((1,), (0,)), ((), ())), precision=jax.lax.Precision.HIGHEST)
    return jnp.sum(y / DIVISOR, axis=1, keepdims=True) * SCALING_FACTOR


def flops(*, batch_size, input_size, hidden_size):
    return 2 * batch_size * input_size * hidden_size
