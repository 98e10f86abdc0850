# 25k_Conv3d_GroupNorm_Mean: y = conv3d_valid_3x3x3(x, W) + conv_bias (NCDHW, 3 -> 24 channels); GroupNorm
# over 8 groups of 3 channels x (D, H, W) (biased variance, eps 1e-5, * gamma + beta); out[n] = mean of
# the result over every non-batch axis.
# Averaging a GroupNorm output needs only per-channel sums: mean over (c, d, h, w) of
# gamma_c * (y - mu_g) * rstd_g + beta_c = mean_c(gamma_c * (mean_c(y) - mu_g) * rstd_g + beta_c), where
# mu_g and rstd_g come from the group's sums of y and y*y. So the Pallas kernel computes the convolution
# and, per (image, channel), f32 sums of y and y*y over the valid positions; a (N, 24)-sized glue step
# finishes the formula.
# The kernel takes one image per grid step, flattened to (Cin, D*H*W) lanes (the wrapper's reshape; the
# input is small), and produces the output positions in chunks of whole depth slices at the full H x W
# extent: the window of input lanes a chunk reads is padded to 8 sublanes, rolled once per (dy, dx) tap,
# and the dz taps are aligned lane slices (multiples of H*W) of the rolled windows. The 27 taps x 8
# (padded) channels form a (216, lanes) im2col block for one (24, 216) MXU matmul. Positions with
# h >= H-2 or w >= W-2 are computed but masked out of the sums.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHUNK_LANES = 2048  # output positions per matmul, at most (whole depth slices)
CIN_PAD = 8  # input channels padded to one f32 sublane tile inside the kernel
GROUPS = 8
EPS = 1e-5


def _kernel(x_ref, w_ref, b_ref, s1_ref, s2_ref, *, dims, slices):
    _, d, h, w = dims
    ks = 3
    hw = h * w
    out_d = d - ks + 1
    lanes = slices * hw
    span = x_ref.shape[2] - (out_d - slices) * hw  # lanes a chunk reads: lanes + 2 slices + pad
    cin = x_ref.shape[1]
    pos = jax.lax.broadcasted_iota(jnp.int32, (1, lanes), 1)
    valid = (((pos // w) % h) < h - ks + 1) & ((pos % w) < w - ks + 1)

    def chunk(c, stats):
        start = pl.multiple_of(c * lanes, 128)
        window = x_ref[0, :, pl.ds(start, span)].astype(jnp.float32)
        window = jnp.concatenate([window, jnp.zeros((CIN_PAD - cin, span), jnp.float32)], axis=0)
        taps = []
        for dy in range(ks):
            for dx in range(ks):
                s = dy * w + dx
                rolled = pltpu.roll(window, span - s, 1) if s else window  # [:, p] <- [:, p + s]
                taps.extend(rolled[:, dz * hw : dz * hw + lanes] for dz in range(ks))
        patches = jnp.concatenate(taps, axis=0).astype(x_ref.dtype)  # (27 * 8, lanes)
        y = jnp.dot(w_ref[...], patches, preferred_element_type=jnp.float32) + b_ref[...]
        y = jnp.where(valid, y, 0.0)
        return stats[0] + jnp.sum(y, axis=1, keepdims=True), stats[1] + jnp.sum(y * y, axis=1, keepdims=True)

    zero = jnp.zeros((w_ref.shape[0], 1), jnp.float32)
    s1, s2 = jax.lax.fori_loop(0, out_d // slices, chunk, (zero, zero))
    s1_ref[0] = s1
    s2_ref[0] = s2


def workload(x, weight, conv_bias, gamma, beta):
    n, cin, d, h, w = x.shape
    cout, k = weight.shape[0], weight.shape[2]
    hw = h * w
    out_d, out_h, out_w = d - k + 1, h - k + 1, w - k + 1
    # Whole depth slices per chunk: the largest divisor of out_d that keeps a chunk within CHUNK_LANES.
    slices = max(s for s in range(1, out_d + 1) if out_d % s == 0 and (s == 1 or s * hw <= CHUNK_LANES))
    span = slices * hw + (k - 1) * hw + 128  # 128 >= (k-1) * (W + 1): the in-slice tap offsets
    flat = x.reshape(n, cin, d * hw)
    flat = jnp.pad(flat, ((0, 0), (0, 0), (0, (out_d - slices) * hw + span - d * hw)))
    # Weights (co, ci, dz, dy, dx) -> columns (dy, dx, dz, ci padded to 8), the order of the taps.
    w2 = jnp.pad(weight, ((0, 0), (0, CIN_PAD - cin), (0, 0), (0, 0), (0, 0)))
    w2 = w2.transpose(0, 3, 4, 2, 1).reshape(cout, k * k * k * CIN_PAD)
    s1, s2 = pl.pallas_call(
        functools.partial(_kernel, dims=(cin, d, h, w), slices=slices),
        grid=(n,),
        in_specs=[
            pl.BlockSpec((1, cin, flat.shape[2]), lambda i: (i, 0, 0)),
            pl.BlockSpec((cout, w2.shape[1]), lambda i: (0, 0)),
            pl.BlockSpec((cout, 1), lambda i: (0, 0)),
        ],
        out_specs=[pl.BlockSpec((1, cout, 1), lambda i: (i, 0, 0))] * 2,
        out_shape=[jax.ShapeDtypeStruct((n, cout, 1), jnp.float32)] * 2,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(flat, w2, conv_bias.astype(jnp.float32).reshape(cout, 1))
    # Glue on (N, Cout) sums: group statistics, then the mean of the normalised output.
    count = out_d * out_h * out_w
    mean_c = s1[:, :, 0] / count  # (N, C)
    g = cout // GROUPS
    mu_g = s1[:, :, 0].reshape(n, GROUPS, g).sum(-1) / (g * count)  # (N, G)
    var_g = jnp.maximum(s2[:, :, 0].reshape(n, GROUPS, g).sum(-1) / (g * count) - mu_g * mu_g, 0.0)
    rstd_g = jax.lax.rsqrt(var_g + EPS)
    normed = (mean_c - jnp.repeat(mu_g, g, axis=1)) * jnp.repeat(rstd_g, g, axis=1)
    out = jnp.mean(normed * gamma.astype(jnp.float32) + beta.astype(jnp.float32), axis=1)
    return out.astype(x.dtype)
