# expect: workload=8p_GEMM status=lowering_error error_class=traced_control_flow
# Python `if` on a traced value (pl.program_id) inside the kernel body instead of pl.when / lax.cond.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    if pl.program_id(2) == 0:
        acc_ref[...] = jnp.zeros_like(acc_ref)
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
    if pl.program_id(2) == pl.num_programs(2) - 1:
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm, bn, bk = min(512, M), min(256, N), min(512, K)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn, K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
