"""A Pallas TPU kernel for the custom workload swiglu_softcap (examples/custom_workloads/swiglu_softcap.py).

Both matmuls share one pass over x: the grid walks (token block, feature block, reduction block), two
float32 accumulators collect x @ w_gate and x @ w_up, and the last reduction step applies silu, the
product and the soft cap, and writes bfloat16 once.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CAP = 30.0
BT, BF, BD = 128, 512, 512


def _body(x_ref, g_ref, u_ref, o_ref, acc_g, acc_u, *, steps):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_g[...] = jnp.zeros_like(acc_g)
        acc_u[...] = jnp.zeros_like(acc_u)

    x = x_ref[...]
    acc_g[...] += jnp.dot(x, g_ref[...], preferred_element_type=jnp.float32)
    acc_u[...] += jnp.dot(x, u_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == steps - 1)
    def _():
        gate, up = acc_g[...], acc_u[...]
        y = gate * jax.nn.sigmoid(gate) * up
        o_ref[...] = (CAP * jnp.tanh(y / CAP)).astype(o_ref.dtype)


def workload(x, w_gate, w_up):
    T, D = x.shape
    F = w_gate.shape[1]
    bt, bf, bd = min(BT, T), min(BF, F), min(BD, D)
    steps = D // bd
    return pl.pallas_call(
        functools.partial(_body, steps=steps),
        grid=(T // bt, F // bf, steps),
        in_specs=[
            pl.BlockSpec((bt, bd), lambda i, j, k: (i, k)),
            pl.BlockSpec((bd, bf), lambda i, j, k: (k, j)),
            pl.BlockSpec((bd, bf), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((bt, bf), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((T, F), x.dtype),
        scratch_shapes=[pltpu.VMEM((bt, bf), jnp.float32), pltpu.VMEM((bt, bf), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w_gate, w_up)
