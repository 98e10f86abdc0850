"""Loads through ref.reshape / ref.bitcast views in TPU interpret mode (jaxbench_mcp.internals.interpret).

Each kernel runs through targets.interpret_on_cpu, as the worker runs candidates, and is compared
with the same computation done on a value inside a kernel: the bitcast cases pin our ref semantics
to jax's own value-level pltpu.bitcast, which the interpreter already runs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxbench_mcp.catalog.targets import interpret_on_cpu, interpreted_on_cpu
from jaxbench_mcp.internals import interpret as interpret_transforms


def _params():
    return pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True, random_seed=0)


def _run(kernel, x, out_shape, out_dtype):
    def call(x):  # built while tracing, inside force_tpu_interpret_mode, as a candidate's workload is
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype))(x)

    return np.asarray(interpret_on_cpu(call, [x], (), "v6e", _params()))


def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"uint{a.dtype.itemsize * 8}"))


def test_load_through_reshape_matches_value_reshape():
    x = jnp.arange(2 * 4 * 8 * 128, dtype=jnp.float32).reshape(2, 4, 8, 128)

    def through_ref(x_ref, o_ref):
        o_ref[...] = x_ref.at[1].reshape(32, 128)[3::4, :]

    def on_value(x_ref, o_ref):
        o_ref[...] = x_ref[1].reshape(32, 128)[3::4, :]

    got = _run(through_ref, x, (8, 128), jnp.float32)
    np.testing.assert_array_equal(got, _run(on_value, x, (8, 128), jnp.float32))
    np.testing.assert_array_equal(got, np.asarray(x)[1].reshape(32, 128)[3::4])


@pytest.mark.parametrize("rows", [slice(None), slice(1, None, 4)], ids=["all_rows", "strided_rows"])
def test_bitcast_bf16_to_u32_matches_value_bitcast(rows):
    # The ragged paged attention pattern: reshape a bf16 buffer, view it as uint32, load strided rows.
    x = jax.random.normal(jax.random.key(0), (2, 4, 8, 128), jnp.float32).astype(jnp.bfloat16)
    n = len(range(16)[rows])

    def through_ref(x_ref, o_ref):
        o_ref[...] = x_ref.at[1].reshape(32, 128).bitcast(jnp.uint32)[rows, :]

    def on_value(x_ref, o_ref):
        o_ref[...] = pltpu.bitcast(x_ref[1].reshape(32, 128), jnp.uint32)[rows, :]

    got = _run(through_ref, x, (n, 128), jnp.uint32)
    np.testing.assert_array_equal(got, _run(on_value, x, (n, 128), jnp.uint32))
    # Row 2r sits in the low half of word r (the 7p kernel splits K and V this way).
    plain = np.asarray(x)[1].reshape(32, 128)
    np.testing.assert_array_equal(got & 0xFFFF, _bits(plain[0::2])[rows])
    np.testing.assert_array_equal(got >> 16, _bits(plain[1::2])[rows])


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["unpack_u32_to_bf16", "same_width"])
def test_bitcast_from_u32_matches_value_bitcast(dtype):
    halves = jax.random.normal(jax.random.key(1), (32, 128), jnp.float32).astype(jnp.bfloat16)
    x = jnp.asarray(interpret_transforms.bitcast_rows(np.asarray(halves), np.dtype(np.uint32)))  # (16, 128)
    rows = 16 * 4 // jnp.dtype(dtype).itemsize

    def through_ref(x_ref, o_ref):
        o_ref[...] = x_ref.bitcast(dtype)[...]

    def on_value(x_ref, o_ref):
        o_ref[...] = pltpu.bitcast(x_ref[...], dtype)

    got = _run(through_ref, x, (rows, 128), dtype)
    np.testing.assert_array_equal(_bits(got), _bits(_run(on_value, x, (rows, 128), dtype)))
    if dtype == jnp.bfloat16:
        np.testing.assert_array_equal(_bits(got), _bits(halves))


def test_masked_store_into_a_tall_buffer():
    # jax 0.12 alone rejects this in-bounds store as "Out-of-bounds masked swap" (rows >= 128 masked in).
    x = jnp.arange(256 * 128, dtype=jnp.float32).reshape(256, 128)

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.full(o_ref.shape, -1.0, jnp.float32)
        rows = jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 0)
        pltpu.store(o_ref, x_ref[...], mask=(rows >= 100) & (rows < 200))

    got = _run(kernel, x, (256, 128), jnp.float32)
    want = np.full((256, 128), -1.0, np.float32)
    want[100:200] = np.asarray(x)[100:200]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("masked_rows, in_bounds", [(56, True), (57, False)])
def test_a_masked_store_past_the_buffer_is_still_refused(masked_rows, in_bounds):
    # A 128-row window starting at row 200 of a 256-row buffer: only its first 56 rows exist.
    x = jnp.ones((128, 128), jnp.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)
        rows = jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 0)
        start = x_ref[0, 0].astype(jnp.int32) + 199  # 200, known only at run time (a static one fails to trace)
        pltpu.store(o_ref.at[pl.ds(start, 128)], x_ref[...], mask=rows < masked_rows)

    if in_bounds:
        got = _run(kernel, x, (256, 128), jnp.float32)
        np.testing.assert_array_equal(got[200:], 1.0)
        np.testing.assert_array_equal(got[:200], 0.0)
    else:
        with pytest.raises(Exception, match="[Oo]ut-of-bounds"):
            _run(kernel, x, (256, 128), jnp.float32)


def test_store_through_reshape_is_refused_clearly():
    x = jnp.ones((8, 128), jnp.float32)

    def store_through_view(x_ref, o_ref):
        o_ref.reshape(16, 64)[...] = x_ref[...].reshape(16, 64)

    with pytest.raises(Exception, match="supports ref.reshape/ref.bitcast views for loads only"):
        _run(store_through_view, x, (8, 128), jnp.float32)


def test_install_is_idempotent():
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc, utils as interpret_utils

    interpret_transforms.install()
    get, to_range = ipc.get, interpret_utils.to_range
    interpret_transforms.install()
    assert (ipc.get, interpret_utils.to_range) == (get, to_range)


def test_unknown_view_transform_is_refused():
    from jax._src.state.types import ReshapeTransform, TransposeTransform

    with pytest.raises(NotImplementedError, match="TransposeTransform"):
        interpret_transforms.apply_view(np.zeros((4, 8)), [ReshapeTransform((8, 4)), TransposeTransform((1, 0))])


# ---- canaries: the jax bugs the patches work around are still there, and a changed jax is refused whole ----

_UNPATCHED = r"""
import sys
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

def run(kernel, x, out_shape):
    params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True, random_seed=0)
    with pltpu.force_tpu_interpret_mode(params):
        call = lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(out_shape, x.dtype))(x)
        return jax.block_until_ready(jax.jit(call)(x))

def reshape_load(x_ref, o_ref):
    o_ref[...] = x_ref.reshape(8, 128)[...]

def masked_store(x_ref, o_ref):
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
    rows = jax.lax.broadcasted_iota(jnp.int32, o_ref.shape, 0)
    pltpu.store(o_ref, x_ref[...], mask=(rows >= 100) & (rows < 200))

case = sys.argv[1]
try:
    if case == "reshape":
        run(reshape_load, jnp.ones((16, 64), jnp.float32), (8, 128))
    else:
        run(masked_store, jnp.ones((256, 128), jnp.float32), (256, 128))
except Exception as exc:
    print("FAILED", type(exc).__name__, str(exc)[:2000].replace("\n", " "))
else:
    print("WORKED")
"""


@pytest.mark.parametrize(
    "case, symptom", [("reshape", "has no attribute 'indices'"), ("masked", "Out-of-bounds masked swap")]
)
def test_plain_jax_still_has_the_bug_each_patch_works_around(case, symptom):
    """Runs jax's interpreter unpatched, in a fresh process. When this fails, jax fixed the bug upstream: drop the
    matching part of jaxbench_mcp.internals.interpret."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _UNPATCHED, case],
        capture_output=True,
        text=True,
        timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.startswith("FAILED") and symptom in out.stdout, (
        f"jax {jax.__version__} no longer shows {symptom!r} for the {case} case "
        f"(got {out.stdout[:300]!r}{out.stderr[-300:]!r}): upstream fixed it; update jaxbench_mcp.internals.interpret"
    )


def test_one_compile_runs_each_time_in_the_parallel_grid_order_its_seed_draws(monkeypatch):
    """A check compiles each size once (interpreted_on_cpu) and every run still visits the 'parallel' grid axes in
    an order of its own, drawn while it runs; an 'arbitrary' axis runs in order."""
    steps = 8

    def visits(semantics):
        def kernel(o_ref, seen_ref):  # each grid point writes how many points ran before it
            before = jnp.where(jnp.isnan(seen_ref[...]), 0.0, seen_ref[...])  # the scratch starts as NaN
            o_ref[...] = before
            seen_ref[...] = before + 1.0

        return pl.pallas_call(
            kernel,
            grid=(steps,),
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((8 * steps, 128), jnp.float32),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=(semantics,)),
        )()

    params = pltpu.InterpretParams(uninitialized_memory="nan")
    x = [jnp.zeros(())]
    parallel = interpreted_on_cpu(lambda _: visits("parallel"), x, (), "v6e", params)
    orders = [tuple(np.asarray(parallel(x, seed))[::8, 0].astype(int)) for seed in (11, 12, 11)]
    assert sorted(orders[0]) == list(range(steps))
    assert orders[0] == orders[2] != orders[1]  # 8! orders: two seeds meet with odds 1 in 40,320
    arbitrary = interpreted_on_cpu(lambda _: visits("arbitrary"), x, (), "v6e", params)
    assert tuple(np.asarray(arbitrary(x, 11))[::8, 0].astype(int)) == tuple(range(steps))
    # The hook is private to jax: a changed signature is refused, as the other patches' are.
    monkeypatch.setattr(interpret_transforms.ipc, "_get_randomized_grid_coordinates", lambda grid, params, seed: ())
    with pytest.raises(RuntimeError, match="draws grid orders with"):
        interpret_transforms._check_grid_order_hooks()
    monkeypatch.delattr(interpret_transforms.ipc, "_get_parallel_dim_semantics")
    with pytest.raises(RuntimeError, match="no longer has _get_parallel_dim_semantics"):
        interpret_transforms._check_grid_order_hooks()


def test_a_changed_interpreter_is_refused_before_anything_is_patched(monkeypatch):
    """All or nothing: when one private signature no longer matches, install() raises and patches nothing."""
    import subprocess
    import sys

    script = r"""
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc, utils, shared_memory as sm
from jaxbench_mcp.internals import interpret
get, to_range, swap = ipc.get, utils.to_range, sm.GenericSharedMemory.swap_buffer_content
def swap_with_another_signature(
    self, key, rnge, value, mask, thread, increment_clock=True, logging_info=None, extra=None
):
    pass
sm.GenericSharedMemory.swap_buffer_content = swap_with_another_signature
try:
    interpret.install()
except RuntimeError as exc:
    print("REFUSED", exc)
print("UNTOUCHED", ipc.get is get and utils.to_range is to_range)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert "REFUSED jax's interpreter swap_buffer_content takes" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "UNTOUCHED True" in out.stdout
