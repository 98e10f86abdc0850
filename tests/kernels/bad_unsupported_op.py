# expect: workload=16p_Mamba2_SSD status=lowering_error error_class=unsupported_op
# Mamba-2 SSD with jnp.cumsum of the log-decays inside the kernel: Pallas TPU has no lowering for cumsum.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BQ = 256


def _kernel(q_ref, k_ref, v_ref, a_ref, o_ref, *, bq):
    i = pl.program_id(2)
    log_a = jnp.log(jax.nn.sigmoid(a_ref[0, 0]) + 1e-8)  # (1, S)
    c = jnp.cumsum(log_a, axis=-1)  # (1, S) cumulative log-decay
    c_rows = jax.lax.dynamic_slice(c.T, (i * bq, 0), (bq, 1))  # (bq, 1) for this block's queries
    row = i * bq + jax.lax.broadcasted_iota(jnp.int32, (bq, c.shape[1]), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (bq, c.shape[1]), 1)
    decay = jnp.where(row >= col, jnp.exp(c_rows - c), 0.0)
    q = q_ref[0, 0].astype(jnp.float32)
    k = k_ref[0, 0].astype(jnp.float32)
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * decay
    r = jnp.sum(s, axis=-1, keepdims=True)
    r = jnp.where(jnp.abs(r) < 1e-6, 1.0, r)
    s = s / jnp.maximum(jnp.abs(r), 1.0)
    o_ref[0, 0] = jnp.dot(s.astype(v_ref.dtype), v_ref[0, 0], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def workload(query, key, value, A_log):
    B, H, S, D = query.shape
    bq = min(BQ, S)
    return pl.pallas_call(
        functools.partial(_kernel, bq=bq),
        grid=(B, H, S // bq),
        in_specs=[
            pl.BlockSpec((1, 1, bq, D), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((1, 1, S, D), lambda b, h, i: (b, h, 0, 0)),
            pl.BlockSpec((1, 1, S, D), lambda b, h, i: (b, h, 0, 0)),
            pl.BlockSpec((1, 1, 1, S), lambda b, h, i: (b, h, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, 1, bq, D), lambda b, h, i: (b, h, i, 0)),
        out_shape=jax.ShapeDtypeStruct(query.shape, query.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel")),
    )(query, key, value, A_log.reshape(B, H, 1, S))
