"""19k_Matmul_Subtract_Multiply_ReLU: KernelBench level 2, problem 9."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "19k_Matmul_Subtract_Multiply_ReLU"
MODEL = "KernelBench level 2, problem 9 (9_Matmul_Subtract_Multiply_ReLU)"
OPERATOR = "Matmul_Subtract_Multiply_ReLU"
DESCRIPTION = """
out = relu((x @ weight + bias - 2.0) * 1.5): x is (B, K), weight is stored (K, N) (in, out), bias is
(N,). The matmul, the bias add, the subtraction, the scaling and the ReLU all produce bfloat16
(jnp.matmul of bfloat16 operands, default precision), so the output is (B, N) bfloat16, as the
JAXBench harness runs it.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "The output is almost all zeros: x @ weight has a spread of about 1 (std ~1.05 at K=8192), so few "
    "values exceed 2.0 (about 3% with float32 inputs).",
    "With the harness's bfloat16 inputs it is sparser still: jax.random.normal drawn in bfloat16 averages "
    "about -0.012 (measured), which shifts x @ weight down by about 1; about 0.2% of outputs are "
    "non-zero (small size, seed 42). An all-zeros output still fails the 1e-2 check, since the "
    "non-zero values reach about 2.6.",
    "The small size keeps K=8192: with a smaller K the pre-activation never reaches 2.0 and the output is all zeros.",
)
DEGENERATE_OUTPUT = False
SUBTRACT_VALUE = 2.0
MULTIPLY_VALUE = 1.5


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = jnp.matmul(x, weight) + bias
    return jax.nn.relu((y - SUBTRACT_VALUE) * MULTIPLY_VALUE)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
