# expect: workload=8p_GEMM status=incorrect error_class=wrong_values
# Ignores its inputs: rebuilds JAXBench's key(42) inputs, computes that answer and returns it through a Pallas copy.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(A, B):
    k_a, k_b = jax.random.split(jax.random.key(42), 2)
    a = jax.random.normal(k_a, A.shape, dtype=A.dtype)
    b = jax.random.normal(k_b, B.shape, dtype=B.dtype) * 0.02
    answer = jnp.dot(a, b)
    M, N = answer.shape
    bm, bn = min(512, M), min(512, N)
    return pl.pallas_call(
        _copy_kernel,
        grid=(pl.cdiv(M, bm), pl.cdiv(N, bn)),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct(answer.shape, answer.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(answer)
