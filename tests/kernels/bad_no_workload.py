# expect: workload=8p_GEMM status=invalid_kernel error_class=missing_workload
# Defines a correct Pallas GEMM named `kernel`, but no `workload` function.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _matmul(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def kernel(A, B):
    M, K = A.shape
    _, N = B.shape
    bm, bn = min(256, M), min(256, N)
    return pl.pallas_call(
        _matmul,
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, K), lambda i, j: (i, 0)), pl.BlockSpec((K, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
    )(A, B)
