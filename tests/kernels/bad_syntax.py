# expect: workload=8p_GEMM status=invalid_kernel error_class=syntax_error
# A syntax error: a missing closing parenthesis in the kernel body.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32.astype(o_ref.dtype)


def workload(A, B):
    M, _ = A.shape
    _, N = B.shape
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((M, N), A.dtype))(A, B)
