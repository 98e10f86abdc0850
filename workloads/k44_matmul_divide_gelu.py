"""44k_Matmul_Divide_GELU: KernelBench level 2, problem 86 (linear, divide by 10, GELU)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "44k_Matmul_Divide_GELU"
MODEL = "KernelBench level 2, problem 86 (86_Matmul_Divide_GELU)"
OPERATOR = "Matmul_Divide_GELU"
DESCRIPTION = """
out = jax.nn.gelu((x @ weight + bias) / 10.0) with GELU's default tanh approximation: x is (B, K),
weight is stored (K, N), bias is (N,), and the output is (B, N). All bfloat16 as the JAXBench harness
passes them: the matmul result rounds to bfloat16, and the division and the GELU run in bfloat16. Under
jit, XLA (which allows excess precision by default) may keep a fused chain's intermediates in float32
and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "input_size": 8192, "output_size": 8192},
    "small": {"batch_size": 256, "input_size": 8192, "output_size": 1024},
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "jax.nn.gelu defaults to the tanh approximation; the PyTorch KernelBench original uses the exact erf GELU.",
    "JAXBench draws the weights as bfloat16 normals, whose mean is about -0.012 rather than 0 (and x as "
    "bfloat16 uniforms averaging about 0.496); summed over K = 8192 this shifts every x @ weight entry by "
    "about -1, as much as the entries' own spread, so over 80% of the pre-activations are negative.",
)
DIVISOR = 10.0


def create_inputs(*, seed, batch_size, input_size, output_size, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, input_size), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (input_size, output_size), dtype=dtype) * 0.02
    bias = normal(k_b, (output_size,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    return jax.nn.gelu((x @ weight + bias) / DIVISOR, approximate=True)


def flops(*, batch_size, input_size, output_size):
    return 2 * batch_size * input_size * output_size
