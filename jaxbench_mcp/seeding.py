"""Random keys for workload inputs.

JAXBench builds every input from fixed keys (key(42) for most tensors, key(0) or key(0xBADC0DE) for
some KernelBench ones). Seed 42 stands for "JAXBench's own inputs": it returns exactly those keys,
so the published inputs are reproduced bit for bit. Any other seed derives a distinct key per
original constant, so that a kernel cannot learn the answer for one seed and replay it.
"""

import math

import jax
import jax.numpy as jnp

JAXBENCH_SEED = 42


def jaxbench_key(seed, original: int) -> jax.Array:
    """The key JAXBench built from `jax.random.key(original)`, re-seeded by `seed`.

    `seed` may be traced, so that one compiled create_inputs serves every seed.
    """
    theirs = jax.random.key_data(jax.random.key(original))
    ours = jax.random.key_data(jax.random.fold_in(jax.random.key(seed), original))
    return jax.random.wrap_key_data(jnp.where(seed == JAXBENCH_SEED, theirs, ours))


# XLA:CPU compiles the counter-based generator for an N-d shape far more slowly than for a flat one
# (7 s against 0.2 s for a 5-d bf16 tensor), while the values are the same bit for bit: the counters
# run over the flattened index either way. Workloads draw through these two.


def _shape(shape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def normal(key: jax.Array, shape=(), dtype=float) -> jax.Array:
    """jax.random.normal, bit for bit, drawn flat and reshaped."""
    shape = _shape(shape)
    return jax.random.normal(key, (math.prod(shape),), dtype=dtype).reshape(shape)


def uniform(key: jax.Array, shape=(), dtype=float, minval=0.0, maxval=1.0) -> jax.Array:
    """jax.random.uniform, bit for bit, drawn flat and reshaped."""
    shape = _shape(shape)
    return jax.random.uniform(key, (math.prod(shape),), dtype=dtype, minval=minval, maxval=maxval).reshape(shape)
