# 18k_Conv2D_ReLU_BiasAdd: out = relu(conv2d_valid_3x3(x, W) + conv_bias) + bias, NCHW in and out.
# One grid step per image: the (Cin, H, W) image and the (Cout, H-2, W-2) output block stay in their
# natural NCHW layout (no transposes or slices around the kernel). Output rows are produced in chunks of
# `rows` rows (a static loop): the chunk's rows+2 input rows are flattened to lanes, (Cin, (rows+2)*W),
# and each of the 3x3 taps is that slab shifted by dy*W + dx lanes (an aligned slice for dy, a lane roll
# for dx). The nine shifted slabs stacked on sublanes form the (9*Cin, rows*W) im2col block, one
# (Cout, 9*Cin) x (9*Cin, rows*W) MXU matmul; bias, ReLU and bias follow in f32. Each output row was
# computed at the full input width W; its last k-1 columns are not outputs and are dropped by the store.
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK_LANES = 2048  # output positions (rows * W) per matmul


def _kernel(x_ref, w_ref, cb_ref, b_ref, o_ref, *, ksize, rows):
    cin, h, width = x_ref.shape[1:]
    out_h, out_w = o_ref.shape[2:]
    for r0 in range(0, out_h, rows):                     # static chunks; the last may be shorter
        nr = min(rows, out_h - r0)
        lanes = nr * width
        slab = x_ref[0, :, r0:r0 + nr + ksize - 1, :].astype(jnp.float32)
        slab = slab.reshape(cin, (nr + ksize - 1) * width)
        taps = []
        for dy in range(ksize):
            row = slab[:, dy * width: dy * width + lanes]
            for dx in range(ksize):
                shifted = pltpu.roll(row, lanes - dx, 1) if dx else row   # shifted[:, p] = row[:, p + dx]
                taps.append(shifted.astype(x_ref.dtype))
        patches = jnp.concatenate(taps, axis=0)                          # (k*k*cin, lanes)
        y = jnp.dot(w_ref[...], patches, preferred_element_type=jnp.float32)
        y = jnp.maximum(y + cb_ref[...], 0.0) + b_ref[...]
        y = y.reshape(y.shape[0], nr, width)[:, :, :out_w]
        o_ref[0, :, r0:r0 + nr, :] = y.astype(o_ref.dtype)


def workload(x, weight, conv_bias, bias):
    n, cin, h, w = x.shape
    cout, _, k, _ = weight.shape
    out_h, out_w = h - k + 1, w - k + 1
    rows = max(1, min(out_h, CHUNK_LANES // w))
    # Weights as (cout, kh, kw, cin) -> (cout, k*k*cin), in the order of the taps in the kernel.
    w2 = weight.transpose(0, 2, 3, 1).reshape(cout, k * k * cin)
    import functools
    return pl.pallas_call(
        functools.partial(_kernel, ksize=k, rows=rows),
        grid=(n,),
        in_specs=[
            pl.BlockSpec((1, cin, h, w), lambda i: (i, 0, 0, 0)),
            pl.BlockSpec((cout, k * k * cin), lambda i: (0, 0)),
            pl.BlockSpec((cout, 1), lambda i: (0, 0)),
            pl.BlockSpec((cout, 1), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((1, cout, out_h, out_w), lambda i: (i, 0, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, cout, out_h, out_w), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, w2, conv_bias.astype(jnp.float32).reshape(cout, 1), bias.astype(jnp.float32).reshape(cout, 1))
