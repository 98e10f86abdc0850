# expect: workload=8p_GEMM status=lowering_error error_class=trace_error
# workload() raises a ValueError from its own shape check (wrong assumption about the layout) while being traced.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    N, K2 = B.shape  # assumes B is stored transposed as (N, K)
    if K != K2:
        raise ValueError(f"contraction mismatch: A is {A.shape}, B is {B.shape}; expected B as (N, K)")
    bm, bn = min(512, M), min(256, N)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, K), lambda i, j: (i, 0)), pl.BlockSpec((bn, K), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
    )(A, B)
