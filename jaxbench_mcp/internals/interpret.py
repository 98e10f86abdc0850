"""Loads through ref.reshape / ref.bitcast views in jax's TPU interpret mode.

jax 0.12's TPU interpreter (jax._src.pallas.mosaic.interpret) only follows NDIndexer transforms: a
load through a reshaped or bitcast ref (jax's own ragged paged attention kernel does both on its
VMEM scratch) dies with "'ReshapeTransform' object has no attribute 'indices'". Mosaic compiles such
views, so a correct kernel could not pass our check on a host without a TPU.

install() extends the interpreter's load callback, in this process only. A load whose transforms
contain a ReshapeTransform or BitcastTransform is split at the first of them: the NDIndexers before
it go through the interpreter's own read (so race detection and out-of-bounds checks still see that
region), and the rest is applied to the value read:

* reshape: row-major, as Mosaic's reshape of a contiguous VMEM buffer;
* bitcast: the value-level pltpu.bitcast with its default dim=-2 (packing runs along the
  second-minor dimension), which is also what Mosaic does to a ref's block shape;
* NDIndexer: plain indexing, bounds-checked.

Stores, swaps and DMA writes through such views are not supported: they raise NotImplementedError
instead of falling into jax's AttributeError (or worse, writing somewhere wrong).

It also mends masked stores (pltpu.store(ref, val, mask=...)), which the same kernel uses: jax
0.12's masked swap marks the wrong lanes as out of bounds (it always cuts along the first axis,
once per axis), so a fully in-bounds store into, say, a (256, 128) buffer with any lane of rows
128.. set is rejected as "Out-of-bounds masked swap".

And it draws the order in which a kernel visits its 'parallel' grid axes when the program runs, not
when it is traced. jax draws it from InterpretParams.random_seed while tracing, so every new order
meant a new compile of the whole interpreted program. Under grid_orders(seed) every pallas_call the
program runs draws a fresh permutation of each parallel axis from that seed; outside it, from
random_seed. A check compiles each size once and still gives every run orders of its own: its run
stage takes 0.40x (12p) to 0.91x (10p) of the time it took (benchmarks/interpret_runs.py).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc, shared_memory as sm, utils as interpret_utils
from jax._src.state.indexing import NDIndexer, Slice
from jax._src.state.types import BitcastTransform, ReshapeTransform
from jax.experimental import io_callback

_LOCK = threading.Lock()
_MARK = "_jaxbench_ref_views"  # set on our replacement `get`, so a second install() is a no-op
_GET_PARAMS = ("token", "device_id", "local_core_id", "memory_space", "buffer_id", "transforms")


class UnsupportedRefView(NotImplementedError):
    pass


def install() -> None:
    """Extend jax's TPU interpreter in this process (idempotent)."""
    with _LOCK:
        if getattr(ipc.get, _MARK, False):
            return
        # We lean on private jax internals: refuse to patch anything that does not look as expected.
        raw_get = getattr(ipc.get, "__wrapped__", None)
        if raw_get is None or not hasattr(ipc, "fail_on_exception") or not hasattr(interpret_utils, "to_range"):
            raise RuntimeError("jax's TPU interpreter changed shape; jaxbench_mcp.internals.interpret needs updating")
        names = tuple(inspect.signature(raw_get).parameters)[: len(_GET_PARAMS)]
        if names != _GET_PARAMS:
            raise RuntimeError(f"jax's interpreter get() takes {names}, expected {_GET_PARAMS}")
        _check_grid_order_hooks()

        @functools.wraps(raw_get)
        def get_through_views(token, device_id, local_core_id, memory_space, buffer_id, transforms, *args, **kwargs):
            prefix, rest = _split(transforms)
            if not rest:
                return raw_get(token, device_id, local_core_id, memory_space, buffer_id, transforms, *args, **kwargs)
            token, value = raw_get(token, device_id, local_core_id, memory_space, buffer_id, prefix, *args, **kwargs)
            return token, apply_view(np.asarray(value), rest)

        # Re-wrapped by jax's own fail_on_exception, so our errors stop the kernel the way jax's do.
        # The kernel body looks `get` up by name at trace time, and DMA reads call get.__wrapped__:
        # both now reach get_through_views.
        new_get = ipc.fail_on_exception(get_through_views)
        setattr(new_get, _MARK, True)

        plain_to_range = interpret_utils.to_range

        def to_range(transforms):
            # Everything that still reaches to_range with a view (store, swap, DMA write, output
            # block) is a write we do not model: say so instead of jax's AttributeError.
            for t in transforms:
                if not _is_indexer(t):
                    raise UnsupportedRefView(
                        f"jaxbench's interpret mode supports ref.reshape/ref.bitcast views for loads only; "
                        f"a store, swap or DMA through a {type(t).__name__} is not supported: store through the "
                        f"ref itself instead (ref[...] = value.reshape(ref.shape), or pltpu.bitcast the value)"
                    )
            return plain_to_range(transforms)

        # All or nothing: every check above and in _masked_swap passes before the first patch is applied.
        shared_memory_class, swap_buffer_content = _masked_swap()
        interpret_utils.to_range = to_range
        shared_memory_class.swap_buffer_content = swap_buffer_content
        ipc._get_randomized_grid_coordinates = _grid_orders_at_run_time
        ipc.get = new_get


# ---- grid orders drawn at run time ----------------------------------------------------------------

_ORDER_PARAMS = ("grid", "mosaic_params", "random_seed")
_orders_lock = threading.Lock()
_run_orders: np.random.Generator | None = None


def _check_grid_order_hooks() -> None:
    if not hasattr(ipc, "_get_parallel_dim_semantics"):
        raise RuntimeError("jax's interpreter no longer has _get_parallel_dim_semantics, which grid orders read")
    names = tuple(inspect.signature(ipc._get_randomized_grid_coordinates).parameters)
    if names != _ORDER_PARAMS:
        raise RuntimeError(f"jax's interpreter draws grid orders with {names}, expected {_ORDER_PARAMS}")


@contextlib.contextmanager
def grid_orders(seed: int | None) -> Iterator[None]:
    """Programs run inside visit their kernels' 'parallel' grid axes in orders drawn from `seed` (None: from
    each kernel's InterpretParams.random_seed, as outside)."""
    global _run_orders
    with _orders_lock:
        _run_orders = None if seed is None else np.random.default_rng(seed)
    try:
        yield
    finally:
        with _orders_lock:
            _run_orders = None


def _draw_order(size: int, random_seed: int | None) -> np.ndarray:
    with _orders_lock:
        rng = _run_orders if _run_orders is not None else np.random.default_rng(random_seed or 0)
        return rng.permutation(size).astype(np.int32)


def _grid_orders_at_run_time(grid, mosaic_params, random_seed):
    """jax's _get_randomized_grid_coordinates with the permutations drawn by a host callback each time the
    kernel runs: a permutation of each 'parallel' axis, an empty array for each 'arbitrary' one (jax's own
    convention, which _get_grid_point reads)."""
    parallel = ipc._get_parallel_dim_semantics(mosaic_params, len(grid))
    coordinates = []
    for size, is_parallel in zip(grid, parallel, strict=True):
        if is_parallel:
            size = int(jax_core.concrete_or_error(None, size))  # jax's rule: a parallel axis has a static size
            coordinates.append(
                io_callback(functools.partial(_draw_order, size, random_seed), jax.ShapeDtypeStruct((size,), np.int32))
            )
        else:
            coordinates.append(jnp.array((), dtype=np.int32))
    return tuple(coordinates)


def _masked_swap():
    """(the class to patch, the mended swap_buffer_content), after checking jax's is what we mend."""
    cls = sm.GenericSharedMemory
    plain_swap = cls.swap_buffer_content
    names = tuple(inspect.signature(plain_swap).parameters)
    expected = ("self", "key", "rnge", "value", "mask", "thread", "increment_clock", "logging_info")
    if names != expected or not all(hasattr(sm, n) for n in ("Buffer", "ShapeAndDtype")):
        raise RuntimeError(f"jax's interpreter swap_buffer_content takes {names}, expected {expected}")

    @functools.wraps(plain_swap)
    def swap_buffer_content(self, key, rnge, value, mask, thread, increment_clock=True, logging_info=None):
        if mask is None:
            return plain_swap(self, key, rnge, value, mask, thread, increment_clock, logging_info)
        # Same contract as jax's: None if a masked-in lane falls outside the buffer; otherwise the
        # old contents under the mask (and `value` elsewhere), with the masked lanes written.
        with self.lock:
            clock = self.incr_clock(thread, take_lock=False) if self.detect_races and increment_clock else None
            buff = self.mem[key]
            if not isinstance(buff, sm.Buffer):
                raise ValueError(f"Attempting to swap into allocation with `key` {key} that is not a `Buffer`.")
            shape_and_dtype = sm.ShapeAndDtype(buff.logical_shape, buff.dtype)
            if buff.dtype != value.dtype:
                raise ValueError(f"swapping {value.dtype} into a {buff.dtype} buffer")
            try:
                old = buff[rnge].copy()  # clipped to the allocation; IndexError when wholly outside
            except IndexError:
                return None, shape_and_dtype, clock
            inside = tuple(slice(n) for n in old.shape)
            outside = np.ones(mask.shape, dtype=bool)
            outside[inside] = False
            if (outside & mask).any():
                return None, shape_and_dtype, clock
            keep = mask[inside]
            returned = value.copy()
            returned[inside] = np.where(keep, old, value[inside])
            buff.set_in_bounds_portion(rnge, np.where(keep, value[inside], old))
            return returned, shape_and_dtype, clock

    return cls, swap_buffer_content


def _is_indexer(t) -> bool:
    return isinstance(t, NDIndexer)


def _split(transforms) -> tuple[tuple, tuple]:
    """Transforms before the first non-NDIndexer, and the rest."""
    transforms = tuple(transforms)
    for i, t in enumerate(transforms):
        if not _is_indexer(t):
            return transforms[:i], transforms[i:]
    return transforms, ()


def apply_view(value: np.ndarray, transforms) -> np.ndarray:
    """Apply reshape / bitcast / NDIndexer transforms, in order, to a value read from a ref."""
    for t in transforms:
        if isinstance(t, ReshapeTransform):
            value = _reshape(value, tuple(int(d) for d in t.shape))
        elif isinstance(t, BitcastTransform):
            value = bitcast_rows(value, np.dtype(t.dtype))
        elif _is_indexer(t):
            value = _index(value, t)
        else:
            raise UnsupportedRefView(
                f"jaxbench's interpret mode cannot load through a {type(t).__name__} that follows a "
                f"reshape or bitcast of a ref (only reshape, bitcast and indexing are supported)"
            )
    return value


def _reshape(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if -1 in shape or int(np.prod(shape)) != value.size:
        raise ValueError(f"cannot reshape a ref view of shape {value.shape} into {shape}")
    return np.reshape(value, shape)  # row-major


def bitcast_rows(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """pltpu.bitcast(value, dtype) in numpy: the second-minor dimension absorbs the width change.

    Packing k narrow elements into one wide one takes rows k*r .. k*r+k-1 of a column, the lowest
    row in the lowest bits (little-endian, as lax.bitcast_convert_type); unpacking is the inverse.
    """
    src_bits, dst_bits = value.dtype.itemsize * 8, dtype.itemsize * 8
    if src_bits == dst_bits:
        return value.view(dtype)
    if value.ndim < 2:
        raise UnsupportedRefView("bitcast of a 1-D ref view with a bitwidth change is not supported (nor by Mosaic)")
    *lead, rows, cols = value.shape
    if src_bits < dst_bits:
        k = dst_bits // src_bits
        if rows % k:
            raise ValueError(f"cannot pack {rows} rows of {value.dtype} into {dtype}")
        grouped = np.moveaxis(value.reshape(*lead, rows // k, k, cols), -2, -1)  # (..., rows/k, cols, k)
        return np.ascontiguousarray(grouped).view(dtype)[..., 0]
    k = src_bits // dst_bits
    split = np.ascontiguousarray(value)[..., None].view(dtype)  # (..., rows, cols, k), low bits first
    return np.moveaxis(split, -1, -2).reshape(*lead, rows * k, cols)


def _index(value: np.ndarray, indexer) -> np.ndarray:
    if len(indexer.indices) != value.ndim:
        raise ValueError(f"indexer of rank {len(indexer.indices)} on a ref view of shape {value.shape}")
    key: list[slice | int] = []
    for dim, idx in zip(value.shape, indexer.indices, strict=True):
        if isinstance(idx, Slice):
            start, size, stride = int(idx.start), int(idx.size), int(idx.stride)
            if start < 0 or (size > 0 and start + (size - 1) * stride >= dim):
                raise IndexError(f"out-of-bounds read of a ref view of shape {value.shape}: {indexer.indices}")
            key.append(slice(start, start + size * stride, stride))
        else:
            try:
                i = int(idx)
            except TypeError as exc:
                raise UnsupportedRefView(
                    "advanced (array) indexing of a reshaped or bitcast ref is not supported"
                ) from exc
            if not 0 <= i < dim:
                raise IndexError(f"out-of-bounds read of a ref view of shape {value.shape}: {indexer.indices}")
            key.append(i)
    return value[tuple(key)]
