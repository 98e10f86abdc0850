# expect: workload=12p_RMSNorm status=invalid_kernel error_class=size_dependent_program
# RMSNorm that branches on the input's size: plain jnp below 2^26 elements (every small-size run), a
# Pallas kernel that only scales by `scale` (no normalisation) above it (the production size).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPSILON = 1e-5


def _scale_only(x_ref, s_ref, o_ref):
    o_ref[...] = (x_ref[...].astype(jnp.float32) * s_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, scale):
    if x.size < 2**26:
        xf = x.astype(jnp.float32)
        inv = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + EPSILON)
        return (xf * inv * scale.astype(jnp.float32)).astype(x.dtype)
    *lead, D = x.shape
    rows = x.size // D
    br = 256
    out = pl.pallas_call(
        _scale_only,
        grid=(rows // br,),
        in_specs=[pl.BlockSpec((br, D), lambda i: (i, 0)), pl.BlockSpec((1, D), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, D), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, D), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x.reshape(rows, D), scale.reshape(1, D))
    return out.reshape(x.shape)
