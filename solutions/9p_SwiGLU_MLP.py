# 9p_SwiGLU_MLP: out = (silu(x @ Wg) * (x @ Wu)) @ Wd as two tiled Pallas GEMMs.
# Kernel 1 (gate/up): one grid walks (row block, mlp block, emb block) with emb last and "arbitrary";
# each step feeds the same x block to both weight blocks and accumulates two f32 tiles; on the last
# step the SwiGLU epilogue (silu(g) * u, f32) runs in row chunks and the hidden tile is rounded to bf16
# once. Kernel 2 (down): a plain tiled GEMM with an f32 accumulator.
# The (tokens, mlp) hidden activations go through HBM once (0.9 GiB at full size, ~5% of the matmul
# time); fusing the down projection as well would need a (rows, emb) f32 accumulator per row block,
# which does not fit v4's 16 MiB of VMEM at emb = 8192.
# Blocks fit v4: kernel 1 1024 x 512 x 512 (x 1 MiB, Wg/Wu 0.5 MiB each, double-buffered; two 2 MiB
# accumulators; 1 MiB output), kernel 2 1024 x 1024 x 512 (as 8p).
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

GATE_BLOCKS = (1024, 512, 512)
DOWN_BLOCKS = (1024, 1024, 512)
EPI_ROWS = 128


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _gate_up_kernel(x_ref, g_ref, u_ref, o_ref, accg_ref, accu_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        accg_ref[...] = jnp.zeros_like(accg_ref)
        accu_ref[...] = jnp.zeros_like(accu_ref)

    x = x_ref[...]
    accg_ref[...] += jnp.dot(x, g_ref[...], preferred_element_type=jnp.float32)
    accu_ref[...] += jnp.dot(x, u_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        rows = _fit(accg_ref.shape[0], EPI_ROWS, 8)

        def chunk(r, carry):
            sl = pl.ds(pl.multiple_of(r * rows, rows), rows)
            g = accg_ref[sl, :]
            o_ref[sl, :] = (g * jax.nn.sigmoid(g) * accu_ref[sl, :]).astype(o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, accg_ref.shape[0] // rows, chunk, 0)


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _gate_up(x, wg, wu):
    m, e = x.shape
    n = wg.shape[1]
    bm, bn, bk = _fit(m, GATE_BLOCKS[0], 8), _fit(n, GATE_BLOCKS[1], 128), _fit(e, GATE_BLOCKS[2], 128)
    w_spec = pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))
    return pl.pallas_call(
        _gate_up_kernel,
        grid=(m // bm, n // bn, e // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), w_spec, w_spec],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)] * 2,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, wg, wu)


def _matmul(a, b):
    m, kdim = a.shape
    n = b.shape[1]
    bm, bn, bk = _fit(m, DOWN_BLOCKS[0], 8), _fit(n, DOWN_BLOCKS[1], 128), _fit(kdim, DOWN_BLOCKS[2], 128)
    return pl.pallas_call(
        _matmul_kernel,
        grid=(m // bm, n // bn, kdim // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b)


def workload(x, gate_kernel, up_kernel, down_kernel):
    *lead, e = x.shape
    x2 = x.reshape(-1, e)
    hidden = _gate_up(x2, gate_kernel, up_kernel)
    return _matmul(hidden, down_kernel).reshape(*lead, down_kernel.shape[1])
