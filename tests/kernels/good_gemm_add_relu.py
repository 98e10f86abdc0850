# expect: workload=41k_Gemm_Add_ReLU status=correct
# GEMM with a fused bias+ReLU epilogue: tiled M/N/K, f32 VMEM accumulator, epilogue on the last K step.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM = 512
BN = 1024
BK = 1024


def _fit(dim, target):
    block = min(target, dim)
    while dim % block and block > 128:
        block -= 128
    return block if dim % block == 0 else dim


def _kernel(x_ref, w_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        y = acc_ref[...] + b_ref[...].astype(jnp.float32)
        o_ref[...] = jnp.maximum(y, 0.0).astype(o_ref.dtype)


def workload(x, weight, bias):
    M, K = x.shape
    _, N = weight.shape
    bm, bn, bk = _fit(M, BM), _fit(N, BN), _fit(K, BK)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn, K // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            pl.BlockSpec((1, bn), lambda i, j, k: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, weight, bias.reshape(1, N))
