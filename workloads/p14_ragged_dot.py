"""14p_Ragged_Dot: Mixtral-8x7B per-expert matmul with equal groups, i.e. a batched bfloat16 GEMM."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "14p_Ragged_Dot"
MODEL = "Mixtral-8x7B"
OPERATOR = "ragged_dot"
DESCRIPTION = """
out[g] = x[g] @ weights[g] for every group g: x is (G, M/G, K), weights is (G, K, N), the output is
(G, M/G, N). All groups have the same M/G rows, so this is a plain batched matmul
(einsum 'gmk,gkn->gmn') at default precision with bfloat16 inputs and a bfloat16 result.
"""
SIZES = {
    "full": {"num_groups": 8, "M": 8192, "K": 4096, "N": 14336},
    # 128 rows per group; N = 2^11 * 3 keeps the full 14336 = 2^11 * 7 up to the 2048 cap (see NOTES).
    "small": {"num_groups": 8, "M": 1024, "K": 512, "N": 6144},
}
INPUT_NAMES = ("x", "weights")
NOTES = (
    "Despite the name nothing is ragged: every group has exactly M/G rows and no group sizes are "
    "passed (the baseline's docstring says create_inputs returns group_sizes; it does not).",
    "flops() is the baseline benchmark() formula (2*M*K*N); the harness never reads it and reports "
    "XLA's cost analysis instead (XLA:CPU counts 9.627e11).",
    "Small size: 128 rows per group; N = 6144 = 2^11 * 3 keeps what tiling sees of 14336 = 2^11 * 7 "
    "(workloads.keeps_divisibility), so N/K is 12 instead of 3.5.",
)
DEGENERATE_OUTPUT = False


def create_inputs(*, seed, num_groups, M, K, N):
    k_x, k_w = jax.random.split(jaxbench_key(seed, 42), 2)
    x = normal(k_x, (num_groups, M // num_groups, K), dtype=jnp.bfloat16)
    weights = normal(k_w, (num_groups, K, N), dtype=jnp.bfloat16) * 0.02
    return x, weights


def reference(x, weights):
    return jnp.einsum("gmk,gkn->gmn", x, weights)


def flops(*, num_groups, M, K, N):
    return 2 * M * K * N
