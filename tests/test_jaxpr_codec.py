"""The recorded-program codec: what the candidate's process writes is rebuilt exactly, and nothing else is.

The judge decodes bytes that hostile code wrote: every payload below is one an attacker could leave in place of
a program, and each must end in CodecError (never in code of the attacker's choosing, never in another
exception).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxbench_mcp.internals import jaxpr_codec

ROOT = Path(__file__).resolve().parents[1]


def _gemm(a, b):
    def kernel(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(1) == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype),
        grid=(a.shape[0] // 128, a.shape[1] // 128),
        in_specs=[pl.BlockSpec((128, 128), lambda i, k: (i, k)), pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
        out_specs=pl.BlockSpec((128, 128), lambda i, k: (i, 0)),
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(a, b)


def _programs():
    f32 = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    bf16 = [jax.ShapeDtypeStruct((256, 256), jnp.bfloat16), jax.ShapeDtypeStruct((256, 128), jnp.bfloat16)]
    table = np.arange(256, dtype=np.float32)  # a constant the program closes over
    key = jax.random.key(7)  # and a key array
    return {
        "elementwise": jax.make_jaxpr(lambda x: jnp.tanh(x) * 2.0 + table)(f32),
        "loop": jax.make_jaxpr(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * i + 1, x))(f32),
        "branch": jax.make_jaxpr(lambda x: jax.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x))(f32),
        "kernel": jax.make_jaxpr(_gemm)(*bf16),
        "random": jax.make_jaxpr(lambda x: x + jax.random.normal(jax.random.fold_in(key, 3), x.shape))(f32),
    }


@pytest.mark.parametrize("name", ["elementwise", "loop", "branch", "kernel", "random"])
def test_a_program_comes_back_as_it_was_recorded(name):
    closed = _programs()[name]
    decoded = jaxpr_codec.decode(jaxpr_codec.encode(closed))
    assert str(decoded) == str(closed)
    args = [np.ones(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars]
    if name != "kernel":  # a kernel runs in interpret mode, where the check stage runs it (test_checking)
        want = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *args)
        got = jax.core.eval_jaxpr(decoded.jaxpr, decoded.consts, *args)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(np.asarray(w), np.asarray(g))


def test_a_kernel_keeps_its_name_so_its_schedule_finds_it():
    from jaxbench_mcp.analysis import kernels

    # jax names a kernel's Mosaic module after its body, and the estimate pairs each compiled schedule with its traced
    # kernel by that name: with every body called "program", two kernels were paired crosswise.
    def two_kernels(a, b):
        def _scale(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2

        scaled = pl.pallas_call(_scale, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype))(a)
        return _gemm(scaled, b)

    bf16 = [jax.ShapeDtypeStruct((256, 256), jnp.bfloat16), jax.ShapeDtypeStruct((256, 128), jnp.bfloat16)]
    closed = jax.make_jaxpr(two_kernels)(*bf16)
    decoded = jaxpr_codec.decode(jaxpr_codec.encode(closed))
    names = [kernels._mosaic_name(e) for e in decoded.jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert names == ["_scale", "kernel"]
    assert names == [kernels._mosaic_name(e) for e in closed.jaxpr.eqns if e.primitive.name == "pallas_call"]


def test_custom_derivative_rules_do_not_travel_only_the_forward_body():
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), tangents[0]))
    closed = jax.make_jaxpr(f)(jnp.ones(4))
    decoded = jaxpr_codec.decode(jaxpr_codec.encode(closed))
    assert [e.primitive.name for e in decoded.eqns] == ["jit"]
    got = jax.core.eval_jaxpr(decoded.jaxpr, decoded.consts, np.ones(4, np.float32))[0]
    np.testing.assert_array_equal(got, jnp.sin(jnp.ones(4)))


def test_every_class_the_judge_rebuilds_exists_in_this_jax():
    # A canary for jax upgrades: a renamed class would refuse every program that holds one.
    for module, name in jaxpr_codec._CLASSES:
        assert isinstance(getattr(importlib.import_module(module), name), type), (module, name)
    for module, name in jaxpr_codec._JAX_FUNCTIONS:
        assert callable(getattr(importlib.import_module(module), name)), (module, name)


def test_host_callbacks_are_written_by_name_and_refused_with_every_name():
    def f(x):
        y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        jax.debug.callback(print, y)
        return y

    data = jaxpr_codec.encode(jax.make_jaxpr(f)(jnp.ones(3)))
    with pytest.raises(jaxpr_codec.RefusedPrimitive) as refused:
        jaxpr_codec.decode(data)
    assert refused.value.names == ["pure_callback", "debug_callback"]


def test_a_primitive_jax_does_not_define_is_refused():
    mine = jax.extend.core.Primitive("my_secret_op")  # its rules would be the candidate's Python
    mine.def_abstract_eval(lambda x: x)
    mine.def_impl(lambda x: x)
    data = jaxpr_codec.encode(jax.make_jaxpr(lambda x: mine.bind(x))(jnp.ones(3)))
    with pytest.raises(jaxpr_codec.RefusedPrimitive, match="my_secret_op"):
        jaxpr_codec.decode(data)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/jaxbench-codec-pwned",))


def _raw_pickle(obj) -> bytes:
    return pickle.dumps(obj, protocol=5)


def _hostile_payloads():
    program = jaxpr_codec.encode(_programs()["elementwise"])
    ill_typed = jax.make_jaxpr(lambda x: x + 1.0)(jnp.ones(3, jnp.float32))
    eqn = ill_typed.eqns[0]
    wrong_out = jax.extend.core.Var(jax.core.ShapedArray((4,), jnp.float32))
    ill_typed_eqn = eqn.replace(outvars=[wrong_out])
    ill = jax.extend.core.Jaxpr(
        ill_typed.jaxpr.constvars, ill_typed.jaxpr.invars, [wrong_out], [ill_typed_eqn], consts=[]
    )
    object_array = pickle.dumps(("jaxbench-program/1", jax.__version__, np.array([None], dtype=object)))
    original, jaxpr_codec._func_name = jaxpr_codec._func_name, lambda _jaxpr: "x" * 10_000
    try:
        long_name = jaxpr_codec.encode(_programs()["elementwise"])
    finally:
        jaxpr_codec._func_name = original
    return {
        "a reduce that runs a shell": _raw_pickle(("jaxbench-program/1", jax.__version__, _RunsCode())),
        "builtins.eval by name": b"\x80\x05cbuiltins\neval\n\x8c\x0b__import__()\x85R.",
        "a function of jax that is not a rebuild": b"\x80\x05cjax._src.core\neval_jaxpr\n)R.",
        "a truncated program": program[: len(program) // 2],
        "random bytes": os.urandom(4096),
        "an empty file": b"",
        "not a program": _raw_pickle(("jaxbench-program/1", jax.__version__, 42)),
        "another format": _raw_pickle(("other/9", jax.__version__, None)),
        "another jax": _raw_pickle(("jaxbench-program/1", "0.0.1", None)),
        "a persistent id that is not a primitive": b"\x80\x05\x8c\x03abc\x94Q.",
        "an array of objects": object_array,
        "an ill-typed program": jaxpr_codec.encode(ill),
        "a jaxpr name far too long": long_name,
        "nesting far too deep": b"\x80\x05" + b"]" * 200_000 + b"a" * 199_999 + b".",
    }


_HOSTILE = [
    "a reduce that runs a shell",
    "builtins.eval by name",
    "a function of jax that is not a rebuild",
    "a truncated program",
    "random bytes",
    "an empty file",
    "not a program",
    "another format",
    "another jax",
    "a persistent id that is not a primitive",
    "an array of objects",
    "an ill-typed program",
    "a jaxpr name far too long",
    "nesting far too deep",
]


def test_the_hostile_payloads_are_the_ones_listed():
    assert sorted(_hostile_payloads()) == sorted(_HOSTILE)


@pytest.mark.parametrize("name", _HOSTILE)
def test_a_hostile_payload_is_refused_with_a_codec_error(name):
    data = _hostile_payloads()[name]
    with pytest.raises(jaxpr_codec.CodecError):
        jaxpr_codec.type_check(jaxpr_codec.decode(data))
    assert not Path("/tmp/jaxbench-codec-pwned").exists()


def test_a_file_over_the_limit_is_refused_unread(monkeypatch):
    data = jaxpr_codec.encode(_programs()["kernel"])
    monkeypatch.setattr(jaxpr_codec, "MAX_BYTES", len(data) - 1)
    with pytest.raises(jaxpr_codec.CodecError, match="more than"):
        jaxpr_codec.decode(data)


_FRESH_DECODE = """
import sys
from jaxbench_mcp.internals import jaxpr_codec
for path in sys.argv[1:]:
    print(jaxpr_codec.decode(open(path, "rb").read()))
    print("=====")
"""


@pytest.mark.slow
def test_every_corpus_program_round_trips_into_a_fresh_process(tmp_path):
    # The 50 solutions at both sizes, decoded where nothing was traced: the judge's situation. (The expert
    # kernels and the test kernels go through the whole check in test_solutions / test_checking.)
    from jaxbench_mcp.catalog import targets, workloads
    from jaxbench_mcp.catalog.workloads import abstract_inputs

    expected, paths = [], []
    for source in sorted((ROOT / "solutions").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"solution_{source.stem}", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        w = workloads.get_workload(source.stem)
        for size in ("full", "small"):
            with targets.chip_context("v6e"):
                closed = jax.make_jaxpr(module.workload, static_argnums=tuple(w.static_argnums))(
                    *abstract_inputs(w, size)
                )
            path = tmp_path / f"{source.stem}_{size}.program"
            path.write_bytes(jaxpr_codec.encode(closed))
            expected.append(str(closed))
            paths.append(str(path))
    assert len(paths) == 100
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_DECODE, *paths], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    decoded = out.split("\n=====\n")[:-1]
    assert len(decoded) == len(expected)
    mismatched = [p for p, want, got in zip(paths, expected, decoded, strict=True) if want != got]
    assert not mismatched, mismatched


def test_a_scoped_body_that_closes_over_the_kernels_refs_keeps_its_constant_inputs():
    # run_scoped traces its body with the kernel's refs as constants, which the equation then passes as operands:
    # the body's recorded constants are dead tracers, and its constant inputs must stay constant inputs (jax's
    # lowering allocates a buffer for every other input).
    def kernel(x_ref, o_ref):
        def body(scratch):
            scratch[...] = x_ref[...] * 2.0
            o_ref[...] = scratch[...]

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    closed = jax.make_jaxpr(f)(jax.ShapeDtypeStruct((8, 128), jnp.float32))
    decoded = jaxpr_codec.decode(jaxpr_codec.encode(closed))

    def scoped(kernel_jaxpr):
        return next(e.params["jaxpr"] for e in kernel_jaxpr.eqns if e.primitive.name == "run_scoped")

    want, got = scoped(closed.eqns[0].params["jaxpr"]), scoped(decoded.eqns[0].params["jaxpr"])
    assert want.constvars, "the body no longer closes over the kernel's refs: update the test"
    assert len(got.constvars) == len(want.constvars) and len(got.invars) == len(want.invars)
    assert str(decoded) == str(closed)
