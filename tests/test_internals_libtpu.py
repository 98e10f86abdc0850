"""Canaries for jaxbench_mcp.internals.libtpu: what a deviceless compile for a TPU generation writes into a Mosaic
kernel's compiled custom call (the scoped VMEM limit and what the kernel allocated), checked on a tiny kernel whose
VMEM follows from its block shapes alone.

Each fails with "jax <version> changed <what>: update <function>" when an upgrade breaks the assumption.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from canaries import changed
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.internals import libtpu

_ROWS, _COLS = 256, 512  # one f32 block: 512 KiB, already a whole number of (8, 128) tiles


def _running_sum_kernel(x_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(0) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]  # the scratch carries over the grid steps, so the compiler must keep it
    o_ref[...] = acc_ref[...]


def _running_sum(x):
    """Four steps down the rows: the input and output blocks are double-buffered, the scratch is one buffer."""
    return pl.pallas_call(
        _running_sum_kernel,
        grid=(4,),
        in_specs=[pl.BlockSpec((_ROWS, _COLS), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((_ROWS, _COLS), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((_ROWS, _COLS), jnp.float32)],
        out_shape=jax.ShapeDtypeStruct((4 * _ROWS, _COLS), jnp.float32),
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=24 << 20),
        name="quoted_name_used_scoped_memory_configs",
    )(x)


@pytest.mark.parametrize("generation", ["v5e", "v6e"])
def test_the_compiled_custom_call_says_its_scoped_vmem_limit_and_use(generation):
    abstract = [jax.ShapeDtypeStruct((4 * _ROWS, _COLS), jnp.float32)]
    text = targets.lower_for_tpu(_running_sum, abstract, (), generation).compile().as_text()
    block = _ROWS * _COLS * 4
    with changed("the scoped VMEM configs of a compiled tpu_custom_call", "libtpu.scoped_vmem"):
        found = libtpu.scoped_vmem(text)
        assert len(found) == 1, found
        assert found[0].limit == 24 << 20, found
        # two buffers each of the input and output blocks, one of the scratch, and Mosaic's own internal scratch
        # (none on v6e, 296 KiB on v5e with libtpu 0.0.50)
        assert 5 * block <= found[0].used <= 5 * block + 512 * 2**10, (found, 5 * block)


def test_a_config_line_without_the_used_figure_gives_nothing():
    line = 'custom-call(), custom_call_target="tpu_custom_call", backend_config={"custom_call_config":{"body":"AA"}}'
    assert libtpu.scoped_vmem(line) == []
    escaped = line.replace('"AA"', '"x\\"used_scoped_memory_configs\\":[{\\"memory_space\\":\\"1\\"}]"')
    assert libtpu.scoped_vmem(escaped) == []
