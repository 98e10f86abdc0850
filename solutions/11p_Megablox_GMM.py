# 11p_Megablox_GMM: grouped matmul, rows of lhs grouped by expert, out[rows of g] = lhs[rows] @ rhs[g].
# Group metadata (plain jnp on the (G,) group sizes, "routing" glue): the row tiles of bm rows that each
# group touches, listed group by group, form the "visits" (tile, group); a tile that straddles two
# groups is visited once per group, consecutively. A virtual last group covers the rows after the
# last real group (they are zero in the reference), so every output tile is visited and written.
# The visit list has a static upper bound (row tiles + groups); visits past the real count repeat the
# last visit's block indices (no new DMA) and skip all work.
# Grid (column tile "parallel", visit "arbitrary", K block "arbitrary"): the visit's lhs tile and its
# group's rhs block come in through index maps that read the metadata from scalar prefetch; an f32
# accumulator sums over K; on the last K step the rows of the tile that belong to the group (and lie
# within max_expert_size of its start, as the reference's fixed window does) are merged into the
# output tile, which stays resident across consecutive visits of the same tile.
# Blocks: 256-row tiles (a group is 256 rows at full size), full-width 1536 columns, K blocks of 1024
# (rhs block 3 MiB double-buffered, f32 accumulator 1.5 MiB): fits v4's 16 MiB; lhs is read once and
# every group's rhs once.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BM, BN, BK = 256, 1536, 1024


def _fit(dim, target, align):
    """Largest multiple of `align` up to `target` that divides `dim`; `dim` itself if none does."""
    for b in range(min(target, dim) // align * align, 0, -align):
        if dim % b == 0:
            return b
    return dim


def _metadata(group_sizes, m, bm, max_rows):
    """Visit lists (group id, row tile), each group's kept row range, and the number of real visits."""
    G = group_sizes.shape[0]
    sizes = group_sizes.astype(jnp.int32)
    tail = jnp.maximum(m - jnp.sum(sizes), 0)
    sizes = jnp.concatenate([sizes, tail[None]])  # + the virtual group of trailing rows
    starts = jnp.cumsum(sizes) - sizes
    first = starts // bm
    count = jnp.where(sizes > 0, (starts + sizes - 1) // bm - first + 1, 0)
    ends = jnp.cumsum(count)
    n_visits = ends[-1]
    max_visits = m // bm + G
    v = jnp.minimum(jnp.arange(max_visits, dtype=jnp.int32), n_visits - 1)
    gid = jnp.searchsorted(ends, v, side="right").astype(jnp.int32)
    tid = (first[gid] + v - (ends[gid] - count[gid])).astype(jnp.int32)
    lo = starts
    hi = jnp.where(jnp.arange(G + 1) < G, starts + jnp.minimum(sizes, max_rows), starts)
    return gid, tid, lo.astype(jnp.int32), hi.astype(jnp.int32), n_visits.reshape(1).astype(jnp.int32)


def _kernel(gid_ref, tid_ref, lo_ref, hi_ref, nv_ref, x_ref, w_ref, o_ref, acc_ref, *, num_groups):
    v, k = pl.program_id(1), pl.program_id(2)
    g = gid_ref[v]
    live = v < nv_ref[0]

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(live & (g < num_groups))
    def _accumulate():
        acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(live & (k == pl.num_programs(2) - 1))
    def _merge():
        tile = tid_ref[v]
        first = (v == 0) | (tid_ref[jnp.maximum(v - 1, 0)] != tile)
        rows = tile * acc_ref.shape[0] + jax.lax.broadcasted_iota(jnp.int32, acc_ref.shape, 0)
        mine = (rows >= lo_ref[g]) & (rows < hi_ref[g])
        base = jnp.where(first, jnp.zeros(o_ref.shape, o_ref.dtype), o_ref[...])
        o_ref[...] = jnp.where(mine, acc_ref[...].astype(o_ref.dtype), base)


def workload(lhs, rhs, group_sizes, max_expert_size):
    M, K = lhs.shape
    G, _, N = rhs.shape
    bm, bn, bk = _fit(M, BM, 8), _fit(N, BN, 128), _fit(K, BK, 128)
    gid, tid, lo, hi, nv = _metadata(group_sizes, M, bm, max_expert_size)
    return pl.pallas_call(
        functools.partial(_kernel, num_groups=G),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=5,
            grid=(N // bn, gid.shape[0], K // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda j, v, k, gid, tid, lo, hi, nv: (tid[v], k)),
                pl.BlockSpec((None, bk, bn), lambda j, v, k, gid, tid, lo, hi, nv: (jnp.minimum(gid[v], G - 1), k, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda j, v, k, gid, tid, lo, hi, nv: (tid[v], j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        ),
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
    )(gid, tid, lo, hi, nv, lhs, rhs)
