"""Controlled kernels for the body-value rules of kernel_analysis.body_values_bytes: for each, the VMEM the compiler
gives it beyond its blocks and scratch, beside what the model says, side by side in one run.

Each case is one small pallas_call whose blocks are known, so the compiler's scoped VMEM (libtpu.scoped_vmem on the
compiled program, the kernel allowed the chip's whole VMEM as in benchmarks/vmem_fidelity.py: under the default
limit XLA places small operands in the VMEM left over) less cost_model.pipeline_vmem_bytes is what the scheduler
keeps of the body's values; the model's figure is vmem_bytes less the same blocks. Groups:
  rows      a (64, C) bf16 block converted to f32, then a row max and an elementwise epilogue (42k's row kernel, C =
            8192; narrower blocks for the width at which the scheduler stops keeping the epilogue whole)
  widths    the same epilogue over f32 values of 2 MiB (and one of 4), from 128 rows of 4096 lanes to 4096 of 128:
            how much the scheduler keeps depends on the width of a tile of rows, not on the value's size
  scores    a (512, 2048) f32 block read from its ref: exp(z - max) read by a reduction, a matmul, or elementwise
  heads     softmax attention unrolled over 1-8 heads of one block (7p's and 5p's loops over heads)
  copies    an online-softmax step unrolled over 1-8 heads, by hand or by pl.loop (5p's batch elements, 7p's KV heads,
            jax's flash kernel's trips): what the scheduler keeps of each copy's p = exp(s - max) while later ones run
  norms     a two-pass LayerNorm (centre, then the centred rows' variance) of (R, C) bf16 blocks, C = 64 to 4096
  taps      a matmul result cut into three row slices (a convolution's column taps), stored, summed, or rolled and
            summed (18k's and 46k's convolutions)
  decay     15p's decayed scores, a matmul result scaled along its keys and read by |a|.sum() and by a @ v
  pages     7p's loop without its softmax: K and V of each head read as rows 2h and 2h + 1 of a bf16 page buffer's
            head axis, one of them alone, or from a contiguous head axis
  branches  32k's two matmuls and last-step logsumexp over the accumulator, the accumulation unconditional or in a
            pl.when of its own (a branch's values get room of their own beside the code before it)
  dots      a plain bf16 matmul into its output block, M 1024-2048, K 1024-2048, N 512-1024 (_dot_staging's rules)
  patches   one im2col convolution step: lane-shifted copies of a block stacked into a patch matrix, cast to bf16
            and multiplied (18k, 25k, 33k and 46k's convolutions)
  columns   sums over the rows of (R, C) blocks (21k's column sums), bf16 converted and f32 read straight
  affine    34k's norm kernel: a (1, C, H, W) bf16 block converted to f32, times a per-channel scale plus a shift
            read from (C, 1, 1) refs (broadcast over sublanes and lanes); the scale alone, constants, (C, 1, W) refs
These are the measurements behind the column-strip and epilogue rules and the notes on what is still unmodelled.
Open: the widths group (v6e) shows the hold rule (a value read after its row max is kept whole) over-modelling narrow
values: for 2 MiB of f32 the compiler keeps 0.92 MiB at 2048 lanes, 0.59 at 512 and nothing at 128, where the model
keeps 1.81 (the whole value less what the registers hold); it holds at 4096 lanes and wider. The copies group is behind
the unrolled-copies rule (kernel_analysis._unrolled_kept): with p = exp(s - max) read by its row sum and by p @ v in
each of n unrolled copies, the compiler's VMEM grows with n (v6e, 512 x 1024 scores: 2.01, 3.02, 6.90 and 13.65 MiB for
1, 2, 4 and 8 copies; modelled 2.06, 3.06, 5.66, 10.86), a pl.loop unroll exactly as copies written out; with the row
sum alone or p @ v alone nothing grows. Model / compiler, beyond the blocks: v6e and 7x 0.73x-1.44x from 256 rows up (29
of the 36 with 2 or more copies within 0.8x-1.1x); v5e 0.74x-1.72x, keeping less of some shapes (1024 x 512 at 8 copies:
7.90 MiB compiled, 11.11 modelled) and more of others (1024 x 1024: 29.31, 21.91); 128-row scores keep less on every
chip at 2 copies or more (7x, 128 x 2048 at 8 copies: 1.80, 5.28). The heads group (each head's output divided by its
row sums) now reads 2.51 MiB modelled at 8 heads against 1.80 compiled on v6e and 2.35 on v5e (0.31 at one head on both;
p @ v stored undivided: 0.31 at 1 and at 8). The scores group is behind the from-a-ref fork rule: p = exp(z - max) of
scores read straight from their ref is kept whole when a row sum and p @ v read it (v6e: 3.02 MiB compiled, 3.81
modelled) or two row sums (3.82, 4.06); read by p @ v alone it streams (0.37, 0.06). The taps group shows the reshaped
rule (a value read more than once, once by a slice) over-modelling a matmul result cut into a convolution's taps: the
model keeps the whole f32 result (384 x 2048: 2.81 MiB beyond the blocks) where the compiler keeps 0.01-0.37 MiB with
the taps summed and 0.24-1.17 MiB with them rolled first (v6e, v5e, 7x); yet 18k's whole kernel is under-modelled on v6e
(0.88x). In copies of 18k's kernel its fori_loop over whole chunks and the static remainder chunk after it take room
side by side (v6e: 2.63 MiB beyond the blocks with the loop alone, 2.12 with the remainder alone, 4.89 with both; v5e
1.46, 1.48, 3.05), and without the taps' rolls it keeps 1.17 MiB (v6e). Neither obvious rule is general: a rolled-taps
rule (a third of the result kept, nothing for summed taps) puts 18k at 0.81x-0.91x and 22k at 0.87x; a rule giving the
code after a loop room of its own fixes 46k and 18k on v6e and 7x but puts 34k's convolution, of the same
loop-and-remainder shape, at 1.15x and 18k on v5e at 1.16x. The decay group is behind 7x's exception to the fork rule:
v6e keeps decayed scores read by a row sum and a matmul whole (3.30-3.70 MiB of 4 MiB of f32 at 1024 x 1024, 512 x 2048
and 2048 x 512; 0.09 at 512 x 512), 7x only where the matmul has more than 1024 rows (1.33 MiB at 2048 x 512; 0.08-0.36
at 1024 rows or fewer, modelled 0.06-0.31 now). The pages group holds 7p's strided K and V reads, in a copy of its loop
(q (256, 128) per head against K and V read as buf[:, :, 2h, :] and buf[:, :, 2h + 1, :] of a (32, 16, 2H, 128) bf16
page buffer, then s @ v): 1.84, 1.98, 2.09, 2.09 MiB beyond the blocks at 1, 2, 4, 8 heads on v6e (7x the same to 0.06;
v5e 3.82, 3.87, 1.91, 1.92), with a leading slot axis indexed by program_id % 2 the same, and 2.09 at 16 heads (so not
the buffer's padded size: about one tile per row of V, 512 x 4 KiB); with 256 rows of pages 0.84 at 1 head; with the
same buffer read with a contiguous head axis, nothing; with V = K (one strided read serving both matmuls) 0.02-0.21;
with V strided and K from a contiguous block 0.33-0.41, K strided and V contiguous 0.00-0.10 (v6e, 1 and 8 heads). So it
is the pair: rows 2h and 2h + 1 of a bf16 buffer share each packed sublane, and reading both costs about one 4 KiB tile
per row of the pages read (512 x 4 KiB = 2 MiB), once per head, not per read. But a rule staging a tile per row wherever
rows r and r ^ 1 of one 16-bit ref are read apart (tried) puts tests/kernels/good_paged_attention.py at 1.43x: it reads
heads g and g + 1 of one K buffer in successive unrolled heads and the compiler keeps nothing for them (0.99x as
modelled now), and 7p only moves to 0.87x-0.89x; the pair must be read within one head, by its two matmuls. 7p's mask,
read by every head's where, is another 0.48 MiB (v6e). The norms group is behind the narrow-rows rule (a held value made
from another, a tile of its rows one vreg wide, keeps half of that one beside it): a two-pass LayerNorm over rows of 128
lanes or fewer keeps about 1.5x the f32 rows (v6e and 7x, rows 1024-8192 of 64 lanes: 0.45-6.17 MiB compiled, 0.56-5.81
modelled; v5e 0.62-6.99), over 512 lanes about 1.1x (modelled 1.0x); at 4096 lanes the epilogue rule over-models it
(0.87 MiB compiled, 1.81 modelled). 7p's misses are partly its strided K and V reads (benchmarks/vmem_fidelity.py): with
1, 2, 4 and 8 of its KV heads its kernel needs 1.90, 3.13, 4.38 and 6.25 MiB beyond its blocks (v6e), modelled 0.56-0.69
before the copies rule. The dots group: on v6e the model holds at N = 1024 and is 0.5-1.5 MiB over at N = 512 (two
MXU-wide column tiles). 7x stages differently: with M = 1024 nothing at N = 512 and only the LHS at N = 1024 (no f32
partial tile), which the model now follows (_dot_staging's small rows); with M = 2048 about 4 MiB at N = 512 whatever K,
and 1.2 MiB more than v6e at N = 1024, still modelled as on v6e (5.81 MiB for both K = 1024 cases: over at N = 512,
under at N = 1024). The patches group: one im2col step keeps 0 to 0.61 MiB beyond its blocks (v6e, v5e: most with 32
channels x 27 taps over 1024 lanes, whose f32 patch matrix is 3.4 MiB), modelled 0: the 0.4-2.4 MiB the corpus's
convolutions miss come from elsewhere in them. The affine group: with constants, (C, 1, W) refs or the scale alone the
compiler keeps nothing (at most 0.36 MiB) beyond the blocks; with a scale and a shift from (C, 1, 1) refs it keeps about
the f32 copy of the block less what the registers hold while that is small (C = 8, 16, 32 and 48 of 128 x 128 on v6e:
0.27, 0.71, 1.66 and 2.65 MiB; f32 copies of 0.5 to 3 MiB), and beyond that an amount that follows nothing modelled: v6e
1.94, 2.22, 2.89 and 10.09 MiB at C = 64, 96, 128 and 256; v5e 2.79, 2.43, 2.73 and 6.95, and 0.24 for 34k's own 128 x
126 x 126 block (2.90 on v6e). Left unmodelled: neither chip's figures follow the block's size, and they differ between
chips (34k's norm kernel as modelled now: 0.85x on v6e, 0.99x on v5e).
benchmarks/vmem_fidelity.py measures the whole corpus.
Usage: python benchmarks/vmem_sweeps.py [--targets v6e,v5e] [--groups rows,dots]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import vmem_fidelity  # noqa: E402 -- the same measurement: every kernel may use the chip's whole VMEM
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402


def _row_max(z):
    return jnp.max(z, axis=-1, keepdims=True)


def _rows(epilogue, cols: int = 8192, rows: int = 64):
    """(rows, cols) bf16 blocks of an (8 * rows, cols) array, converted to f32 and passed through `epilogue`."""

    def body(z_ref, o_ref):
        o_ref[...] = epilogue(z_ref[...].astype(jnp.float32)).astype(o_ref.dtype)

    def call(x):
        spec = pl.BlockSpec((rows, cols), lambda i: (i, 0))
        return pl.pallas_call(body, grid=(8,), in_specs=[spec], out_specs=spec, out_shape=x)(x)

    return call, [jax.ShapeDtypeStruct((8 * rows, cols), jnp.bfloat16)]


def _scores(reader):
    """(512, 2048) f32 blocks read from their ref, p = exp(z - max z), and `reader(p, v_ref)` -> (512, 128)."""

    def body(z_ref, v_ref, o_ref):
        z = z_ref[...]
        o_ref[...] = reader(jnp.exp(z - _row_max(z)), v_ref)

    def call(x, v):
        return pl.pallas_call(
            body,
            grid=(8,),
            in_specs=[pl.BlockSpec((512, 2048), lambda i: (i, 0)), pl.BlockSpec((2048, 128), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((512, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((4096, 128), jnp.float32),
        )(x, v)

    return call, [jax.ShapeDtypeStruct((4096, 2048), jnp.float32), jax.ShapeDtypeStruct((2048, 128), jnp.bfloat16)]


def _columns(rows: int, cols: int, dtype, convert: bool):
    """Sums over the rows of (rows, cols) blocks of an (8192, 8192) array, each block converted to f32 or not."""

    def body(w_ref, o_ref):
        w = w_ref[...]
        o_ref[...] = jnp.sum(w.astype(jnp.float32) if convert else w, axis=0, keepdims=True)

    def call(w):
        return pl.pallas_call(
            body,
            grid=(8192 // cols, 8192 // rows),
            in_specs=[pl.BlockSpec((rows, cols), lambda j, i: (i, j))],
            out_specs=pl.BlockSpec((1, cols), lambda j, i: (0, j)),
            out_shape=jax.ShapeDtypeStruct((1, 8192), jnp.float32),
        )(w)

    return call, [jax.ShapeDtypeStruct((8192, 8192), dtype)]


def _channel_affine(channels: int, height: int, width: int, per: str):
    """34k's norm kernel: a (1, C, H, W) bf16 block converted to f32, times a per-channel scale plus a shift, both
    read from (C, 1, 1) f32 refs ("scale and shift"), the scale alone ("scale"), constants ("constants"), or (C, 1, W)
    refs ("lane-wide refs": broadcast over sublanes only)."""
    vector = (channels, 1, width) if per == "lane-wide refs" else (channels, 1, 1)

    def body(m_ref, s_ref, b_ref, o_ref):
        m = m_ref[...].astype(jnp.float32)
        if per == "constants":
            y = m * 1.5 + 0.5
        elif per == "scale":
            y = m * s_ref[...]
        else:
            y = m * s_ref[...] + b_ref[...]
        o_ref[...] = y.astype(o_ref.dtype)

    block = (1, channels, height, width)

    def call(m, s, b):
        vec = pl.BlockSpec(vector, lambda i: (0, 0, 0))
        return pl.pallas_call(
            body,
            grid=(4,),
            in_specs=[pl.BlockSpec(block, lambda i: (i, 0, 0, 0)), vec, vec],
            out_specs=pl.BlockSpec(block, lambda i: (i, 0, 0, 0)),
            out_shape=jax.ShapeDtypeStruct((4, channels, height, width), jnp.bfloat16),
        )(m, s, b)

    return call, [
        jax.ShapeDtypeStruct((4, channels, height, width), jnp.bfloat16),
        jax.ShapeDtypeStruct(vector, jnp.float32),
        jax.ShapeDtypeStruct(vector, jnp.float32),
    ]


def _heads(heads: int, store: str = "p @ v / sum(p)"):
    """Softmax attention of (256, 128) bf16 queries against (512, 128) keys and values, unrolled over `heads` heads
    of one block (7p's loop over its KV heads): each head's scores are (256, 512) f32. Each head stores `store`:
    its normalised output, p @ v undivided, or the row sums alone."""

    def body(q_ref, k_ref, v_ref, o_ref):
        for h in range(heads):
            s = jax.lax.dot_general(q_ref[h], k_ref[h], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            p = jnp.exp(s - _row_max(s))
            if store == "p @ v":
                o_ref[h] = _dot(p, v_ref.at[h])
            elif store == "sum(p)":
                o_ref[h] = _row_sum(p)
            else:
                o_ref[h] = _dot(p, v_ref.at[h]) / _row_sum(p)

    def call(q, k, v):
        spec = pl.BlockSpec((heads, 256, 128), lambda i: (i, 0, 0))
        kv = pl.BlockSpec((heads, 512, 128), lambda i: (0, 0, 0))
        out = jax.ShapeDtypeStruct((4 * heads, 256, 128), jnp.float32)
        return pl.pallas_call(body, grid=(4,), in_specs=[spec, kv, kv], out_specs=spec, out_shape=out)(q, k, v)

    q = jax.ShapeDtypeStruct((4 * heads, 256, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((heads, 512, 128), jnp.bfloat16)
    return call, [q, kv, kv]


def _copies(copies: int, rows: int, keys: int, unrolled_by: str = "hand"):
    """One online-softmax step (scores of `rows` bf16 queries against `keys` keys, head_dim 128; running max, row sums
    and accumulator in f32 refs) for each of `copies` heads of one block, written out by hand or unrolled by
    pl.loop: each copy's p = exp(s - max) is read by its row sum and by p @ v (5p's batch elements, 7p's KV heads,
    jax's flash kernel's trips)."""

    def body(q_ref, k_ref, v_ref, m_ref, l_ref, acc_ref):
        def step(h):
            s = jax.lax.dot_general(q_ref[h], k_ref[h], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            m_prev = m_ref[h]
            m_new = jnp.maximum(m_prev, _row_max(s))
            alpha = jnp.exp(m_prev - m_new)
            p = jnp.exp(s - jnp.tile(m_new, (1, keys // 128)))
            l_ref[h] = alpha * l_ref[h] + p.sum(axis=-1, keepdims=True)
            acc_ref[h] = alpha * acc_ref[h] + _dot(p, v_ref.at[h])
            m_ref[h] = m_new

        if unrolled_by == "pl.loop":
            pl.loop(0, copies, unroll=True)(step)
        else:
            for h in range(copies):
                step(h)

    def call(q, k, v):
        spec = pl.BlockSpec((copies, rows, 128), lambda i: (i, 0, 0))
        kv = pl.BlockSpec((copies, keys, 128), lambda i: (0, 0, 0))
        state = jax.ShapeDtypeStruct((4 * copies, rows, 128), jnp.float32)
        return pl.pallas_call(body, grid=(4,), in_specs=[spec, kv, kv], out_specs=[spec] * 3, out_shape=[state] * 3)(
            q, k, v
        )

    q = jax.ShapeDtypeStruct((4 * copies, rows, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((copies, keys, 128), jnp.bfloat16)
    return call, [q, kv, kv]


def _layer_norm(rows: int, cols: int):
    """A two-pass LayerNorm of (rows, cols) bf16 blocks in f32: the rows centred by their mean, then scaled by the
    centred rows' variance (28k's LayerNorm over its 64-lane rows)."""

    def body(x_ref, o_ref):
        y = x_ref[...].astype(jnp.float32)
        centred = y - jnp.mean(y, axis=1, keepdims=True)
        variance = jnp.mean(centred * centred, axis=1, keepdims=True)
        o_ref[...] = (centred * jax.lax.rsqrt(variance + 1e-5)).astype(o_ref.dtype)

    def call(x):
        spec = pl.BlockSpec((rows, cols), lambda i: (i, 0))
        return pl.pallas_call(
            body, grid=(4,), in_specs=[spec], out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)
        )(x)

    return call, [jax.ShapeDtypeStruct((4 * rows, cols), jnp.bfloat16)]


def _taps(m: int, k: int, n: int, combine: str):
    """A (m, k) @ (k, n) bf16 matmul whose f32 result is cut into three row slices (18k's and 46k's column taps of a
    convolution): the first stored alone, the three summed, or the three summed after lane rolls by 0, 1 and 2."""

    def body(w_ref, x_ref, o_ref):
        z = jnp.dot(w_ref[...], x_ref[...], preferred_element_type=jnp.float32)
        c = m // 3
        y = z[:c]
        for dx in (1, 2) if combine != "first tap stored" else ():
            tap = z[dx * c : (dx + 1) * c]
            y = y + (pltpu.roll(tap, n - dx, 1) if combine == "rolled and summed" else tap)
        o_ref[...] = y

    def call(w, x):
        return pl.pallas_call(
            body,
            grid=(4,),
            in_specs=[pl.BlockSpec((m, k), lambda i: (0, 0)), pl.BlockSpec((None, k, n), lambda i: (i, 0, 0))],
            out_specs=pl.BlockSpec((None, m // 3, n), lambda i: (i, 0, 0)),
            out_shape=jax.ShapeDtypeStruct((4, m // 3, n), jnp.float32),
        )(w, x)

    return call, [jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((4, k, n), jnp.bfloat16)]


def _decay(rows: int, keys: int):
    """Retention's shape (15p): scores of `rows` bf16 queries against `keys` keys (head_dim 128), decayed along the
    keys, read by |a|.sum() and by a @ v; the output is a @ v over the row sums."""

    def body(q_ref, k_ref, v_ref, o_ref):
        s = jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        a = s * jnp.exp(-0.01 * jax.lax.broadcasted_iota(jnp.int32, (1, keys), 1).astype(jnp.float32))
        o_ref[...] = _dot(a, v_ref) / _row_sum(jnp.abs(a))

    def call(q, k, v):
        whole = pl.BlockSpec((keys, 128), lambda i: (0, 0))
        spec = pl.BlockSpec((rows, 128), lambda i: (i, 0))
        out = jax.ShapeDtypeStruct((4 * rows, 128), jnp.float32)
        return pl.pallas_call(body, grid=(4,), in_specs=[spec, whole, whole], out_specs=spec, out_shape=out)(q, k, v)

    q = jax.ShapeDtypeStruct((4 * rows, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((keys, 128), jnp.bfloat16)
    return call, [q, kv, kv]


def _pages(heads: int, read: str):
    """7p's loop over KV heads without its softmax: per head, (256, 128) bf16 queries against K and V of 512 tokens
    read out of a (32 pages, 16 tokens, 2 * heads, 128) bf16 page buffer, s = q @ K.T, then s @ V. `read`: "K and V
    strided" (rows 2h and 2h + 1 of the head axis, 7p's layout), "V strided" or "K strided" (the other from a
    contiguous (512, 128) block), "K as V" (one strided read for both), or "contiguous" (the head axis before the
    tokens)."""
    tokens = 32 * 16
    buffer = (32, 2 * heads, 16, 128) if read == "contiguous" else (32, 16, 2 * heads, 128)

    def body(q_ref, buf_ref, c_ref, o_ref):
        for h in range(heads):
            if read == "contiguous":
                k, v = (buf_ref[:, 2 * h + i, :, :].reshape(tokens, 128) for i in (0, 1))
            else:
                k, v = (buf_ref[:, :, 2 * h + i, :].reshape(tokens, 128) for i in (0, 1))
            if read == "V strided":
                k = c_ref[...]
            elif read == "K strided":
                v = c_ref[...]
            elif read == "K as V":
                v = k
            s = jax.lax.dot_general(q_ref[h], k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            o_ref[h] = jnp.dot(s.astype(jnp.bfloat16), v, preferred_element_type=jnp.float32)

    def call(q, buf, c):
        spec = pl.BlockSpec((heads, 256, 128), lambda i: (i, 0, 0))
        return pl.pallas_call(
            body,
            grid=(4,),
            in_specs=[
                spec,
                pl.BlockSpec(buffer, lambda i: (0, 0, 0, 0)),
                pl.BlockSpec((tokens, 128), lambda i: (0, 0)),
            ],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct((4 * heads, 256, 128), jnp.float32),
        )(q, buf, c)

    return call, [
        jax.ShapeDtypeStruct((4 * heads, 256, 128), jnp.bfloat16),
        jax.ShapeDtypeStruct(buffer, jnp.bfloat16),
        jax.ShapeDtypeStruct((tokens, 128), jnp.bfloat16),
    ]


def _branches(in_a_branch: bool, computed: bool):
    """32k's shape: each step h = sigmoid(x @ w1) (1024, 512) and acc += h @ w2 (1024, 1024) f32, unconditionally or
    in a pl.when of its own; the last step's logsumexp reads the accumulator (plus a bias when `computed`: a value
    the row max holds, else re-read from the ref)."""
    from jax.experimental.pallas import tpu as pltpu

    def body(x_ref, w1_ref, w2_ref, b_ref, o_ref, acc_ref):
        t, last = pl.program_id(1), pl.num_programs(1) - 1

        @pl.when(t == 0)
        def _zero():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        def accumulate():
            h = jax.nn.sigmoid(jnp.dot(x_ref[...], w1_ref[...], preferred_element_type=jnp.float32))
            acc_ref[...] += jnp.dot(h.astype(jnp.bfloat16), w2_ref[...], preferred_element_type=jnp.float32)

        if in_a_branch:
            pl.when(t < last)(accumulate)
        else:
            accumulate()

        @pl.when(t == last)
        def _logsumexp():
            z = acc_ref[...] + b_ref[...] if computed else acc_ref[...]
            m = _row_max(z)
            o_ref[...] = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))

    def call(x, w1, w2, b):
        return pl.pallas_call(
            body,
            grid=(2, 4),
            in_specs=[
                pl.BlockSpec((1024, 2048), lambda i, t: (i, 0)),
                pl.BlockSpec((2048, 512), lambda i, t: (0, t)),
                pl.BlockSpec((512, 1024), lambda i, t: (t, 0)),
                pl.BlockSpec((1, 1024), lambda i, t: (0, 0)),
            ],
            out_specs=pl.BlockSpec((1024, 1), lambda i, t: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((2048, 1), jnp.float32),
            scratch_shapes=[pltpu.VMEM((1024, 1024), jnp.float32)],
        )(x, w1, w2, b)

    bf16 = jnp.bfloat16
    shapes = [((2048, 2048), bf16), ((2048, 2048), bf16), ((2048, 1024), bf16), ((1, 1024), jnp.float32)]
    return call, [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]


def _plain_dot(m: int, k: int, n: int):
    """(m, k) @ (k, n) bf16 blocks, the f32 product stored straight to the output block."""

    def body(x_ref, w_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    def call(x, w):
        return pl.pallas_call(
            body,
            grid=(2,),
            in_specs=[pl.BlockSpec((m, k), lambda i: (i, 0)), pl.BlockSpec((k, n), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((m, n), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((2 * m, n), jnp.float32),
        )(x, w)

    return call, [jax.ShapeDtypeStruct((2 * m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)]


def _patches(channels: int, taps: int, lanes: int, dtype):
    """An im2col convolution step (18k, 25k, 33k, 46k): `taps` lane-shifted copies of a (channels, lanes + ...)
    block (an aligned slice per group of three taps, a lane roll within it), stacked into a (taps * channels, lanes)
    patch matrix, cast to bf16 when the block is f32, and one (64, taps * channels) @ patches matmul."""
    extra = 128 * ((taps + 2) // 3)

    def body(x_ref, w_ref, o_ref):
        slab = x_ref[...]
        rows = []
        for t in range(taps):
            row = slab[:, 128 * (t // 3) : 128 * (t // 3) + lanes]
            rows.append(pltpu.roll(row, lanes - t % 3, 1) if t % 3 else row)
        patches = jnp.concatenate(rows, axis=0).astype(jnp.bfloat16)
        o_ref[...] = jnp.dot(w_ref[...], patches, preferred_element_type=jnp.float32)

    def call(x, w):
        return pl.pallas_call(
            body,
            grid=(8,),
            in_specs=[
                pl.BlockSpec((None, channels, lanes + extra), lambda i: (i, 0, 0)),
                pl.BlockSpec((64, taps * channels), lambda i: (0, 0)),
            ],
            out_specs=pl.BlockSpec((None, 64, lanes), lambda i: (i, 0, 0)),
            out_shape=jax.ShapeDtypeStruct((8, 64, lanes), jnp.float32),
        )(x, w)

    return call, [
        jax.ShapeDtypeStruct((8, channels, lanes + extra), dtype),
        jax.ShapeDtypeStruct((64, taps * channels), jnp.bfloat16),
    ]


def _dot(p, v_ref):
    return jnp.dot(p.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32)


def _row_sum(p):
    return jnp.broadcast_to(p.sum(axis=-1, keepdims=True), (p.shape[0], 128))


CASES = {
    "rows": [
        ("gelu(z - max)", _rows(lambda z: jax.nn.gelu(z - _row_max(z), approximate=True))),
        ("tanh(z - max)", _rows(lambda z: jnp.tanh(z - _row_max(z)))),
        ("(z - max) * 2", _rows(lambda z: (z - _row_max(z)) * 2)),
        ("d * d + d, d = z - max", _rows(lambda z: (lambda d: d * d + d)(z - _row_max(z)))),
        ("exp(z - max) * z", _rows(lambda z: jnp.exp(z - _row_max(z)) * z)),
        ("gelu(z)", _rows(lambda z: jax.nn.gelu(z, approximate=True))),
        ("z * z + z", _rows(lambda z: z * z + z)),
        *(
            (f"{name}, 64 x {cols}", _rows(epilogue, cols))
            for name, epilogue in [
                ("d * d + d", lambda z: (lambda d: d * d + d)(z - _row_max(z))),
                ("exp(z - max) * z", lambda z: jnp.exp(z - _row_max(z)) * z),
            ]
            for cols in (4096, 2048, 1024)
        ),
    ],
    "widths": [
        (f"d * d + d, {rows} x {cols}", _rows(lambda z: (lambda d: d * d + d)(z - _row_max(z)), cols, rows))
        for rows, cols in [(128, 4096), (256, 2048), (512, 1024), (1024, 512), (4096, 128), (1024, 1024)]
    ],
    "scores": [
        ("sum(p) + p @ v", _scores(lambda p, v_ref: _row_sum(p) + _dot(p, v_ref))),
        ("sum(p) + sum(p * p)", _scores(lambda p, v_ref: _row_sum(p) + _row_sum(p * p))),
        ("(p * p + p) @ v", _scores(lambda p, v_ref: _dot(p * p + p, v_ref))),
        ("p @ v", _scores(lambda p, v_ref: _dot(p, v_ref))),
    ],
    "heads": [
        *((f"softmax attention, {h} heads unrolled", _heads(h)) for h in (1, 2, 4, 8)),
        *((f"{store} stored, {h} heads unrolled", _heads(h, store)) for store in ("p @ v", "sum(p)") for h in (1, 8)),
    ],
    "copies": [
        *(
            (f"online softmax {r} x {k}, {c} copies", _copies(c, r, k))
            for r, k in [(128, 2048), (256, 512), (256, 1024), (512, 512), (512, 1024), (1024, 512), (1024, 1024)]
            for c in (1, 2, 4, 8)
        ),
        *((f"online softmax 512 x 512, {c} copies by pl.loop", _copies(c, 512, 512, "pl.loop")) for c in (2, 4)),
    ],
    "norms": [
        (f"two-pass LayerNorm {r} x {c}", _layer_norm(r, c))
        for r, c in [(8192, 64), (4096, 64), (2048, 64), (1024, 64), (4096, 96), (2048, 128), (512, 512), (64, 4096)]
    ],
    "taps": [
        (f"{m} x {k} @ {k} x 2048, {combine}", _taps(m, k, 2048, combine))
        for combine in ("first tap stored", "summed", "rolled and summed")
        for m, k in [(384, 192), (384, 576), (192, 192)]
    ],
    "decay": [
        (f"decayed scores {r} x {k}", _decay(r, k)) for r, k in [(512, 512), (1024, 1024), (512, 2048), (2048, 512)]
    ],
    "pages": [
        (f"{read}, {h} heads", _pages(h, read))
        for read in ("K and V strided", "V strided", "K strided", "K as V", "contiguous")
        for h in (1, 8)
    ],
    "branches": [
        (f"logsumexp of acc{' + b' if bias else ''}, accumulation {where}", _branches(where != "before it", bias))
        for bias in (True, False)
        for where in ("before it", "in a branch")
    ],
    "dots": [
        (f"{m} x {k} @ {k} x {n}", _plain_dot(m, k, n)) for m in (1024, 2048) for k in (1024, 2048) for n in (512, 1024)
    ],
    "patches": [
        (f"{c} ch x {t} taps, {n} lanes, {jnp.dtype(d).name}", _patches(c, t, n, d))
        for c, t, n, d in [
            (8, 9, 2048, jnp.float32),
            (8, 9, 1024, jnp.float32),
            (8, 27, 2048, jnp.float32),
            (32, 27, 1024, jnp.float32),
            (32, 9, 2048, jnp.float32),
            (8, 9, 2048, jnp.bfloat16),
            (64, 3, 2048, jnp.bfloat16),
            (64, 9, 2048, jnp.bfloat16),
        ]
    ],
    "affine": [
        (f"{c} x {h} x {w}, {per}", _channel_affine(c, h, w, per))
        for c, h, w, per in [
            *((c, 128, 128, "scale and shift") for c in (8, 16, 32, 48, 64, 96, 128, 256)),
            (32, 256, 128, "scale and shift"),
            (32, 128, 512, "scale and shift"),
            (128, 126, 126, "scale and shift"),
            (128, 126, 126, "scale"),
            (128, 126, 126, "constants"),
            (128, 128, 128, "lane-wide refs"),
        ]
    ],
    "columns": [
        (f"sum over rows, {r} x {c} {name}", _columns(r, c, dtype, convert))
        for name, dtype, convert in [("bf16 -> f32", jnp.bfloat16, True), ("f32 from its ref", jnp.float32, False)]
        for r, c in [(256, 2048), (512, 2048), (1024, 2048), (512, 1024), (512, 4096)]
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="v6e,v5e", help="comma-separated TPU generations")
    parser.add_argument("--groups", default=",".join(CASES), help="comma-separated groups of cases")
    args = parser.parse_args()

    from jaxbench_mcp.analysis import kernels as kernel_analysis
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.perf import cost_model
    from jaxbench_mcp.sandbox import protocol

    vmem_fidelity._install_limit_hook()
    mib = 2**20
    print(f"{'gen':<4} {'group':<8} {'case':<44} {'compiler':>9} {'model':>9}   (MiB beyond blocks and scratch)")
    for generation in args.targets.split(","):
        for group in args.groups.split(","):
            cases = CASES[group]
            for name, (call, abstract) in cases:
                (kernel,), _ = kernel_analysis.describe_kernels(jax.make_jaxpr(call)(*abstract).jaxpr)
                info = protocol.KernelInfo(**kernel)
                fixed = cost_model.pipeline_vmem_bytes(info)
                found = vmem_fidelity.compiler_used(
                    call, abstract, (), generation, targets.chip_facts(generation).vmem_bytes
                )
                if not found:
                    print(f"{generation:<4} {group:<8} {name:<44} {'-':>9}   does not compile within the chip's VMEM")
                    continue
                used = max(found.values())
                model = cost_model.vmem_bytes(info, generation) - fixed
                print(f"{generation:<4} {group:<8} {name:<44} {(used - fixed) / mib:>9.3f} {model / mib:>9.3f}")


if __name__ == "__main__":
    main()
