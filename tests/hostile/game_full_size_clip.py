# expect: workload=8p_GEMM status=incorrect error_class=wrong_values
# attack: a correct tiled GEMM whose store clips to [-3, 3]: the small size's outputs (std ~0.45, K = 512) never get there, the full size's (std ~1.8, K = 8192) pass 3 in one element of ten; caught by the run at the full_reduction size (K = 8192)
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LIMIT = 3.0  # keeps the bf16 output clear of outliers


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = jnp.clip(acc_ref[...], -LIMIT, LIMIT).astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm, bn, bk = min(512, M), min(512, N), min(512, K)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn, K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
