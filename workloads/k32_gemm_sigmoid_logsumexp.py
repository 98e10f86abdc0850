"""32k_Gemm_Sigmoid_LogSumExp: KernelBench level 2, problem 45."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "32k_Gemm_Sigmoid_LogSumExp"
MODEL = "KernelBench level 2, problem 45 (45_Gemm_Sigmoid_LogSumExp)"
OPERATOR = "Gemm_Sigmoid_LogSumExp"
DESCRIPTION = """
A two-layer MLP reduced by logsumexp: h = sigmoid(x @ w1.T + b1) with w1 stored (hidden, in);
z = h @ w2.T + b2 with w2 stored (out, hidden); out = logsumexp of z over its out features, one value
per row. Both matmuls take bfloat16 operands at default precision and return bfloat16, and every
elementwise step and the logsumexp are bfloat16; output (B,) bfloat16 as the JAXBench harness runs it.
"""
SIZES = {
    "full": {"batch_size": 16384, "input_size": 2048, "hidden_size": 4096, "output_size": 1024},
    "small": {"batch_size": 256, "input_size": 2048, "hidden_size": 4096, "output_size": 1024},
}
INPUT_NAMES = ("x", "w1", "b1", "w2", "b2")
NOTES = (
    "The output is nearly constant: h stays close to 0.5, so z differs little between rows and every "
    "logsumexp lands near the same value (about 6.69, std ~0.003 at the small size, mostly one "
    "bfloat16 value); the row mean everywhere passes the 1e-2 check (DEGENERATE_OUTPUT). It is near "
    "constant with float32 inputs too.",
    "Weak under our check too (degenerate-output audit, benchmarks/degenerate_audit.py): the truth's "
    "own mean everywhere and the seed-42 output replayed both pass. Within a seed the rows spread by "
    "~0.003 and across seeds the mean moves by ~0.04 (6.66 to 6.70 at seeds 1, 7, 11), while the "
    "calibrated tolerance is ~0.05-0.07 (two bfloat16 steps of 0.03 at 6.7), so a hard-coded constant "
    "near 6.68 passes. No check on a bfloat16 output can do better: the signal is below its resolution.",
)
DEGENERATE_OUTPUT = True


def create_inputs(*, seed, batch_size, input_size, hidden_size, output_size, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, input_size), dtype=dtype)
    k_w1, k_b1, k_w2, k_b2 = jax.random.split(jaxbench_key(seed, 42), 4)
    w1 = normal(k_w1, (hidden_size, input_size), dtype=dtype) * 0.02
    b1 = normal(k_b1, (hidden_size,), dtype=dtype) * 0.02
    w2 = normal(k_w2, (output_size, hidden_size), dtype=dtype) * 0.02
    b2 = normal(k_b2, (output_size,), dtype=dtype) * 0.02
    return x, w1, b1, w2, b2


def reference(x, w1, b1, w2, b2):
    h = jax.nn.sigmoid(jnp.matmul(x, w1.T) + b1)
    z = jnp.matmul(h, w2.T) + b2
    return jax.scipy.special.logsumexp(z, axis=1)


def flops(*, batch_size, input_size, hidden_size, output_size):
    return 2 * batch_size * (input_size * hidden_size + hidden_size * output_size)
