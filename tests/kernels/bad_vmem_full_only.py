# expect: workload=8p_GEMM status=compile_error error_class=vmem_overflow
# GEMM that keeps whole-K panels and up to 4096 output columns in VMEM: fits at the small size, overflows at full size.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

SUB_K = 512


def _kernel(a_ref, b_ref, o_ref):
    K = a_ref.shape[1]
    sub = min(SUB_K, K)

    def body(t, acc):
        start = pl.multiple_of(t * sub, sub)
        return acc + jnp.dot(
            a_ref[:, pl.ds(start, sub)], b_ref[pl.ds(start, sub), :], preferred_element_type=jnp.float32
        )

    acc = jax.lax.fori_loop(0, K // sub, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm = min(256, M)
    bn = min(4096, N)  # "fewer, bigger blocks": the whole K panel of B for 4096 columns
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
