# 22k_Conv2d_InstanceNorm_Divide: y = conv2d_valid_3x3(x, W) + conv_bias (NCHW); InstanceNorm over each
# (image, channel) plane (biased variance, eps 1e-5, * in_weight + in_bias); out = y / 2.
# The convolution is 18k's: one grid step per image (and block of output channels), the image and the
# output block in their natural NCHW layout, output rows in chunks of `rows` rows; per chunk the three
# row shifts dy are aligned lane slices of the flattened (Cin, (rows+2)*W) input slab, stacked into a
# (3*Cin, rows*W) block X, one MXU matmul (3*Cout, 3*Cin) x X gives the three column taps, and lane
# rolls by dx add them up. Every output row is computed at the full input width W.
# The whole plane of each channel is in this grid step, so the InstanceNorm is local to it: pass 1
# stores y (minus a per-channel shift, the first chunk's mean, so the bf16 store keeps more of y's
# variation) and accumulates f32 sums of the shifted values and their squares over the valid columns;
# pass 2 rereads the block from VMEM and normalises it in place.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK_LANES = 2048  # output positions (rows * W) per matmul, at most
EPS = 1e-5
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


def _kernel(x_ref, w_ref, cb_ref, iw_ref, ib_ref, o_ref, *, ksize, rows):
    width = x_ref.shape[3]
    bco, out_h, out_w = o_ref.shape[1:]
    valid = (jax.lax.broadcasted_iota(jnp.int32, (1, rows * width), 1) % width) < out_w

    def conv(r0, nr):
        return _conv_rows(x_ref, w_ref, r0, nr, ksize) + cb_ref[...]

    def store(y, r0, nr, shift, stats):
        d = y - shift
        ok = valid[:, : nr * width]
        s1 = stats[0] + jnp.sum(jnp.where(ok, d, 0.0), axis=1, keepdims=True)
        s2 = stats[1] + jnp.sum(jnp.where(ok, d * d, 0.0), axis=1, keepdims=True)
        o_ref[0, :, pl.ds(r0, nr), :] = d.reshape(bco, nr, width)[:, :, :out_w].astype(o_ref.dtype)
        return s1, s2

    first = min(rows, out_h)
    y0 = conv(0, first)
    shift = jnp.sum(jnp.where(valid[:, : first * width], y0, 0.0), axis=1, keepdims=True) / (first * out_w)
    zero = jnp.zeros((bco, 1), jnp.float32)
    stats = store(y0, 0, first, shift, (zero, zero))

    def chunk(c, stats):
        r0 = pl.multiple_of(c * rows, rows)
        return store(conv(r0, rows), r0, rows, shift, stats)

    full = out_h // rows
    stats = jax.lax.fori_loop(1, full, chunk, stats)  # chunk 0 is done; whole chunks, aligned starts
    if out_h > max(full, 1) * rows:  # the remaining rows, one static chunk
        r0 = max(full, 1) * rows
        stats = store(conv(r0, out_h - r0), r0, out_h - r0, shift, stats)

    count = out_h * out_w
    mean_d = stats[0] / count  # mean of y - shift
    var = jnp.maximum(stats[1] / count - mean_d * mean_d, 0.0)
    scale = jax.lax.rsqrt(var + EPS) * iw_ref[...] * 0.5  # the final / 2 folded in
    offset = ib_ref[...] * 0.5 - mean_d * scale
    scale, offset = scale.reshape(bco, 1, 1), offset.reshape(bco, 1, 1)

    def normalise(c, carry):
        r0 = pl.multiple_of(c * rows, rows)
        v = o_ref[0, :, pl.ds(r0, rows), :].astype(jnp.float32)
        o_ref[0, :, pl.ds(r0, rows), :] = (v * scale + offset).astype(o_ref.dtype)
        return carry

    jax.lax.fori_loop(0, full, normalise, 0)
    if out_h > full * rows:
        r0 = full * rows
        v = o_ref[0, :, r0:, :].astype(jnp.float32)
        o_ref[0, :, r0:, :] = (v * scale + offset).astype(o_ref.dtype)


def workload(x, weight, conv_bias, in_weight, in_bias):
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
            pl.BlockSpec((bco, 1), lambda i, c: (c, 0)),
        ],
        out_specs=pl.BlockSpec((1, bco, out_h, out_w), lambda i, c: (i, c, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, cout, out_h, out_w), x.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel"), vmem_limit_bytes=vmem * 3 // 4 if vmem >= 48 * 2**20 else None
        ),
    )(x, w2, *[v.astype(jnp.float32).reshape(cout, 1) for v in (conv_bias, in_weight, in_bias)])
