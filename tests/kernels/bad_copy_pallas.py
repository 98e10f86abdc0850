# expect: workload=8p_GEMM status=no_pallas error_class=pallas_not_doing_the_work
# A Pallas kernel that streams A through VMEM unchanged (real bytes, no arithmetic), then a jnp.dot does
# every FLOP of the GEMM in XLA.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(A, B):
    M, K = A.shape
    bm = min(512, M)
    a = pl.pallas_call(
        _copy,
        grid=(M // bm,),
        in_specs=[pl.BlockSpec((bm, K), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((bm, K), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((M, K), A.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(A)
    return jnp.dot(a, B, preferred_element_type=jnp.float32).astype(A.dtype)
