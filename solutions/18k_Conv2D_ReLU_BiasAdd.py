# 18k_Conv2D_ReLU_BiasAdd: out = relu(conv2d_valid_3x3(x, W) + conv_bias) + bias, NCHW in and out.
# One grid step per image (and block of output channels); the (Cin, H, W) image and the (Cout, H-2, W-2)
# output block keep their natural NCHW layout, so nothing is transposed, padded or sliced around the kernel.
# Output rows are produced in chunks of `rows` rows: the chunk's rows+2 input rows are flattened onto
# lanes, (Cin, (rows+2)*W), and the three row shifts dy are aligned lane slices of that slab, stacked on
# sublanes into a (3*Cin, rows*W) block X. One MXU matmul with the three column taps stacked on the output side,
# (3*Cout, 3*Cin) x (3*Cin, rows*W), gives Z_dx for dx = 0, 1, 2, and y = Z_0 + Z_1 shifted by one lane +
# Z_2 shifted by two (lane rolls of the f32 result: fewer rows to roll than shifting the input).
# Every output row is computed at the full input width W; its last k-1 columns (where the roll wraps
# into the next row) are not outputs and are dropped by the store. Bias, ReLU and bias run in f32.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK_LANES = 2048  # output positions (rows * W) per matmul, at most
# Output channels per grid step: all of them where VMEM allows, half on v4 (16 MiB of VMEM).
COUT_SPLIT_BY_VMEM = ((48 * 2**20, 1), (0, 2))


def _conv_rows(x_ref, w_ref, r0, nr, ksize):
    """The conv of output rows r0..r0+nr-1 at the full input width: (Cout, nr * W) f32."""
    cin, _, width = x_ref.shape[1:]
    cout = w_ref.shape[0] // ksize
    lanes = nr * width
    slab = x_ref[0, :, pl.ds(r0, nr + ksize - 1), :].astype(jnp.float32)
    slab = slab.reshape(cin, (nr + ksize - 1) * width).astype(x_ref.dtype)
    rows_x = jnp.concatenate([slab[:, dy * width : dy * width + lanes] for dy in range(ksize)], axis=0)
    z = jnp.dot(w_ref[...], rows_x, preferred_element_type=jnp.float32)  # (k*cout, lanes)
    y = z[:cout]
    for dx in range(1, ksize):
        y = y + pltpu.roll(z[dx * cout : (dx + 1) * cout], lanes - dx, 1)  # [:, p] <- [:, p + dx]
    return y


def _kernel(x_ref, w_ref, cb_ref, b_ref, o_ref, *, ksize, rows):
    width = x_ref.shape[3]
    out_h, out_w = o_ref.shape[2:]

    def emit(r0, nr):
        y = _conv_rows(x_ref, w_ref, r0, nr, ksize)
        y = jnp.maximum(y + cb_ref[...], 0.0) + b_ref[...]
        y = y.reshape(y.shape[0], nr, width)[:, :, :out_w]
        o_ref[0, :, pl.ds(r0, nr), :] = y.astype(o_ref.dtype)

    def chunk(c, carry):
        emit(pl.multiple_of(c * rows, rows), rows)
        return carry

    full = out_h // rows
    jax.lax.fori_loop(0, full, chunk, 0)  # whole chunks, sublane-aligned starts
    if out_h > full * rows:  # the remaining rows, one static chunk
        emit(full * rows, out_h - full * rows)


def workload(x, weight, conv_bias, bias):
    n, cin, h, w = x.shape
    cout, _, k, _ = weight.shape
    out_h, out_w = h - k + 1, w - k + 1
    rows = max(16, CHUNK_LANES // w // 16 * 16)  # a multiple of 16 keeps chunk starts tile-aligned
    vmem = pltpu.get_tpu_info().vmem_capacity_bytes
    split = next(s for least, s in COUT_SPLIT_BY_VMEM if vmem >= least)
    bco = cout // split if cout % (8 * split) == 0 else cout
    # Weights (cout, cin, dy, dx) -> per block of bco output channels: rows (dx, cout), columns (dy, cin),
    # matching the stacking of Z and X in the kernel.
    w2 = weight.reshape(cout // bco, bco, cin, k, k).transpose(0, 4, 1, 3, 2).reshape(cout // bco, k * bco, k * cin)
    return pl.pallas_call(
        functools.partial(_kernel, ksize=k, rows=rows),
        grid=(n, cout // bco),
        in_specs=[
            pl.BlockSpec((1, cin, h, w), lambda i, c: (i, 0, 0, 0)),
            pl.BlockSpec((None, k * bco, k * cin), lambda i, c: (c, 0, 0)),
            pl.BlockSpec((bco, 1), lambda i, c: (c, 0)),
            pl.BlockSpec((bco, 1), lambda i, c: (c, 0)),
        ],
        out_specs=pl.BlockSpec((1, bco, out_h, out_w), lambda i, c: (i, c, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, cout, out_h, out_w), x.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"), vmem_limit_bytes=vmem * 3 // 4 if vmem >= 48 * 2**20 else None
        ),
    )(x, w2, conv_bias.astype(jnp.float32).reshape(cout, 1), bias.astype(jnp.float32).reshape(cout, 1))
