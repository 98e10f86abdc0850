# expect: workload=8p_GEMM status=no_pallas error_class=pallas_not_doing_the_work
# attack: a Pallas GEMM for the first eighth of the rows; the other seven eighths are a jnp.dot inside a lax.scan over 14 row chunks, which XLA's cost analysis counts once (the kernel then looks like ~2/3 of the work)
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(a_ref, b_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _pallas_gemm(A, B):
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


def workload(A, B):
    M, K = A.shape
    head_rows, chunk = M // 8, M // 16
    head = _pallas_gemm(A[:head_rows], B)
    chunks = A[head_rows:].reshape(-1, chunk, K)  # 14 chunks

    def step(carry, a):
        return carry, jnp.dot(a, B, preferred_element_type=jnp.float32).astype(A.dtype)

    _, rest = jax.lax.scan(step, None, chunks)
    return jnp.concatenate([head, rest.reshape(-1, B.shape[1])], axis=0)
