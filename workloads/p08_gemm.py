"""8p_GEMM: the Llama-3.1-70B FFN projection as one dense matmul."""

import jax
import jax.numpy as jnp

from jaxbench_mcp.seeding import jaxbench_key, normal

ID = "8p_GEMM"
MODEL = "Llama-3.1-70B"
OPERATOR = "dense_matmul"
DESCRIPTION = """
C = A @ B for A of shape (M, K) and B of shape (K, N), both bfloat16, with a bfloat16 result
(jnp.dot at default precision: products accumulate in float32 on the MXU, then round once).
"""
SIZES = {
    "full": {"M": 8192, "K": 8192, "N": 28672},
    # N = 2^11 * 3 keeps the full N's factor 2^12 * 7 up to the 2048 cap (see NOTES); the output's spread
    # shrinks with K (std ~0.45 instead of ~1.8).
    "small": {"M": 512, "K": 512, "N": 6144},
    # Held out (checked in campaigns, and by check --config): another aspect ratio, the same divisibility
    # (N = 2^11 * 5).
    "held_out": {"M": 128, "K": 1024, "N": 10240},
    # The full K (the output's spread of the full size) at the small M and N: a check below full size runs one
    # seed here too.
    "full_reduction": {"M": 512, "K": 8192, "N": 6144},
}
INPUT_NAMES = ("A", "B")
NOTES = (
    "Small size: N = 6144 = 2^11 * 3 keeps what tiling sees of the full N = 28672 = 2^12 * 7 "
    "(divisible by every power of two up to 2048, not a power of two; workloads.keeps_divisibility); "
    "the full size's N/K = 3.5 would need N = 14336 at K = 4096, so the ratio is not kept.",
)


def create_inputs(*, seed, M, K, N):
    k_a, k_b = jax.random.split(jaxbench_key(seed, 42), 2)
    a = normal(k_a, (M, K), dtype=jnp.bfloat16)
    b = normal(k_b, (K, N), dtype=jnp.bfloat16) * 0.02
    return a, b


def reference(A, B):
    return jnp.dot(A, B)


def flops(*, M, K, N):
    return 2 * M * K * N
