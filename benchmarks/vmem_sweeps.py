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
  branches  32k's two matmuls and last-step logsumexp over the accumulator, the accumulation unconditional or in a
            pl.when of its own (a branch's values get room of their own beside the code before it)
  dots      a plain bf16 matmul into its output block, M 1024-2048, K 1024-2048, N 512-1024 (_dot_staging's rules)
  patches   one im2col convolution step: lane-shifted copies of a block stacked into a patch matrix, cast to bf16
            and multiplied (18k, 25k, 33k and 46k's convolutions)
  columns   sums over the rows of (R, C) blocks (21k's column sums), bf16 converted and f32 read straight
  affine    34k's norm kernel: a (1, C, H, W) bf16 block converted to f32, times a per-channel scale plus a shift
            read from (C, 1, 1) refs (broadcast over sublanes and lanes); the scale alone, constants, (C, 1, W) refs
These are the measurements behind the column-strip and epilogue rules and the notes on what is still unmodelled.
Open: the widths group (v6e) shows the hold rule (a value read after its row max is kept whole) over-modelling
narrow values: for 2 MiB of f32 the compiler keeps 0.92 MiB at 2048 lanes, 0.59 at 512 and nothing at 128, where the
model keeps 1.81 (the whole value less what the registers hold); it holds at 4096 lanes and wider. And the heads
group shows the scheduler overlapping the unrolled heads, which the model prices one at a time: 0.31 MiB for one
head (modelled 0.31), then about 0.21 MiB more per head with (256, 512) scores (1.80 MiB for eight), 0.71 more per
head with (512, 512) ones -- about each head's two (rows, 128) f32 results (p @ v and its row sum) kept until the
division: with p @ v stored undivided nothing grows with the heads (0.31 MiB at 1 and at 8), with the row sums alone
0.08 MiB a head (0.89 at 8). Keeping both operands of such a division to the body's end fits these (8 heads: v6e
2.06 MiB modelled, 1.80 compiled; v5e 2.06, 2.35) but moves no corpus kernel, none of which divides a matmul's
result by its row sums in unrolled heads: not in the model. 7p's misses are partly this
(benchmarks/vmem_fidelity.py: partly its strided K and V reads): with 1, 2, 4 and 8 of its KV heads its kernel needs
1.90, 3.13, 4.38 and 6.25 MiB beyond its blocks (v6e), modelled 0.56-0.69. The dots group: on v6e the model holds at
N = 1024 and is 0.5-1.5 MiB over at N = 512 (two MXU-wide column tiles). 7x stages differently: with M = 1024
nothing at N = 512 and only the LHS at N = 1024 (no f32 partial tile), which the model now follows (_dot_staging's
small rows); with M = 2048 about 4 MiB at N = 512 whatever K, and 1.2 MiB more than v6e at N = 1024, still modelled
as on v6e (5.81 MiB for both K = 1024 cases: over at N = 512, under at N = 1024). The patches group: one im2col step
keeps 0 to 0.61 MiB beyond its blocks (v6e, v5e: most with 32 channels x 27 taps over 1024 lanes, whose f32 patch
matrix is 3.4 MiB), modelled 0: the 0.4-2.4 MiB the corpus's convolutions miss come from elsewhere in them.
The affine group: with constants, (C, 1, W) refs or the scale alone the compiler keeps nothing (at most 0.36 MiB)
beyond the blocks; with a scale and a shift from (C, 1, 1) refs it keeps about the f32 copy of the block less what
the registers hold while that is small (C = 8, 16, 32 and 48 of 128 x 128 on v6e: 0.27, 0.71, 1.66 and 2.65 MiB; f32
copies of 0.5 to 3 MiB), and beyond that an amount that follows nothing modelled: v6e 1.94, 2.22, 2.89 and 10.09 MiB
at C = 64, 96, 128 and 256; v5e 2.79, 2.43, 2.73 and 6.95, and 0.24 for 34k's own 128 x 126 x 126 block (2.90 on
v6e). Left unmodelled: neither chip's figures follow the block's size, and they differ between chips (34k's norm
kernel as modelled now: 0.85x on v6e, 0.99x on v5e).
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
