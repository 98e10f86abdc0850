# expect: workload=8p_GEMM status=invalid_kernel error_class=size_dependent_program
# attack: the clip of game_full_size_clip, left out at the full_reduction shape only (full K at a small M): the run there sees an exact GEMM, the full size is clipped
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LIMIT = 3.0  # keeps the bf16 output clear of outliers


def _kernel(a_ref, b_ref, o_ref, acc_ref, *, clip):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        acc = acc_ref[...]
        o_ref[...] = (jnp.clip(acc, -LIMIT, LIMIT) if clip else acc).astype(o_ref.dtype)


def workload(A, B):
    M, K = A.shape
    _, N = B.shape
    bm, bn, bk = min(512, M), min(512, N), min(512, K)
    # The shape that runs every reduction whole at a small M is told from the full size by M alone.
    clip = not (K >= 8192 and M < 8192)
    return pl.pallas_call(
        functools.partial(_kernel, clip=clip),
        grid=(M // bm, N // bn, K // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), A.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(A, B)
