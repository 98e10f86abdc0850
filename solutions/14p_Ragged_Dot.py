# 14p_Ragged_Dot: out[g] = x[g] @ w[g] for equal groups, i.e. a batched bf16 GEMM.
# Grid (group, row block, column block, K block), K last and "arbitrary", f32 VMEM accumulator; the
# group axis is a squeezed (None) block dimension, so the body sees plain 2-D tiles. Each group's
# weight (K, N) is used by that group's rows only, so no tile is shared across groups.
# Blocks 1024 x 1024 x 512 fit v4's 16 MiB of VMEM (inputs 1 MiB each and the 2 MiB bf16 output,
# double-buffered, plus the 4 MiB f32 accumulator).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BN, BK = 1024, 1024, 512


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _kernel(x_ref, w_ref, o_ref, acc_ref):
    k = pl.program_id(3)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(3) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def workload(x, weights):
    G, M, K = x.shape
    N = weights.shape[2]
    bm, bn, bk = _fit(M, BM, 8), _fit(N, BN, 128), _fit(K, BK, 128)
    return pl.pallas_call(
        _kernel,
        grid=(G, M // bm, N // bn, K // bk),
        in_specs=[
            pl.BlockSpec((None, bm, bk), lambda g, i, j, k: (g, i, k)),
            pl.BlockSpec((None, bk, bn), lambda g, i, j, k: (g, k, j)),
        ],
        out_specs=pl.BlockSpec((None, bm, bn), lambda g, i, j, k: (g, i, j)),
        out_shape=jax.ShapeDtypeStruct((G, M, N), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(x, weights)
