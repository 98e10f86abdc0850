# expect: workload=18k_Conv2D_ReLU_BiasAdd status=correct
# 3x3 conv as one im2col matmul per row chunk inside the kernel (lane rolls of the flat image), fused bias+ReLU+bias.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK_LANES = 2048  # output positions (rows * width) per matmul


def _rows_per_chunk(out_h, width):
    best = out_h
    for r in range(1, out_h):
        if out_h % r == 0 and (r * width) % 128 == 0 and r * width <= CHUNK_LANES:
            best = r
    return best


def _kernel(x_ref, w_ref, cb_ref, b_ref, o_ref, *, ksize, width, rows):
    out_h = o_ref.shape[2] // width
    n_chunks = out_h // rows
    span = (rows + ksize - 1) * width  # input positions a chunk reads
    lanes = rows * width

    def chunk(c, carry):
        start = pl.multiple_of(c * lanes, 128) if n_chunks > 1 else 0
        window = x_ref[0, :, pl.ds(start, span)].astype(jnp.float32)
        taps = []
        for kh in range(ksize):
            for kw in range(ksize):
                shift = kh * width + kw
                shifted = pltpu.roll(window, (span - shift) % span, 1) if shift else window
                taps.append(shifted[:, :lanes].astype(x_ref.dtype))
        patches = jnp.concatenate(taps, axis=0)  # (k*k*cin, lanes)
        y = jnp.dot(w_ref[...], patches, preferred_element_type=jnp.float32)
        y = jnp.maximum(y + cb_ref[...].astype(jnp.float32), 0.0) + b_ref[...].astype(jnp.float32)
        o_ref[0, :, pl.ds(start, lanes)] = y.astype(o_ref.dtype)
        return carry

    jax.lax.fori_loop(0, n_chunks, chunk, 0)


def workload(x, weight, conv_bias, bias):
    n, cin, h, w = x.shape
    cout, _, k, _ = weight.shape
    out_h, out_w = h - k + 1, w - k + 1
    rows = _rows_per_chunk(out_h, w)
    # Weights as (cout, kh, kw, cin) -> (cout, k*k*cin), matching the order of the taps in the kernel.
    w2 = weight.transpose(0, 2, 3, 1).reshape(cout, k * k * cin)
    wide = pl.pallas_call(
        functools.partial(_kernel, ksize=k, width=w, rows=rows),
        grid=(n,),
        in_specs=[
            pl.BlockSpec((1, cin, h * w), lambda i: (i, 0, 0)),
            pl.BlockSpec((cout, k * k * cin), lambda i: (0, 0)),
            pl.BlockSpec((cout, 1), lambda i: (0, 0)),
            pl.BlockSpec((cout, 1), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((1, cout, out_h * w), lambda i: (i, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, cout, out_h * w), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x.reshape(n, cin, h * w), w2, conv_bias.reshape(cout, 1), bias.reshape(cout, 1))
    # Each output row was computed at full input width; the last k-1 columns of a row are not outputs.
    return wide.reshape(n, cout, out_h, w)[:, :, :, :out_w]
