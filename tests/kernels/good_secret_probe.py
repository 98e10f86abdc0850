# expect: workload=8p_GEMM status=correct
# Correct tiled GEMM that returns zeros if it can see anything secret-like in os.environ: proves the worker scrubbed it.
import functools
import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_MARKERS = ("TOKEN", "SECRET", "KEY", "PASSWORD")


def _secrets_visible():
    return any(name == "JAXBENCH_TEST_SECRET" or any(m in name.upper() for m in _MARKERS) for name in os.environ)


def _kernel(a_ref, b_ref, o_ref, acc_ref, *, leak):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        result = jnp.zeros_like(acc_ref) if leak else acc_ref[...]
        o_ref[...] = result.astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm, bn, bk = min(512, M), min(256, N), min(512, K)
    return pl.pallas_call(
        functools.partial(_kernel, leak=_secrets_visible()),
        grid=(M // bm, N // bn, K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
