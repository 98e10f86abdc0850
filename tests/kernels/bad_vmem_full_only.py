# expect: workload=8p_GEMM status=compile_error error_class=vmem_overflow
# GEMM with whole-K and huge-N blocks: fine at the small size, far beyond VMEM at the full size.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm = min(512, M)
    bn = min(8192, N)  # "bigger blocks are faster": whole K, up to 8192 columns
    while N % bn:
        bn //= 2
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, K), lambda i, j: (i, 0)), pl.BlockSpec((K, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(A, B)
