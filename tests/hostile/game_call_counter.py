# expect: workload=12p_RMSNorm status=incorrect error_class=wrong_values
# attack: counts the calls per input shape: the largest shape and the first call at any smaller one (the analyses' traces) get a Pallas kernel that drops the epsilon and the scale; every later call at a smaller shape (the seeds' runs) is plain jnp
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPSILON = 1e-5
_CALLS: dict = {}


def _reference(x, scale):
    xf = x.astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + EPSILON)
    return (xf * inv * scale.astype(jnp.float32)).astype(x.dtype)


def _kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    o_ref[...] = (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True))).astype(o_ref.dtype)


def _pallas(x, scale):
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    br = max(8, min(x2.shape[0], (2 << 20) // (d * x.dtype.itemsize)))
    out = pl.pallas_call(
        _kernel,
        grid=(x2.shape[0] // br,),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x2.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x2, scale.reshape(1, d))
    return out.reshape(x.shape)


def workload(x, scale):
    key = tuple(x.shape)
    _CALLS[key] = _CALLS.get(key, 0) + 1
    largest = max(_CALLS, key=math.prod)
    if key == largest or _CALLS[key] == 1:
        return _pallas(x, scale)
    return _reference(x, scale)
