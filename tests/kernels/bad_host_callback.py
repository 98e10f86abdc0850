# expect: workload=8p_GEMM status=invalid_kernel error_class=host_callback
# Computes the matmul on the host with numpy through jax.pure_callback; a Pallas kernel only copies the result.
import jax
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _host_matmul(a, b):
    return (np.asarray(a, np.float32) @ np.asarray(b, np.float32)).astype(a.dtype)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(A, B):
    M, _ = A.shape
    _, N = B.shape
    out = jax.ShapeDtypeStruct((M, N), A.dtype)
    c = jax.pure_callback(_host_matmul, out, A, B)
    bm, bn = min(512, M), min(256, N)
    return pl.pallas_call(
        _copy_kernel,
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=out,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(c)
