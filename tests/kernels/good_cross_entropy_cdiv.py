# expect: workload=13p_Cross_Entropy status=correct
# Fused linear + cross-entropy with vocab blocks of 1024 over a pl.cdiv grid: the last block hangs over the
# end of the vocabulary (128256 = 125 * 1024 + 256) and its columns past V are masked to -inf.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BT = 512
BV = 1024


def _make_kernel(vocab):
    def kernel(h_ref, w_ref, lab_ref, loss_ref, m_ref, l_ref, pick_ref):
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _init():
            m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
            l_ref[...] = jnp.zeros_like(l_ref)
            pick_ref[...] = jnp.zeros_like(pick_ref)

        logits = jnp.dot(h_ref[...], w_ref[...], preferred_element_type=jnp.float32)
        col = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1) + j * BV
        # Columns past the vocabulary hold whatever the padded block read: mask them before any use.
        logits = jnp.where(col < vocab, logits, -jnp.inf)
        pick_ref[...] += jnp.sum(jnp.where(col == lab_ref[...], logits, 0.0), axis=-1, keepdims=True)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, logits.max(axis=-1, keepdims=True))
        l_ref[...] = jnp.exp(m_prev - m_new) * l_ref[...] + jnp.exp(logits - m_new).sum(axis=-1, keepdims=True)
        m_ref[...] = m_new

        @pl.when(j == pl.num_programs(1) - 1)
        def _finish():
            loss_ref[...] = m_ref[...] + jnp.log(l_ref[...]) - pick_ref[...]

    return kernel


def workload(hidden, weight, labels):
    T, H = hidden.shape
    _, V = weight.shape
    bt = min(BT, T)
    per_token = pl.pallas_call(
        _make_kernel(V),
        grid=(pl.cdiv(T, bt), pl.cdiv(V, BV)),
        in_specs=[
            pl.BlockSpec((bt, H), lambda i, j: (i, 0)),
            pl.BlockSpec((H, BV), lambda i, j: (0, j)),
            pl.BlockSpec((bt, 1), lambda i, j: (i, 0)),
        ],
        out_specs=pl.BlockSpec((bt, 1), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((T, 1), jnp.float32),
        scratch_shapes=[pltpu.VMEM((bt, 1), jnp.float32)] * 3,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=64 * 1024 * 1024
        ),
    )(hidden, weight, labels.reshape(T, 1).astype(jnp.int32))
    return jnp.mean(per_token)
