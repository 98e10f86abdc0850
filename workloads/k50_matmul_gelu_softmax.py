"""50k_Matmul_GELU_Softmax: KernelBench level 2, problem 99 (linear, GELU, softmax)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "50k_Matmul_GELU_Softmax"
MODEL = "KernelBench level 2, problem 99 (99_Matmul_GELU_Softmax)"
OPERATOR = "Matmul_GELU_Softmax"
DESCRIPTION = """
out = softmax(jax.nn.gelu(x @ weight + bias)) over the feature axis, with GELU's default tanh
approximation: x is (B, K), weight is stored (K, N), bias is (N,), and the output is (B, N). All
bfloat16 as the JAXBench harness passes them: the matmul result rounds to bfloat16, the GELU runs in
bfloat16, and jax.nn.softmax runs on bfloat16 values. Under jit, XLA (which allows excess precision by
default) may keep a fused chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "jax.nn.gelu defaults to the tanh approximation; the PyTorch KernelBench original uses the exact erf GELU.",
    "JAXBench draws the weights as bfloat16 normals, whose mean is about -0.012 rather than 0 (and x as "
    "bfloat16 uniforms averaging about 0.496); summed over K = 8192 this shifts every x @ weight entry by "
    "about -1, as much as the entries' own spread, so over 80% of the pre-activations are negative.",
    "Probabilities average 1/N. At full size (N = 8192, seed 42) none exceeds about 0.0095, so an "
    "all-zeros output passes JAXBench's 1e-2 check there; the small size (N = 1024, largest probability "
    "0.042) does not have that defect.",
)


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 42), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    return jax.nn.softmax(jax.nn.gelu(jnp.matmul(x, weight) + bias, approximate=True), axis=1)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
