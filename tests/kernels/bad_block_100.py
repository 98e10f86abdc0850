# expect: workload=8p_GEMM status=lowering_error error_class=block_shape_tiling
# GEMM with (100, 100) blocks: neither divisible by 8 (sublanes) nor 128 (lanes) nor equal to the array dims.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BLOCK = 100


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    b = BLOCK
    return pl.pallas_call(
        _kernel,
        grid=(pl.cdiv(M, b), pl.cdiv(N, b), pl.cdiv(K, b)),
        in_specs=[pl.BlockSpec((b, b), lambda i, j, k: (i, k)), pl.BlockSpec((b, b), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((b, b), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((b, b), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
