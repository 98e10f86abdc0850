"""Canaries for jaxbench_mcp.internals.pallas: what jax keeps in a traced pallas_call (and in pl.kernel, DMA,
run_scoped and program_id equations), checked on tiny kernels traced with jax.make_jaxpr (nothing compiles).

Each fails with "jax <version> changed <what>: update <function>" when an upgrade breaks the assumption.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from canaries import changed
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.internals import pallas


def _eqns(jaxpr, name: str) -> list:
    """The equations of primitive `name`, anywhere in `jaxpr` (bodies included)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(eqn)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = sub if hasattr(sub, "eqns") else getattr(sub, "jaxpr", None)
                if hasattr(inner, "eqns"):
                    found += _eqns(inner, name)
    return found


def _prefetch_kernel(s_ref, x_ref, y_hbm, o_ref, acc_ref):
    acc_ref[...] = x_ref[...] + s_ref[0]
    o_ref[...] = acc_ref[...]


def _prefetch_call(s, x, y):
    """A (2, 3) grid, one scalar-prefetch operand, a blocked input, an input left in HBM, one scratch buffer."""
    return pl.pallas_call(
        _prefetch_kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(2, 3),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j, s: (i + s[0], j)), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i, j, s: (i, j)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        ),
        out_shape=jax.ShapeDtypeStruct((16, 384), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=48 << 20),
        input_output_aliases={1: 0},
        name="prefetching",
    )(s, x, y)


@pytest.fixture(scope="module")
def prefetch_eqn():
    closed = jax.make_jaxpr(_prefetch_call)(
        jax.ShapeDtypeStruct((1,), jnp.int32),
        jax.ShapeDtypeStruct((16, 384), jnp.float32),
        jax.ShapeDtypeStruct((16, 384), jnp.float32),
    )
    return _eqns(closed.jaxpr, "pallas_call")[0]


def test_grid_and_operand_counts(prefetch_eqn):
    with changed("the pallas_call grid mapping (grid, num_inputs, num_index_operands, scratch)", "pallas_call_info"):
        info = pallas.pallas_call_info(prefetch_eqn)
        assert info.grid == (2, 3)
        assert (info.num_inputs, info.num_scalar_prefetch, info.num_scratch) == (2, 1, 1)
        assert len(info.blocks) == 3  # the inputs', then the outputs'


def test_blocks(prefetch_eqn):
    with changed("the pallas_call block mappings (block shape, array aval, memory space)", "pallas_call_info"):
        blocked, in_hbm, out = pallas.pallas_call_info(prefetch_eqn).blocks
        assert blocked.block_shape == (pallas.BlockDim("Blocked", 8), pallas.BlockDim("Blocked", 128))
        assert blocked.array_shape == (16, 384) and blocked.dtype == np.float32
        assert (blocked.in_hbm, in_hbm.in_hbm, out.in_hbm) == (False, True, False)


def test_a_block_keeps_its_buffer_count():
    def call(x):
        spec = pl.BlockSpec((8, 128), lambda i: (0, 0), pipeline_mode=pl.Buffered(1))
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
            grid=(2,),
            in_specs=[spec],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        )(x)

    closed = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((8, 128), jnp.float32))
    with changed("the pipeline_mode (pl.Buffered) of pallas_call block mappings", "pallas_call_info"):
        single, out = pallas.pallas_call_info(_eqns(closed.jaxpr, "pallas_call")[0]).blocks
        assert (single.buffer_count, out.buffer_count) == (1, None)


def test_index_maps_take_grid_indices_then_scalar_prefetch(prefetch_eqn):
    from jaxbench_mcp.analysis.kernels import _evaluate_index_map

    with changed("the index-map jaxprs of pallas_call block mappings", "pallas_call_info"):
        index_map = pallas.pallas_call_info(prefetch_eqn).blocks[2].index_map
        assert len(index_map.jaxpr.invars) == 2 + 1 and not index_map.consts
        assert [int(v) for v in _evaluate_index_map(index_map, (np.int32(1), np.int32(2)))] == [1, 2]


def test_dimension_semantics_name_and_aliases(prefetch_eqn):
    with changed("the pallas_call compiler params, name or input_output_aliases", "pallas_call_info"):
        info = pallas.pallas_call_info(prefetch_eqn)
        assert info.dimension_semantics == ("parallel", "arbitrary")
        assert info.name == "prefetching"
        assert info.input_output_aliases == ((1, 0),)
        assert info.vmem_limit_bytes == 48 << 20


def test_enum_dimension_semantics_read_as_their_name():
    def call(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: None,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            compiler_params=pltpu.CompilerParams(dimension_semantics=(pltpu.PARALLEL,)),
        )(x)

    eqn = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((16, 128), jnp.float32)).jaxpr.eqns[0]
    # kernel_analysis._kernel_traffic counts a grid dimension as parallel when its semantics' text says so.
    with changed("how a pltpu.GridDimensionSemantics reads as text", "pallas_call_info"):
        assert "parallel" in pallas.pallas_call_info(eqn).dimension_semantics[0].lower()


def test_kernel_body_and_its_default_name(prefetch_eqn):
    def copy_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def call(x):
        return pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    eqn = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((8, 128), jnp.float32)).jaxpr.eqns[0]
    with changed("where a pallas_call keeps its body or its kernel's name", "pallas_call_info"):
        assert pallas.pallas_call_info(eqn).name == "copy_kernel"
        body = pallas.pallas_call_info(prefetch_eqn).kernel
        # the scalar-prefetch refs, the inputs', the outputs', the scratch refs
        assert [tuple(v.aval.shape) for v in body.invars] == [(1,), (8, 128), (16, 384), (8, 128), (8, 128)]


def test_squeezed_and_element_block_dimensions():
    def call(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: None,
            grid=(2,),
            in_specs=[pl.BlockSpec((None, pl.Element(16, (4, 0)), 128), lambda i: (i, 0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        )(x)

    eqn = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((2, 64, 128), jnp.float32)).jaxpr.eqns[0]
    with changed("the block dimension classes (Squeezed, Element and its padding)", "pallas.BlockDim / _block_dim"):
        assert pallas.pallas_call_info(eqn).blocks[0].block_shape == (
            pallas.BlockDim("Squeezed", None),
            pallas.BlockDim("Element", 16, padding=4),
            pallas.BlockDim("Blocked", 128),
        )


def test_a_grid_dimension_known_at_run_time_is_not_an_int():
    def call(n, x):
        return pl.pallas_call(
            lambda x_ref, o_ref: None,
            grid=(n,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        )(x)

    eqn = _eqns(jax.make_jaxpr(call)(jnp.int32(2), jnp.zeros((16, 128), jnp.float32)).jaxpr, "pallas_call")[0]
    with changed("how a pallas_call records a grid dimension known only at run time", "pallas_call_info"):
        (dim,) = pallas.pallas_call_info(eqn).grid
        assert isinstance(dim, str)


def test_pallas_call_operands_are_dynamic_grid_sizes_then_scalar_prefetch_then_inputs():
    def call(n, s, x):
        return pl.pallas_call(
            lambda s_ref, x_ref, o_ref: None,
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(n,),
                in_specs=[pl.BlockSpec((8, 128), lambda i, s: (i, 0))],
                out_specs=pl.BlockSpec((8, 128), lambda i, s: (i, 0)),
            ),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        )(s, x)

    args = (jnp.int32(2), jnp.zeros((3,), jnp.int32), jnp.zeros((16, 128), jnp.float32))
    eqn = _eqns(jax.make_jaxpr(call)(*args).jaxpr, "pallas_call")[0]
    with changed(
        "the order of a pallas_call's operands", "kernel_analysis._kernel_traffic, coverage.full_size_coverage"
    ):
        assert [tuple(v.aval.shape) for v in eqn.invars] == [(), (3,), (16, 128)]


def test_mesh_kernel_body():
    def call(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=pltpu.TensorCoreMesh(axis_name="core"))
        def copy(x_ref, o_ref):
            pltpu.sync_copy(x_ref, o_ref)

        return copy(x)

    with targets.chip_context("v6e"):
        closed = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((8, 128), jnp.float32))
    with changed("how pl.kernel traces (an mpmd_map with its bodies in `jaxprs`)", "pallas.mesh_kernel_body"):
        (eqn,) = _eqns(closed.jaxpr, "mpmd_map")
        body = pallas.mesh_kernel_body(eqn)
        assert [tuple(v.aval.shape) for v in body.invars] == [(8, 128), (8, 128)] and body.eqns


def test_program_id_axis_dma_and_run_scoped():
    def kernel(x_hbm, o_ref, buf, sem):
        j = pl.program_id(1)
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(j * 8, 8)], buf, sem)
        copy.start()
        copy.wait()

        def scoped(tmp):
            tmp[...] = buf[...]
            o_ref[...] = tmp[...]

        pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32))

    def call(x):
        return pl.pallas_call(
            kernel,
            grid=(1, 2),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (j, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())],
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        )(x)

    body = jax.make_jaxpr(call)(jax.ShapeDtypeStruct((16, 128), jnp.float32)).jaxpr.eqns[0].params["jaxpr"]
    with changed("the program_id equation's grid axis", "pallas.grid_axis"):
        assert pallas.grid_axis(_eqns(body, "program_id")[0]) == 1
    with changed("how dma_start keeps its source and destination refs", "pallas.dma_source_and_target"):
        src, dst = pallas.dma_source_and_target(_eqns(body, "dma_start")[0])
        assert src.ref is body.invars[0] and [type(t).__name__ for t in src.transforms] == ["NDIndexer"]
        assert dst is body.invars[2]
    with changed("where pl.run_scoped keeps its body", "pallas.run_scoped_body"):
        scoped = pallas.run_scoped_body(_eqns(body, "run_scoped")[0])
        assert [tuple(v.aval.shape) for v in scoped.invars] == [(8, 128)] and scoped.eqns
