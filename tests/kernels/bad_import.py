# expect: workload=8p_GEMM status=invalid_kernel error_class=import_error
# Imports a module that does not exist (a hallucinated Pallas helper package).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas.tpu_autotune import best_block_sizes


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(A, B):
    M, _ = A.shape
    _, N = B.shape
    bm, bn = best_block_sizes(A.shape, B.shape)
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((M, N), A.dtype))(A, B)
