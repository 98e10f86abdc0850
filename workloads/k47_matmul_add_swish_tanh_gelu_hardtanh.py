"""47k_Matmul_Add_Swish_Tanh_GELU_Hardtanh: KernelBench level 2, problem 95 (linear, add, swish, tanh, GELU, clip)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "47k_Matmul_Add_Swish_Tanh_GELU_Hardtanh"
MODEL = "KernelBench level 2, problem 95 (95_Matmul_Add_Swish_Tanh_GELU_Hardtanh)"
OPERATOR = "Matmul_Add_Swish_Tanh_GELU_Hardtanh"
DESCRIPTION = """
y = x @ weight + bias + add_value (x is (B, K), weight stored (K, N), bias and add_value (N,));
then, elementwise in this order: swish y * sigmoid(y), tanh, jax.nn.gelu with its default tanh
approximation, and a clip to [-1, 1]; the output is (B, N). All bfloat16 as the JAXBench harness passes
them: the matmul result rounds to bfloat16 and every later step runs in bfloat16. Under jit, XLA (which
allows excess precision by default) may keep a fused chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024},
}
INPUT_NAMES = ("x", "weight", "bias", "add_value")
NOTES = (
    "jax.nn.gelu defaults to the tanh approximation; the PyTorch KernelBench original uses the exact erf GELU.",
    "JAXBench draws the weights as bfloat16 normals, whose mean is about -0.012 rather than 0 (and x as "
    "bfloat16 uniforms averaging about 0.496); summed over K = 8192 this shifts every x @ weight entry by "
    "about -1, as much as the entries' own spread, so over 80% of the pre-activations are negative.",
    "The final clip to [-1, 1] never changes anything: tanh bounds the GELU input to (-1, 1), where GELU "
    "stays within about [-0.17, 0.85].",
)


def create_inputs(*, seed, batch_size, in_features, out_features, dtype=jnp.bfloat16):
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b, k_a = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 3)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    add_value = normal(k_a, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias, add_value


def reference(x, weight, bias, add_value):
    y = x @ weight + bias + add_value
    y = jnp.tanh(jax.nn.silu(y))
    return jnp.clip(jax.nn.gelu(y, approximate=True), -1.0, 1.0)


def flops(*, batch_size, in_features, out_features):
    return 2 * batch_size * in_features * out_features
