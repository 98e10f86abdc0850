# expect: workload=12p_RMSNorm status=invalid_kernel error_class=program_too_large
# attack: a compile bomb: a correct Pallas RMSNorm whose output goes through 40 nested levels of a jitted function calling the level below twice (2^40 paths once XLA inlines the calls): "program too large", not a bare timeout
# ---- a correct Pallas RMSNorm ----
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402


def _rmsnorm_kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * s_ref[...].astype(jnp.float32)
    o_ref[...] = y.astype(o_ref.dtype)


def rmsnorm(x, scale):
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    br = max(8, min(x2.shape[0], (2 << 20) // (d * x.dtype.itemsize)))
    out = pl.pallas_call(
        _rmsnorm_kernel,
        grid=(x2.shape[0] // br,),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x2.shape, x.dtype),
    )(x2, scale.reshape(1, d))
    return out.reshape(x.shape)


def _identity(y):
    return y * 1.0


# 40 levels of a function calling the one below twice: a trace of 40 small jaxprs, 2^40 multiplies once XLA
# inlines the calls.
_CHAIN = jax.jit(_identity)
for _ in range(40):
    _CHAIN = jax.jit(lambda y, f=_CHAIN: f(f(y)))


def workload(x, scale):
    return _CHAIN(rmsnorm(x, scale))
