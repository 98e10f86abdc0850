"""The static cost model: pure functions from counts (bundles, grid steps, bytes) to seconds, per TPU generation.

  compute  = the bundles a run executes x seconds per bundle, never less than its matmuls take at the MXUs (and
             on 7x more than either where the two come close: Calibration.compute_overlap_power).
             From the loop structure of libtpu's final schedule: the code outside the grid loop runs once; per
             grid step, the straight-line body runs `body_ratio` of its code (pl.when skips) and the in-kernel
             loops run `loop_ratio` times their code (trips; kernel_replay). Seconds per bundle is calibrated per
             generation so that a large, ideal bf16 matmul tile runs at the chip's peak (from
             pltpu.get_tpu_info_for_chip). A megacore device's cores share its parallel work (parallel_split).
  memory   = the HBM bytes its BlockSpecs and DMAs move (a block is re-fetched whenever its block index
             changes between consecutive grid steps) / HBM bandwidth
  overhead = grid steps x the wait of a step's DMAs beyond their bytes (a step's own bookkeeping, the DMA
             issue and semaphore waits, is in its bundles: compute)
  estimate = max(compute, memory + overhead) + the part of min(compute, memory) the pipeline cannot overlap (at
             least one step's worth: the first fetch and the last write-back); the largest term names the
             bottleneck. A step's DMA wait is hidden when the step computes longer than its DMAs take.
Per generation, `CALIBRATION` scales these terms (fit on tokamax's real TPU timings by
benchmarks/estimate_fidelity.py --fit; the raw model is the identity). The XLA baseline is XLA's own cost
analysis: its optimal_seconds, at least max(FLOPs / peak, bytes accessed / bandwidth) of its own counts; the
XLA work around a candidate's kernels is costed per instruction of the compiled program (internals.hlo).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from jaxbench_mcp.catalog import targets
from jaxbench_mcp.internals import hlo, libtpu

# Bumped whenever the model's counting changes, so that cached baseline and expert estimates are recomputed.
MODEL_VERSION = 13
# How long a grid step's DMAs take beyond their bytes at the bandwidth (issue to completion), measured on a v5e
# (benchmarks/grid_steps.py: x * 2 over 64 MiB of f32 in 1024 to 64 steps, 0.18-0.22 us a step more than the
# bytes; the same steps under compute cost nothing more than their bundles). Other generations assume it.
STEP_OVERHEAD_S = 0.2e-6
# A grid step that moves nothing (its blocks stay, it starts no copy) waits on no DMA: it costs the grid loop's own
# code, 0.021 us on a v5e (benchmarks/grid_steps.py: one block kept over 64, 1,024 and 8,192 steps that skip their
# work, 14.5, 34.3 and 182.5 us; 0.2 us a step would make the last 1,650). Other generations assume it.
IDLE_STEP_S = 0.021e-6
# The calibration tile: one grid step of a (T, T) x (T, T) bf16 matmul with a float32 result.
CALIBRATION_TILE = 1024


def calibration_kernel():
    """A function and its abstract args: one grid step of an ideal bf16 MXU matmul tile."""
    t = CALIBRATION_TILE

    def body(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    def matmul(a, b):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((t, t), jnp.float32))(a, b)

    args = [jax.ShapeDtypeStruct((t, t), jnp.bfloat16)] * 2
    return matmul, args


def seconds_per_bundle(generation: str, calibration_bundles: int) -> float:
    ideal = 2 * CALIBRATION_TILE**3 / targets.chip_facts(generation).peak_bf16_flops
    return ideal / calibration_bundles


@dataclass(frozen=True)
class Calibration:
    """Per-generation corrections to the raw model, fit on measured kernels (identity = raw model)."""

    compute_scale: float = 1.0  # measured seconds per modelled second of bundle issue
    hbm_efficiency: float = 1.0  # the share of peak HBM bandwidth a kernel's DMAs reach
    # The share its writes reach, and the reads interleaved with them (memory_seconds); None: hbm_efficiency.
    hbm_write_efficiency: float | None = None
    mxu_efficiency: float = 1.0  # the share of the MXUs' peak a kernel's matmuls reach (at most 1: the peak)
    overlap_loss: float = 0.0  # the share of min(compute, memory) that is not hidden under the other
    # How far the bundles' issue and the MXUs' pace hide each other: None, fully (compute is the longer of the two);
    # else the power of the generalised mean that joins them, which is longer than either where they come close.
    compute_overlap_power: float | None = None
    step_overhead_s: float = STEP_OVERHEAD_S
    xla_op_overhead_s: float = 0.0  # fixed cost per XLA op around the kernels (launch, pipeline fill)
    fitted_on: str = "raw model"


RAW = Calibration()
# Chosen by `benchmarks/estimate_fidelity.py --per-op 12 --fit` on the fit half of tokamax's measured configs
# (the objective: the share within 1.5x, each op weighing alike), kept only where that half holds at least 10
# configs (v5e's 6 are too few: it keeps the raw model). compute_scale scales the bundles' issue rate only:
# below 1, code that does not wait on the MXUs issues faster than the calibration matmul's bundles, which do.
# mxu_efficiency is the share of the MXUs' peak real matmul loops reach (the floor of compute). With those two,
# neither fit wants an overlap correction: the pipeline's own overlap stands (overlap_loss 0). Refit once grid steps
# cost their DMA waits (STEP_OVERHEAD_S): v5p's constants again, 7x's but an HBM efficiency of 0.6, whose
# validation half is no better than 0.7's: kept. Generations without usable measurements (v4; v6e, whose tokamax
# data is held out for acceptance) keep the raw model.
CALIBRATION: dict[str, Calibration] = {
    # 7x's compute_overlap_power: tokamax's cross entropy at (2048, 512) blocks issues in 0.87 of its MXU time and runs
    # 1.035x of it, at (1024, 1024) 0.59 and 1.017x; with 16 (2 ** (1 / 16) = 1.044x where the two are equal) its
    # configs rank 0.97 against max()'s 0.90 and the roofline's 0.94, and every other 7x group within 0.01 of max()
    # (benchmarks/estimate_fidelity.py). Not fit elsewhere: where the raw model stands (v5e, v6e) an ideal matmul's
    # issue is its MXU time by construction, one term and not two.
    "7x": Calibration(
        compute_scale=0.7,
        hbm_efficiency=0.7,
        mxu_efficiency=0.7,
        overlap_loss=0.0,
        compute_overlap_power=16,
        fitted_on="calibrated on 30 tokamax 7x configs",
    ),
    # Not fit on kernels: v5e's writes measured apart (benchmarks/hbm_mix.py: a stream that writes, alone or
    # interleaved with as many reads, reaches 0.79-0.81 of the peak). Reads keep the full peak: with each step's fixed
    # cost added they come out at 0.94-1.11 of hbm_mix's times, and 0.9 fit the v5e corpus no better. Its tokamax
    # data is too small to fit the rest.
    "v5e": Calibration(hbm_write_efficiency=0.8, fitted_on="raw model; HBM writes at 0.8 of the peak, as measured"),
    "v5p": Calibration(
        compute_scale=0.8,
        hbm_efficiency=1.0,
        mxu_efficiency=0.9,
        overlap_loss=0.0,
        fitted_on="calibrated on 24 tokamax v5p configs",
    ),
}


def calibration_for(generation: str) -> Calibration:
    return CALIBRATION.get(generation, RAW)


@dataclass(frozen=True)
class KernelCost:
    compute_s: float
    memory_s: float
    overhead_s: float
    exposed_s: float = 0.0  # the part of min(compute, memory) the pipeline does not hide (step_mix included)

    @property
    def estimate_s(self) -> float:
        return max(self.compute_s, self.memory_s + self.overhead_s) + self.exposed_s


def parallel_split(parallel_steps: int, generation: str) -> float:
    """How many cores' worth of speed a kernel with `parallel_steps` grid steps along "parallel" dimensions gets on
    one device: a megacore device (targets.cores_per_device) deals them out evenly, so the busiest core runs
    ceil(steps / cores) of them (3 steps on 2 cores: 2 on one, a 1.5x speedup, not 2x)."""
    cores = targets.cores_per_device(generation)
    if parallel_steps < 2 or cores < 2:
        return 1.0
    return parallel_steps / math.ceil(parallel_steps / cores)


def executed_bundles(
    depth_bundles,
    bundles: int,
    steps: int,
    has_grid_loop: bool,
    body_ratio: float,
    loop_ratio: float,
    flat_ratio: float,
    in_kernel_loops: int,
    loop_waits=(),
    straight_waits=(),
    branch_bundles: Mapping[Any, Sequence[int]] | None = None,
    branch_ratios: Mapping[Any, Sequence[float | None]] | None = None,
    unbranched_ratios: Sequence[float | None] = (None, None),
) -> float:
    """Bundles a whole run executes, from the schedule's bundles per loop depth.

    With a grid loop (a gridded kernel of more than one step), depth 0 is the code around the grid (once),
    depth 1 the step's straight-line body, deeper the body's own loops; without one, depth 0 is the body. Only
    loop bodies repeat: the body's own loops run `loop_ratio` times their code per step, the straight-line
    body `body_ratio` of its code. When the trace has in-kernel loops but the schedule none, the compiler
    unrolled them (every trip is in the schedule): the whole body runs `flat_ratio` of its code. A trip of the
    body's own loops also stalls for its matmul and transpose results: `loop_waits` per loop depth from 1 (the
    schedule's, from result_wait), taken at the depth of the body's outermost own loops; and so does the
    straight-line code: `straight_waits` per depth from 0 (result_wait(..., straight=True) of the code at exactly
    that depth), with the code it stalls.

    The regions of branches (`branch_bundles` per kind and depth) run as often as their own work does:
    `branch_ratios` per kind (outside the body's own loops, inside them; None where the trace has no such branches
    there, and their regions count as the code around them), not as the rest of the code (paged attention starts
    its first pages once a run; cross entropy's loss epilogue runs at the last of its hidden blocks while its
    matmul runs at every one). Where the trace's matmul and vector branches all have regions, the code outside
    them runs `unbranched_ratios` of its own: a step that runs one of two alternative matmul branches still runs
    all of the code around them."""
    depths = list(depth_bundles) or [bundles]
    grid = 1 if has_grid_loop and len(depths) > 1 else 0  # the grid loop's depth, 0 if the schedule has none
    straight = [straight_waits[d] if len(straight_waits) > d else 0 for d in range(grid + 1)]
    once = depths[0] + straight[0] if grid else 0
    body, inner = depths[grid] + straight[grid], sum(depths[grid + 1 :])

    def regions(kind: str, deeper: bool) -> int:
        found = list((branch_bundles or {}).get(kind, ()))
        return sum(found[grid + 1 :]) if deeper else sum(found[grid : grid + 1])

    def part(code: float, ratio: float, loop: bool, deeper: bool) -> float:
        """Bundles `code` (with its branches' regions at its depth, or deeper) runs per step."""
        ratios: dict[str, float] = {}
        for kind, both in (branch_ratios or {}).items():
            if (found := both[loop]) is not None:
                ratios[kind] = found
        kinds = {kind: regions(kind, deeper) for kind in ratios}
        work_kinds = [kind for kind in ratios if kind in libtpu.WORK_BRANCH_KINDS]
        # The code outside the branches runs at its own ratio only where every matmul and vector branch was found:
        # a branch compiled without a region of its own is in that code, and is counted at the ratio of all work.
        own = unbranched_ratios[loop]
        if work_kinds and own is not None and all(kinds[kind] for kind in work_kinds):
            ratio = own
        else:
            kinds = {kind: n for kind, n in kinds.items() if kind == libtpu.COPY_BRANCH}
        return (code - sum(kinds.values())) * ratio + sum(n * ratios[kind] for kind, n in kinds.items())

    if inner and in_kernel_loops:
        wait = loop_waits[grid] if len(loop_waits) > grid else 0
        per_step = part(body, body_ratio, False, False) + part(inner, loop_ratio, True, True) + wait * loop_ratio
    elif in_kernel_loops:  # unrolled: the branches of every trip are in the schedule, as its other code
        per_step = (body + inner) * flat_ratio
    else:
        per_step = part(body + inner, body_ratio, False, False)
    return once + steps * per_step


# How many bundle slots after its work was pushed the first result of a burst in a rolled loop's trip can be popped (the
# estimate's unit of issue time): fitted on benchmarks/loop_matmuls.py's v5e record; other generations assume v5e's.
# Effective figures that carry the loop's own costs too, not the units' latencies: a large matmul's schedule pops
# results 50-120 bundles after their pushes and runs at speed.
RESULT_LATENCY_BUNDLES = {"mxu": 170, "xlu": 150}
# The same for every result of straight-line code (a grid step's body outside its own loops; an unrolled loop is
# straight-line code): fitted on the unrolled twins of benchmarks/loop_matmuls.py's fit group, the MXU's bounded by
# 8p_GEMM's schedule, which keeps eight matmuls in flight and pops each result about 100 slots after its push at full
# speed (its v5e time 1.02x its estimate without waits).
STRAIGHT_LATENCY_BUNDLES = {"mxu": 90, "xlu": 170}


def result_wait(ops, straight: bool = False) -> int:
    """Bundle slots the ops of one trip of a loop body (libtpu.LoopBody.ops), or of a run of straight-line code
    (`straight`), stall waiting for matmul and transpose results, their bundles issuing in order: a bundle issues one
    slot after the previous one, or once the result it pops is ready, whichever is later.

    A unit returns results in the order its work went in, so the j-th of its Q pops takes the result of push
    j * P // Q of its P (a matmul's push counts once per result vreg, so P = Q; a transpose's vregs all come with
    its last part). In a rolled loop's trip only the first result of each burst waits (ready RESULT_LATENCY_BUNDLES
    after its push): a burst begins with a push into a unit whose earlier results were all popped (the trip's first
    push; a matmul fed by the one before it, once its results are out), and the rest of the burst streams behind its
    first (benchmarks/loop_matmuls.py: a loop of four (512, 512) products a step measured within 2% of its unrolled
    twin, where a wait per result estimated it 1.55x; an attention trip's two chained matmuls, scores then values,
    0.71x-0.72x of their measured time at 2 to 8 heads while only the trip's first result waited, 0.89x-0.91x
    since). In straight-line code every result is ready STRAIGHT_LATENCY_BUNDLES after its push: the scheduler pops
    most of them that late anyway, and a chain (a transpose into a matmul, scores into the product with values)
    stalls at each link, head after head of an unrolled loop (benchmarks/loop_matmuls.py: unrolled attention 0.42x
    of its measured time when no wait was counted). A pop whose push comes later in the body takes the previous
    trip's result, ready by then."""
    latencies = STRAIGHT_LATENCY_BUNDLES if straight else RESULT_LATENCY_BUNDLES
    pushed_total: dict[str, int] = {}
    popped_total: dict[str, int] = {}
    for op in ops:
        if op.pushes:
            pushed_total[op.pushes] = pushed_total.get(op.pushes, 0) + op.results
        if op.pops:
            popped_total[op.pops] = popped_total.get(op.pops, 0) + 1
    pushed: dict[str, list[int]] = {unit: [] for unit in pushed_total}
    bursts: dict[str, list[bool]] = {unit: [] for unit in pushed_total}  # per pushed result: does it begin a burst
    popped: dict[str, int] = {}
    stall, index = 0, 0
    while index < len(ops):
        bundle = ops[index].bundle
        issue, last = bundle + stall, index
        while last < len(ops) and ops[last].bundle == bundle:
            op = ops[last]
            if op.pops and pushed_total.get(op.pops):
                j = popped.get(op.pops, 0)
                popped[op.pops] = j + 1
                paired = j * pushed_total[op.pops] // popped_total[op.pops]
                if paired < len(pushed[op.pops]) and (straight or bursts[op.pops][paired]):
                    latency = latencies[op.pops.rstrip("0123456789")]
                    issue = max(issue, pushed[op.pops][paired] + latency)
            last += 1
        stall = issue - bundle
        for op in ops[index:last]:
            if op.pushes:
                unit = op.pushes
                out = popped.get(unit, 0) * pushed_total[unit] // max(1, popped_total.get(unit, 0))
                bursts[unit].extend([len(pushed[unit]) <= out] + [False] * (op.results - 1))
                pushed[unit].extend([issue] * op.results)
        index = last
    return stall


MXU_PUSH_FLOPS = 2 * 8 * 128 * 128


def memory_seconds(
    hbm_bytes: float, written_bytes: float, generation: str, calibration: Calibration = RAW, cores: float = 1.0
) -> float:
    """Seconds to move `hbm_bytes`, `written_bytes` of them writes. Reads stream at the calibrated share of the
    peak; writes at their own, and so do as many reads as there are writes: a stream that interleaves the two runs
    at the writes' pace (benchmarks/hbm_mix.py: on a v5e reads alone reach 0.9 of the peak, any stream that writes
    as much as it reads 0.8, 3 reads to 1 write 0.86)."""
    bandwidth = targets.chip_facts(generation).hbm_bytes_per_second * cores
    written = min(written_bytes, hbm_bytes)
    read = hbm_bytes - written
    paced = min(read, written)
    write_efficiency = calibration.hbm_write_efficiency or calibration.hbm_efficiency
    return (read - paced) / (bandwidth * calibration.hbm_efficiency) + (written + paced) / (
        bandwidth * write_efficiency
    )


def overlapped(issue_s: float, mxu_s: float, power: float | None) -> float:
    """The seconds of compute whose bundles issue in `issue_s` and whose matmuls take `mxu_s` at the MXUs: the longer
    of the two (power None), or their generalised mean of `power` (Calibration.compute_overlap_power)."""
    longest = max(issue_s, mxu_s)
    if power is None or longest <= 0:
        return longest
    return longest * ((issue_s / longest) ** power + (mxu_s / longest) ** power) ** (1 / power)


def pipelined_cost(
    executed: float,
    steps: int,
    hbm_bytes: float,
    written_bytes: float,
    generation: str,
    spb: float,
    calibration: Calibration = RAW,
    pipeline_stages: float | None = None,
    cores: float = 1.0,
    mxu_pushes: float = 0.0,
    step_mix: Sequence[tuple[float, float, float]] = (),
    moving_steps: int | None = None,
) -> KernelCost:
    """Seconds from executed bundles and moved bytes (chip facts are per TensorCore). The bundles issue at the
    calibrated rate; the matmuls take at least their time at the share of the MXUs' peak kernels reach, which no
    issue rate shortens (the bundle count can undercount them: a loop body whose branches hold differently sized
    matmuls; and the rate per bundle is taken from a matmul whose bundles wait on the MXUs, so code that does not
    wait issues faster). A
    pipeline of n stages hides all but about 1/n of the smaller of compute and memory (the first fetch, the last
    write-back); the calibration may say it hides less. Where the steps differ in their mix of work and bytes
    (`step_mix`: per group of steps, its shares of both and of the moving steps), each group overlaps its own: the
    steps that only move bytes wait on them whatever the others compute. A step's fixed cost is its DMAs' wait for
    the `moving_steps` that move bytes (None: every step), the grid loop's own code (IDLE_STEP_S) for the rest.
    `cores`: the cores' worth of speed the work gets (a megacore device's parallel grid, a TensorCore mesh;
    parallel_split)."""
    chip = targets.chip_facts(generation)
    compute = (
        overlapped(
            executed * spb * calibration.compute_scale,
            mxu_pushes * MXU_PUSH_FLOPS / (chip.peak_bf16_flops * calibration.mxu_efficiency),
            calibration.compute_overlap_power,
        )
        / cores
    )
    memory = memory_seconds(hbm_bytes, written_bytes, generation, calibration, cores)
    stages = max(1.0, pipeline_stages if pipeline_stages is not None else float(steps))
    exposed = min(compute, memory) * max(1.0 / stages, calibration.overlap_loss)
    # A step's fixed cost hides under the write-back of the step before, as far as that lasts beyond a fixed cost of
    # its own (on a v5e, benchmarks/hbm_mix.py: streams writing 0.5 MiB a step take as long in 128 steps as in 8,
    # while 128 KiB ones still show the steps, as do reads; grid_steps.py: 0.02 us a step is left at 256 KiB).
    writing = memory_seconds(written_bytes, written_bytes, generation, calibration, cores)
    moving = steps if moving_steps is None else min(steps, moving_steps)
    fixed = moving * calibration.step_overhead_s / cores
    overhead = max(0.0, fixed - max(0.0, writing - fixed))
    if step_mix:
        grouped = sum(max(compute * w, memory * b + overhead * s) for w, b, s in step_mix)
        exposed += max(0.0, grouped - max(compute, memory + overhead))
    idle = (steps - moving) * IDLE_STEP_S / cores
    return KernelCost(compute_s=compute, memory_s=memory, overhead_s=overhead + idle, exposed_s=exposed)


# Every TPU TensorCore so far has 4 MXUs: its clock follows from the MXU peak (v5e: 4 x 128 x 128 MACs x 2 x 1.5 GHz =
# 197 TFLOP/s); its vector units issue 4 ALU operations a cycle on 8 x 128 elements each.
MXUS_PER_CORE = 4
VALU_SLOTS = 4
VREG_ELEMENTS = targets.VREG_ELEMENTS


def vector_ops_per_second(generation: str) -> float:
    """Element operations per second the vector units of one TensorCore do (elementwise arithmetic, reductions)."""
    chip = targets.chip_facts(generation)
    clock = chip.peak_bf16_flops / (2 * MXUS_PER_CORE * chip.mxu_size**2)
    return clock * VALU_SLOTS * VREG_ELEMENTS


def outside_seconds(ops, generation: str, calibration: Calibration = RAW) -> list[float]:
    """Seconds of each XLA op around the kernels (all its runs): the largest of its matmuls at the MXUs' peak (with
    what its convolutions' padding wastes), its other arithmetic at the vector units' rate and its HBM bytes at the
    bandwidth (memory_seconds), plus a fixed cost per run."""
    chip = targets.chip_facts(generation)
    vector_rate = vector_ops_per_second(generation)
    return [
        op.count
        * (
            max(
                (op.flops + getattr(op, "padding_flops", 0.0)) / chip.peak_bf16_flops,
                getattr(op, "vector_ops", 0.0) / vector_rate,
                memory_seconds(op.bytes, op.written_bytes, generation, calibration),
            )
            + calibration.xla_op_overhead_s
        )
        for op in ops
    ]


# What to change for each bottleneck (one or two concrete moves) and where to read about it.
BOTTLENECK_ADVICE = {
    "grid-step-overhead-bound": (
        "fewer, larger grid steps: grow the block sizes (as far as VMEM allows) so that each step does more work",
        "performance#block-size-vmem",
    ),
    "memory-bound": (
        "move fewer HBM bytes: larger blocks along the axes that re-fetch an operand (its index map "
        "changes between consecutive steps), or fuse the work around the kernel into it",
        "performance#roofline",
    ),
    "MXU-bound": (
        "already limited by the matmul units: keep matmul tiles multiples of the MXU size and in bf16; "
        "skip work that is masked out (pl.when on the block index)",
        "performance#mxu-shapes",
    ),
    "vector-unit-bound": (
        "the vector units limit it: move elementwise work off the per-step path (hoist it out of "
        "the innermost loop, do it once per output block), use bf16 where precision allows",
        "performance#reading-profile",
    ),
    "copy-issue-bound": (
        "starting copies limits it (most of its bundles are branches that only start DMAs, each copy ~10 bundles "
        "of address arithmetic and bounds checks): move more per copy (several pages that sit together, a "
        "BlockSpec), and start only the copies a step will read",
        "recipe-paged-attention#decode-performance",
    ),
}
# Where to read about each bottleneck (context_docs/ refs).
BOTTLENECK_DOCS = {name: doc for name, (_, doc) in BOTTLENECK_ADVICE.items()}
# The share of a kernel's compute time spent in copy branches from which starting copies is its bottleneck.
COPY_ISSUE_SHARE = 0.5


def bottleneck(cost: KernelCost, slot_use: dict[str, float], copy_share: float = 0.0) -> str:
    """What limits a kernel; `copy_share`: the share of its compute time spent in copy branches (executed_bundles)."""
    if cost.memory_s + cost.overhead_s >= cost.compute_s:  # the steps wait on their DMAs
        return "grid-step-overhead-bound" if cost.overhead_s >= cost.memory_s else "memory-bound"
    if copy_share >= COPY_ISSUE_SHARE:
        return "copy-issue-bound"
    vector = max((slot_use.get(k, 0.0) for k in ("VALU", "XLU", "EUP", "VLOAD", "VSTORE")), default=0.0)
    return "MXU-bound" if slot_use.get("MXU", 0.0) >= vector else "vector-unit-bound"


def workload_roofline_us(w, generation: str) -> float:
    """The roofline bound of a workload at full size: its FLOPs and the bytes of its inputs and outputs."""
    return targets.roofline_seconds(w.flops("full"), w.io_bytes("full"), generation)[0] * 1e6


def workload_memory_bound_us(w, generation: str) -> float:
    """The least time any correct program of a workload takes at full size: reading its inputs (but those it declares
    sparse: a paged cache is read only where its block table points) and writing its outputs, once each, at the
    device's HBM bandwidth. A kernel may do fewer FLOPs than the workload's nominal count (an algebraic fold), so
    this bound, not the FLOP roofline, is the one no estimate or measurement can beat."""
    return targets.roofline_seconds(0.0, workload_must_move_bytes(w), generation)[0] * 1e6


def workload_must_move_bytes(w) -> int:
    """Bytes a workload must read and write at full size: its dense inputs and its outputs."""
    dense = sum(a.tensor.nbytes for a in w.input_specs("full") if a.tensor and a.name not in w.sparse_inputs)
    return dense + sum(t.nbytes for t in w.output_specs("full"))


# The share of the MXUs' peak XLA's own matmuls reach, per generation. XLA's cost analysis prices a large GEMM at the
# roofline (optimal_seconds sits on it), which no real run reaches.
# v6e: JAXBench's README times 8p_GEMM (8192x8192 @ 8192x28672 bf16) with XLA at 5.32 ms, where the roofline is
# 4.18 ms: 0.79 (its Pallas tutorial matmul: 5.41 ms). A different source from tokamax's held-out v6e data.
# v5e: our own timings of the corpus' XLA baselines on one chip (benchmarks/data/tpu_times_v5e.json): the median
# share of the MXUs' peak over the compute-bound baselines of the fit half of the workloads (split by a hash of their
# id) is 0.93; the validation half's is 0.935 (benchmarks/xla_baseline_calibration.py part 3 prints both).
# No XLA timing exists here for v4, v5p or 7x: they take v6e's share, an assumption, not a fit.
XLA_MXU_EFFICIENCY = {"v6e": 0.79, "v5e": 0.93}
XLA_MXU_EFFICIENCY_ASSUMED = 0.79


def xla_mxu_efficiency(generation: str) -> float:
    return XLA_MXU_EFFICIENCY.get(generation, XLA_MXU_EFFICIENCY_ASSUMED)


# The share of the roofline tuned TPU kernels reach: what a profile says to aim for when the XLA baseline's
# figure is implausible. The median over 10 (op, generation) groups of tokamax's kept configs' roofline / measured
# time (7x, v5p, v5e; v6e held out), printed by benchmarks/xla_baseline_calibration.py.
AIM_ROOFLINE_SHARE = 0.44


def xla_counts(compiled, generation: str) -> dict:
    """What the XLA baseline's estimate is priced from: XLA's cost analysis of the compiled reference, with the runs
    of its loops after the first added from the program's own instructions (XLA's analysis counts a loop's body
    once: 7p's lax.map over 256 token blocks, 11p's loop over 128 groups), the MXU work its convolutions' narrow
    features waste on `generation`'s MXU (hlo._convolution_padding_flops), and whether every loop was counted."""
    cost = compiled.cost_analysis() or {}
    ops, loops_counted = hlo.outside_ops(compiled.as_text(), targets.chip_facts(generation).mxu_size)
    more_flops, more_bytes = hlo.repeated_work(ops)
    return {
        "xla_flops": float(cost.get("flops", 0.0)) + more_flops,
        "xla_bytes": float(cost.get("bytes accessed", 0.0)) + more_bytes,
        "xla_padding_flops": sum(op.padding_flops * op.count for op in ops),
        "xla_optimal_seconds": cost.get("optimal_seconds"),
        "xla_loops_counted": loops_counted,
    }


def xla_baseline_s(reference: dict, generation: str) -> float:
    """XLA's own estimate of the baseline: its cost model's optimal_seconds, but never below the roofline of
    XLA's own FLOP and byte counts with the FLOPs (and the MXU work its convolutions' padding wastes) at the share
    of the MXUs' peak XLA's matmuls reach (xla_mxu_efficiency; optimal_seconds is negative or missing for some
    programs)."""
    efficiency = xla_mxu_efficiency(generation)
    mxu_flops = reference["xla_flops"] + reference.get("xla_padding_flops", 0.0)
    bound = targets.roofline_seconds(mxu_flops / efficiency, reference["xla_bytes"], generation)[0]
    return max(reference.get("xla_optimal_seconds") or 0.0, bound)


# ---- VMEM -------------------------------------------------------------------------------------------------

LANES = targets.LANES


def _sublane_tile(itemsize: int, rows: int) -> int:
    """Rows of the VMEM tile a buffer's second-minor dimension is padded to (its memref tiling, which follows the
    operand's HBM layout): 8 for every dtype, or for a buffer of fewer rows the next power of two of them, at least
    the rows one 32-bit word packs (2 for 16-bit values, 4 for 8-bit). Measured with benchmarks/vmem_fidelity.py's
    "used" figure on v6e and v5e, blocks and VMEM scratch alike: f32, bf16 and int8 buffers of 24 and 40 rows take
    24 and 40 (bf16 is not padded to 16 rows, int8 not to 32), 12 rows take 16, 3 rows 4; one bf16 row takes 2."""
    if rows >= 8:
        return 8
    tile = max(1, 4 // max(1, itemsize))
    while tile < rows:
        tile *= 2
    return tile


def padded_block_bytes(block_shape, dtype: str) -> int:
    """VMEM bytes of one buffer of a block as Mosaic lays it out: squeezed (None) dimensions dropped, the last
    dimension padded to 128 lanes and the one before it to the sublane tile of its dtype and row count (a (..., 1)
    block takes a whole 128-lane row per element: 40k's (512, 1) f32 bias blocks take 256 KiB each, measured)."""
    itemsize = np.dtype(dtype).itemsize
    dims = [int(d) for d in block_shape if d is not None]
    if not dims:
        dims = [1]
    if len(dims) == 1:
        dims = [1, *dims]
    *lead, rows, cols = dims
    tile = _sublane_tile(itemsize, rows)
    rows = -(-rows // tile) * tile
    cols = -(-cols // LANES) * LANES
    return int(np.prod(lead, dtype=np.int64)) * rows * cols * itemsize


def _is_7x(generation: str | None) -> bool:
    try:
        return generation is not None and targets.check_generation(generation) == "7x"
    except targets.UnknownTarget:
        return False


def _mxu_size(generation: str | None) -> int:
    """The MXU width of `generation`; 256 (v6e's) when it names none we know."""
    if generation is None:
        return 256
    try:
        return targets.chip_facts(targets.check_generation(generation)).mxu_size
    except targets.UnknownTarget:
        return 256


def pipeline_vmem_bytes(kernel) -> int:
    """The part of vmem_bytes that is exact: the pipelined blocks at their padded sizes times their buffers, and the
    VMEM scratch at its padded size. The compiler allocates them as they are: every corpus kernel's compiled scoped
    VMEM is at least this, less 2% at most (23k's matvec, whose (1, N) blocks XLA may keep in VMEM itself:
    benchmarks/vmem_fidelity.py); the body's values are the modelled part."""
    scratch = getattr(kernel, "scratch", None)
    if scratch:
        total = sum(padded_block_bytes(b.shape, b.dtype) for b in scratch if b.memory_space in ("vmem", ""))
    else:
        total = int(kernel.scratch_bytes)
    for block in kernel.blocks:
        if block.in_hbm:
            continue
        shape = block.block_shape if block.block_shape else block.array_shape
        total += int(getattr(block, "buffers", 2)) * padded_block_bytes(shape, block.dtype)
    return total


def vmem_bytes(kernel, generation: str | None = None) -> int:
    """VMEM a Pallas kernel needs on `generation` (None: a 256-wide MXU, as v6e's), from its description
    (protocol.KernelInfo) alone, before any compile: every pipelined block (not in HBM) at its padded size times
    its buffers (two when its index changes over the grid, one when it stays: BlockInfo.buffers), plus its VMEM
    scratch at its padded size (SMEM scratch and semaphores live elsewhere), plus the large intermediate values of
    its body for the chip's MXU width and matmul staging (kernel_analysis.body_values_bytes). A description without
    scratch shapes counts its scratch_bytes unpadded. This is the kernel's own need with its operands in HBM: the
    compiler's "used_scoped_memory_configs" when every kernel may use the chip's whole VMEM (benchmarks/vmem_fidelity.py
    compares the two on the corpus). Under a smaller limit XLA may place a small operand in VMEM itself, outside
    the kernel's scoped allocation, and the kernel then compiles under less."""
    narrow = getattr(kernel, "body_values_bytes_mxu128", None)
    seven = getattr(kernel, "body_values_bytes_7x", None)
    body = getattr(kernel, "body_values_bytes", 0)
    if narrow is not None and _mxu_size(generation) < 256:
        body = narrow
    elif seven is not None and _is_7x(generation):
        body = seven
    return pipeline_vmem_bytes(kernel) + int(body or 0)


def vmem_overflow(kernels, generation: str, margin: float = 1.0, pipeline_margin: float = 1.0) -> str | None:
    """A sentence when some kernel cannot fit `generation`'s VMEM whatever limit it asks the compiler for (its whole
    estimate, vmem_bytes, exceeds `margin` times the chip's physical VMEM, or its pipeline buffers and scratch alone,
    pipeline_vmem_bytes, exceed `pipeline_margin` times it), or cannot fit the scoped limit it compiles under (its
    blocks and scratch exceed `pipeline_margin` times its vmem_limit_bytes or the chip's default: they live in that
    allocation whatever the compiler does; the whole estimate is not held to the limit, since under a tight limit the
    compiler keeps less besides them). The check refuses such a kernel as vmem_overflow in seconds, without the
    compile (minutes) that would fail. None when every kernel may fit."""
    chip = targets.chip_facts(generation)
    mib = 2**20
    for k in kernels:
        need, fixed = vmem_bytes(k, generation), pipeline_vmem_bytes(k)
        if fixed > pipeline_margin * chip.vmem_bytes or need > margin * chip.vmem_bytes:
            return (
                f"kernel {k.name} needs ~{need / mib:,.1f} MiB of VMEM ({fixed / mib:,.1f} MiB of blocks and "
                f"scratch), over {generation}'s vmem capacity of {chip.vmem_bytes / mib:,.0f} MiB (default scoped "
                f"limit {chip.scoped_vmem_bytes / mib:,.0f} MiB; vmem_limit_bytes cannot exceed the capacity): "
                "use smaller blocks"
            )
        limit = k.vmem_limit_bytes or chip.scoped_vmem_bytes
        if fixed > pipeline_margin * limit:
            which = (
                "its CompilerParams(vmem_limit_bytes)"
                if k.vmem_limit_bytes
                else f"{generation}'s default, vmem_limit_bytes unset"
            )
            return (
                f"kernel {k.name}'s blocks and scratch take ~{fixed / mib:,.1f} MiB of VMEM, over the scoped vmem "
                f"limit of {limit / mib:,.1f} MiB it compiles under ({which}): raise CompilerParams(vmem_limit_bytes) "
                f"(at most {chip.vmem_bytes / mib:,.0f} MiB, {generation}'s capacity) or use smaller blocks"
            )
    return None
