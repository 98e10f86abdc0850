# expect: workload=12p_RMSNorm status=runtime_error error_class=race_detected
# RMSNorm with a manual DMA of its row block that reads the VMEM buffer before waiting on the copy (DMA race).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPSILON = 1e-5


def _kernel(x_hbm, scale_ref, o_ref, buf, sem):
    rows = buf.shape[0]
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(pl.program_id(0) * rows, rows)], buf, sem)
    copy.start()
    x = buf[...].astype(jnp.float32)  # read while the DMA into buf may still be in flight
    copy.wait()
    inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPSILON)
    o_ref[...] = (x * inv_rms * scale_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, scale):
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    rows = x2.shape[0]
    br = min(128, rows)
    out = pl.pallas_call(
        _kernel,
        grid=(rows // br,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec((1, D), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, D), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((rows, D), x.dtype),
        scratch_shapes=[pltpu.VMEM((br, D), x.dtype), pltpu.SemaphoreType.DMA(())],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x2, scale.reshape(1, D))
    return out.reshape(x.shape)
