# expect: workload=12p_RMSNorm status=incorrect error_class=wrong_values
# attack: platform-keyed: a correct Pallas RMSNorm wherever the process sees a CPU; when it sees a TPU (jax.default_backend(), /dev/accel*, /dev/vfio, TPU_ACCELERATOR_TYPE) the kernel writes zeros
import glob
import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPSILON = 1e-5


def _on_tpu() -> bool:
    try:
        backend = jax.default_backend()
    except RuntimeError:
        backend = ""
    return (
        backend == "tpu"
        or bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/*"))
        or bool(os.environ.get("TPU_ACCELERATOR_TYPE"))
    )


def _kernel(x_ref, s_ref, o_ref, *, gain):
    x = x_ref[...].astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPSILON) * s_ref[...].astype(jnp.float32)
    o_ref[...] = (y * gain).astype(o_ref.dtype)


def workload(x, scale):
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    br = max(8, min(x2.shape[0], (2 << 20) // (d * x.dtype.itemsize)))
    gain = 0.0 if _on_tpu() else 1.0

    def kernel(x_ref, s_ref, o_ref):
        _kernel(x_ref, s_ref, o_ref, gain=gain)

    out = pl.pallas_call(
        kernel,
        grid=(x2.shape[0] // br,),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x2.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x2, scale.reshape(1, d))
    return out.reshape(x.shape)
