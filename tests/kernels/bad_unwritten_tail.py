# expect: workload=8p_GEMM status=incorrect error_class=unwritten_output
# Tiled GEMM with 3072-wide output column blocks and a floor-divided grid: at N = 28672 (= 9 * 3072 + 1024)
# the last 1024 output columns are never written. Every small N that keeps the full size's powers of two
# is a multiple of 2048, and 6144 = 2 * 3072, so only the full-size coverage analysis sees it.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BN, BK = 512, 3072, 512


def _kernel(a_ref, b_ref, o_ref, acc_ref):
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
    bm, bk = min(BM, M), min(BK, K)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // BN, K // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
            pl.BlockSpec((bk, BN), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((bm, BN), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((bm, BN), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
