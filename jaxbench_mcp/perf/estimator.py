"""A static estimate of any traceable function that holds Pallas TPU kernels: `jaxbench_mcp.estimate`.

    import jax, jax.numpy as jnp, jaxbench_mcp
    est = jaxbench_mcp.estimate(my_matmul, jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16),
                                jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16), target="v6e")
    print(est.total_us, est.bottleneck, est.summary())

Arguments are abstract (ShapeDtypeStruct) or concrete; a small concrete argument (group sizes, a block table:
up to kernel_replay.SMALL_ELEMENTS elements) is used to follow what depends on it (a grid dimension known only
at run time, scalar-prefetch index maps, loop bounds, predicates). Everything else about the estimate is in
cost_model (the arithmetic), kernel_analysis and kernel_replay (what the trace says a kernel does when it runs),
internals.libtpu (the compiled schedule) and internals.hlo (XLA's work around the kernels).

Where the work runs:
  * `analyse` is the traced and compiled part. profile_kernel and `estimate_file` (the CLI: untrusted files)
    run it inside the sandboxed worker (jaxbench_mcp.sandbox.worker), which reports it through protocol events.
  * `estimate(fn, ...)` runs it in this process: the function object is the caller's own code, already
    running here, so a sandbox would protect nothing. libtpu reads its dump flag once, when it loads: the
    first call sets it (before anything in this process compiles for a TPU); if libtpu was already loaded
    without it, the call raises EstimateUnavailable and says to use estimate_file instead.
  * `assemble` turns what `analyse` found into seconds (cost_model), in the trusted parent, for both paths.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np
from pydantic import BaseModel, Field

from jaxbench_mcp.analysis import kernels as kernel_analysis, replay as kernel_replay
from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.checking.diagnosis import compile_failure
from jaxbench_mcp.errors import BadRequest
from jaxbench_mcp.internals import hlo, libtpu
from jaxbench_mcp.internals.hlo import _split_top
from jaxbench_mcp.models import KernelEstimate, OptionalReal, Real
from jaxbench_mcp.perf import cost_model
from jaxbench_mcp.sandbox import protocol

# At most this many XLA ops are itemised in an estimate (the rest are summed into the total).
MAX_OUTSIDE_OPS = 200


class EstimateUnavailable(RuntimeError):
    """The estimate cannot be made here (the message says why and what to do instead)."""


class OutsideOpTerm(BaseModel):
    name: str = Field(description="The instruction's name in XLA's optimised program")
    opcode: str
    us: Real = Field(description="Its share of the estimate: its own roofline from FLOPs and HBM bytes, all its runs")
    flops: Real
    bytes: Real = Field(description="HBM bytes of its operands and result (VMEM-resident buffers excluded), per run")
    count: int = Field(1, description="How often it runs (a while loop's known trip count)")


class Estimate(BaseModel):
    """A labelled static estimate for one TPU generation (not a measurement)."""

    target: str
    total_us: Real = Field(description="Kernels plus the XLA work around them")
    kernels: list[KernelEstimate] = Field(default_factory=list)
    outside_us: OptionalReal = Field(
        None, description="XLA's work outside the Pallas kernels; None when it could not be costed"
    )
    outside_ops: list[OutsideOpTerm] = Field(default_factory=list, description="That work per XLA op, largest first")
    bottleneck: str | None = None
    advice: list[str] = Field(
        default_factory=list, description="What to change for the bottleneck, with the doc section"
    )
    flags: list[str] = Field(default_factory=list)
    calibration: str = Field("raw model", description="Which per-generation calibration scaled the terms")

    def summary(self) -> str:
        lines = [
            f"{self.target}: ~{self.total_us:,.1f} us (static estimate; {self.calibration})"
            + (f"; bottleneck: {self.bottleneck}" if self.bottleneck else "")
        ]
        lines.extend(
            f"  kernel {k.name}: "
            + (f"{k.runs} runs x " if k.runs != 1 else "")
            + f"{k.grid_steps} steps x {k.bundles_per_step} bundles"
            + (f" x {k.run_ratio:.2f} run" if k.run_ratio != 1 else "")
            + f"; compute {k.compute_us:,.1f} us, HBM {k.memory_us:,.1f} us ({k.hbm_bytes / 2**20:,.1f} MiB, "
            f"{k.hbm_written_bytes / 2**20:,.1f} written), "
            f"not overlapped {k.exposed_us:,.1f} us, step DMA waits {k.overhead_us:,.1f} us -> {k.bottleneck}"
            + (f"; rolled loops waiting for results add {k.loop_wait_us:,.1f} us" if k.loop_wait_us >= 0.05 else "")
            for k in self.kernels
        )
        if self.outside_us is not None:
            lines.append(
                f"  XLA work outside the kernels: ~{self.outside_us:,.1f} us"
                + (
                    " ("
                    + ", ".join(f"{o.opcode} {o.name} {o.us:,.1f} us" for o in self.outside_ops[:5])
                    + (f", +{len(self.outside_ops) - 5} more" if len(self.outside_ops) > 5 else "")
                    + ")"
                    if self.outside_ops
                    else ""
                )
            )
        lines += [f"  do: {a}" for a in self.advice]
        lines += [f"  flag: {f}" for f in self.flags]
        return "\n".join(lines)


# ---- the traced and compiled part (sandboxed worker, or in process for trusted callables) -----------------


def analyse(
    fn: Callable,
    args: Sequence,
    static_argnums: Sequence[int],
    generations: list[str],
    dump_root: Path,
    on_trace: Callable[[protocol.ProfileTrace | None, str | None], None],
    on_compile: Callable[[str, protocol.ProfileCompile | None, str | None, float], None],
    write_module: Callable[[str, str], str] | None = None,
    on_compile_start: Callable[[str], None] = lambda generation: None,
) -> None:
    """Trace `fn(*args)`, follow its kernels (kernel_analysis, kernel_replay), then compile it for each generation
    with libtpu's schedule dumps and read the schedules and XLA's work around the kernels.

    Reports through callbacks: on_trace(trace, None) or on_trace(None, error text); per generation
    on_compile_start(generation) before compiling (a watchdog times the compile against its own budget, not the
    trace's), then on_compile(generation, compiled, None, seconds) or on_compile(generation, None, error text,
    seconds).
    `write_module(generation, lowered text) -> file name` keeps the lowered module (the profile checks that it
    is the program the check judged)."""
    try:
        trace = trace_kernels(fn, args, static_argnums, generations[0])
    except Exception as exc:  # noqa: BLE001 -- reported, not raised: the caller decides
        on_trace(None, "".join(traceback.format_exception(exc)))
        return
    on_trace(trace, None)
    for generation in generations:
        on_compile_start(generation)
        t0 = time.perf_counter()
        try:
            compiled = compile_kernels(fn, args, static_argnums, generation, dump_root, write_module)
        except Exception as exc:  # noqa: BLE001
            on_compile(generation, None, "".join(traceback.format_exception(exc)), time.perf_counter() - t0)
            continue
        on_compile(generation, compiled, None, time.perf_counter() - t0)


def trace_kernels(
    fn: Callable, args: Sequence, static_argnums: Sequence[int], generation: str
) -> protocol.ProfileTrace:
    """What the trace says each kernel does when it runs: grid steps, HBM traffic, run ratios (raises on failure)."""
    static = tuple(static_argnums)
    dynamic_args = [a for i, a in enumerate(args) if i not in static]
    abstract = [a if i in static else _abstract(a) for i, a in enumerate(args)]
    with targets.chip_context(generation, targets.cores_per_device(generation)):  # as compile_kernels lowers it
        closed = jax.make_jaxpr(fn, static_argnums=static)(*abstract)
    known = kernel_replay.known_kernel_operands(closed, dynamic_args)
    traffic = kernel_analysis.kernel_traffic(closed.jaxpr, known)
    return protocol.ProfileTrace(traffic=[protocol.KernelTraffic(**t) for t in traffic])


def compile_kernels(
    fn: Callable,
    args: Sequence,
    static_argnums: Sequence[int],
    generation: str,
    dump_root: Path,
    write_module: Callable[[str, str], str] | None = None,
) -> protocol.ProfileCompile:
    """Compile for `generation` with schedule dumps: the kernels' schedules and the XLA work around them (raises
    on a failed compile)."""
    static = tuple(static_argnums)
    abstract = [a if i in static else _abstract(a) for i, a in enumerate(args)]

    try:
        lowered = targets.lower_for_tpu(fn, abstract, static, generation)
        text = lowered.as_text()
        module_file = write_module(generation, text) if write_module else f"lowered_{generation}.mlir"
        key = (generation, hashlib.sha256(text.encode()).hexdigest())
        if key in _COMPILED:
            # jax compiles the same module once per process; a second compile comes from its cache and leaves no
            # schedule dump, so the schedules read the first time are the answer.
            return _COMPILED[key].model_copy(update={"module_file": module_file})
        compiled = lowered.compile()
    except Exception:
        libtpu.collect_dump(dump_root, f"failed-{generation}")
        raise
    result = read_compile(compiled, generation, dump_root, module_file)
    if result.schedules:
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        _COMPILED[key] = result
    return result


def read_compile(compiled, generation: str, dump_root: Path, module_file: str) -> protocol.ProfileCompile:
    """What a compile that just ended in a process started with schedule dumps (libtpu.dump_flag) says: the
    kernels' schedules, from the files libtpu wrote since the last collect_dump, and the XLA work around them, from
    the compiled program (`compiled`: a jax Compiled)."""
    schedules = libtpu.parse_dump(libtpu.collect_dump(dump_root, generation))
    try:
        ops, complete = hlo.outside_ops(compiled.as_text(), targets.chip_facts(generation).mxu_size)
        ops = sorted(ops, key=lambda o: -o.count * max(o.flops, o.bytes))
        outside = protocol.OutsideCost(
            xla_flops=sum(o.flops * o.count for o in ops),
            xla_bytes=sum(o.bytes * o.count for o in ops),
            xla_optimal_seconds=None,
            complete=complete and len(ops) <= MAX_OUTSIDE_OPS,
            ops=[
                protocol.OutsideOp(
                    name=o.name[:200],
                    opcode=o.opcode[:60],
                    flops=o.flops,
                    bytes=o.bytes,
                    written_bytes=o.written_bytes,
                    count=o.count,
                    vector_ops=o.vector_ops,
                    padding_flops=o.padding_flops,
                )
                for o in ops[:MAX_OUTSIDE_OPS]
            ],
        )
    except Exception:  # noqa: BLE001 -- the kernels' estimate stands; the work around them is not estimated
        outside = None
    return protocol.ProfileCompile(
        schedules=[
            protocol.Schedule(
                name=k.name,
                bundles=k.bundles,
                slot_use=k.slot_use,
                depth_bundles=list(k.depth_bundles),
                kernel=k.kernel,
                call_shapes=k.call_shapes if k.call_shapes is None or len(k.call_shapes) <= 2000 else None,
                loop_waits=_loop_waits(k.loop_bodies),
                straight_waits=_straight_waits(k.loop_bodies),
                branch_bundles={kind: list(n) for kind, n in k.branch_bundles.items()},
            )
            for k in schedules
        ],
        outside=outside,
        module_file=module_file,
    )


def _loop_waits(bodies: Sequence[libtpu.LoopBody]) -> list[int]:
    """Per loop depth from 1, the stall of one trip of each of its bodies, summed."""
    waits = [0] * max((b.depth for b in bodies), default=0)
    for body in bodies:
        if body.depth:
            waits[body.depth - 1] += cost_model.result_wait(body.ops)
    return waits


def _straight_waits(bodies: Sequence[libtpu.LoopBody]) -> list[int]:
    """Per depth from 0, the stall of the straight-line code at exactly that depth (a body's ops outside its inner
    loops), once per trip of each of its bodies, summed."""
    waits = [0] * (max((b.depth for b in bodies), default=-1) + 1)
    for body in bodies:
        waits[body.depth] += cost_model.result_wait([op for op in body.ops if op.depth == body.depth], straight=True)
    return waits


# (generation, sha256 of the lowered module) -> what its compile found, for this process's later compiles of it.
_COMPILED: dict[tuple[str, str], protocol.ProfileCompile] = {}


def _abstract(a):
    return a if isinstance(a, jax.ShapeDtypeStruct) else jax.ShapeDtypeStruct(a.shape, a.dtype)


def _is_control(spec) -> bool:
    """An input whose values steer a kernel (lengths, page tables, group sizes): integer or bool, and small."""
    if spec.tensor is None:
        return False
    dtype = np.dtype(spec.tensor.dtype)
    small = int(np.prod(spec.tensor.shape, dtype=np.int64)) <= kernel_replay.SMALL_ELEMENTS
    return small and (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.bool_))


def workload_args(w, size: str = "full", seed: int = 42) -> list:
    """The arguments a workload's estimate is traced on: its small integer inputs (lengths, page tables, group
    sizes, offsets: fixed by the workload's scenario) as concrete numpy arrays, so that the kernels' grids,
    predicates, loop trips and DMAs follow them; every other array abstract; static values as they are.

    Only the integer inputs are generated: the program that makes them drops the float data (XLA removes what
    no output needs), so this costs little even at full size. The compile stays abstract (compile_kernels),
    so the lowered program is the one a check judges."""
    specs = w.input_specs(size)
    args = workloads.abstract_inputs(w, size)
    wanted = [i for i, s in enumerate(specs) if _is_control(s)]
    if not wanted:
        return args
    dynamic = [i for i in range(len(specs)) if i not in w.static_argnums]
    params = w.size_params(size)

    def control(key):
        produced = w.module.create_inputs(seed=key, **params)
        return [produced[i] for i in wanted]

    with jax.default_device(jax.devices("cpu")[0]):
        values = jax.jit(control)(jax.numpy.uint32(seed))
    for i, value in zip(wanted, values, strict=True):
        if i in dynamic:
            args[i] = np.asarray(value)
    return args


def calibration_bundles(generation: str, dump_root: Path) -> int | None:
    """Bundles of the calibration kernel (cost_model.calibration_kernel) in `generation`'s schedule."""
    fn, args = cost_model.calibration_kernel()
    targets.deviceless_compile(fn, args, generation)
    found = libtpu.parse_dump(libtpu.collect_dump(dump_root, f"calibration-{generation}"))
    return found[0].bundles if found else None


# ---- seconds, in the trusted parent -----------------------------------------------------------------------


def assemble(
    trace: protocol.ProfileTrace,
    compiled: protocol.ProfileCompile,
    generation: str,
    spb: float,
    calibration: cost_model.Calibration | None = None,
) -> Estimate | str:
    """The estimate for one generation from what `analyse` reported; a string saying why there is none."""
    calibration = calibration or cost_model.calibration_for(generation)
    traffic, schedules = trace.traffic, compiled.schedules
    if not schedules:
        return "no Pallas kernel schedule found in the compile dump"
    pairs = pair_kernels(schedules, traffic)
    if isinstance(pairs, str):
        return pairs
    kernels = [
        kernel_estimate(f"{k}:{flow.kernel or schedule.name}", schedule, flow, generation, spb, calibration)
        for k, (schedule, flow) in enumerate(pairs)
    ]
    outside_us, ops = None, []
    if compiled.outside is not None:
        seconds = cost_model.outside_seconds(compiled.outside.ops, generation, calibration)
        ops = sorted(
            (
                OutsideOpTerm(name=o.name, opcode=o.opcode, us=s * 1e6, flops=o.flops, bytes=o.bytes, count=o.count)
                for o, s in zip(compiled.outside.ops, seconds, strict=True)
            ),
            key=lambda o: -o.us,
        )
        outside_us = sum(seconds) * 1e6
    total = sum(k.estimate_us for k in kernels) + (outside_us or 0.0)
    main = max(kernels, key=lambda k: k.estimate_us)
    estimate = Estimate(
        target=generation,
        total_us=total,
        kernels=kernels,
        outside_us=outside_us,
        outside_ops=ops,
        bottleneck=main.bottleneck,
        calibration=calibration.fitted_on,
    )
    if main.bottleneck in cost_model.BOTTLENECK_ADVICE:
        move, doc = cost_model.BOTTLENECK_ADVICE[main.bottleneck]
        estimate.advice.append(f"{main.bottleneck} ({main.name}): {move} (read_docs: {doc})")
    if outside_us is not None and outside_us > total / 2:
        estimate.advice.append(
            "most of the time is XLA work around the kernels (largest: "
            + ", ".join(f"{o.opcode} {o.name}" for o in ops[:2])
            + "): fold it into a kernel or remove it (read_docs: performance#when-xla-wins)"
        )
    estimate.flags = estimate_flags(estimate, compiled.outside)
    for k in kernels:
        if k.loop_wait_us > LOOP_WAIT_SHARE * k.estimate_us:
            estimate.advice.append(
                LOOP_WAIT_ADVICE.format(kernel=k.name, us=k.loop_wait_us, share=k.loop_wait_us / k.estimate_us)
            )
    return estimate


# Where waiting for results in a rolled loop is worth acting on (benchmarks/loop_matmuls.py: on a v5e, unrolling such
# loops of 64-deep matmuls and transposes made them 1.5-2.6x faster).
LOOP_WAIT_SHARE = 0.1
LOOP_WAIT_ADVICE = (
    "{kernel}: ~{us:,.1f} us ({share:.0%} of its estimate) is trips of an in-kernel loop the compiler kept rolled "
    "waiting for their matmul or transpose results (each trip pops a result soon after pushing its work). Unroll "
    "the loop (fori_loop(..., unroll=True)) or batch its trips into larger matmuls, so that the scheduler pops one "
    "trip's results while it pushes the next one's operands (read_docs: performance#in-kernel-loops)"
)


def pair_kernels(
    schedules: Sequence[protocol.Schedule], traffic: Sequence[protocol.KernelTraffic]
) -> list[tuple[protocol.Schedule, protocol.KernelTraffic]] | str:
    """Each traced kernel (trace order) with its schedule, or a string saying why they cannot be paired.

    libtpu dumps schedules in compile order, which need not be the trace's (XLA schedules independent kernels
    as it likes), so they pair by the kernel's name. Kernels sharing a name pair in order where they do the same
    work (the same body called twice), else by the shapes of their calls (one kernel function on several shapes);
    where neither tells them apart, none is paired: a crosswise pairing would price one kernel's code with the
    other's work. A lone kernel needs no name."""
    if len(schedules) != len(traffic):
        return (
            f"no estimate: libtpu's dump holds {len(schedules)} kernel schedule(s) for the {len(traffic)} kernel(s) "
            "of the trace, so they cannot be paired"
        )
    if len(traffic) == 1:
        return [(schedules[0], traffic[0])]
    compiled: dict[str | None, list[protocol.Schedule]] = {}
    for schedule in schedules:
        compiled.setdefault(schedule.kernel, []).append(schedule)
    traced: dict[str | None, list[protocol.KernelTraffic]] = {}
    for flow in traffic:
        traced.setdefault(flow.kernel, []).append(flow)
    counts = {n: len(v) for n, v in compiled.items()}
    if None in compiled or None in traced or counts != {n: len(v) for n, v in traced.items()}:

        def names(groups):
            return ", ".join(f"{n or '(unnamed)'} x{len(v)}" for n, v in groups.items())

        return (
            f"no estimate: the kernels libtpu compiled ({names(compiled)}) are not the kernels of the trace "
            f"({names(traced)}), so their schedules cannot be paired with them"
        )
    for name, flows in traced.items():
        if len({_work_of(flow) for flow in flows}) == 1:
            continue  # the same body and work: any order pairs them alike
        # One kernel function on several shapes: the custom call's shapes tell its schedules apart.
        shapes = [flow.call_shapes for flow in flows if flow.call_shapes is not None]
        if (
            len(shapes) != len(flows)
            or len(set(shapes)) != len(shapes)
            or sorted(shapes) != sorted(str(s.call_shapes) for s in compiled[name])
        ):
            return (
                f"no estimate: {len(flows)} kernels share the name {name}, but do different work, so libtpu's "
                "schedules cannot be told apart; give each pallas_call a name of its own (pl.pallas_call(..., "
                'name="gemm"))'
            )
        by_shapes = {s.call_shapes: s for s in compiled[name]}
        compiled[name] = [by_shapes[shape] for shape in shapes]  # in trace order, for the pairing below
    return [(compiled[flow.kernel].pop(0), flow) for flow in traffic]


def _work_of(flow: protocol.KernelTraffic) -> tuple:
    """What a kernel's schedule is priced with: two kernels alike in all of it are interchangeable in a pairing."""
    return (
        flow.steps,
        flow.hbm_bytes,
        flow.hbm_written_bytes,
        flow.dma_bytes,
        flow.mxu_pushes,
        flow.floor_flops,
        flow.run_ratio,
        flow.runs,
        tuple((kind, *r) for kind, r in sorted(flow.branch_ratios.items())),
        tuple(flow.unbranched_ratios),
    )


def kernel_estimate(
    name: str,
    schedule: protocol.Schedule,
    flow: protocol.KernelTraffic,
    generation: str,
    spb: float,
    calibration: cost_model.Calibration,
) -> KernelEstimate:
    has_grid_loop = flow.steps > 1
    counts = (
        schedule.depth_bundles,
        schedule.bundles,
        flow.steps,
        has_grid_loop,
        flow.body_ratio,
        flow.loop_ratio,
        flow.flat_ratio,
        flow.in_kernel_loops,
    )

    def executed_bundles(loop_waits, branch_ratios=flow.branch_ratios) -> float:
        return cost_model.executed_bundles(
            *counts,
            loop_waits=loop_waits,
            straight_waits=schedule.straight_waits,
            branch_bundles=schedule.branch_bundles,
            branch_ratios=branch_ratios,
            unbranched_ratios=flow.unbranched_ratios,
        )

    executed = executed_bundles(schedule.loop_waits)
    waited = executed - executed_bundles(())
    # The copy branches' bundles run: those of every kind, with no copy branch run.
    no_copies = {
        **flow.branch_ratios,
        "copy": [None if r is None else 0.0 for r in flow.branch_ratios.get("copy", [None, None])],
    }
    copying = executed - executed_bundles(schedule.loop_waits, no_copies)
    # A kernel that pipelines its own DMAs inside a loop overlaps them across the loop's trips.
    stages = flow.steps * (max(1.0, flow.loop_ratio) if flow.in_kernel_loops and flow.dma_bytes else 1.0)
    if flow.cores > 1:
        # A TensorCore mesh kernel: `executed` is one core's average; the busiest core's share sets the time.
        executed, waited, copying = executed * flow.cores, waited * flow.cores, copying * flow.cores
        cores = 1.0 / flow.core_share
    else:
        cores = cost_model.parallel_split(flow.parallel_steps, generation)
    priced = (
        flow.hbm_bytes,
        flow.hbm_written_bytes,
        generation,
        spb,
        calibration,
        stages,
        cores,
        flow.mxu_pushes,
        flow.step_mix,
        flow.moving_steps,
    )
    cost = cost_model.pipelined_cost(executed, flow.steps, *priced)
    unwaited = cost_model.pipelined_cost(executed - waited, flow.steps, *priced)
    not_copying = cost_model.pipelined_cost(executed - copying, flow.steps, *priced)
    copy_share = 1.0 - not_copying.compute_s / cost.compute_s if cost.compute_s > 0 else 0.0
    runs = max(0, flow.runs)  # a kernel inside a loop runs once per trip: each run costs the same
    followed = flow.steps_exact and flow.runs_exact and flow.run_ratio_exact and flow.exact
    floor_compute_s, floor_memory_s = (0.0, 0.0) if followed else operand_floor(flow, generation, calibration)
    floored = max(floor_compute_s, floor_memory_s) > cost.estimate_s
    if floored:
        # What could not be followed is bounded by the work the operands imply, never priced below it.
        cost = cost_model.KernelCost(
            compute_s=max(cost.compute_s, floor_compute_s),
            memory_s=max(cost.memory_s, floor_memory_s),
            overhead_s=cost.overhead_s,
            exposed_s=cost.exposed_s,
        )
    return KernelEstimate(
        name=name,
        grid_steps=flow.steps,
        bundles_per_step=schedule.bundles,
        slot_use=schedule.slot_use,
        hbm_bytes=flow.hbm_bytes * runs,
        hbm_written_bytes=flow.hbm_written_bytes * runs,
        hbm_bytes_exact=flow.exact,
        run_ratio=flow.run_ratio,
        run_ratio_exact=flow.run_ratio_exact,
        grid_steps_exact=flow.steps_exact and flow.runs_exact,
        compute_us=cost.compute_s * 1e6 * runs,
        memory_us=cost.memory_s * 1e6 * runs,
        overhead_us=cost.overhead_s * 1e6 * runs,
        exposed_us=cost.exposed_s * 1e6 * runs,
        estimate_us=cost.estimate_s * 1e6 * runs,
        bottleneck=cost_model.bottleneck(cost, schedule.slot_use, copy_share),
        runs=runs,
        floored=floored,
        loop_wait_us=0.0 if floored else (cost.estimate_s - unwaited.estimate_s) * 1e6 * runs,
    )


def operand_floor(
    flow: protocol.KernelTraffic, generation: str, calibration: cost_model.Calibration
) -> tuple[float, float]:
    """One run's time bound from the work the kernel's operands imply (kernel_analysis.operand_floor), on all the
    device's cores, as (compute, memory) seconds: its matmul at the MXUs' peak, its bytes at the bandwidth."""
    chip = targets.chip_facts(generation)
    cores = targets.cores_per_device(generation)
    return (
        flow.floor_flops / (chip.peak_bf16_flops * calibration.mxu_efficiency * cores),
        cost_model.memory_seconds(flow.floor_bytes, flow.floor_written_bytes, generation, calibration, cores),
    )


def estimate_flags(estimate: Estimate, outside: protocol.OutsideCost | None) -> list[str]:
    """What an estimate cannot see, said next to it."""
    flags = []
    kernels = estimate.kernels
    if estimate.outside_us is None:
        flags.append("XLA work outside the Pallas kernels is not included: the compiled program could not be read")
    elif outside is not None and not outside.complete:
        flags.append(
            "XLA work outside the kernels is partly counted: a loop's trip count is unknown (its body counts once)"
        )
    if any(k.runs > 1 for k in kernels):
        flags.append(
            "a kernel runs inside a loop: its cost counts once per trip ("
            + ", ".join(f"{k.name} x{k.runs}" for k in kernels if k.runs > 1)
            + ")"
        )
    if any(not k.grid_steps_exact for k in kernels):
        flags.append(
            "a grid dimension is known only at run time and could not be computed from the inputs: it counts as "
            "the number of blocks its index maps address (an upper bound), or as 1 without such a bound; or a "
            "loop around a kernel has a trip count the inputs do not determine (the kernel counts once)"
        )
    if any(k.floored for k in kernels):
        flags.append(
            "BOUNDED, not counted: the replay could not follow "
            + ", ".join(k.name for k in kernels if k.floored)
            + " (a grid, trip count or predicate the inputs do not determine) and its count fell below the work its "
            "operands imply; it is priced at that bound (every input read and every output written once, its matmul "
            "at the MXUs' peak). Pass the integer inputs (group sizes, lengths) as concrete arrays for a real count"
        )
    if any(not k.hbm_bytes_exact for k in kernels):
        flags.append("HBM traffic is approximate: an index map or DMA depends on data the inputs do not determine")
    if any(not k.run_ratio_exact for k in kernels):
        flags.append(
            "compute is approximate: a pl.when/cond predicate depends on data (its heaviest branch is counted) "
            "or a loop's trip count is unknown (its body counts once)"
        )
    return flags


# ---- the public API ---------------------------------------------------------------------------------------

_LOCK = threading.Lock()
_SPB: dict[str, float] = {}
_DUMP_ROOT: Path | None = None


_DUMP_PREFIX = "jaxbench-estimate-"


def _remove_dump_roots_of_dead_processes() -> None:
    """atexit cannot run in a killed process (a timed-out script): its dump folder is removed by the next one."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_DUMP_PREFIX}*-*"):
        pid = folder.name[len(_DUMP_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive, another user's
            pass


def _process_dump_root() -> Path:
    """This process's libtpu dump folder, set before libtpu loads; EstimateUnavailable if it loaded without one."""
    global _DUMP_ROOT

    if _DUMP_ROOT is not None:
        return _DUMP_ROOT
    current = libtpu.dump_dir_of(os.environ.get("LIBTPU_INIT_ARGS", ""))
    if current is not None:
        _DUMP_ROOT = Path(current)
        return _DUMP_ROOT
    if libtpu.loaded_in_process():
        raise EstimateUnavailable(
            "libtpu is already loaded in this process without a schedule dump folder (it reads its flags once), so "
            "this process cannot read kernel schedules: call jaxbench_mcp.estimate before anything else compiles for "
            "a TPU, or use jaxbench_mcp.perf.estimator.estimate_file (a worker process) instead"
        )
    _remove_dump_roots_of_dead_processes()
    root = Path(tempfile.mkdtemp(prefix=f"{_DUMP_PREFIX}{os.getpid()}-"))
    atexit.register(shutil.rmtree, root, True)  # each compile's schedules are read right after it
    os.environ["LIBTPU_INIT_ARGS"] = (
        os.environ.get("LIBTPU_INIT_ARGS", "") + " " + libtpu.dump_flag(str(root))
    ).strip()
    _DUMP_ROOT = root
    return root


def seconds_per_bundle(generation: str, dump_root: Path) -> float:
    if generation not in _SPB:
        bundles = calibration_bundles(generation, dump_root)
        if not bundles:
            raise EstimateUnavailable(f"the calibration kernel left no schedule for {generation}")
        _SPB[generation] = cost_model.seconds_per_bundle(generation, bundles)
    return _SPB[generation]


def estimate(
    fn: Callable,
    *args,
    target: str = targets.DEFAULT_CPU_TARGET,
    static_argnums: Sequence[int] = (),
    calibration: cost_model.Calibration | None = None,
) -> Estimate:
    """A static estimate of `fn(*args)` on TPU generation `target`, from a deviceless compile in this process.

    `args`: ShapeDtypeStructs, concrete arrays (small ones are followed, see the module doc) or, at
    `static_argnums`, Python values. Raises EstimateUnavailable when no estimate can be made (the message says
    why: the trace or the compile failed, libtpu is loaded without dumps, no Pallas kernel was found)."""
    generation = targets.check_generation(target)
    with _LOCK:
        root = _process_dump_root()
        spb = seconds_per_bundle(generation, root)
        found: dict = {}

        def on_trace(trace, error):
            found["trace"], found["trace_error"] = trace, error

        def on_compile(gen, compiled, error, _seconds):
            found["compiled"], found["compile_error"] = compiled, error

        analyse(fn, args, static_argnums, [generation], root, on_trace, on_compile)
    if found.get("trace") is None:
        raise EstimateUnavailable(f"tracing failed:\n{found.get('trace_error', '')[-3000:]}")
    if found.get("compiled") is None:
        raise EstimateUnavailable(f"compiling for {generation} failed:\n{found.get('compile_error', '')[-3000:]}")
    result = assemble(found["trace"], found["compiled"], generation, spb, calibration)
    if isinstance(result, str):
        raise EstimateUnavailable(result)
    return result


# ---- untrusted files: the sandboxed worker ----------------------------------------------------------------


def parse_args(spec: str) -> list[protocol.ArrayArg | protocol.StaticInput]:
    """`--args` of `jaxbench-mcp estimate`: comma-separated arguments, each an abstract array `bf16[8192,8192]`, a
    small concrete array `int32[4]=[1024,1024,1024,1024]`, or a Python literal (a static argument: 3, 0.5, True,
    'causal', None). Returns protocol.ArrayArg / protocol.StaticInput values."""
    aliases = {
        "bf16": "bfloat16",
        "f32": "float32",
        "f16": "float16",
        "s32": "int32",
        "i32": "int32",
        "s8": "int8",
        "i8": "int8",
        "u8": "uint8",
        "u32": "uint32",
        "s64": "int64",
        "i64": "int64",
        "pred": "bool",
        "f64": "float64",
    }
    found: list[protocol.ArrayArg | protocol.StaticInput] = []
    for item in _split_top(spec):
        match = re.fullmatch(r"([a-z][a-z0-9_]*)\[([\d,\s]*)\](?:\s*=\s*(\[.*\]))?", item)
        if match:
            shape = [int(d) for d in match.group(2).replace(" ", "").split(",") if d]
            values = ast.literal_eval(match.group(3)) if match.group(3) else None
            if values is not None:
                values = np.asarray(values).reshape(-1).tolist()
            found.append(
                protocol.ArrayArg(shape=shape, dtype=aliases.get(match.group(1), match.group(1)), values=values)
            )
            continue
        try:
            found.append(protocol.StaticInput(static=ast.literal_eval(item)))
        except (ValueError, SyntaxError):
            raise BadRequest(
                f"cannot read argument {item!r}: write an array as dtype[dims] (e.g. bf16[8192,8192]), "
                "a small concrete one as int32[4]=[1,2,3,4], or a Python literal for a static argument"
            ) from None
    return found


def estimate_file(
    source: str, function: str, args: list, generations: list[str], checker=None, cancel=None
) -> dict[str, Estimate | str]:
    """A static estimate of `function` from the Python source `source` (untrusted: it runs in the sandboxed
    worker), per generation: an Estimate, or a string saying why there is none. `args` as parse_args returns."""
    owned = checker is None
    checker = checker or Checker(spares=0, slots=1)
    static = [i for i, a in enumerate(args) if isinstance(a, protocol.StaticInput)]
    try:
        outcome = checker.run_job(
            lambda _d, _recorded: protocol.EstimateJob(
                function=function, args=args, static_argnums=static, targets=generations
            ),
            source,
            cancel=cancel,
            dump_schedules=True,
        )
    finally:
        if owned:
            checker.close()
    try:
        if outcome.violation:
            return dict.fromkeys(generations, f"no estimate: the worker broke the protocol ({outcome.violation})")
        events = outcome.stage_events()
        spb = {
            e.target: cost_model.seconds_per_bundle(e.target, e.calibration_bundles)
            for e in outcome.events
            if isinstance(e, protocol.Reference) and e.calibration_bundles
        }
        failed = next((e for e in events if e.state == "failed" and e.stage is not protocol.Stage.COMPILE), None)
        trace = next((e.profile_trace for e in events if e.profile_trace is not None), None)
        results: dict[str, Estimate | str] = {}
        for e in events:
            if e.stage is not protocol.Stage.COMPILE or e.state == "start":
                continue
            if e.state == "failed":
                results[e.target] = compile_failure(e.text or "")
            elif e.target not in spb:
                results[e.target] = f"no estimate: the calibration kernel left no schedule for {e.target}"
            elif trace is not None:
                results[e.target] = assemble(trace, e.profile_compile, e.target, spb[e.target])
        for g in generations:
            if g not in results:
                why = (
                    (failed.text or "").strip()[-2000:]
                    if failed
                    else (outcome.killed_for or f"exit status {outcome.returncode}")
                )
                results[g] = f"no estimate for {g}: {why}"
        return results
    finally:
        outcome.cleanup()
