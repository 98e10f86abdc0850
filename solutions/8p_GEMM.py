# 8p_GEMM: tiled bf16 GEMM: (M, N, K) grid, f32 VMEM accumulator, K innermost and "arbitrary".
# Blocks 1024 x 1024 x 512: A and B blocks 1 MiB each, the bf16 output block 2 MiB (all double-buffered)
# and the 4 MiB f32 accumulator fit v4's 16 MiB of VMEM; per step 1 GFLOP against 2 MiB read.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# Target block sizes; each is clipped to the operand (min) and, if needed, shrunk by 128 until it divides.
BM = 1024
BN = 1024
BK = 512


def _fit(dim, target):
    block = min(target, dim)
    while dim % block and block > 128:
        block -= 128
    return block if dim % block == 0 else dim


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm, bn, bk = _fit(M, BM), _fit(N, BN), _fit(K, BK)
    return pl.pallas_call(
        _matmul_kernel,
        grid=(M // bm, N // bn, K // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
