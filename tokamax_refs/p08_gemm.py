"""Expert reference for 8p_GEMM: the Pallas TPU matmul kernel that ships with jax.

JAXBench's optimized.py calls matmul(A, B, block_shape=(1024, 2048), block_k=1024), a
(M/bm, N/bn, K/bk) grid with a float32 VMEM accumulator. Imported from jax, not vendored.
"""

import dataclasses

from jax.experimental.pallas.ops.tpu.matmul import matmul

WORKLOAD_ID = "8p_GEMM"
SOURCE = "jax.experimental.pallas.ops.tpu.matmul"


@dataclasses.dataclass(frozen=True)
class Blocks:
    block_m: int
    block_n: int
    block_k: int


# full: JAXBench's tuned values are block_shape = (1024, 2048), block_k = 1024 (grid (8, 14, 8)).
# They need 28 MiB of scoped VMEM (double-buffered 1024x2048 output tile plus its float32
# accumulator), over v5e's 16 MiB default, and the kernel takes no vmem limit; (1024, 1024) with
# block_k = 1024 still needs 18.4 MiB. So the tile is 1024 x 1024 with block_k = 512: grid
# (8, 28, 16), 12 MiB. v6e (32 MiB default) compiles JAXBench's values too.
# small: 256-wide tiles, grid (2, 24, 2) at 512 x 512 x 6144.
# full_reduction: the small M and N with the full K; 256-wide K blocks would make 1,536
# interpret-mode steps (a minute on CPU), these make 192 (7.5 MiB of VMEM).
BLOCKS = {
    "full": Blocks(block_m=1024, block_n=1024, block_k=512),
    "small": Blocks(block_m=256, block_n=256, block_k=256),
    "full_reduction": Blocks(block_m=256, block_n=512, block_k=1024),
}


def _blocks_for(m: int, k: int, n: int) -> Blocks:
    full = BLOCKS["full"]
    if m % full.block_m == 0 and n % full.block_n == 0 and k % full.block_k == 0:
        return full
    long_k = BLOCKS["full_reduction"]
    sizes = (m, n, k)
    if k >= 4 * long_k.block_k and all(d % b == 0 for d, b in zip(sizes, dataclasses.astuple(long_k), strict=True)):
        return long_k
    return BLOCKS["small"]


def workload(A, B):
    b = _blocks_for(A.shape[0], A.shape[1], B.shape[1])
    return matmul(A, B, block_shape=(b.block_m, b.block_n), block_k=b.block_k)
