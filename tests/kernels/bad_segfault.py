# expect: workload=8p_GEMM status=crashed error_class=killed_by_signal
# Dereferences a NULL pointer through ctypes when called: the process dies with SIGSEGV.
import ctypes

import jax.numpy as jnp


def workload(A, B):
    ctypes.string_at(0)
    return jnp.dot(A, B)
