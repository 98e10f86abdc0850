"""swiglu_softcap: a gated MLP activation with a tanh soft cap, the example of README's "Your own op".

A workload module for `jaxbench-mcp serve --workloads examples/custom_workloads`: module-level data plus
create_inputs and reference. MODEL, NOTES and flops are optional for custom workloads (the FLOPs then come
from XLA's cost analysis of the reference).
"""

import jax
import jax.numpy as jnp

ID = "swiglu_softcap"
OPERATOR = "swiglu_activation"
DESCRIPTION = """
out = cap * tanh((silu(x @ w_gate) * (x @ w_up)) / cap) with cap = 30: x is (T, D), w_gate and w_up are
(D, F), all bfloat16, and the output is (T, F) bfloat16. Both matmuls accumulate in float32 and round to
bfloat16; silu, the product and the soft cap then run in bfloat16.
"""
SIZES = {
    "full": {"T": 8192, "D": 4096, "F": 14336},
    # F = 2^11 * 7 keeps its factor of two (capped at 2^11) at 2^11 * 3; T and D are powers of two.
    "small": {"T": 256, "D": 512, "F": 6144},
    # A held-out shape: another token count and width, the same divisibility.
    "held_out": {"T": 128, "D": 1024, "F": 2048 * 5},
}
INPUT_NAMES = ("x", "w_gate", "w_up")
CAP = 30.0


def create_inputs(*, seed, T, D, F):
    k_x, k_g, k_u = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(k_x, (T, D), dtype=jnp.bfloat16)
    w_gate = jax.random.normal(k_g, (D, F), dtype=jnp.bfloat16) * 0.1
    w_up = jax.random.normal(k_u, (D, F), dtype=jnp.bfloat16) * 0.1
    return x, w_gate, w_up


def reference(x, w_gate, w_up):
    gate = jnp.dot(x, w_gate)
    up = jnp.dot(x, w_up)
    return CAP * jnp.tanh(jax.nn.silu(gate) * up / CAP)
