# expect: workload=8p_GEMM status=crashed error_class=memory_limit
# Allocates ever-growing host memory inside workload() (a bytearray doubling forever) until the limit kills it.
import jax.numpy as jnp


def workload(A, B):
    hoard = [bytearray(1 << 20)]
    while True:
        hoard.append(bytearray(len(hoard[-1]) * 2))
    return jnp.dot(A, B)
