"""What a traced Pallas kernel says about itself, read from jax's private pallas_call parameters.

A pallas_call equation keeps its grid, BlockSpecs (index-map jaxprs, block shapes, memory spaces), scalar
prefetch and scratch counts in a GridMapping, its compiler parameters and its body beside it; pl.kernel /
core_map kernels, DMAs, run_scoped and program_id keep theirs under other private names. They are read here
only, into plain values.

Checked against jax 0.12.0.1: tests/test_internals_pallas.py holds a canary per assumption.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # jax is imported where it is used: importing this module does not load it
    from jax.extend.core import Jaxpr, JaxprEqn

# pl.kernel (and core_map) kernels trace to these primitives instead of pallas_call.
MESH_KERNEL_PRIMITIVES = frozenset({"mpmd_map", "core_map"})
KERNEL_PRIMITIVES = frozenset({"pallas_call"}) | MESH_KERNEL_PRIMITIVES


@dataclass(frozen=True)
class BlockDim:
    """One dimension of a BlockSpec's block shape."""

    kind: str  # jax's name for it: "Blocked", "Squeezed", "Element", "BoundedSlice", "Indirect"
    size: int | None  # elements per block along this dimension; None when squeezed out
    padding: int = 0  # pl.Element: the index map addresses elements of the array padded by this much in front


@dataclass(frozen=True)
class Block:
    """One BlockSpec'd operand or result of a pallas_call."""

    index_map: Jaxpr  # with its consts (.jaxpr, .consts); takes the grid indices, then the scalar-prefetch refs
    block_shape: tuple[BlockDim, ...]
    array_shape: tuple[int, ...]
    dtype: np.dtype  # or a jax extended dtype (a PRNG key), as the array has it
    memory_space: str  # lower case: "default", "vmem", "any", "hbm", ...
    buffer_count: int | None = None  # pipeline_mode=pl.Buffered(n): n (an (in, out) pair: its input count)

    @property
    def in_hbm(self) -> bool:
        """Not pipelined into VMEM (memory_space=pl.ANY or HBM): the kernel copies it by hand."""
        return "any" in self.memory_space or "hbm" in self.memory_space


@dataclass(frozen=True)
class PallasCallInfo:
    name: str
    # A dimension known only at run time is a str (jax's name for such a dimension), not an int.
    grid: tuple[int | str, ...]
    blocks: tuple[Block, ...]  # the inputs', then the outputs'
    num_inputs: int
    num_scalar_prefetch: int
    num_scratch: int
    dimension_semantics: tuple[str, ...]  # as given: "parallel", "arbitrary", or jax's enum values as str
    vmem_limit_bytes: int | None  # CompilerParams(vmem_limit_bytes); None: the chip's default scoped limit
    kernel: Jaxpr  # the body: takes the scalar-prefetch refs, the inputs', the outputs', the scratch refs
    input_output_aliases: tuple[tuple[int, int], ...]  # (input, output) pairs that share a buffer


def pallas_call_info(eqn: JaxprEqn) -> PallasCallInfo:
    """The grid, blocks and body of a pallas_call equation."""
    p = eqn.params
    mapping = p["grid_mapping"]
    kernel = p["jaxpr"]
    debug = getattr(kernel, "debug_info", None)
    semantics = getattr(p.get("compiler_params"), "dimension_semantics", None) or ()
    limit = getattr(p.get("compiler_params"), "vmem_limit_bytes", None)
    return PallasCallInfo(
        name=p.get("name") or getattr(debug, "func_name", None) or "kernel",
        grid=tuple(g if isinstance(g, int) else str(g) for g in mapping.grid),
        blocks=tuple(_block(bm) for bm in mapping.block_mappings),
        num_inputs=int(mapping.num_inputs),
        num_scalar_prefetch=int(mapping.num_index_operands),
        num_scratch=int(mapping.num_scratch_operands),
        dimension_semantics=tuple(str(d) for d in semantics),
        vmem_limit_bytes=int(limit) if isinstance(limit, int) else None,
        kernel=kernel,
        input_output_aliases=tuple(tuple(pair) for pair in p.get("input_output_aliases", ())),
    )


def _block(bm: Any) -> Block:
    return Block(
        index_map=bm.index_map_jaxpr,
        block_shape=tuple(_block_dim(d) for d in bm.block_shape),
        array_shape=tuple(bm.array_aval.shape),
        dtype=bm.array_aval.dtype,
        memory_space=str(getattr(bm.transformed_block_aval, "memory_space", "")).lower(),
        buffer_count=_buffer_count(getattr(bm, "pipeline_mode", None)),
    )


def _buffer_count(mode: Any) -> int | None:
    count = getattr(mode, "buffer_count", None)
    if isinstance(count, tuple):
        count = count[0]
    return int(count) if isinstance(count, int) else None


def _block_dim(d: Any) -> BlockDim:
    kind = type(d).__name__
    size = d if isinstance(d, int) else getattr(d, "block_size", None)
    padding = int(d.padding[0]) if kind == "Element" else 0
    return BlockDim(kind=kind, size=None if size is None else int(size), padding=padding)


def mesh_kernel_body(eqn: JaxprEqn) -> Jaxpr:
    """The body of a pl.kernel / core_map kernel (an mpmd_map or core_map equation; the first body of an mpmd_map
    with several), open."""
    body = eqn.params["jaxprs"][0] if "jaxprs" in eqn.params else eqn.params["jaxpr"]
    return getattr(body, "jaxpr", body)


def grid_axis(eqn: JaxprEqn) -> int:
    """The grid axis a program_id or num_programs reads."""
    return eqn.params["axis"]


def run_scoped_body(eqn: JaxprEqn) -> Jaxpr:
    """The body of a pl.run_scoped: open, its invars the scoped scratch refs."""
    return eqn.params["jaxpr"]


def dma_source_and_target(eqn: JaxprEqn) -> tuple[Any, Any]:
    """A dma_start's source and destination: each a ref variable, or a view of one (`.ref`, `.transforms`)."""
    src, dst, *_ = eqn.params["tree"].unflatten(list(eqn.invars))
    return src, dst


def tensorcore_mesh(eqn: JaxprEqn) -> tuple[str, int] | None:
    """(axis name, cores) of a pl.kernel / core_map kernel's TensorCore mesh (the first mesh of an mpmd_map); None
    for any other mesh (SparseCore subcores, several axes)."""
    mesh = eqn.params["meshes"][0] if "meshes" in eqn.params else eqn.params.get("mesh")
    if mesh is None or type(mesh).__name__ != "TensorCoreMesh":
        return None
    return str(mesh.axis_name), int(mesh.num_cores)


def axis_index_name(eqn: JaxprEqn) -> Any:
    """The mesh axis an axis_index equation reads."""
    return eqn.params["axis_name"]
