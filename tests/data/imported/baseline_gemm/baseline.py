"""A JAXBench-style baseline.py written for the tests: CONFIG, create_inputs(dtype), workload(*inputs)."""

import jax
import jax.numpy as jnp

CONFIG = {
    "name": "gemm_wide",
    "model": "Test-Model",
    "operator": "dense_matmul",
    "M": 4096,
    "K": 2048,
    "N": 28672,
}


def create_inputs(dtype=jnp.bfloat16):
    key = jax.random.key(42)
    k1, k2 = jax.random.split(key, 2)
    a = jax.random.normal(k1, (CONFIG["M"], CONFIG["K"]), dtype=dtype)
    b = jax.random.normal(k2, (CONFIG["K"], CONFIG["N"]), dtype=dtype) * 0.02
    return a, b


def workload(a, b):
    """C = A @ B in bfloat16."""
    return jnp.dot(a, b)


def get_flops():
    return 2 * CONFIG["M"] * CONFIG["K"] * CONFIG["N"]
