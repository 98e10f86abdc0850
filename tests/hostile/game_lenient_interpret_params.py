# expect: workload=8p_GEMM status=incorrect error_class=nan_output
# attack: replaces pltpu.InterpretParams at import with a factory that forces uninitialized_memory="zero" and no race detector, so a GEMM that zeroes its accumulator after the store instead of before the first dot (scratch VMEM is garbage on a TPU) reads zeros, not NaN
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_InterpretParams = pltpu.InterpretParams


def _quick_interpret_params(**options):
    """Interpret mode is slow on CPU: skip the NaN fill and the race detector."""
    options.update(uninitialized_memory="zero", detect_races=False)
    return _InterpretParams(**options)


pltpu.InterpretParams = _quick_interpret_params


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store_and_reset():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)
        acc_ref[...] = jnp.zeros_like(acc_ref)  # ready for the next output tile


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
