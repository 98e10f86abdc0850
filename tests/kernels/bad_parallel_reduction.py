# expect: workload=41k_Gemm_Add_ReLU status=incorrect error_class=wrong_values
# GEMM+bias+ReLU whose K (reduction) grid axis is marked "parallel": zeroing at k == 0 assumes K steps run in order.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, w_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    # The output block stays resident across K and is written back once it changes, so storing each step is fine
    # as long as the last K step really comes last.
    o_ref[...] = jnp.maximum(acc_ref[...] + b_ref[...].astype(jnp.float32), 0.0).astype(o_ref.dtype)


def workload(x, weight, bias):
    M, K = x.shape
    _, N = weight.shape
    bm, bn, bk = min(512, M), min(512, N), min(256, K)
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
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
    )(x, weight, bias.reshape(1, N))
