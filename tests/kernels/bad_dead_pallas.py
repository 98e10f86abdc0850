# expect: workload=8p_GEMM status=no_pallas error_class=pallas_not_doing_the_work
# A pallas_call that only copies one (8, 128) tile beside a jnp.dot that does all the work; its result is
# folded in (times zero) so that it is not dead code.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(A, B):
    tile = pl.pallas_call(
        _copy,
        grid=(1,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((8, 128), A.dtype),
    )(A)
    return jnp.dot(A, B, preferred_element_type=jnp.float32).astype(A.dtype) + tile[0, 0] * 0
