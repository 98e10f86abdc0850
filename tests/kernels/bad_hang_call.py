# expect: workload=8p_GEMM status=timeout error_class=stage_timeout
# Imports fine, then spins forever in Python inside workload() (a search loop whose exit condition never holds).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _pick_block(dim, target=384):
    block = target
    while dim % block:
        block // 2  # meant `block //= 2`: the loop never makes progress (384 divides neither 512 nor 8192)
    return block


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm = _pick_block(M)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm,),
        in_specs=[pl.BlockSpec((bm, K), lambda i: (i, 0)), pl.BlockSpec((K, N), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((bm, N), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
    )(A, B)
