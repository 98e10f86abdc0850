"""How fast a correct kernel is: measured on a TPU host (measuring.py), estimated on a CPU host with libtpu.

This module orchestrates: it checks first, then runs profile, measure and reference jobs through the checker
and assembles a Profile. A candidate's estimate is the public estimator's (jaxbench_mcp.perf.estimator: `analyse` in
the sandboxed worker, `assemble` here), so profile_kernel and jaxbench_mcp.estimate share one code path; the
arithmetic is jaxbench_mcp.perf.cost_model. Baseline, expert and calibration results are cached (the server's store)
by workload, target, jax, libtpu and cost-model version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax

from jaxbench_mcp.catalog import expert_refs, targets, workloads
from jaxbench_mcp.checking.diagnosis import compile_failure
from jaxbench_mcp.checking.judge import inspect_module
from jaxbench_mcp.models import DeviceTiming, OutsideOpCost, Profile, TargetEstimate
from jaxbench_mcp.perf import cost_model, estimator, measuring
from jaxbench_mcp.perf.estimator import Estimate
from jaxbench_mcp.requests import ProfileRequest
from jaxbench_mcp.sandbox import protocol
from jaxbench_mcp.taxonomy import ERROR_CLASSES, ErrorClass, Stage

if TYPE_CHECKING:
    from jaxbench_mcp.perf.estimator import Estimate

# Measured runs that disagree by more than this (max - min over median) get a flag.
NOISY_SPREAD_PCT = 20.0
# The XLA ops around the kernels itemised in a profile (largest first; the total counts them all).
MAX_OUTSIDE_OPS_SHOWN = 12


# ---- orchestration: check first, then estimate candidate, XLA baseline and expert -------------

# What a profile on each tier holds.
PROFILE_KINDS = {
    targets.Tier.TPU: "measured",
    targets.Tier.CPU_LIBTPU: "static estimate",
    targets.Tier.CPU: "roofline only",
}
ESTIMATE_LABEL = (
    "STATIC ESTIMATE from a deviceless compile on a CPU host (libtpu's bundle schedule by loop, HBM bytes of "
    "BlockSpecs and DMAs, pipeline overlap, grid steps' DMA waits, XLA ops around the kernels; calibrated per "
    "generation on tokamax's TPU timings): not a measurement; use it to rank variants, not to quote times"
)
MEASURED_LABEL = (
    "MEASURED device time on the attached {generation} from a jax profiler trace: median of {n} runs, each on "
    "fresh full-size inputs, after {warmup} warm-up runs"
)


class MemoryCache:
    """Results worth keeping (baseline and expert estimates and timings), as JSON-ready dicts by key. The server
    uses its store instead (store.Store.cache_get/cache_put), so that they survive restarts."""

    def __init__(self) -> None:
        self._values: dict[str, dict] = {}

    def cache_get(self, key: str) -> dict | None:
        return self._values.get(key)

    def cache_put(self, key: str, value: dict) -> None:
        self._values[key] = value


# An expert or baseline this many times its roofline is a weak target: flagged, so that beating it is not read as
# the ceiling. Slow experts are real: on a v5e jax's paged attention measured 4.5x its roofline and ragged paged
# attention 2.7x, both estimated within 1.1x (benchmarks/measured_fidelity.py), so the speedup against them stands.
FAR_FROM_ROOFLINE = 2.5


def _no_double(text) -> str:
    """A reason once, not 'no estimate: no estimate: ...'."""
    text = str(text) if not isinstance(text, str) else text
    while text.startswith("no estimate: no estimate:"):
        text = text[len("no estimate: ") :]
    return text


def below_roofline(entry, w, generation: str) -> None:
    """No speedup is read from a candidate estimate below the workload's roofline (its nominal FLOPs at the MXUs'
    peak, its inputs and outputs at the bandwidth): the kernel does fewer FLOPs than the nominal count (a fold:
    said) or the model missed work (an undercount: not a win)."""
    if entry.candidate_us is None or not entry.roofline_us or entry.candidate_us >= entry.roofline_us:
        return
    flops = w.flops("full")
    entry.flags.append(
        f"the estimate ({entry.candidate_us:,.1f} us) is {100 * entry.roofline_us / entry.candidate_us:.0f}% of "
        f"the roofline ({entry.roofline_us:,.1f} us for the workload's nominal {flops / 1e9:,.1f} GFLOP): either the "
        "kernel does fewer FLOPs than the nominal count (an algebraic fold) or the model missed work; no speedup is "
        "claimed from an estimate below the roofline"
    )
    entry.speedup_vs_xla = None
    entry.speedup_vs_expert = None


def aim_text(entry, bound_us: float) -> str:
    """What to aim for when the XLA baseline's figure is implausible (far above its roofline, or below the bytes
    it must move): a share of the roofline real TPU kernels reach (cost_model.AIM_ROOFLINE_SHARE), never below
    the memory bound. Sets entry.aim_us."""
    entry.aim_us = max(entry.roofline_us / cost_model.AIM_ROOFLINE_SHARE, bound_us)
    return (
        f"aim for {entry.aim_us:,.1f} us instead ({100 * entry.roofline_us / entry.aim_us:.0f}% of the roofline, "
        "the median share of tokamax's tuned TPU kernels)"
    )


def memory_bound(w, generation: str) -> tuple[float, str]:
    """The time no correct program of the workload beats on `generation` (cost_model.workload_memory_bound_us: a
    fold may skip FLOPs, not moving its inputs and outputs) and a phrase saying what it is."""
    bound = cost_model.workload_memory_bound_us(w, generation)
    moved = cost_model.workload_must_move_bytes(w)
    return bound, (
        f"{bound:,.1f} us, the time the workload's inputs and outputs ({moved / 2**20:,.1f} MiB) take to move once at "
        f"{generation}'s HBM bandwidth"
    )


@dataclass(frozen=True)
class SourceEstimate:
    estimate: Estimate

    @property
    def kernels(self) -> list:
        return self.estimate.kernels

    @property
    def outside_us(self) -> float | None:
        return self.estimate.outside_us

    @property
    def total_us(self) -> float:
        return self.estimate.total_us


def _source_estimate(assembled: Estimate | str) -> SourceEstimate | str:
    return SourceEstimate(assembled) if not isinstance(assembled, str) else assembled


def stopped_reason(checker, outcome, events, generation: str) -> str:
    """Why a profile job left no compile result for `generation`: the stage the worker really was in (the last
    one it started), what stopped it and the budget it ran past; a timeout says `timeout`."""
    started = [e for e in events if e.state == "start"]
    compiling = any(e.stage is Stage.COMPILE and e.target == generation for e in started)
    last = started[-1] if started else None
    stage = (
        f"compiling for {generation}"
        if compiling
        else (f"its {last.stage} stage" if last is not None else "starting (before the trace)")
    )
    failed = next((e for e in events if e.state == "failed" and e.stage is not Stage.COMPILE), None)
    if failed is not None:  # the worker said why it stopped: a program refused before compiling
        why = (failed.text or "").strip().splitlines()
        return f"no estimate: the {failed.stage} stage failed: {why[0] if why else 'no reason given'}"
    killed = outcome.killed_for or ""
    if killed.startswith("timeout"):
        limits = getattr(checker, "limits", None)
        part = killed.split(":", 1)[1] if ":" in killed else "overall"
        budget = None
        if limits is not None:
            try:
                budget = (
                    limits.for_stage(Stage(part)) if part != "overall" else getattr(limits, "overall_seconds", None)
                )
            except (ValueError, AttributeError):
                budget = None
        return (
            f"timeout: the profiling worker was stopped while {stage}: the {part} time limit"
            + (f" of {budget:.0f} s" if budget else "")
            + " ran out (a cold compile of a large kernel can take minutes: retry, or use smaller unrolled loops)"
        )
    if killed:
        return f"no estimate: the profiling worker was stopped while {stage} ({killed})"
    return f"no estimate: the profiling worker exited while {stage} (exit status {outcome.returncode})"


class Profiler:
    """Runs profile, measure and reference jobs through a checker (its queue, its sandboxed workers) and keeps
    what does not depend on the candidate (calibration, XLA baseline, expert kernel) in a cache keyed by
    workload, target and the jax and libtpu versions."""

    def __init__(self, checker, cache=None):
        self.checker = checker
        self.cache = cache if cache is not None else MemoryCache()

    def _key(self, *parts) -> str:
        return "/".join(
            str(p)
            for p in (
                "profile",
                *parts,
                f"jax-{jax.__version__}",
                f"libtpu-{targets.libtpu_version()}",
                f"model-{cost_model.MODEL_VERSION}",
            )
        )

    def _run(self, job, source: str | None = None, dump_schedules: bool = True, cancel=None):
        return self.checker.run_job(lambda _dir, _recorded: job, source, cancel=cancel, dump_schedules=dump_schedules)

    def reference_estimates(self, workload_id: str, generations: list[str]) -> dict[str, dict]:
        """Per generation: the bundle calibration and XLA's cost analysis of the baseline (cached)."""
        found = {g: self.cache.cache_get(self._key("reference", workload_id, g)) for g in generations}
        missing = [g for g, value in found.items() if value is None]
        if missing:
            outcome = self._run(protocol.ReferenceJob(workload_id=workload_id, targets=missing))
            for e in outcome.events:
                if isinstance(e, protocol.Reference):
                    found[e.target] = e.model_dump()
                    self.cache.cache_put(self._key("reference", workload_id, e.target), found[e.target])
            outcome.cleanup()
        return {g: found[g] or {} for g in generations}

    def estimate_source(
        self,
        workload_id: str,
        source: str,
        generations: list[str],
        spb: dict[str, float],
        cancel=None,
        checked_programs: dict[str, str] | None = None,
    ) -> dict[str, SourceEstimate | str]:
        """Compile a kernel file for each generation with schedule dumps: a SourceEstimate (or why there is none)
        per generation. With `checked_programs`, a generation whose lowered module differs from the checked one
        gets no estimate, and one whose check read its compile (a profile's own check: Checker.readings) is
        estimated from that reading, without compiling again."""
        results: dict[str, SourceEstimate | str] = {}
        for generation in generations:
            reading = self.checker.readings.find((checked_programs or {}).get(generation, ""), generation)
            if reading is not None:
                trace, compiled = reading
                results[generation] = _source_estimate(estimator.assemble(trace, compiled, generation, spb[generation]))
        generations = [g for g in generations if g not in results]
        if not generations:
            return results
        # The candidate is traced in a process of its own; the profile compiles that recorded program.
        trace_job = protocol.TraceJob(
            workload_id=workload_id,
            sizes=["full"],
            chip=generations[0],
            cores=targets.cores_per_device(generations[0]),
        )
        outcome = self.checker.run_job(
            lambda _dir, recorded: protocol.ProfileJob(
                workload_id=workload_id, targets=generations, programs=recorded.programs if recorded else []
            ),
            source,
            cancel=cancel,
            dump_schedules=True,
            trace=trace_job,
        )
        events = outcome.stage_events()
        trace = next((e.profile_trace for e in events if e.profile_trace is not None), None)
        if outcome.violation:
            for generation in generations:
                results[generation] = f"no estimate: the worker broke the protocol ({outcome.violation})"
        for e in events:
            if e.stage is not Stage.COMPILE or e.state == "start" or outcome.violation:
                continue
            if e.state == "failed":
                results[e.target] = compile_failure(e.text or "")
                continue
            if checked_programs is not None:
                try:
                    _, digest = inspect_module(outcome.job_dir, e.profile_compile.module_file)
                except protocol.ProtocolViolation as exc:
                    results[e.target] = f"no estimate: {exc}"
                    continue
                if checked_programs.get(e.target) != digest:
                    results[e.target] = (
                        "no estimate: the program compiled for the profile is not the one the check judged "
                        "(its lowered module differs): a candidate must compute the same thing every time"
                    )
                    continue
            if trace is None:
                results[e.target] = "no estimate: the trace of the kernels is missing"
                continue
            results[e.target] = _source_estimate(estimator.assemble(trace, e.profile_compile, e.target, spb[e.target]))
        for generation in generations:
            if generation not in results:
                results[generation] = stopped_reason(self.checker, outcome, events, generation)
        outcome.cleanup()
        return results

    def expert_estimates(
        self, workload_id: str, expert_source: str, generations: list[str], spb: dict[str, float], cancel=None
    ) -> dict[str, SourceEstimate | str]:
        """estimate_source for the expert kernel, cached per generation (only successes are kept)."""
        results: dict[str, SourceEstimate | str] = {}
        for g in generations:
            kept = self.cache.cache_get(self._key("expert", workload_id, g))
            if kept is not None:
                results[g] = SourceEstimate(Estimate(**kept))
        missing = [g for g in generations if g not in results]
        if missing:
            for g, estimate in self.estimate_source(workload_id, expert_source, missing, spb, cancel).items():
                results[g] = estimate
                if isinstance(estimate, SourceEstimate):
                    self.cache.cache_put(self._key("expert", workload_id, g), estimate.estimate.model_dump(mode="json"))
        return results

    def measure_source(
        self,
        workload_id: str,
        source: str | None,
        generation: str | None,
        checked_program: str | None = None,
        iterations: int = measuring.DEFAULT_ITERATIONS,
    ):
        """TPU host: a DeviceTiming of a kernel file (None: the XLA baseline), or a string saying why there is none.

        The file is traced in a process of its own, as a check traces it, and the measuring process times the recorded
        program, never the file. With `checked_program` (the check's lowered-module digest for `generation`), a
        program whose lowering differs is not timed: a candidate must compute the same thing every time."""
        job = protocol.MeasureJob(
            workload_id=workload_id, targets=[generation] if generation else [], first_seed=1_000, iterations=iterations
        )
        trace = None
        if source is not None:
            trace = protocol.TraceJob(
                workload_id=workload_id, sizes=["full"], chip=generation or targets.DEFAULT_CPU_TARGET
            )
        outcome = self.checker.run_job(
            lambda _dir, recorded: job.model_copy(update={"programs": recorded.programs if recorded else []}),
            source,
            dump_schedules=False,
            trace=trace,
        )
        try:
            events = outcome.stage_events()
            failed = next((e for e in events if e.state == "failed"), None)
            done = next((e for e in events if e.measured is not None), None)
            if outcome.violation:
                return f"not measured: the worker broke the protocol ({outcome.violation})"
            lowered = next((e.lowered for e in events if e.lowered is not None), None)
            if source is not None and lowered is not None:
                try:
                    _, digest = inspect_module(outcome.job_dir, lowered.module_file)
                except protocol.ProtocolViolation as exc:
                    return f"not measured: {exc}"
                if checked_program is not None and digest != checked_program:
                    return (
                        "not measured: the program traced for the timed runs is not the one the check judged (its "
                        "lowered module differs): a candidate must compute the same thing every time"
                    )
            if source is not None and done is not None and lowered is None:
                return "not measured: the measuring worker timed a program it did not lower first"
            if done is None:
                why = (
                    ((failed.text or "").strip().splitlines() or ["failed"])[-1][:300]
                    if failed
                    else (outcome.killed_for or f"exit status {outcome.returncode}")
                )
                return f"not measured: {why}"
        finally:
            outcome.cleanup()
        timing = measuring.Samples(tuple(done.measured.samples_us))
        return DeviceTiming(
            median_us=timing.median_us,
            min_us=timing.min_us,
            spread_pct=timing.spread_pct,
            iterations=len(timing.samples_us),
        )

    def _cached_measurement(self, workload_id: str, generation: str, expert_source: str | None):
        key = self._key("measured", "expert" if expert_source is not None else "xla", workload_id, generation)
        kept = self.cache.cache_get(key)
        if kept is not None:
            return DeviceTiming(**kept)
        timing = self.measure_source(workload_id, expert_source, generation)
        if not isinstance(timing, str):  # a failure (a timeout, say) is worth retrying next time
            self.cache.cache_put(key, timing.model_dump())
        return timing

    def measured_target(
        self,
        w,
        source: str,
        generation: str,
        roofline_us: float,
        progress: Callable[[str], None],
        checked_program: str | None = None,
    ):
        """The candidate, the XLA baseline and the expert kernel, each timed on the attached chip; the candidate only
        where its recorded program is the checked one (`checked_program`, the check's digest for `generation`)."""
        entry = TargetEstimate(
            target=generation, kind="measured", candidate_us=None, xla_baseline_us=None, roofline_us=roofline_us
        )
        progress(f"measuring the candidate on {generation}")
        candidate = self.measure_source(w.id, source, generation, checked_program)
        if isinstance(candidate, str):
            entry.error = candidate
            return entry
        bound, bound_text = memory_bound(w, generation)
        if candidate.median_us < bound:
            # A fold may skip FLOPs, but no correct program skips reading its inputs or writing its outputs.
            info = ERROR_CLASSES[ErrorClass.IMPLAUSIBLE_TIME]
            entry.error = (
                f"rejected ({ErrorClass.IMPLAUSIBLE_TIME}): the measured median {candidate.median_us:,.1f} us is "
                f"below {bound_text}: no correct program is that fast. {info.hint}"
            )
            entry.docs = list(info.docs)
            return entry
        entry.candidate_timing, entry.candidate_us = candidate, candidate.median_us
        progress(f"measuring the XLA baseline on {generation} (cached after the first time)")
        xla = self._cached_measurement(w.id, generation, None)
        if isinstance(xla, str):
            entry.flags.append(f"XLA baseline {xla}")
        else:
            entry.xla_timing, entry.xla_baseline_us = xla, xla.median_us
            entry.speedup_vs_xla = xla.median_us / candidate.median_us
        expert_source = expert_refs.expert_source(w.id)
        if expert_source is not None:
            progress(f"measuring the expert kernel on {generation} (cached after the first time)")
            expert = self._cached_measurement(w.id, generation, expert_source)
            if isinstance(expert, str):
                entry.flags.append(f"expert kernel {expert}")
            else:
                entry.expert_timing, entry.expert_us = expert, expert.median_us
                entry.speedup_vs_expert = expert.median_us / candidate.median_us
        if candidate.spread_pct > NOISY_SPREAD_PCT:
            entry.flags.append(
                f"the runs disagree by {candidate.spread_pct:.0f}% (max - min over median): compare medians with care"
            )
        return entry

    def estimated_targets(
        self,
        w,
        source: str,
        generations: list[str],
        roofline_us: dict[str, float],
        progress: Callable[[str], None],
        cancel=None,
        checked_programs: dict[str, str] | None = None,
    ):
        """Static estimates per generation (CPU host with libtpu, or the generations a TPU host is not)."""
        progress(
            f"calibrating bundles and costing the XLA baseline for {', '.join(generations)} "
            "(cached after the first time)"
        )
        refs = self.reference_estimates(w.id, generations)
        missing = [g for g in generations if not refs[g].get("calibration_bundles")]
        entries = [
            TargetEstimate(
                target=g,
                candidate_us=None,
                xla_baseline_us=None,
                roofline_us=roofline_us[g],
                error="no estimate: compiling the calibration kernel for this generation failed or timed out",
            )
            for g in missing
        ]
        generations = [g for g in generations if g not in missing]
        if not generations:
            return entries
        spb = {g: cost_model.seconds_per_bundle(g, refs[g]["calibration_bundles"]) for g in generations}
        progress(f"estimating the candidate for {', '.join(generations)} (from what its check's compiles read)")
        candidate = self.estimate_source(w.id, source, generations, spb, cancel, checked_programs=checked_programs)
        expert_source = expert_refs.expert_source(w.id)
        expert: dict[str, SourceEstimate | str] = {}
        if expert_source is not None:
            progress(
                f"compiling the expert kernel for {', '.join(generations)} with schedule dumps "
                "(cached after the first time)"
            )
            expert = self.expert_estimates(w.id, expert_source, generations, spb, cancel)
        for g in generations:
            xla_error = refs[g].get("xla_error")
            xla_us = None if xla_error else cost_model.xla_baseline_s(refs[g], g) * 1e6
            entry = TargetEstimate(target=g, candidate_us=None, xla_baseline_us=xla_us, roofline_us=roofline_us[g])
            entries.append(entry)
            estimate = candidate[g]  # estimate_source answers for every generation asked
            if isinstance(estimate, str) or not estimate.kernels:
                entry.error = (
                    estimate if isinstance(estimate, str) else "no Pallas kernel schedule found in the compile dump"
                )
                continue
            found = estimate.estimate
            entry.kernels, entry.outside_kernels_us, entry.candidate_us = (
                found.kernels,
                found.outside_us,
                found.total_us,
            )
            entry.outside_ops = [OutsideOpCost(**o.model_dump()) for o in found.outside_ops[:MAX_OUTSIDE_OPS_SHOWN]]
            entry.bottleneck, entry.advice = found.bottleneck, list(found.advice)
            entry.flags += found.flags
            if found.outside_us is not None and found.outside_us > found.total_us / 2:
                entry.flags.append(
                    f"most of the time ({found.outside_us:,.1f} of {found.total_us:,.1f} us) is XLA work "
                    "outside the Pallas kernels"
                )
            bound, bound_text = memory_bound(w, g)
            if xla_us is None:
                # A fact of the chip, not of the model: on a v5e, XLA's 2p and 16p baselines ran out of HBM too.
                entry.flags.append(
                    f"XLA's baseline does not compile for {g} ({xla_error}): no speedup against it is claimed; "
                    + aim_text(entry, bound)
                )
            elif xla_us < bound:
                # XLA's cost analysis can miss work (a loop of unknown trip count counts once).
                entry.flags.append(
                    f"XLA's own estimate of the baseline ({xla_us:,.1f} us) is below {bound_text}, "
                    "which the reference cannot beat: its cost analysis missed work, so no speedup against it is "
                    f"claimed; {aim_text(entry, bound)}"
                )
            else:
                entry.speedup_vs_xla = xla_us / entry.candidate_us
            if xla_us is not None and not refs[g].get("xla_loops_counted", True):
                entry.flags.append(
                    "XLA's baseline holds a loop whose trip count could not be read from its compiled program: "
                    "that loop's body is counted once, so the baseline's estimate is a lower bound"
                )
            if xla_us is not None and xla_us > FAR_FROM_ROOFLINE * entry.roofline_us:
                entry.flags.append(
                    f"XLA's own estimate of the baseline ({xla_us:,.1f} us) is "
                    f"{xla_us / entry.roofline_us:.1f}x the roofline: treat 'vs XLA' with care; "
                    + aim_text(entry, bound)
                )
            expert_estimate = expert.get(g)
            if isinstance(expert_estimate, SourceEstimate) and expert_estimate.kernels:
                entry.expert_us = expert_estimate.total_us
                if entry.expert_us < bound:
                    entry.flags.append(
                        f"the expert kernel's estimate ({entry.expert_us:,.1f} us) is below {bound_text}, which no "
                        "correct kernel beats: a gap in the model for that kernel, so no speedup against it is claimed"
                    )
                else:
                    entry.speedup_vs_expert = entry.expert_us / entry.candidate_us
                    if entry.expert_us > FAR_FROM_ROOFLINE * entry.roofline_us:
                        entry.flags.append(
                            f"the expert kernel's estimate ({entry.expert_us:,.1f} us) is "
                            f"{entry.expert_us / entry.roofline_us:.2f}x its roofline: a slow expert for this "
                            "workload on this chip: beating it is not the ceiling, the share of the roofline is "
                            "the figure to push"
                        )
            elif isinstance(expert_estimate, str):
                entry.flags.append(f"expert kernel: {_no_double(expert_estimate)}")
            elif g in expert:
                entry.flags.append("expert kernel: no Pallas kernel schedule found in its compile dump")
            below_roofline(entry, w, g)
        return entries

    def profile(
        self,
        request: ProfileRequest,
        verdict,
        on_progress: Callable[[str], None] | None = None,
        cancel=None,
    ):
        """How fast a kernel that passed its check is, next to the XLA baseline and the expert kernel, for the
        request's targets (none: every generation).

        TPU host: measured on the attached chip (other generations estimated). CPU host with libtpu: static
        estimates. Plain CPU host: the roofline bound only.
        """
        tier = self.checker.tier
        w = workloads.get_workload(request.workload_id)
        source = request.source
        generations = list(request.targets) or list(targets.GENERATIONS)
        flops = w.flops("full")
        io_bytes = w.io_bytes("full")
        roofline_us = {g: cost_model.workload_roofline_us(w, g) for g in generations}
        attached = targets.attached_generation() if tier is targets.Tier.TPU else None
        label = {
            targets.Tier.TPU: MEASURED_LABEL.format(
                generation=attached, n=measuring.DEFAULT_ITERATIONS, warmup=measuring.WARMUP_RUNS
            ),
            targets.Tier.CPU_LIBTPU: ESTIMATE_LABEL,
            targets.Tier.CPU: "roofline lower bound only: this host has no libtpu to compile for TPU",
        }[tier]
        result = Profile(workload_id=w.id, tier=str(tier), kind=PROFILE_KINDS[tier], label=label, verdict=verdict)
        if verdict.status != "correct":
            return result
        if tier is targets.Tier.CPU:
            result.targets = [
                TargetEstimate(
                    target=g, kind="roofline only", candidate_us=None, xla_baseline_us=None, roofline_us=roofline_us[g]
                )
                for g in generations
            ]
            return result
        progress = on_progress or (lambda _message: None)
        if attached in generations:
            checked = verdict.program_sha256.get(attached)
            result.targets.append(self.measured_target(w, source, attached, roofline_us[attached], progress, checked))
        estimated = [g for g in generations if g != attached]
        if estimated:
            result.targets += self.estimated_targets(
                w, source, estimated, roofline_us, progress, cancel, verdict.program_sha256
            )
        for entry in result.targets:
            if not entry.docs:
                entry.docs = ["performance#reading-profile"]
                bottleneck_doc = cost_model.BOTTLENECK_DOCS.get(entry.bottleneck or "")
                if bottleneck_doc and bottleneck_doc not in entry.docs:
                    entry.docs.append(bottleneck_doc)
            if entry.xla_baseline_us and entry.roofline_us:
                entry.xla_roofline_pct = 100.0 * entry.roofline_us / entry.xla_baseline_us
            if entry.expert_us and entry.roofline_us:
                entry.expert_roofline_pct = 100.0 * entry.roofline_us / entry.expert_us
            if entry.candidate_us:
                entry.tflops_per_s = flops / entry.candidate_us / 1e6
                entry.hbm_gb_per_s = io_bytes / entry.candidate_us / 1e3
                entry.roofline_pct = 100.0 * entry.roofline_us / entry.candidate_us
                bound, bound_text = memory_bound(w, entry.target)
                if entry.candidate_us < bound:
                    entry.flags.append(
                        f"the estimate ({entry.candidate_us:,.1f} us) is below {bound_text}, which no correct "
                        "kernel beats: the model missed work here; do not read it as a win"
                    )
        return result
