"""The error catalog against real errors: each one is provoked with the installed jax + libtpu
(TPU lowering, deviceless compiles for v5e/v6e, TPU interpret mode on the CPU), then classified."""

import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxbench_mcp.catalog import docs
from jaxbench_mcp.catalog.targets import deviceless_compile, lower_for_tpu
from jaxbench_mcp.checking import error_catalog
from jaxbench_mcp.checking.error_catalog import Diagnosis, classify, classify_exception, diagnosis_for
from jaxbench_mcp.taxonomy import ERROR_CLASSES, ErrorClass, status_of

S = jax.ShapeDtypeStruct


# ---- helpers: run a stage, return the exception it raised ---------------------------------------


def raised(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - we want whatever the stage raises
        return exc
    pytest.fail("expected an error")


def load_source(source: str):
    """What a checker's load stage does: exec the file as a module, then fetch `workload`."""

    def load():
        module = types.ModuleType("candidate")
        exec(compile(source, "candidate.py", "exec"), module.__dict__)
        return module.workload

    return raised(load)


def trace(fn, *specs):
    return raised(lambda: jax.jit(fn).trace(*specs))


def lower(fn, *specs):
    return raised(lambda: lower_for_tpu(fn, list(specs)))


def compile_for(fn, generation, *specs):
    return raised(lambda: deviceless_compile(fn, list(specs), generation))


def interpret(fn, *args, **params):
    def go():
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(**params)):
            np.asarray(jax.jit(fn)(*args))

    try:
        return raised(go)
    finally:
        pltpu.reset_tpu_interpret_mode_state()


def assert_class(stage, exc, expected, rule=None):
    diagnosis = classify_exception(stage, exc)
    text = error_catalog.exception_text(exc)
    assert diagnosis.error_class == expected, (diagnosis, text[:2000])
    if rule is not None:
        assert diagnosis.rule == rule, (diagnosis, text[:2000])
    assert diagnosis.status == status_of(expected)
    assert diagnosis.hint and diagnosis.doc_refs
    return diagnosis


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def blocked(kernel, block, grid, out_shape, index_map=None, **kw):
    index_map = index_map or (lambda *g: g)
    spec = pl.BlockSpec(block, index_map)
    return lambda x: pl.pallas_call(kernel, grid=grid, in_specs=[spec], out_specs=spec, out_shape=out_shape, **kw)(x)


# ---- load ---------------------------------------------------------------------------------------


def test_load_errors():
    assert_class("load", load_source("def workload(x:\n    return x\n"), ErrorClass.SYNTAX_ERROR, "syntax")
    assert_class("load", load_source("def f(x):\n  return x\n    y = 1\n"), ErrorClass.SYNTAX_ERROR)
    assert_class(
        "load", load_source("import jax_pallas_kernels_that_do_not_exist\n"), ErrorClass.IMPORT_ERROR, "import"
    )
    assert_class(
        "load",
        load_source("from jax.experimental.pallas.tpu import TPUCompilerParams\n"),
        ErrorClass.IMPORT_ERROR,
        "import",
    )
    renamed = "from jax.experimental.pallas import tpu as pltpu\nPARAMS = pltpu.TPUCompilerParams()\n"
    assert_class("load", load_source(renamed), ErrorClass.IMPORT_ERROR, "renamed-api-load")
    assert_class("load", load_source("def kernel(x):\n    return x\n"), ErrorClass.MISSING_WORKLOAD, "missing-workload")
    # Any other exception while importing: the load stage's generic class.
    d = assert_class("load", load_source("SCALE = 1 / 0\n"), ErrorClass.IMPORT_ERROR)
    assert d.rule is None


# ---- trace --------------------------------------------------------------------------------------


def _if_kernel(x_ref, o_ref):
    if x_ref[0, 0] > 0:
        o_ref[...] = x_ref[...]
    else:
        o_ref[...] = -x_ref[...]


def _range_kernel(x_ref, o_ref):
    for _ in range(x_ref[0, 0].astype(jnp.int32)):
        o_ref[...] = x_ref[...]


def test_traced_control_flow():
    x = S((8, 128), jnp.float32)
    for kernel in (_if_kernel, _range_kernel):

        def fn(a, k=kernel):
            return pl.pallas_call(k, out_shape=S(a.shape, a.dtype))(a)

        assert_class("trace", trace(fn, x), ErrorClass.TRACED_CONTROL_FLOW, "traced-control-flow")
        assert_class("lower", lower(fn, x), ErrorClass.TRACED_CONTROL_FLOW, "traced-control-flow")


def test_shape_and_dtype_errors_at_trace_time():
    x = S((8, 128), jnp.float32)

    def sum_kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(x_ref[...], axis=0)  # (128,) into an (8, 128) ref

    def fn(a):
        return pl.pallas_call(sum_kernel, out_shape=S(a.shape, a.dtype))(a)

    assert_class("trace", trace(fn, x), ErrorClass.TRACE_ERROR, "store-shape")

    def fn(a):
        return pl.pallas_call(copy_kernel, out_shape=S(a.shape, jnp.bfloat16))(a)

    assert_class("trace", trace(fn, x), ErrorClass.TRACE_ERROR, "store-dtype")

    def bad_rank(a):
        return pl.pallas_call(
            copy_kernel,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=S(a.shape, a.dtype),
        )(a)

    assert_class("trace", trace(bad_rank, S((16, 128), jnp.float32)), ErrorClass.TRACE_ERROR, "index-map-arity")

    def bad_args(a):
        return pl.pallas_call(
            copy_kernel,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=S(a.shape, a.dtype),
        )(a)

    assert_class("trace", trace(bad_args, S((16, 128), jnp.float32)), ErrorClass.TRACE_ERROR, "index-map-arity")

    def two_specs(a):
        return pl.pallas_call(
            copy_kernel,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))] * 2,
            out_shape=S(a.shape, a.dtype),
        )(a)

    assert_class("trace", trace(two_specs, S((16, 128), jnp.float32)), ErrorClass.TRACE_ERROR, "spec-pytree")

    const = jnp.ones((8, 128), jnp.float32)

    def closure_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + const

    def fn(a):
        return pl.pallas_call(closure_kernel, out_shape=S(a.shape, a.dtype))(a)

    assert_class("trace", trace(fn, x), ErrorClass.TRACE_ERROR, "captured-constants")

    # A plain jnp shape error in the wrapper: no specific entry, the trace stage's generic class.
    d = assert_class("trace", trace(lambda a: a @ a, x), ErrorClass.TRACE_ERROR)
    assert d.rule is None


def test_static_out_of_bounds_slice():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(8, 16), :]

    def fn(a):
        return pl.pallas_call(kernel, out_shape=S((16, 128), a.dtype))(a)

    assert_class("trace", trace(fn, S((16, 128), jnp.float32)), ErrorClass.OUT_OF_BOUNDS, "static-out-of-bounds")


# ---- lower --------------------------------------------------------------------------------------


def test_block_shape_not_tiled():
    fn = blocked(copy_kernel, (100, 100), (10, 10), S((1000, 1000), jnp.float32))
    exc = lower(fn, S((1000, 1000), jnp.float32))
    assert "divisible by 8 and 128" in str(exc)
    assert_class("lower", exc, ErrorClass.BLOCK_SHAPE_TILING, "block-8-128")
    assert_class("compile", exc, ErrorClass.BLOCK_SHAPE_TILING, "block-8-128")


def test_blocked_any_memory_space():
    def fn(a):
        return pl.pallas_call(
            copy_kernel,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0), memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=S(a.shape, a.dtype),
        )(a)

    assert_class("lower", lower(fn, S((16, 128), jnp.float32)), ErrorClass.BLOCK_SHAPE_TILING, "block-8-128")


@pytest.mark.parametrize(
    "name,body",
    [
        ("sort", lambda x: jnp.sort(x, axis=1)),
        ("cumsum", lambda x: jnp.cumsum(x, axis=1)),
        ("gelu_exact", lambda x: jax.nn.gelu(x, approximate=False)),
        ("float_iota", lambda x: x + jax.lax.broadcasted_iota(jnp.float32, x.shape, 1)),
    ],
)
def test_unsupported_ops(name, body):
    def kernel(x_ref, o_ref):
        o_ref[...] = body(x_ref[...])

    def fn(a):
        return pl.pallas_call(kernel, out_shape=S(a.shape, a.dtype))(a)

    exc = lower(fn, S((8, 128), jnp.float32))
    assert_class("lower", exc, ErrorClass.UNSUPPORTED_OP, "unsupported-op")


@pytest.mark.slow
def test_int8_arithmetic_fails_at_compile():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def fn(a):
        return pl.pallas_call(kernel, out_shape=S(a.shape, a.dtype))(a)

    exc = compile_for(fn, "v6e", S((32, 128), jnp.int8))
    assert "Mosaic failed to compile" in str(exc)
    assert_class("compile", exc, ErrorClass.UNSUPPORTED_OP, "unsupported-op")


def test_triple_buffering_at_top_level():
    def fn(a):
        return pl.pallas_call(
            copy_kernel,
            grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(3))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
            out_shape=S(a.shape, a.dtype),
        )(a)

    exc = compile_for(fn, "v6e", S((256, 128), jnp.float32))
    assert_class("compile", exc, ErrorClass.LOWERING_OTHER, "buffer-count")


def test_chip_query_on_a_cpu_host():
    def outer(x_hbm, o_hbm):
        pltpu.emit_pipeline(
            copy_kernel,
            grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
            out_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
        )(x_hbm, o_hbm)

    def fn(a):
        return pl.pallas_call(
            outer,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            out_shape=S(a.shape, a.dtype),
        )(a)

    exc = lower(fn, S((256, 128), jnp.float32))
    assert_class("lower", exc, ErrorClass.LOWERING_OTHER, "no-tpu-device-kind")


# ---- compile ------------------------------------------------------------------------------------


def _copy_blocks(rows, cols, grid, **compiler):
    params = pltpu.CompilerParams(**compiler) if compiler else None
    return blocked(
        copy_kernel,
        (rows, cols),
        (grid, 1),
        S((rows * grid, cols), jnp.float32),
        index_map=lambda i, j: (i, j),
        compiler_params=params,
    )


@pytest.mark.parametrize(
    "generation,rows,cols,compiler",
    [
        ("v6e", 4096, 8192, {}),  # a window larger than all of VMEM
        ("v6e", 2048, 4096, {}),  # "Ran out of memory in memory space vmem"
        ("v5e", 2048, 2048, {}),  # over the default scoped limit
        ("v6e", 2048, 2048, {"vmem_limit_bytes": 8 << 20}),  # over an explicit limit
    ],
)
@pytest.mark.slow
def test_vmem_overflow(generation, rows, cols, compiler):
    fn = _copy_blocks(rows, cols, 2, **compiler)
    exc = compile_for(fn, generation, S((2 * rows, cols), jnp.float32))
    assert "vmem" in str(exc).lower()
    assert_class("compile", exc, ErrorClass.VMEM_OVERFLOW, "vmem")


def test_vmem_message_from_the_design_note():
    d = classify("compile", "Ran out of memory in memory space vmem. Used 291.84M of 127.94M vmem")
    assert d.error_class == ErrorClass.VMEM_OVERFLOW


def test_smem_overflow():
    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * s_ref[0, 0].astype(jnp.float32)

    def fn(s, x):
        return pl.pallas_call(
            kernel,
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_shape=S(x.shape, x.dtype),
        )(s, x)

    exc = compile_for(fn, "v6e", S((4096, 2), jnp.int32), S((8, 128), jnp.float32))
    d = assert_class("compile", exc, ErrorClass.COMPILE_OTHER, "smem")
    assert "memory-spaces#smem" in d.doc_refs


def test_core_parallel_axis_too_long():
    fn = blocked(
        copy_kernel,
        (64, 128),
        (4,),
        S((256, 128), jnp.float32),
        index_map=lambda i: (i, 0),
        compiler_params=pltpu.CompilerParams(dimension_semantics=(pltpu.CORE_PARALLEL,)),
    )
    exc = compile_for(fn, "v5e", S((256, 128), jnp.float32))
    assert_class("compile", exc, ErrorClass.COMPILE_OTHER, "core-parallel")


# ---- run (TPU interpret mode) -------------------------------------------------------------------


@pytest.mark.slow
def test_out_of_bounds_block_index():
    fn = blocked(copy_kernel, (8, 128), (2,), S((16, 128), jnp.float32), index_map=lambda i: (i + 1, 0))
    exc = interpret(fn, jnp.ones((16, 128), jnp.float32))
    assert_class("run", exc, ErrorClass.OUT_OF_BOUNDS, "out-of-bounds")


@pytest.mark.slow
def test_out_of_bounds_dynamic_read():
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[pl.ds(i * 8 + 8, 8), :]

    def fn(a):
        return pl.pallas_call(
            kernel,
            grid=(2,),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=S((16, 128), a.dtype),
        )(a)

    exc = interpret(fn, jnp.ones((16, 128), jnp.float32))
    assert_class("run", exc, ErrorClass.OUT_OF_BOUNDS, "out-of-bounds")


@pytest.mark.slow
def test_race_reading_a_dma_target_before_wait():
    def kernel(x_hbm, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_hbm, buf, sem)
        copy.start()
        o_ref[...] = buf[...]
        copy.wait()

    def fn(a):
        return pl.pallas_call(
            kernel,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_shape=S(a.shape, a.dtype),
            scratch_shapes=[pltpu.VMEM(a.shape, a.dtype), pltpu.SemaphoreType.DMA],
        )(a)

    exc = interpret(fn, jnp.ones((8, 128), jnp.float32), detect_races=True)
    assert_class("run", exc, ErrorClass.RACE_DETECTED, "race")


@pytest.mark.slow
def test_race_between_cores_on_a_wrongly_parallel_axis():
    def fn(a):
        return pl.pallas_call(
            copy_kernel,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            out_shape=S((8, 128), a.dtype),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(a)

    exc = interpret(fn, jnp.ones((16, 128), jnp.float32), detect_races=True, num_cores_or_threads=2)
    assert_class("run", exc, ErrorClass.RACE_DETECTED, "race")


def test_other_runtime_error_falls_back():
    """An exception raised while the program runs (here inside a host callback) with no specific entry."""

    def host(x):
        raise ValueError("the host side failed")

    def fn(a):
        return jax.pure_callback(host, S(a.shape, a.dtype), a)

    exc = raised(lambda: np.asarray(jax.jit(fn)(jnp.ones((8, 128), jnp.float32))))
    d = assert_class("run", exc, ErrorClass.RUNTIME_EXCEPTION)
    assert d.rule is None


@pytest.mark.slow
def test_missing_init_shows_as_nan_in_interpret_mode():
    """nan_output is decided by the comparison; check the mechanism the docs describe is real."""

    def kernel(x_ref, o_ref, acc_ref):
        acc_ref[...] += x_ref[...]  # no init under pl.when
        o_ref[...] = acc_ref[...]

    def fn(a):
        return pl.pallas_call(kernel, out_shape=S(a.shape, a.dtype), scratch_shapes=[pltpu.VMEM(a.shape, jnp.float32)])(
            a
        )

    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(uninitialized_memory="nan")):
        out = np.asarray(jax.jit(fn)(jnp.ones((8, 128), jnp.float32)))
    assert np.isnan(out).all()
    d = diagnosis_for(ErrorClass.NAN_OUTPUT)
    assert "accumulation#init-under-when" in d.doc_refs


# ---- the catalog itself -------------------------------------------------------------------------


def test_every_error_class_has_a_hint_and_existing_doc_refs():
    for cls in ErrorClass:
        d = diagnosis_for(cls)
        assert isinstance(d, Diagnosis) and d.error_class == cls and d.status == status_of(cls)
        assert d.hint and len(d.hint) < 200, cls
        assert d.doc_refs, cls
        for ref in d.doc_refs:
            assert docs.section_exists(ref), (cls, ref)
        # Each class has its own section in the errors topic.
        assert docs.section_exists("errors#" + cls.value.replace("_", "-")), cls
    assert diagnosis_for("wrong_values").error_class == ErrorClass.WRONG_VALUES


def test_every_catalog_entry_is_well_formed():
    ids = [e.id for e in error_catalog.CATALOG]
    assert len(ids) == len(set(ids))
    for entry in error_catalog.CATALOG:
        assert entry.stages and entry.stages <= set(error_catalog.STAGES)
        assert entry.hint and len(entry.hint) < 200
        assert entry.doc_refs
        for ref in entry.doc_refs:
            assert docs.section_exists(ref), (entry.id, ref)
        assert entry.error_class in ERROR_CLASSES


def test_fallbacks_and_stage_validation():
    for stage, cls in error_catalog.FALLBACK.items():
        d = classify(stage, "something nobody has seen before")
        assert d.error_class == cls and d.rule is None
        assert classify(stage, "").error_class == cls
    with pytest.raises(ValueError):
        classify("compare", "x")


def test_stage_scoping():
    # The same words mean different things at different stages: a race report is only a run error,
    # and "divisible by 8 and 128" is not a load error.
    assert classify("load", "divisible by 8 and 128").error_class == ErrorClass.IMPORT_ERROR
    assert classify("compile", "RACE DETECTED").error_class == ErrorClass.COMPILE_OTHER


def test_render_is_one_line_with_refs():
    d = classify("compile", "Ran out of memory in memory space vmem")
    line = d.summary()
    assert "\n" not in line and "errors#vmem-overflow" in line


# ---- a reduction axis marked "parallel" vs a missing accumulator init --------------------------


def _kernel_desc(semantics, grid=(4, 4, 8), num_scratch=1):
    from jaxbench_mcp.models import KernelDescription

    return KernelDescription(
        name="k",
        grid=list(grid),
        block_shapes=[],
        dimension_semantics=list(semantics),
        num_scalar_prefetch=0,
        num_scratch=num_scratch,
    )


def test_parallel_reduction_axis_is_told_apart_from_a_missing_init():
    """tests/kernels/bad_parallel_reduction.py (K axis "parallel") and bad_missing_acc_init.py (no init, K
    "arbitrary"): interpret mode shuffles parallel axes, so the first shows wrong values or NaN, the second NaN;
    only the grid semantics say which fix applies."""
    parallel_k = [_kernel_desc(("parallel", "parallel", "parallel"))]
    arbitrary_k = [_kernel_desc(("parallel", "parallel", "arbitrary"))]
    for cls in (ErrorClass.WRONG_VALUES, ErrorClass.NAN_OUTPUT):
        d = error_catalog.refine_for_kernels(diagnosis_for(cls), parallel_k)
        assert d.error_class == cls and d.rule == "parallel-reduction"
        assert "dimension-semantics#parallel-arbitrary" in d.doc_refs and "arbitrary" in d.hint
        for ref in d.doc_refs:
            assert docs.section_exists(ref), ref
    missing_init = error_catalog.refine_for_kernels(diagnosis_for(ErrorClass.NAN_OUTPUT), arbitrary_k)
    assert missing_init.rule is None and "accumulation#init-under-when" in missing_init.doc_refs
    assert "dimension-semantics#parallel-arbitrary" not in missing_init.doc_refs


def test_parallel_refinement_leaves_other_cases_alone():
    parallel_k = [_kernel_desc(("parallel", "parallel", "parallel"))]
    # No scratch accumulator (an elementwise kernel), or a single step on the last axis: nothing to say.
    for kernels in (
        [_kernel_desc(("parallel", "parallel"), grid=(4, 8), num_scratch=0)],
        [_kernel_desc(("parallel", "parallel"), grid=(4, 1))],
        [],
    ):
        d = error_catalog.refine_for_kernels(diagnosis_for(ErrorClass.WRONG_VALUES), kernels)
        assert d.rule is None
    # Errors that are not a comparison of values keep their own diagnosis.
    d = error_catalog.refine_for_kernels(classify("compile", "Ran out of memory in memory space vmem"), parallel_k)
    assert d.error_class == ErrorClass.VMEM_OVERFLOW


def test_an_uncaught_exception_is_named_with_the_line_that_raised_it():
    """A worker that exited on an exception: the message names it and its line, and says when that line is the
    checker's own (what 14p's expert once hit: a literal reached a set in the VMEM analysis)."""
    from jaxbench_mcp.checking.diagnosis import uncaught_exception

    ours = (
        "E0000 libtpu noise\nTraceback (most recent call last):\n"
        '  File "/app/jaxbench_mcp/sandbox/worker.py", line 635, in <module>\n    main()\n'
        '  File "/app/jaxbench_mcp/analysis/kernels.py", line 242, in <genexpr>\n'
        "    passed = frozenset(b for b, v in operands if v in from_refs)\n"
        "TypeError: unhashable type: 'Literal'\n"
    )
    said = uncaught_exception(ours)
    assert said.startswith("TypeError: unhashable type: 'Literal' (raised in jaxbench_mcp/analysis/kernels.py line 242")
    assert "the checker's own code" in said
    theirs = ours.replace("/app/jaxbench_mcp/analysis/kernels.py", "/job/candidate.py")
    said = uncaught_exception(theirs)
    assert said == "TypeError: unhashable type: 'Literal' (raised in candidate.py line 242, in <genexpr>)"
    assert uncaught_exception("Killed\n") == ""
