# expect: workload=12p_RMSNorm status=incorrect error_class=shape_mismatch
# Correct RMSNorm on the flattened (rows, D) view, but forgets to reshape back to (batch, seq, D).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPSILON = 1e-5


def _kernel(x_ref, scale_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPSILON)
    o_ref[...] = (x * inv_rms * scale_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, scale):
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    rows = x2.shape[0]
    br = min(128, rows)
    return pl.pallas_call(
        _kernel,
        grid=(rows // br,),
        in_specs=[pl.BlockSpec((br, D), lambda i: (i, 0)), pl.BlockSpec((1, D), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, D), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, D), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x2, scale.reshape(1, D))
