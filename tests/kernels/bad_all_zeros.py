# expect: workload=8p_GEMM status=incorrect error_class=unread_input
# A Pallas kernel that only writes zeros of the right shape and dtype; it reads one 128-wide strip of A and B, so
# most of both inputs is never read at full size (caught before the values are compared).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)


def workload(A, B):
    M, _ = A.shape
    _, N = B.shape
    bm, bn = min(512, M), min(256, N)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, 128), lambda i, j: (i, 0)), pl.BlockSpec((128, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(A, B)
