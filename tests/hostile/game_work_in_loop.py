# expect: workload=8p_GEMM status=no_pallas error_class=pallas_not_doing_the_work
# attack: a jnp.dot does every FLOP; a Pallas kernel only casts its float32 result to bfloat16, called from a lax.fori_loop over two row halves, so the work around the kernels cannot be cut out (unknown) and the share rule does not fire
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _cast_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].astype(o_ref.dtype)


def _pallas_cast(x, dtype):
    rows, cols = x.shape
    br, bc = min(512, rows), min(512, cols)
    return pl.pallas_call(
        _cast_kernel,
        grid=(rows // br, cols // bc),
        in_specs=[pl.BlockSpec((br, bc), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((br, bc), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct(x.shape, dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x)


def workload(A, B):
    M, _ = A.shape
    acc = jnp.dot(A, B, preferred_element_type=jnp.float32)
    half = M // 2

    def body(h, out):
        rows = jax.lax.dynamic_slice_in_dim(acc, h * half, half, axis=0)
        return jax.lax.dynamic_update_slice_in_dim(out, _pallas_cast(rows, A.dtype), h * half, axis=0)

    return jax.lax.fori_loop(0, 2, body, jnp.zeros((M, B.shape[1]), A.dtype))
