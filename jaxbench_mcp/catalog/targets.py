"""TPU generations we can target, their hardware facts, and which tier this host offers.

Hardware numbers come from jax's own table (pltpu.get_tpu_info_for_chip), never from us.
Deviceless compiles use jax.experimental.topologies: with libtpu installed, XLA:TPU compiles for
any generation on a CPU host, without allocating anything.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from jaxbench_mcp.errors import AgentError


class Tier(StrEnum):
    TPU = "tpu"  # a TPU is attached: real compiles, real runs, measured time
    CPU_LIBTPU = "cpu_libtpu"  # CPU host with libtpu: deviceless TPU compiles, interpret-mode runs
    CPU = "cpu"  # plain CPU host: lowering for TPU only, interpret-mode runs


# Our names for the generations -> (jax ChipVersion value, topology name for a deviceless compile).
_GENERATIONS: dict[str, tuple[str, str]] = {
    "v4": ("v4", "v4:2x2x1"),
    "v5e": ("v5e", "v5e:1x1"),
    "v5p": ("v5p", "v5p:2x2x1"),
    "v6e": ("v6e", "v6e:1x1"),
    "7x": ("7x", "tpu7x:2x2x1"),
}
GENERATIONS = tuple(_GENERATIONS)
DEFAULT_CPU_TARGET = "v6e"

# The scoped VMEM a Pallas kernel may use when it sets no vmem_limit_bytes, per generation: what the deviceless
# compile (libtpu 0.0.50.1) names as the limit when a kernel's blocks take 17 MiB and 33 MiB ("Scoped allocation
# with size 17.00M and limit 16.00M"; v4 says "Used 17.00M of 16.00M vmem": its limit is all of its VMEM).
_DEFAULT_SCOPED_VMEM_MIB = {"v4": 16, "v5e": 16, "v5p": 16, "v6e": 32, "7x": 32}

# The widths every TPU generation so far shares: a vector register holds 8 sublanes x 128 lanes, and one MXU
# push multiplies 8 rows by a 128 x 128 tile.
SUBLANES = 8
LANES = 128
VREG_ELEMENTS = SUBLANES * LANES
MXU_PUSH_MACS = VREG_ELEMENTS * LANES


class UnknownTarget(AgentError, ValueError):
    pass


def check_generation(name: str) -> str:
    key = name.strip().lower().removeprefix("tpu").removeprefix("-")
    if key == "v7x":
        key = "7x"
    if key not in _GENERATIONS:
        raise UnknownTarget(f"unknown TPU generation {name!r}; choose from {', '.join(GENERATIONS)}")
    return key


def parse_targets(spec: str | Sequence[str] | None) -> list[str]:
    if spec is None:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return list(dict.fromkeys(check_generation(s) for s in items if s.strip()))


@dataclass(frozen=True)
class ChipFacts:
    generation: str
    peak_bf16_flops: float  # per second, per TensorCore (as all of jax's chip facts)
    hbm_bytes_per_second: float
    vmem_bytes: int
    smem_bytes: int
    hbm_bytes: int
    mxu_size: int
    num_cores: int
    scoped_vmem_bytes: int  # the default scoped VMEM limit of a kernel (without vmem_limit_bytes)


@functools.cache
def chip_facts(generation: str) -> ChipFacts:
    from jax.experimental.pallas import tpu as pltpu

    version, _ = _GENERATIONS[check_generation(generation)]
    info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(version), 1)
    return ChipFacts(
        generation=generation,
        peak_bf16_flops=float(info.bf16_ops_per_second),
        hbm_bytes_per_second=float(info.mem_bw_bytes_per_second),
        vmem_bytes=int(info.vmem_capacity_bytes),
        smem_bytes=int(info.smem_capacity_bytes),
        hbm_bytes=int(info.hbm_capacity_bytes),
        mxu_size=int(info.mxu_column_size),
        num_cores=int(info.num_cores),
        scoped_vmem_bytes=_DEFAULT_SCOPED_VMEM_MIB[check_generation(generation)] * 2**20,
    )


@functools.cache
def cores_per_device(generation: str) -> int:
    """TensorCores one jax device of `generation` drives (jax's table): both of a megacore chip's (v4, v5p), whose
    device splits a kernel's "parallel" grid steps, and a TensorCore mesh, across its cores; 1 elsewhere (7x
    exposes each of its cores as a device of its own)."""
    from jax.experimental.pallas import tpu as pltpu

    version = pltpu.ChipVersion(_GENERATIONS[check_generation(generation)][0])
    return version.num_physical_tensor_cores_per_chip if version.supports_megacore else 1


def roofline_seconds(flops: float, hbm_bytes: float, generation: str) -> tuple[float, str]:
    """The lower bound on one device's time from peak bf16 compute and HBM bandwidth (chip facts are per TensorCore:
    a megacore device has two), and which one binds."""
    chip, cores = chip_facts(generation), cores_per_device(generation)
    compute, memory = flops / (chip.peak_bf16_flops * cores), hbm_bytes / (chip.hbm_bytes_per_second * cores)
    return (compute, "compute") if compute >= memory else (memory, "memory")


# ---- tiers ------------------------------------------------------------------------------------


def libtpu_version() -> str | None:
    for dist in ("libtpu", "libtpu-nightly"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tpu_device_files() -> list[str]:
    """TPU VMs expose their chips as /dev/accel* (v4, v5e) or VFIO groups (v5p, v6e, 7x)."""
    return sorted(glob.glob("/dev/accel*") + glob.glob("/dev/vfio/[0-9]*"))


def detect_tier() -> Tier:
    # Decided without initialising a TPU backend: only one process may hold a TPU, and that must be
    # the worker that runs a candidate, not the server.
    if libtpu_version() is None and importlib.util.find_spec("libtpu") is None:
        return Tier.CPU
    return Tier.TPU if tpu_device_files() else Tier.CPU_LIBTPU


_ACCELERATOR_PREFIXES = (
    ("v5litepod", "v5e"),
    ("v5e", "v5e"),
    ("v5p", "v5p"),
    ("v6e", "v6e"),
    ("v4", "v4"),
    ("tpu7x", "7x"),
    ("v7x", "7x"),
)


def attached_generation() -> str | None:
    """The attached TPU's generation, read without touching the device (the VM's accelerator type)."""
    if detect_tier() is not Tier.TPU:
        return None
    accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "").lower()
    return next((gen for prefix, gen in _ACCELERATOR_PREFIXES if accelerator.startswith(prefix)), None)


def compile_targets(tier: Tier) -> list[str]:
    return list(GENERATIONS) if tier is not Tier.CPU else []


# ---- deviceless compile -----------------------------------------------------------------------


@functools.cache
def _topology_device(generation: str):
    from jax.experimental import topologies

    if not tpu_device_files():
        # libtpu guards a chip with a lockfile that also stops a second process from compiling
        # deviceless; with no chip to guard, several workers (and the server) may load it at once.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    _, topology = _GENERATIONS[check_generation(generation)]
    return topologies.get_topology_desc(topology, "tpu").devices[0]


_CHIP_DEVICE_KIND = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite", "7x": "TPU7x"}


def device_kind(generation: str) -> str:
    """jax's device_kind of a generation's chips (what `jax.devices()[0].device_kind` says on its TPU VM)."""
    return _CHIP_DEVICE_KIND[check_generation(generation)]


def generation_of_device_kind(kind: str) -> str:
    """The generation whose chips jax calls `kind` (device_kind's inverse: a measurement record names its chip so)."""
    found = next((g for g, k in _CHIP_DEVICE_KIND.items() if k == kind), None)
    if found is None:
        raise ValueError(f"no TPU generation has device kind {kind!r}; known: {', '.join(_CHIP_DEVICE_KIND.values())}")
    return found


def chip_context(generation: str, cores: int = 1):
    """Trace as if on `generation`: kernels that ask for chip facts while tracing (emit_pipeline,
    rank-1 blocks, gathers) otherwise fail on a CPU host with "Unsupported TPU device kind: cpu".
    `cores`: the TensorCores of the device (cores_per_device for a compile; interpret mode runs one), which
    kernels read (pltpu.get_tpu_info().num_cores, the default TensorCore mesh)."""
    import jax

    device = jax.sharding.AbstractDevice(device_kind=device_kind(generation), num_cores=cores, platform="tpu")
    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device))


def chip_facts_visible(fallback: str = DEFAULT_CPU_TARGET):
    """Nothing on a TPU host; elsewhere chip_context(fallback), for kernels that ask for chip facts."""

    from jax.experimental.pallas import tpu as pltpu

    try:
        pltpu.get_tpu_info()
        return contextlib.nullcontext()
    except ValueError:
        return chip_context(fallback)


def replay(closed) -> Callable:
    """A function that evaluates a recorded program (a ClosedJaxpr) again, never the Python that traced it.

    Its name is `workload` wherever it is lowered, so that a check's and a profile's lowerings of one recorded
    program are the same module text (the profile compares their hashes)."""
    import jax

    def workload(*args):
        return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *args)

    return workload


def interpreted_on_cpu(
    fn: Callable,
    args: Sequence[Any],
    static_argnums: Sequence[int],
    generation: str | None,
    params,
) -> Callable[..., Any]:
    """`fn` compiled once for TPU interpret mode on the CPU, traced on `args` as if on `generation` (None: no chip
    context, for a recorded program, whose avals keep the mesh they were traced under). The result runs it on
    dynamic arguments of the same shapes: `run(dynamic_args, order_seed)`, where order_seed draws the orders of
    the kernels' 'parallel' grid axes for that run (internals.interpret.grid_orders; None: params.random_seed)."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp.internals import interpret as interpret_transforms

    interpret_transforms.install()  # loads through ref.reshape / ref.bitcast views; grid orders drawn per run
    try:
        with pltpu.force_tpu_interpret_mode(params):
            with chip_context(generation) if generation else contextlib.nullcontext():
                traced = jax.jit(fn, static_argnums=tuple(static_argnums)).trace(*args)
            compiled = traced.lower(lowering_platforms=("cpu",)).compile(device_assignment=(jax.devices("cpu")[0],))
    except BaseException:
        pltpu.reset_tpu_interpret_mode_state()  # interpret mode keeps state that a failed run leaves behind
        raise

    def run(dynamic_args: Sequence[Any], order_seed: int | None = None):
        try:
            with pltpu.force_tpu_interpret_mode(params), interpret_transforms.grid_orders(order_seed):
                return jax.block_until_ready(compiled(*dynamic_args))
        except BaseException:
            pltpu.reset_tpu_interpret_mode_state()
            raise

    return run


def interpret_on_cpu(
    fn: Callable,
    args: Sequence[Any],
    static_argnums: Sequence[int],
    generation: str | None,
    params,
):
    """Run `fn(*args)` once in TPU interpret mode on the CPU (interpreted_on_cpu, compiled for this one run)."""
    run = interpreted_on_cpu(fn, args, static_argnums, generation, params)
    return run([a for i, a in enumerate(args) if i not in static_argnums])


def lower_for_tpu(
    fn: Callable,
    args: Sequence[Any],
    static_argnums: Sequence[int] = (),
    generation: str | None = None,
    kernel_facts: bool = True,
):
    """Lower `fn(*args)` for TPU. Array args are ShapeDtypeStructs; static ones are Python values.

    With a generation (needs libtpu) the lowering targets that chip, ready for a deviceless compile;
    without one it is a platform-only TPU lowering that works on any host. kernel_facts=False leaves out
    the chip context that Pallas kernels need while tracing (the program cut out around a recorded jaxpr's
    kernels fails to compile under it: 2p, 4p).
    """
    import jax
    from jax.sharding import SingleDeviceSharding

    if generation is not None:
        sharding = SingleDeviceSharding(_topology_device(generation))
        args = [
            a if i in static_argnums else jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
            for i, a in enumerate(args)
        ]
        # Pinning the outputs too keeps the lowering on the TPU even when the function ignores its inputs.
        jitted = jax.jit(fn, static_argnums=tuple(static_argnums), out_shardings=sharding)
        if not kernel_facts:
            return jitted.lower(*args)
        with chip_context(generation, cores_per_device(generation)):
            return jitted.lower(*args)
    traced = jax.jit(fn, static_argnums=tuple(static_argnums)).trace(*args)
    return traced.lower(lowering_platforms=("tpu",))


def deviceless_compile(
    fn: Callable, args: Sequence[Any], generation: str, static_argnums: Sequence[int] = (), kernel_facts: bool = True
):
    """Compile `fn(*args)` with XLA:TPU for `generation` on this (CPU) host. Raises on failure."""
    return lower_for_tpu(fn, args, static_argnums, generation, kernel_facts).compile()
