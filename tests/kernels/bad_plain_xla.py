# expect: workload=8p_GEMM status=no_pallas error_class=no_pallas_call
# Plain XLA: a correct jnp.dot with no pallas_call at all.
import jax.numpy as jnp


def workload(A, B):
    return jnp.dot(A, B, preferred_element_type=jnp.float32).astype(A.dtype)
