"""Canaries for jaxbench_mcp.internals.jaxpr (jax's names for primitive parameters) and
jaxbench_mcp.internals.tracebacks, checked on tiny functions traced with jax.make_jaxpr (nothing compiles).

Each fails with "jax <version> changed <what>: update <function>" when an upgrade breaks the assumption.
"""

import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from canaries import changed
from jaxbench_mcp.internals import jaxpr as jx, tracebacks


def _only(closed, name: str):
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == name]
    return eqn


def _custom_jvp(x):
    @jax.custom_jvp
    def f(x):
        return x * 2

    f.defjvp(lambda primals, tangents: (f(primals[0]), tangents[0] * 2))
    return f(x)


def _custom_vjp(x):
    @jax.custom_vjp
    def f(x):
        return x * 2

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 2,))
    return f(x)


def _custom_vmap(x):
    @jax.custom_batching.custom_vmap
    def f(x):
        return x * 2

    f.def_vmap(lambda axis_size, in_batched, x: (x * 2, in_batched[0]))
    return f(x)


@pytest.mark.parametrize(
    "fn, primitive",
    [
        (jax.jit(lambda x: x * 2), "jit"),
        (_custom_jvp, "custom_jvp_call"),
        (_custom_vjp, "custom_vjp_call"),
        (_custom_vmap, "custom_vmap_call"),
    ],
    ids=["jit", "custom_jvp", "custom_vjp", "custom_vmap"],
)
def test_plain_calls_keep_their_body(fn, primitive):
    closed = jax.make_jaxpr(fn)(jnp.ones(4))
    with changed(f"the {primitive} primitive or the parameter that holds its body", "jaxpr.call_body (_CALL_BODY)"):
        body = jx.call_body(_only(closed, primitive))
        assert [e.primitive.name for e in body.jaxpr.eqns] == ["mul"] and body.consts == []


def test_sub_jaxprs_are_found_in_every_kind_of_parameter():
    def fn(x):
        y = jax.lax.cond(x[0] > 0, lambda: x + 1, lambda: x - 1)
        return jax.lax.while_loop(lambda v: v[0] < 10, lambda v: v * 2, y)

    closed = jax.make_jaxpr(fn)(jnp.ones(4))
    with changed("how cond and while keep their jaxprs in their parameters", "jaxpr.sub_jaxprs"):
        branches = [[e.primitive.name for e in sub.eqns] for sub in jx.sub_jaxprs(_only(closed, "cond"))]
        assert branches == [["sub"], ["add"]]
        assert len(list(jx.sub_jaxprs(_only(closed, "while")))) == 2


def test_scan_length_unroll_body_and_operand_split():
    def fn(c, xs, k):
        return jax.lax.scan(lambda c, x: (c + x * k, c), c, xs, unroll=2)

    closed = jax.make_jaxpr(fn)(jnp.float32(0), jnp.ones(5), jnp.float32(3))
    eqn = _only(closed, "scan")
    with changed("the scan parameters (jaxpr, length, unroll)", "jaxpr.scan_info"):
        scan = jx.scan_info(eqn)
        assert (scan.length, scan.unroll) == (5, 2)
        assert len(scan.body.jaxpr.invars) == 3 and {e.primitive.name for e in scan.body.jaxpr.eqns} == {"mul", "add"}
    with changed("how a scan records its split into consts, carry and xs (ft_in)", "jaxpr.scan_parts"):
        assert jx.scan_parts(eqn, ["k", "c", "xs"]) == (["k"], ["c"], ["xs"])


def test_cond_branches_in_index_order():
    closed = jax.make_jaxpr(lambda p, x: jax.lax.cond(p, lambda: x + 1, lambda: x - 1))(True, jnp.float32(1))
    with changed("the cond branches parameter (false branch first for a boolean predicate)", "jaxpr.cond_branches"):
        assert [b.jaxpr.eqns[0].primitive.name for b in jx.cond_branches(_only(closed, "cond"))] == ["sub", "add"]


def test_while_condition_body_and_operand_split():
    def fn(limit, step, x):
        return jax.lax.while_loop(lambda v: v < limit, lambda v: v + step, x)

    closed = jax.make_jaxpr(fn)(jnp.float32(10), jnp.float32(1), jnp.float32(0))
    with changed("the while parameters (cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts)", "jaxpr.while_info"):
        loop = jx.while_info(_only(closed, "while"))
        assert (loop.cond_nconsts, loop.body_nconsts) == (1, 1)
        assert loop.cond.jaxpr.eqns[-1].primitive.name == "lt" and loop.body.jaxpr.eqns[-1].primitive.name == "add"


def test_ref_transforms_tree_of_get_and_swap():
    def kernel(x_ref, o_ref):
        o_ref[2:10, :] = x_ref[pl.ds(1, 8), :]

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype))(x)

    body = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((16, 128), jnp.float32)).jaxpr.eqns[0].params["jaxpr"]
    with changed(
        "the transforms tree of state get / swap (after the ref; after the value for swap)", "jaxpr.ref_transforms_tree"
    ):
        get = _only(body, "get")
        (indexer,) = jax.tree_util.tree_unflatten(jx.ref_transforms_tree(get), get.invars[1:])
        assert [(i.start, i.size) for i in indexer.indices] == [(1, 8), (0, 128)]
        swap = _only(body, "swap")
        (indexer,) = jax.tree_util.tree_unflatten(jx.ref_transforms_tree(swap), swap.invars[2:])
        assert [(i.start, i.size) for i in indexer.indices] == [(2, 8), (0, 128)]


def test_convert_dtype():
    closed = jax.make_jaxpr(lambda x: x.astype(jnp.int8))(jnp.ones(4))
    with changed("the convert_element_type parameter new_dtype", "jaxpr.convert_dtype"):
        assert np.dtype(jx.convert_dtype(_only(closed, "convert_element_type"))) == np.int8


def test_sharding_parameters_are_dropped():
    closed = jax.make_jaxpr(lambda x: (x @ x).astype(jnp.int8))(jnp.ones((4, 4)))
    with changed("the names of the sharding parameters (sharding, out_sharding)", "jaxpr.unsharded_params"):
        for eqn in closed.jaxpr.eqns:
            named = {"sharding", "out_sharding"} & set(eqn.params)
            assert named, f"{eqn.primitive.name} has no sharding parameter"
            assert all(jx.unsharded_params(eqn)[k] is None for k in named)


def _traceback_lines(fn) -> list[str]:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 -- the error is what we look at
        return "".join(traceback.format_exception(exc)).splitlines()
    raise AssertionError("no error was raised")


def test_jax_note_on_traceback_filtering_is_noise():
    lines = _traceback_lines(lambda: jax.jit(lambda x: 1 if x > 0 else 2)(1.0))
    with changed("its note on traceback filtering (JAX_TRACEBACK_FILTERING)", "tracebacks.is_jax_noise"):
        assert any(
            line.startswith("For simplicity, JAX has removed") and tracebacks.is_jax_noise(line) for line in lines
        )


def test_jax_repeat_of_an_error_raised_under_a_transformation_is_noise():
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sort(x_ref[...])  # Mosaic cannot lower a sort

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    traced = jax.jit(call).trace(jax.ShapeDtypeStruct((8, 128), jnp.float32))
    lines = _traceback_lines(lambda: traced.lower(lowering_platforms=("tpu",)))
    with changed("how it repeats an error raised under a transformation (jax._src...)", "tracebacks.is_jax_noise"):
        assert any(
            line.startswith("jax._src.source_info_util.JaxStackTraceBeforeTransformation: NotImplementedError")
            and tracebacks.is_jax_noise(line)
            for line in lines
        )


def test_decisive_lines_keep_the_candidate_frame_and_the_error_not_jaxs_frames():
    """diagnosis.decisive_lines drops the frames tracebacks.is_jax_noise recognises."""
    from jaxbench_mcp.checking import diagnosis

    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/jax/_src/core.py", line 10, in bind\n    return f()\n'
        '  File "/tmp/w/candidate.py", line 12, in kernel\n    o_ref[...] = x_ref[0:100]\n'
        '  File "/x/jax/_src/pallas/mosaic/lowering.py", line 99, in lower\n    raise ValueError(msg)\n'
        "ValueError: The Pallas TPU lowering currently requires that the last two dimensions of your block shape "
        "are divisible by 8 and 128\n"
    )
    lines = diagnosis.decisive_lines(text).splitlines()
    assert lines[0] == "candidate.py line 12, in kernel: o_ref[...] = x_ref[0:100]"
    assert lines[-1].startswith("ValueError: The Pallas TPU lowering")
    assert not any("core.py" in line for line in lines)
