# 28k_ConvTranspose3d_LayerNorm_GELU_Scaling: y = conv_transpose3d(x, W, stride 2, padding 1, kernel 4) +
# conv_bias; LayerNorm over the last axis (W_out, eps 1e-5, * ln_weight + ln_bias); out = gelu_tanh(.) * 1.
# Sub-pixel decomposition: with stride 2, output index o = 2m + p (p = 0, 1) along each axis receives exactly
# two kernel taps, from padded input positions m + p + a (a = 0, 1) with tap 3 - 2a - p. So every output
# phase (pd, ph, pw) is a dense stride-1 convolution with a 2x2x2 kernel, and no work is spent on the zeros
# the reference inserts (it runs an 8x larger dilated convolution).
# Kernel 1, grid (image, input depth m): the three padded input slices m..m+2 arrive as (Cin, Hp*Wp)
# lane-dense planes through an element-offset (halo) BlockSpec; each plane is rolled once per in-plane
# offset (dh, dw) in {0,1,2}^2, and each of the 8 phases stacks its 8 taps x Cin rows into a (8*Cin,
# positions) block for one (Cout, 8*Cin) MXU matmul. Positions run over (m_h, m_w) at the padded width Wp;
# the last two columns of each row are not outputs. The phases are written phase-major in bf16 (the
# reference rounds the convolution to bf16 too).
# The wrapper interleaves the phases into (N, Cout, D_out, H_out, W_out) (one XLA transpose copy: the
# interleave moves W_out's even and odd outputs between lanes, which a kernel cannot do cheaply).
# Kernel 2 applies the LayerNorm over W_out (a lane reduction per row) and the GELU in f32.
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

EPS = 1e-5
LN_BLOCK_BYTES = 512 * 1024  # bf16 bytes of output per LayerNorm block (VMEM pads W_out = 64 to 128 lanes)


def _conv_kernel(x_ref, w_ref, b_ref, o_ref, *, wp):
    _, _, cin, plane = x_ref.shape
    positions = o_ref.shape[-1]
    # rolled[s][dh][dw] = slice s of the halo shifted left by dh * Wp + dw lanes, cut to `positions`.
    rolled = []
    for s in range(3):
        p = x_ref[0, s].astype(jnp.float32)  # (cin, Hp * Wp)
        rolled.append(
            [
                [
                    (pltpu.roll(p, plane - (dh * wp + dw), 1) if dh or dw else p)[:, :positions].astype(x_ref.dtype)
                    for dw in range(3)
                ]
                for dh in range(3)
            ]
        )
    for pd in range(2):
        for ph in range(2):
            for pw in range(2):
                taps = [rolled[a + pd][b + ph][c + pw] for a in range(2) for b in range(2) for c in range(2)]
                y = jnp.dot(w_ref[pd, ph, pw], jnp.concatenate(taps, axis=0), preferred_element_type=jnp.float32)
                o_ref[pd, ph, pw] = (y + b_ref[...]).astype(o_ref.dtype)


def _ln_gelu_kernel(y_ref, g_ref, b_ref, o_ref):
    shape = y_ref.shape
    y = y_ref[...].astype(jnp.float32).reshape(-1, shape[-1])  # rows x W_out
    yc = y - jnp.mean(y, axis=1, keepdims=True)
    var = jnp.mean(yc * yc, axis=1, keepdims=True)
    z = yc * jax.lax.rsqrt(var + EPS) * g_ref[...] + b_ref[...]
    o_ref[...] = (jax.nn.gelu(z, approximate=True) * 1.0).reshape(shape).astype(o_ref.dtype)


def workload(x, conv_weight, conv_bias, ln_weight, ln_bias):
    n, cin, d, h, w = x.shape
    cout = conv_weight.shape[1]
    hp, wp = h + 2, w + 2
    positions = h * wp  # (m_h, m_w) at the padded width
    xp = jnp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1)))
    xs = xp.transpose(0, 2, 1, 3, 4).reshape(n, d + 2, cin, hp * wp)
    # Per phase (pd, ph, pw): a (Cout, 8 * Cin) matrix, columns (a, b, c, ci) holding W[ci, co, 3-2a-pd, ...].
    idx = jnp.array([[3 - 2 * a - p for a in range(2)] for p in range(2)])  # [phase, a] -> tap
    wt = conv_weight.transpose(1, 2, 3, 4, 0)  # (co, td, th, tw, ci)
    wph = wt[
        :, idx[:, :, None, None, None, None], idx[None, None, :, :, None, None], idx[None, None, None, None, :, :], :
    ]  # (co, pd, a, ph, b, pw, c, ci)
    wph = wph.transpose(1, 3, 5, 0, 2, 4, 6, 7).reshape(2, 2, 2, cout, 8 * cin)
    phases = pl.pallas_call(
        functools.partial(_conv_kernel, wp=wp),
        grid=(n, d),
        in_specs=[
            pl.BlockSpec(
                (pl.Element(1), pl.Element(3), pl.Element(cin), pl.Element(hp * wp)), lambda i, m: (i, m, 0, 0)
            ),
            pl.BlockSpec((2, 2, 2, cout, 8 * cin), lambda i, m: (0, 0, 0, 0, 0)),
            pl.BlockSpec((cout, 1), lambda i, m: (0, 0)),
        ],
        out_specs=pl.BlockSpec((None, None, 2, 2, 2, cout, positions), lambda i, m: (i, m, 0, 0, 0, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, d, 2, 2, 2, cout, positions), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(xs, wph.astype(x.dtype), conv_bias.astype(jnp.float32).reshape(cout, 1))
    # Interleave: (n, m_d, pd, ph, pw, co, m_h, m_w) -> (n, co, 2 m_d + pd, 2 m_h + ph, 2 m_w + pw).
    y = phases.reshape(n, d, 2, 2, 2, cout, h, wp)[..., :w]
    y = y.transpose(0, 5, 1, 2, 6, 3, 7, 4).reshape(n, cout, 2 * d, 2 * h, 2 * w)
    do, ho, wo = 2 * d, 2 * h, 2 * w
    bd = max(b for b in range(1, do + 1) if do % b == 0 and b * cout * ho * wo * 2 <= LN_BLOCK_BYTES)

    def vec(v):
        return v.astype(jnp.float32).reshape(1, wo)

    return pl.pallas_call(
        _ln_gelu_kernel,
        grid=(n, do // bd),
        in_specs=[
            pl.BlockSpec((1, cout, bd, ho, wo), lambda i, j: (i, 0, j, 0, 0)),
            pl.BlockSpec((1, wo), lambda i, j: (0, 0)),
            pl.BlockSpec((1, wo), lambda i, j: (0, 0)),
        ],
        out_specs=pl.BlockSpec((1, cout, bd, ho, wo), lambda i, j: (i, 0, j, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n, cout, do, ho, wo), x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(y, vec(ln_weight), vec(ln_bias))
