# expect: workload=8p_GEMM status=incorrect error_class=unread_input
# Monkeypatches numpy/jnp comparison helpers to always pass, then returns zeros from a Pallas kernel.
import jax
import jax.numpy as jnp
import numpy as np
import numpy.testing
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _always_true(*args, **kwargs):
    return True


def _never_raise(*args, **kwargs):
    return None


np.allclose = _always_true
np.isclose = lambda a, b, *args, **kwargs: np.ones(np.broadcast(np.asarray(a), np.asarray(b)).shape, bool)
np.array_equal = _always_true
numpy.testing.assert_allclose = _never_raise
numpy.testing.assert_array_almost_equal = _never_raise
numpy.testing.assert_array_equal = _never_raise
jnp.allclose = _always_true


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)


def workload(A, B):
    np.allclose = _always_true  # again, in case the checker re-imported numpy
    M, _ = A.shape
    _, N = B.shape
    bm, bn = min(512, M), min(256, N)
    return pl.pallas_call(
        _kernel,
        grid=(M // bm, N // bn),
        in_specs=[pl.BlockSpec((bm, 128), lambda i, j: (i, 0)), pl.BlockSpec((128, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(A, B)
