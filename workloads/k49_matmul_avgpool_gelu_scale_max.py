"""49k_Matmul_AvgPool_GELU_Scale_Max: KernelBench level 2, problem 98 (GEMM, avg pool, GELU, row max)."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal, uniform

ID = "49k_Matmul_AvgPool_GELU_Scale_Max"
MODEL = "KernelBench level 2, problem 98 (98_Matmul_AvgPool_GELU_Scale_Max)"
OPERATOR = "Matmul_AvgPool_GELU_Scale_Max"
DESCRIPTION = """
y = x @ weight + bias (x is (B, K), weight stored (K, N), bias (N,)); the N features of each row are
averaged in non-overlapping windows of 16 (window = stride = 16, VALID), giving (B, N/16): a
reduce_window sum, then a division by 16; p = jax.nn.gelu of that with its default tanh approximation,
times 2.0; out[b] = max over the N/16 pooled features, so the output is (B,). All bfloat16 as the
JAXBench harness passes them: the matmul result rounds to bfloat16 and the window sum, GELU, scaling
and max run in bfloat16. Under jit, XLA (which allows excess precision by default) may keep a fused
chain's intermediates in float32 and round once.
"""
SIZES = {
    "full": {"batch_size": 4096, "in_features": 8192, "out_features": 8192, "pool_kernel_size": 16},
    "small": {"batch_size": 256, "in_features": 8192, "out_features": 1024, "pool_kernel_size": 16},
    # The max over the full out_features. A check below full size runs one seed here too.
    "full_reduction": {"batch_size": 256, "in_features": 8192, "out_features": 8192, "pool_kernel_size": 16},
}
INPUT_NAMES = ("x", "weight", "bias")
NOTES = (
    "jax.nn.gelu defaults to the tanh approximation; the PyTorch KernelBench original uses the exact erf GELU.",
    "JAXBench draws the weights as bfloat16 normals, whose mean is about -0.012 rather than 0 (and x as "
    "bfloat16 uniforms averaging about 0.496); summed over K = 8192 this shifts every x @ weight entry by "
    "about -1, as much as the entries' own spread, so over 80% of the pre-activations are negative. After "
    "pooling, every small-size output (each row's maximum) is negative, and most full-size ones are.",
    "The pool window is not visible in the input shapes, so the reference uses the window of 16 that both sizes keep.",
)
SCALE_FACTOR = 2.0
# The pool window is not visible in the input shapes; both sizes use JAXBench's 16.
POOL = 16


def create_inputs(*, seed, batch_size, in_features, out_features, pool_kernel_size, dtype=jnp.bfloat16):
    if pool_kernel_size != POOL:
        raise ValueError(f"the reference pools with a window of {POOL}, got pool_kernel_size={pool_kernel_size}")
    x = uniform(jaxbench_key(seed, 0), (batch_size, in_features), dtype=dtype)
    k_w, k_b = jax.random.split(jaxbench_key(seed, 0xBADC0DE), 2)
    weight = normal(k_w, (in_features, out_features), dtype=dtype) * 0.02
    bias = normal(k_b, (out_features,), dtype=dtype) * 0.02
    return x, weight, bias


def reference(x, weight, bias):
    y = jnp.matmul(x, weight) + bias
    summed = jax.lax.reduce_window(y, jnp.array(0, y.dtype), jax.lax.add, (1, POOL), (1, POOL), "VALID")
    p = jax.nn.gelu(summed / POOL, approximate=True) * SCALE_FACTOR
    return jnp.max(p, axis=1)


def flops(*, batch_size, in_features, out_features, pool_kernel_size):
    return 2 * batch_size * in_features * out_features
