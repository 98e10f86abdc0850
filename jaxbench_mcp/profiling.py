"""How fast a correct kernel is: measured on a TPU host (measuring.py), estimated on a CPU host with libtpu.

The static estimate (always labelled as one), per kernel and TPU generation:
  compute  = bundles in the kernel's final schedule (libtpu's own bundle dump) x grid steps x the run
             ratio (code a step runs / code in the schedule: pl.when branches skipped by program-id
             predicates, in-kernel loops repeated; kernel_analysis.run_ratio) x seconds per bundle;
             seconds per bundle is calibrated per generation so that a large, ideal bf16 matmul tile
             runs at the chip's peak (from pltpu.get_tpu_info_for_chip)
  memory   = the HBM bytes its BlockSpecs move (a block is re-fetched whenever its block index changes
             between consecutive grid steps) / HBM bandwidth
  overhead = grid steps x STEP_OVERHEAD_S (the pipeline's fixed cost per grid step)
  estimate = max(compute, memory) + overhead; the largest term names the bottleneck.
Work the candidate leaves to XLA around its kernels is cut out of the traced program
(kernel_analysis.outside_kernels) and costed like the XLA baseline, then added to the kernels' estimates.
The XLA baseline is estimated from XLA's own cost analysis: its optimal_seconds, at least max(FLOPs / peak,
bytes accessed / bandwidth) of its own counts.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jaxbench_mcp import error_catalog, measuring, targets
from jaxbench_mcp.checking import decisive_lines

# A widely quoted figure for the fixed cost of one Pallas TPU grid step (DMA issue/wait, bookkeeping).
STEP_OVERHEAD_S = 0.35e-6
# Where to read about each bottleneck (context_docs/ refs).
BOTTLENECK_DOCS = {
    "grid-step-overhead-bound": "performance#block-size-vmem",
    "memory-bound": "performance#roofline",
    "MXU-bound": "performance#mxu-shapes",
}
# Measured runs that disagree by more than this (max - min over median) get a flag.
NOISY_SPREAD_PCT = 20.0
# The calibration tile: one grid step of a (T, T) x (T, T) bf16 matmul with a float32 result.
CALIBRATION_TILE = 1024
DUMP_FLAG = "--xla_jf_dump_to="
_SCHEDULE_SUFFIX = "-schedule-analysis_final_bundles.txt"
_UTILIZATION_SUFFIX = "-final_hlo-static-per-bundle-utilization.txt"
# Programs of XLA's own in a dump, as opposed to Mosaic kernels.
_XLA_PROGRAMS = re.compile(r"^\d+-(TLP|<late-[a-z]+>)-")
# The sizes in libtpu's VMEM overflow messages (the rest of those lines is the whole HLO instruction).
_VMEM_SIZES = re.compile(r"(Scoped allocation with size [\d.]+\w? and limit [\d.]+\w? exceeded scoped vmem limit by [\d.]+\w?"
                         r"|Used [\d.]+\w? of [\d.]+\w? vmem)")


@dataclass(frozen=True)
class KernelSchedule:
    name: str
    bundles: int
    slot_use: dict[str, float]  # average use of each slot kind per bundle, as a fraction of its capacity


def _parse_utilization(path: Path) -> dict[str, float]:
    lines = path.read_text().splitlines()
    try:
        header = lines.index("== CAPACTIY:") if "== CAPACTIY:" in lines else lines.index("== CAPACITY:")
    except ValueError:
        return {}
    names = [n.strip() for n in lines[header + 1].split(",")]
    capacity = [int(c) for c in lines[header + 2].split()]
    totals, rows = [0] * len(names), 0
    for line in lines[header + 4:]:
        cells = line.split()
        if len(cells) != len(names):
            continue
        rows += 1
        totals = [t + int(c) for t, c in zip(totals, cells)]
    if rows == 0:
        return {}
    return {n: round(t / (rows * cap), 4) for n, t, cap in zip(names, totals, capacity) if cap}


def parse_dump(directory: Path) -> list[KernelSchedule]:
    """The Mosaic kernels that libtpu scheduled, in compile order, from an --xla_jf_dump_to folder."""
    schedules = []
    for path in sorted(directory.glob(f"*{_SCHEDULE_SUFFIX}"), key=lambda p: int(p.name.split("-", 1)[0])):
        if _XLA_PROGRAMS.match(path.name):
            continue
        text = path.read_text()
        match = re.search(r"total scheduled bundles:\s+(\d+)", text)
        if not match or "tpu_custom_call" not in text:  # XLA's own fusions are dumped too
            continue
        stem = path.name.split("-", 1)[1].rsplit("-", 2)[0]  # "<id>-<name>-NN-schedule..." -> name
        stem = re.sub(r"-\d+$", "", stem)
        utilization = next(directory.glob(f"{path.name.split('-', 1)[0]}-*{_UTILIZATION_SUFFIX}"), None)
        schedules.append(KernelSchedule(name=stem, bundles=int(match.group(1)),
                                        slot_use=_parse_utilization(utilization) if utilization else {}))
    return schedules


def collect_dump(dump_root: Path, generation: str) -> Path:
    """Move what libtpu dumped since the last call into a folder of its own for this generation."""
    target = dump_root / f"target-{generation}"
    target.mkdir(parents=True, exist_ok=True)
    for path in list(dump_root.iterdir()):
        if path.is_file():
            shutil.move(str(path), target / path.name)
    return target


def calibration_kernel():
    """A function and its abstract args: one grid step of an ideal bf16 MXU matmul tile."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

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


def block_traffic(block_indices, block_bytes: int) -> int:
    """HBM bytes a pipelined BlockSpec moves: a fetch at the first step and at every index change."""
    import numpy as np

    idx = np.asarray(block_indices)
    if idx.ndim == 1:
        idx = idx[:, None]
    changes = 1 + int(np.any(idx[1:] != idx[:-1], axis=1).sum()) if len(idx) else 0
    return changes * block_bytes


@dataclass(frozen=True)
class KernelCost:
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def estimate_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s


def kernel_cost(bundles: int, steps: int, hbm_bytes: float, generation: str, spb: float,
                run_ratio: float = 1.0) -> KernelCost:
    return KernelCost(compute_s=bundles * steps * run_ratio * spb,
                      memory_s=hbm_bytes / targets.chip_facts(generation).hbm_bytes_per_second, overhead_s=steps * STEP_OVERHEAD_S)


def bottleneck(cost: KernelCost, slot_use: dict[str, float]) -> str:
    if cost.overhead_s >= max(cost.compute_s, cost.memory_s):
        return "grid-step-overhead-bound"
    if cost.memory_s >= cost.compute_s:
        return "memory-bound"
    vector = max((slot_use.get(k, 0.0) for k in ("VALU", "XLU", "EUP", "VLOAD", "VSTORE")), default=0.0)
    return "MXU-bound" if slot_use.get("MXU", 0.0) >= vector else "vector-unit-bound"


def workload_roofline_us(w, generation: str) -> float:
    """The roofline bound of a workload at full size: its FLOPs and the bytes of its inputs and outputs."""
    return targets.roofline_seconds(w.flops("full"), w.io_bytes("full"), generation)[0] * 1e6


def xla_baseline_s(reference: dict, generation: str) -> float:
    """XLA's own estimate of the baseline: its cost model's optimal_seconds, but never below the roofline of
    XLA's own FLOP and byte counts (optimal_seconds is negative or missing for some programs)."""
    bound = targets.roofline_seconds(reference["xla_flops"], reference["xla_bytes"], generation)[0]
    return max(reference.get("xla_optimal_seconds") or 0.0, bound)


# ---- orchestration: check first, then estimate candidate, XLA baseline and expert -------------

ESTIMATE_LABEL = ("STATIC ESTIMATE from a deviceless compile on a CPU host (libtpu's bundle schedule x grid, BlockSpec "
                  "HBM traffic, per-step overhead): not a measurement; use it to rank variants, not to quote times")


def _run_worker_job(checker, job: dict, dump_schedules: bool = True):
    from jaxbench_mcp.jobs import Worker

    worker = Worker(None, checker.tier, checker.limits, dump_schedules=dump_schedules)
    if not worker.wait_ready():
        worker.kill()
        raise RuntimeError("a profiling worker failed to start")
    if dump_schedules:
        job["dump_dir"] = str(worker.dump_dir)
    return checker.queue.run(lambda: worker.run(job, lambda _e: None))


_REFERENCE_CACHE: dict[tuple, dict] = {}


def reference_estimates(checker, workload_id: str, generations: list[str]) -> dict[str, dict]:
    """Per generation: the bundle calibration and XLA's cost analysis of the baseline (cached)."""
    import jax

    missing = [g for g in generations if (workload_id, g, jax.__version__) not in _REFERENCE_CACHE]
    if missing:
        outcome = _run_worker_job(checker, {"mode": "reference", "workload_id": workload_id, "targets": missing})
        for e in outcome.events:
            if e.get("event") == "reference":
                _REFERENCE_CACHE[(workload_id, e["target"], jax.__version__)] = e
        outcome.cleanup()
    return {g: _REFERENCE_CACHE.get((workload_id, g, jax.__version__), {}) for g in generations}


def compile_failure(text: str) -> str:
    """One line for a failed compile: its class and, for a VMEM overflow, the sizes."""
    sizes = _VMEM_SIZES.search(text)
    detail = f"out of VMEM: {sizes.group(0)}" if sizes else decisive_lines(text).splitlines()[-1]
    return f"compile failed ({error_catalog.classify('compile', text).error_class}): {detail[:300]}"


@dataclass(frozen=True)
class SourceEstimate:
    kernels: list  # KernelEstimate per Pallas kernel
    outside_us: float | None  # XLA's estimate of the work around the kernels; None when it could not be cut out

    @property
    def total_us(self) -> float:
        return sum(k.estimate_us for k in self.kernels) + (self.outside_us or 0.0)


def estimate_source(checker, workload_id: str, source: str, generations: list[str], spb: dict[str, float]):
    """Compile a kernel file for each generation with schedule dumps: a SourceEstimate (or why there is none)
    per generation."""
    from jaxbench_mcp.models import KernelEstimate

    outcome = _run_worker_job(checker, {"mode": "profile", "workload_id": workload_id, "source": source, "targets": generations})
    traffic = next((e["traffic"] for e in outcome.events if e.get("stage") == "trace" and e.get("state") == "done"), [])
    results: dict[str, SourceEstimate | str] = {}
    for e in outcome.events:
        if e.get("stage") != "compile" or e.get("state") == "start":
            continue
        if e["state"] == "failed":
            results[e["target"]] = compile_failure(e["text"])
            continue
        kernels = []
        for k, (schedule, flow) in enumerate(zip(e["schedules"], traffic)):
            cost = kernel_cost(schedule["bundles"], flow["steps"], flow["hbm_bytes"], e["target"], spb[e["target"]],
                               flow["run_ratio"])
            kernels.append(KernelEstimate(
                name=f"{k}:{schedule['name']}", grid_steps=flow["steps"], bundles_per_step=schedule["bundles"],
                slot_use=schedule["slot_use"], hbm_bytes=flow["hbm_bytes"], hbm_bytes_exact=flow["exact"],
                run_ratio=flow["run_ratio"], run_ratio_exact=flow["run_ratio_exact"], grid_steps_exact=flow["steps_exact"],
                compute_us=cost.compute_s * 1e6, memory_us=cost.memory_s * 1e6, overhead_us=cost.overhead_s * 1e6,
                estimate_us=cost.estimate_s * 1e6, bottleneck=bottleneck(cost, schedule["slot_use"])))
        outside = e.get("outside")
        results[e["target"]] = SourceEstimate(kernels, xla_baseline_s(outside, e["target"]) * 1e6 if outside else None)
    for generation in generations:
        if generation not in results:
            why = outcome.killed_for or f"exit status {outcome.returncode}"
            results[generation] = f"no estimate: the profiling worker stopped before compiling for {generation} ({why})"
    outcome.cleanup()
    return results


MEASURED_LABEL = ("MEASURED device time on the attached {generation} from a jax profiler trace: median of {n} runs, each on "
                  "fresh full-size inputs, after {warmup} warm-up runs")
_MEASURED_CACHE: dict[tuple, object] = {}  # (workload, device generation, jax version, expert?) -> DeviceTiming


def measure_source(checker, workload_id: str, source: str | None, iterations: int = measuring.DEFAULT_ITERATIONS):
    """TPU host: a DeviceTiming of a kernel file (None: the XLA baseline), or a string saying why there is none."""
    from jaxbench_mcp.models import DeviceTiming

    outcome = _run_worker_job(checker, {"mode": "measure", "workload_id": workload_id, "source": source,
                                        "first_seed": 1_000, "iterations": iterations}, dump_schedules=False)
    done = next((e for e in outcome.events if e.get("stage") == "measure" and e.get("state") == "done"), None)
    failed = next((e for e in outcome.events if e.get("state") == "failed"), None)
    outcome.cleanup()
    if done is None:
        why = failed["text"].strip().splitlines()[-1][:300] if failed else (outcome.killed_for or f"exit status {outcome.returncode}")
        return f"not measured: {why}"
    timing = measuring.Samples(tuple(done["samples_us"]))
    return DeviceTiming(median_us=timing.median_us, min_us=timing.min_us, spread_pct=timing.spread_pct, iterations=len(timing.samples_us))


def _cached_measurement(checker, workload_id: str, generation: str, expert_source: str | None):
    import jax

    key = (workload_id, generation, jax.__version__, expert_source is not None)
    if key in _MEASURED_CACHE:
        return _MEASURED_CACHE[key]
    timing = measure_source(checker, workload_id, expert_source)
    if not isinstance(timing, str):  # a failure (a timeout, say) is worth retrying next time
        _MEASURED_CACHE[key] = timing
    return timing


def measured_target(checker, w, source: str, generation: str, roofline_us: float, progress: Callable[[str], None]):
    """The candidate, the XLA baseline and the expert kernel, each timed on the attached chip."""
    from jaxbench_mcp import expert_refs
    from jaxbench_mcp.models import TargetEstimate

    entry = TargetEstimate(target=generation, kind="measured", candidate_us=None, xla_baseline_us=None, roofline_us=roofline_us)
    progress(f"measuring the candidate on {generation}")
    candidate = measure_source(checker, w.id, source)
    if isinstance(candidate, str):
        entry.error = candidate
        return entry
    entry.candidate_timing, entry.candidate_us = candidate, candidate.median_us
    progress(f"measuring the XLA baseline on {generation} (cached after the first time)")
    xla = _cached_measurement(checker, w.id, generation, None)
    if isinstance(xla, str):
        entry.flags.append(f"XLA baseline {xla}")
    else:
        entry.xla_timing, entry.xla_baseline_us = xla, xla.median_us
        entry.speedup_vs_xla = xla.median_us / candidate.median_us
    expert_module = expert_refs.expert_module(w.id)
    if expert_module is not None:
        progress(f"measuring the expert kernel on {generation} (cached after the first time)")
        expert = _cached_measurement(checker, w.id, generation, Path(expert_module.__file__).read_text())
        if isinstance(expert, str):
            entry.flags.append(f"expert kernel {expert}")
        else:
            entry.expert_timing, entry.expert_us = expert, expert.median_us
            entry.speedup_vs_expert = expert.median_us / candidate.median_us
    if candidate.spread_pct > NOISY_SPREAD_PCT:
        entry.flags.append(f"the runs disagree by {candidate.spread_pct:.0f}% (max - min over median): compare medians with care")
    return entry


def estimated_targets(checker, w, source: str, generations: list[str], roofline_us: dict[str, float],
                      progress: Callable[[str], None]):
    """Static estimates per generation (CPU host with libtpu, or the generations a TPU host is not)."""
    from jaxbench_mcp import expert_refs
    from jaxbench_mcp.models import TargetEstimate

    entries = []
    progress(f"calibrating bundles and costing the XLA baseline for {', '.join(generations)} (cached after the first time)")
    refs = reference_estimates(checker, w.id, generations)
    missing = [g for g in generations if not refs[g].get("calibration_bundles")]
    for g in missing:
        entries.append(TargetEstimate(target=g, candidate_us=None, xla_baseline_us=None, roofline_us=roofline_us[g], error=(
            "no estimate: compiling the calibration kernel or the XLA baseline for this generation failed or timed out")))
    generations = [g for g in generations if g not in missing]
    if not generations:
        return entries
    spb = {g: seconds_per_bundle(g, refs[g]["calibration_bundles"]) for g in generations}
    progress(f"compiling the candidate for {', '.join(generations)} with schedule dumps")
    candidate = estimate_source(checker, w.id, source, generations, spb)
    expert_module = expert_refs.expert_module(w.id)
    expert = {}
    if expert_module is not None:
        progress(f"compiling the expert kernel for {', '.join(generations)} with schedule dumps")
        expert = estimate_source(checker, w.id, Path(expert_module.__file__).read_text(), generations, spb)
    for g in generations:
        entry = TargetEstimate(target=g, candidate_us=None, xla_baseline_us=xla_baseline_s(refs[g], g) * 1e6, roofline_us=roofline_us[g])
        entries.append(entry)
        estimate = candidate.get(g)
        if isinstance(estimate, str) or not estimate.kernels:
            entry.error = estimate if isinstance(estimate, str) else "no Pallas kernel schedule found in the compile dump"
            continue
        kernels = estimate.kernels
        entry.kernels, entry.outside_kernels_us, entry.candidate_us = kernels, estimate.outside_us, estimate.total_us
        entry.bottleneck = max(kernels, key=lambda k: k.estimate_us).bottleneck
        entry.speedup_vs_xla = entry.xla_baseline_us / entry.candidate_us
        if isinstance(expert.get(g), SourceEstimate) and expert[g].kernels:
            entry.expert_us = expert[g].total_us
            entry.speedup_vs_expert = entry.expert_us / entry.candidate_us
        if estimate.outside_us is None:
            entry.flags.append("XLA work outside the Pallas kernels is not included: a kernel sits inside a loop or branch, "
                               "or the rest of the program could not be cut out and compiled alone")
        elif estimate.outside_us > entry.candidate_us / 2:
            entry.flags.append(f"most of the time ({estimate.outside_us:,.1f} of {entry.candidate_us:,.1f} us) is XLA work "
                               "outside the Pallas kernels")
        if any(not k.grid_steps_exact for k in kernels):
            entry.flags.append("a grid dimension is known only at run time and counts as one step: the estimate is a lower bound")
        if any(not k.hbm_bytes_exact for k in kernels):
            entry.flags.append("HBM traffic is approximate: some blocks use scalar prefetch or manual DMA")
        if any(not k.run_ratio_exact for k in kernels):
            entry.flags.append("compute is approximate: a pl.when/cond predicate depends on data (its heaviest branch is "
                               "counted at every step) or a while loop's trip count is unknown (counted once)")
    return entries


def profile(checker, workload_id: str, source: str, generations: list[str], verdict,
            on_progress: Callable[[str], None] | None = None):
    """How fast a kernel that passed its check is, next to the XLA baseline and the expert kernel.

    TPU host: measured on the attached chip (other generations estimated). CPU host with libtpu: static
    estimates. Plain CPU host: the roofline bound only.
    """
    from jaxbench_mcp import workloads
    from jaxbench_mcp.models import Profile, TargetEstimate

    w = workloads.get_workload(workload_id)
    generations = generations or list(targets.GENERATIONS)
    flops = w.flops("full")
    io_bytes = w.io_bytes("full")
    roofline_us = {g: workload_roofline_us(w, g) for g in generations}
    attached = targets.attached_generation() if checker.tier is targets.Tier.TPU else None
    kind, label = {
        targets.Tier.TPU: ("measured", MEASURED_LABEL.format(generation=attached, n=measuring.DEFAULT_ITERATIONS,
                                                             warmup=measuring.WARMUP_RUNS)),
        targets.Tier.CPU_LIBTPU: ("static estimate", ESTIMATE_LABEL),
        targets.Tier.CPU: ("roofline only", "roofline lower bound only: this host has no libtpu to compile for TPU"),
    }[checker.tier]
    result = Profile(workload_id=w.id, tier=str(checker.tier), kind=kind, label=label, verdict=verdict)
    if verdict.status != "correct":
        return result
    if checker.tier is targets.Tier.CPU:
        result.targets = [TargetEstimate(target=g, kind="roofline only", candidate_us=None, xla_baseline_us=None,
                                         roofline_us=roofline_us[g]) for g in generations]
        return result
    progress = on_progress or (lambda _message: None)
    if attached in generations:
        result.targets.append(measured_target(checker, w, source, attached, roofline_us[attached], progress))
    estimated = [g for g in generations if g != attached]
    if estimated:
        result.targets += estimated_targets(checker, w, source, estimated, roofline_us, progress)
    for entry in result.targets:
        entry.docs = ["performance#reading-profile"] + ([BOTTLENECK_DOCS[entry.bottleneck]] if entry.bottleneck in BOTTLENECK_DOCS else [])
        if entry.candidate_us:
            entry.tflops_per_s = flops / entry.candidate_us / 1e6
            entry.hbm_gb_per_s = io_bytes / entry.candidate_us / 1e3
            entry.roofline_pct = 100.0 * entry.roofline_us / entry.candidate_us
            if entry.candidate_us < entry.roofline_us:
                entry.flags.append(
                    f"the candidate's time ({entry.candidate_us:,.1f} us) is below the roofline bound ({entry.roofline_us:,.1f} us): "
                    + ("implausible for a real run: check that the kernel does all the work (e.g. it is not skipping blocks)"
                       if entry.kind == "measured" else "implausible, so the model missed work here")
                    + "; do not read it as a win")
    return result
