# expect: workload=8p_GEMM status=lowering_error error_class=unsupported_op
# A primitive of its own (its rules are the candidate's Python) does the GEMM; the checker replays only jax's
# primitives, so the recorded program is refused by name.
import jax
import numpy as np
from jax.experimental import pallas as pl
from jax.extend.core import Primitive

_matmul_p = Primitive("fast_matmul")
_matmul_p.def_abstract_eval(lambda a, b: jax.core.ShapedArray((a.shape[0], b.shape[1]), a.dtype))
_matmul_p.def_impl(lambda a, b: (np.asarray(a, np.float32) @ np.asarray(b, np.float32)).astype(a.dtype))


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(A, B):
    c = _matmul_p.bind(A, B)
    bm = min(512, c.shape[0])
    return pl.pallas_call(
        _copy,
        grid=(c.shape[0] // bm,),
        in_specs=[pl.BlockSpec((bm, c.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((bm, c.shape[1]), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(c.shape, c.dtype),
    )(c)
