# A task in MaxKernel's layout, written for the tests: get_inputs() returns one (dynamic_args, static_args)
# pair per input configuration, computation() takes the dynamic then the static arguments.
import jax
import jax.numpy as jnp

HIDDEN = 4096
CONFIGS = [
    {"name": "prefill", "tokens": 2048},
    {"name": "decode", "tokens": 64},
]


def get_inputs():
    pairs = []
    for k, cfg in enumerate(CONFIGS):
        key = jax.random.PRNGKey(k)
        kx, kw = jax.random.split(key)
        x = jax.random.normal(kx, (cfg["tokens"], HIDDEN), dtype=jnp.bfloat16)
        w = 1.0 + 0.1 * jax.random.normal(kw, (HIDDEN,), dtype=jnp.bfloat16)
        pairs.append(([x, w], [1e-6]))
    return pairs


# Computation
def computation(x, weight, eps):
    xf = x.astype(jnp.float32)
    rms = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * rms).astype(x.dtype) * weight
