"""From a finished worker to a verdict: the evidence is collected first, then the verdict is assembled once.

`collect` reads the worker's typed events (its account of the trace, the lowering, the compiles and the runs)
and adds what the parent establishes itself: the Mosaic kernels counted in the lowered module it reads, the
outputs read across the wall and compared with the truth, the full-size rules (checking/rules). Every fault
becomes a `Failure`; `verdict` turns the first one (or none: correct) into the status, class, message, hint and
doc sections, and builds the Verdict with everything else collected.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.catalog.targets import Tier
from jaxbench_mcp.checking import error_catalog, rules
from jaxbench_mcp.checking.comparison import compare
from jaxbench_mcp.checking.diagnosis import compile_error_line, decisive_lines, signal_name, uncaught_exception
from jaxbench_mcp.checking.truth import Truth
from jaxbench_mcp.models import CompileReport, KernelDescription, SeedReport, StageReport, Verdict
from jaxbench_mcp.perf import cost_model
from jaxbench_mcp.sandbox import isolation as sandbox, protocol
from jaxbench_mcp.sandbox.jobs import Limits, RunOutcome, read_job_file
from jaxbench_mcp.taxonomy import ErrorClass, Stage, Status, status_of

# A lowered module bigger than this is no candidate's program.
_MAX_MODULE_BYTES = 64 * 2**20
# The parent counts Mosaic kernels in the lowered module itself: this op carries each one.
_MOSAIC_OP = "tpu_custom_call"

# What a check on a host without a TPU cannot see; every verdict of such a host lists it (README, Threat model).
NOT_COVERED_WITHOUT_TPU = (
    "platform-keyed code beyond the queries answered as on a TPU (jax.default_backend(), jax.devices(), the TPU_* "
    "variables): jax's config, backend objects and /dev still show a CPU host",
    "numerics at the full size: the run uses a smaller size (full-size coverage, program and work are judged "
    "without running; where the workload has a full_reduction size, one more seed runs with every reduction at "
    "its full length)",
)


class Failure(NamedTuple):
    """One fault found in a check. Without a class, the catalog classifies `text` by the stage it failed in."""

    error_class: ErrorClass | None
    text: str
    stage: Stage | None = None


@dataclass(frozen=True)
class Case:
    """What a check judges: the workload, the size its seeds ran at, and where."""

    workload: workloads.Workload
    run_size: str
    targets: list[str]
    tier: Tier
    isolation: sandbox.Isolation
    limits: Limits
    require_pallas: bool = True


@dataclass
class Evidence:
    """Everything a check found, before it is judged."""

    stages: list[StageReport] = field(default_factory=list)
    kernels: list[KernelDescription] = field(default_factory=list)
    compiles: list[CompileReport] = field(default_factory=list)
    seeds: list[SeedReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    full_size_findings: list[str] = field(default_factory=list)
    program_sha256: dict[str, str] = field(default_factory=dict)
    pallas_work: str | None = None
    jaxbench_compatible: bool | None = None
    failures: list[Failure] = field(default_factory=list)


def verdict(case: Case, evidence: Evidence, seconds: float) -> Verdict:
    """The verdict, assembled once: correct unless a failure was found, else the first failure decides."""
    return Verdict(
        **_decision(evidence),
        workload_id=case.workload.id,
        size=case.run_size,
        targets=case.targets,
        tier=str(case.tier),
        isolation=str(case.isolation),
        not_covered=list(NOT_COVERED_WITHOUT_TPU) if case.tier is not Tier.TPU else [],
        stages=evidence.stages,
        kernels=evidence.kernels,
        pallas_calls=len(evidence.kernels),
        compiles=evidence.compiles,
        seeds=evidence.seeds,
        warnings=evidence.warnings,
        full_size_findings=evidence.full_size_findings,
        program_sha256=evidence.program_sha256,
        pallas_work=evidence.pallas_work,
        jaxbench_compatible=evidence.jaxbench_compatible,
        total_seconds=seconds,
    )


def _decision(evidence: Evidence) -> dict:
    """status, error_class, message, hint and docs: from the first failure, through the error catalog."""
    if not evidence.failures:
        return {"status": Status.CORRECT, "message": ""}
    cls, text, stage = evidence.failures[0]
    preface = ""
    if stage is Stage.COMPILE and len(evidence.compiles) > 1:
        failed = [c.target for c in evidence.compiles if not c.ok]
        ok = [c.target for c in evidence.compiles if c.ok]
        preface = (
            f"compile failed for {', '.join(failed)}"
            + (f" (ok for {', '.join(ok)})" if ok else "")
            + f"; the first failure ({failed[0]}):\n"
        )
    if cls is None:
        assert stage is not None, "a failure without a class names the stage the catalog classifies it by"
        diagnosis = error_catalog.classify(stage, text)
    else:
        diagnosis = error_catalog.diagnosis_for(cls)
    diagnosis = error_catalog.refine_for_kernels(diagnosis, evidence.kernels)
    return {
        "status": status_of(diagnosis.error_class),
        "error_class": diagnosis.error_class,
        "message": preface + (decisive_lines(text) if cls is None else text),
        "hint": diagnosis.hint,
        "docs": list(diagnosis.doc_refs),
    }


def collect(
    case: Case,
    truths: list[tuple[Callable[[], Truth], str]],
    outcome: RunOutcome,
    progress: Callable[[str], None],
    runs_stopped: bool = False,
) -> Evidence:
    """The evidence of a finished worker. `truths`: per run (the hidden seeds, then the full_reduction run if
    any), how to get its truth (asked only for the runs compared) and its size. `runs_stopped`: the parent stopped
    the runs once the verdict could not be 'correct' (cannot_be_correct, or a wrong output)."""
    evidence = Evidence()
    failures = evidence.failures
    outputs: dict[int, protocol.Output] = {}
    mosaic_kernels: dict[str, int] = {}
    traced: protocol.Traced | None = None
    for e in outcome.stage_events():
        if e.state == "start":
            continue
        ok = e.state == "done"
        evidence.stages.append(
            StageReport(
                stage=e.stage,
                ok=ok,
                seconds=round(e.seconds, 4),
                target=e.target,
                produced_by=_produced_by(case, e.stage),
            )
        )
        if e.traced is not None:
            traced = e.traced
            evidence.kernels = [_kernel_description(k) for k in e.traced.kernels]
            if e.traced.platform_queries:
                evidence.warnings.append(
                    f"workload() asked which platform it runs on ({', '.join(e.traced.platform_queries)}) while it "
                    f"was imported and traced; it was answered as on a TPU {case.targets[0] if case.targets else ''}"
                    ": a kernel computes the same thing on every platform".replace(" :", ":")
                )
            if e.traced.host_callbacks:
                failures.append(
                    Failure(
                        ErrorClass.HOST_CALLBACK,
                        "workload calls back into Python on the host "
                        f"({', '.join(sorted(set(e.traced.host_callbacks)))}); the computation must run on the TPU",
                    )
                )
        if e.lowered is not None and e.lowered.module_file:
            try:
                count, digest = inspect_module(outcome.job_dir, e.lowered.module_file)
            except protocol.ProtocolViolation as exc:
                failures.append(
                    Failure(ErrorClass.PROTOCOL_VIOLATION, f"the lowered module for {e.target or 'TPU'}: {exc}")
                )
                continue
            mosaic_kernels[e.target or "tpu"] = count
            evidence.program_sha256[e.target or "tpu"] = digest
        if e.stage is Stage.COMPILE:
            # The estimate for this target: its MXU width changes what a body's matmuls stage in VMEM.
            kernels = traced.kernels if traced is not None else []
            vmem = max((cost_model.vmem_bytes(k, e.target) for k in kernels), default=None)
            evidence.compiles.append(
                CompileReport(
                    target=e.target,
                    ok=ok,
                    seconds=round(e.seconds, 3),
                    code_size_bytes=e.compiled.code_size_bytes if e.compiled else None,
                    vmem_estimate_bytes=vmem or None,
                    vmem_compiled_bytes=e.compiled.scoped_vmem_bytes if e.compiled else None,
                    error=None if ok else compile_error_line(e.text or ""),
                )
            )
        if e.output is not None and e.seed_index is not None:  # the event log requires both on a run's end
            outputs[e.seed_index] = e.output
        if not ok:
            cls = ErrorClass(e.error_class) if e.error_class else None
            if e.stage is Stage.TRACE and (e.text or "").startswith(protocol.PROGRAM_REFUSED):
                # jax's tracing writes only what rebuilds; anything else was written or changed by hand
                failures.append(Failure(ErrorClass.PROTOCOL_VIOLATION, e.text or ""))
            elif cls is not None:
                text = e.text if cls is ErrorClass.MISSING_WORKLOAD else decisive_lines(e.text or "")
                failures.append(Failure(cls, text or ""))
            else:
                failures.append(Failure(None, e.text or "", e.stage))

    if outcome.violation:
        failures.insert(
            0,
            Failure(
                ErrorClass.PROTOCOL_VIOLATION,
                (
                    f"the process judging the recorded program broke the worker protocol: {outcome.violation}; "
                    "a jaxbench-mcp bug: please report it with this message"
                    if outcome.after_trace
                    else f"the candidate's process broke the worker protocol: {outcome.violation}; the run was stopped"
                ),
            ),
        )
    elif outcome.killed_for and not failures:
        failures.append(_killed(outcome.killed_for, case.limits))
    if not failures and not outcome.finished:
        failures.append(_ended_early(outcome))
    if not failures and traced is None and outcome.finished:
        failures.append(
            Failure(ErrorClass.PROTOCOL_VIOLATION, "the worker reported 'finished' before tracing the candidate")
        )
    if not failures:
        failures += full_size(case, traced, evidence)
        progress("compare")
        failure = _compare_outputs(case, truths, outcome, outputs, evidence, runs_stopped)
        if failure:
            failures.append(failure)

    # Both accounts must show a kernel: the recorded program's (the trace) and the lowered module's.
    if not failures and case.require_pallas and not (any(mosaic_kernels.values()) and evidence.kernels):
        failures.append(Failure(ErrorClass.NO_PALLAS_CALL, _no_kernel_text(mosaic_kernels, len(evidence.kernels))))
    if not failures and case.require_pallas and traced is not None and traced.work is not None:
        failure = work_share(case.workload, traced.work, evidence)
        if failure:
            failures.append(failure)

    if runs_stopped and not failures:  # never 'correct' on fewer runs than the check asked for
        failures.append(
            Failure(
                ErrorClass.INTERNAL_ERROR,
                "the runs were stopped because the verdict could not be 'correct', yet nothing failed: a "
                "jaxbench-mcp bug, please report it with this message",
            )
        )
    if case.workload.degenerate_output:
        evidence.warnings.append(
            "this workload's output is near-constant: an all-zeros or constant output passes JAXBench's own check "
            "(see the workload notes)"
        )
    return evidence


def inspect_module(job_dir: Path, module_file: str) -> tuple[int, str]:
    """(Mosaic kernels, sha256) of a lowered module the worker wrote, read and counted here, in the parent."""
    text = read_job_file(job_dir, module_file, _MAX_MODULE_BYTES)
    return text.count(_MOSAIC_OP.encode()), hashlib.sha256(text).hexdigest()


def full_size(case: Case, traced: protocol.Traced | None, evidence: Evidence) -> list[Failure]:
    """What holds at full size although the run was small: the same program at both sizes, and every output
    element written and every dense input element read by some grid step (in that order of precedence). Findings
    and warnings go into `evidence`; the first failure, if any, is returned."""
    if traced is None:
        return []
    failures = []
    for size, outline in ((case.run_size, traced.run_outline), (workloads.FULL_REDUCTION, traced.reduction_outline)):
        difference = (
            rules.first_difference(outline, traced.outline, (f"{size} size", "full size"))
            if traced.outline is not None and outline is not None
            else None
        )
        if difference is not None:
            failures.append(
                Failure(
                    ErrorClass.SIZE_DEPENDENT_PROGRAM,
                    f"workload() traces to a different program at the {size} size than at full size: "
                    f"{difference['text']}",
                )
            )
            break
    if traced.coverage is not None:
        for finding in traced.coverage.findings:
            evidence.full_size_findings.append(finding.message)
            if finding.kind == "parallel_revisit":
                failures += _parallel_revisit(finding.message, case.targets, evidence)
                continue
            operand = finding.operand.split(" (")[0]
            if finding.kind == "unread_input" and operand in case.workload.sparse_inputs:
                evidence.warnings.append(f"{finding.message} ({operand} is sparse: a kernel may skip parts of it)")
                continue
            cls = {
                "unwritten_output": ErrorClass.UNWRITTEN_OUTPUT,
                "low_precision_accumulation": ErrorClass.LOW_PRECISION_ACCUMULATION,
            }.get(finding.kind, ErrorClass.UNREAD_INPUT)
            failures.append(Failure(cls, finding.message))
    # An unwritten output decides over an unread input: it is the more direct fault.
    failures.sort(key=lambda f: _FULL_SIZE_PRECEDENCE.index(f.error_class))  # type: ignore[arg-type] # all classed
    return failures[:1]


_FULL_SIZE_PRECEDENCE = [
    ErrorClass.SIZE_DEPENDENT_PROGRAM,
    ErrorClass.UNWRITTEN_OUTPUT,
    ErrorClass.LOW_PRECISION_ACCUMULATION,
    ErrorClass.UNREAD_INPUT,
    ErrorClass.PARALLEL_REDUCTION_AXIS,
]


def cannot_be_correct(case: Case, traced: protocol.Traced) -> bool:
    """Whether the recorded program alone already rules 'correct' out (a full-size finding; no kernel, or kernels
    that do not do the work, where Pallas is required), whatever the outputs: the runs after the first are then
    not worth their time (checker.Checker.check stops them)."""
    if full_size(case, traced, Evidence()):
        return True
    if not case.require_pallas:
        return False
    return not traced.kernels or (
        traced.work is not None and work_share(case.workload, traced.work, Evidence()) is not None
    )


def work_share(w, work: protocol.Work, evidence: Evidence) -> Failure | None:
    """The Pallas kernels do the workload's dominant work (checking/rules); the reason goes into `evidence`."""
    share = rules.work_share(
        {"flops": work.kernel_flops, "bytes": work.kernel_bytes, "exact": work.exact},
        None if work.outside_flops is None else {"flops": work.outside_flops, "bytes": work.outside_bytes},
    )
    judged = rules.judge_work_share(share, w.flops("full"), w.io_bytes("full"))
    evidence.pallas_work = judged["reason"]
    if judged["error_class"]:
        return Failure(ErrorClass.PALLAS_NOT_DOING_THE_WORK, judged["reason"])
    return None


def _kernel_description(k: protocol.KernelInfo) -> KernelDescription:
    return KernelDescription(
        name=k.name,
        grid=k.grid,
        block_shapes=[b.block_shape for b in k.blocks],
        dimension_semantics=k.dimension_semantics,
        num_scalar_prefetch=k.num_scalar_prefetch,
        num_scratch=k.num_scratch,
    )


def _produced_by(case: Case, stage: Stage) -> str:
    tier = case.tier
    if stage in (Stage.COMPARE, Stage.POLICY):
        return "server (trusted process)"
    if stage is Stage.COMPILE:
        return (
            "tpu: XLA:TPU compile for the attached chip"
            if tier is Tier.TPU
            else "cpu_libtpu: deviceless XLA:TPU compile"
        )
    if stage is Stage.RUN:
        return "tpu: real run on the attached chip" if tier is Tier.TPU else f"{tier}: TPU interpret mode on the CPU"
    if stage is Stage.LOWER:
        return f"{tier}: jax lowering for TPU (Mosaic)"
    if stage is Stage.TRACE:
        return f"{tier}: recorded in the candidate process, analysed in a process that never ran its code"
    return f"{tier}: candidate process"


def _no_kernel_text(mosaic_kernels: dict[str, int], pallas_calls: int) -> str:
    if not any(mosaic_kernels.values()):
        return (
            "no Pallas kernel in workload(): the lowered program holds no Mosaic kernel (tpu_custom_call); this "
            "benchmark asks for a Pallas kernel"
            + (
                f" (the trace listed {pallas_calls} pallas_call(s) that did not reach the program)"
                if pallas_calls
                else ""
            )
        )
    return (
        "no Pallas kernel in workload(): its recorded program holds no pallas_call, although the lowered module the "
        "worker wrote names one; this benchmark asks for a Pallas kernel"
    )


def _process(outcome: RunOutcome) -> str:
    """Which process a run's outcome is about, in a verdict's words."""
    if outcome.after_trace:
        return "the process judging the candidate's recorded program (it never runs the candidate's code)"
    return "the candidate's process"


def _ended_early(outcome: RunOutcome) -> Failure:
    code = outcome.returncode
    # Inside bubblewrap the sandbox's init reports a child killed by signal N as exit status 128 + N.
    signal_number = (
        -code
        if code is not None and code < 0
        else (
            code - 128
            if outcome.isolation is sandbox.Isolation.BUBBLEWRAP and code is not None and 128 < code < 128 + 65
            else None
        )
    )
    who = _process(outcome)
    if signal_number:
        return Failure(ErrorClass.KILLED_BY_SIGNAL, f"{who} died from signal {signal_name(signal_number)}")
    raised = uncaught_exception(outcome.stderr_tail, judging=outcome.after_trace)
    return Failure(
        ErrorClass.EXITED,
        f"{who} exited with status {code} before the check finished" + (f": it raised {raised}" if raised else ""),
    )


def _parallel_revisit(message: str, chosen: list[str], evidence: Evidence) -> list[Failure]:
    """Wrong where a chip splits parallel axes across its TensorCores (megacore: v4, v5p); elsewhere the steps
    run in order on one core, so the result holds there and the label is only warned about."""
    split = [t for t in chosen if targets.cores_per_device(t) > 1]
    if split:
        return [
            Failure(
                ErrorClass.PARALLEL_REDUCTION_AXIS,
                f"{message}; on {', '.join(split)} two TensorCores split the axis and overwrite each other's "
                "partial results",
            )
        ]
    evidence.warnings.append(
        f"{message}: right on {', '.join(chosen) or 'this host'} (one TensorCore runs the steps in order) "
        'but wrong on megacore chips (v4, v5p), which split parallel axes across two cores; mark it "arbitrary"'
    )
    return []


def _killed(killed_for: str, limits: Limits) -> Failure:
    if killed_for == "memory":
        return Failure(
            ErrorClass.MEMORY_LIMIT,
            f"the worker exceeded the memory limit of {limits.memory_bytes / 2**30:.1f} GiB and was killed",
        )
    if killed_for == "disk":
        return Failure(
            ErrorClass.PROTOCOL_VIOLATION,
            f"the candidate wrote more than {limits.max_job_dir_bytes / 2**30:.1f} GiB into "
            "its job directory, /tmp and /dev/shm and was killed",
        )
    if killed_for == "files":
        return Failure(
            ErrorClass.PROTOCOL_VIOLATION,
            f"the candidate created more than {limits.max_job_dir_entries:,} files and folders in "
            "its job directory, /tmp and /dev/shm and was killed",
        )
    stage = killed_for.split(":", 1)[1]
    if stage == "overall":
        return Failure(ErrorClass.STAGE_TIMEOUT, "the job ran past its overall time limit; the worker was killed")
    return Failure(
        ErrorClass.STAGE_TIMEOUT,
        f"stage '{stage}' ran longer than its limit of {limits.for_stage(Stage(stage)):.0f} s; the worker was killed",
    )


def _probe_failure(job_dir: Path, after_trace: bool, info: protocol.Output, index: int) -> Failure | None:
    """Interpret mode's strictness was in force in this seed's run: the probe kernel, run in the same program
    under the same parameters, read memory it never wrote, which must come out NaN."""
    failure = Failure(
        ErrorClass.PROTOCOL_VIOLATION,
        f"seed {index}: interpret mode's strictness was not in force during the run (a probe kernel that reads "
        "uninitialised memory did not read NaN)"
        + (
            ", although the run never shares a process with candidate code: a jaxbench-mcp bug, please report it"
            if after_trace
            else ": the candidate's process changed jax's interpreter"
        ),
    )
    if info.probe_path is None:
        return failure
    try:
        data = read_job_file(job_dir, info.probe_path, 8 * 1024 * 8 + 4096)
        probe = np.load(io.BytesIO(data), allow_pickle=False)
    except (protocol.ProtocolViolation, ValueError, OSError, EOFError):
        return failure
    if probe.dtype.kind != "f" or probe.size == 0 or not np.isnan(probe).all():
        return failure
    return None


def _size_text(w, size: str, run_size: str) -> str:
    """How a size differs from the run's, e.g. "full_reduction: K=8192 where the small size has 512"."""
    ours, theirs = w.sizes[size], w.sizes[run_size]
    changed = [k for k in ours if ours[k] != theirs.get(k)]
    return (
        f"{size}: "
        + ", ".join(f"{k}={ours[k]}" for k in changed)
        + f" where the {run_size} size has "
        + ", ".join(str(theirs.get(k)) for k in changed)
    )


def _compare_outputs(
    case: Case,
    truths: list[tuple[Callable[[], Truth], str]],
    outcome: RunOutcome,
    outputs: dict[int, protocol.Output],
    evidence: Evidence,
    runs_stopped: bool,
) -> Failure | None:
    """Each run's output against its truth, in order, up to the first wrong one, or to the last that ran where
    the parent stopped the runs."""
    for index, (t, size) in enumerate(truths):
        info = outputs.get(index)
        if info is None and runs_stopped:
            break
        if info is None and outcome.finished:
            return Failure(
                ErrorClass.PROTOCOL_VIOLATION, "the worker reported 'finished' before every seed's run was done"
            )
        if info is None:
            return Failure(ErrorClass.EXITED, f"{_process(outcome)} stopped before producing every output")
        failure = judge_output(case, t(), size, index, info, outcome.job_dir, outcome.after_trace, evidence)
        if failure:
            return failure
    evidence.jaxbench_compatible = all(s.jaxbench_allclose for s in evidence.seeds)
    return None


def judge_output(
    case: Case,
    t: Truth,
    size: str,
    index: int,
    info: protocol.Output,
    job_dir: Path,
    after_trace: bool,
    evidence: Evidence,
) -> Failure | None:
    """One run's output, read across the wall and checked for what it claims to be, against its truth; what it
    finds goes into `evidence`."""
    run = (
        f"seed {index}" if size == case.run_size else f"seed {index} ({_size_text(case.workload, size, case.run_size)})"
    )
    if info.leaves != 1:
        return Failure(
            ErrorClass.SHAPE_MISMATCH, f"workload() returns {info.leaves} arrays; this workload returns exactly one"
        )
    if tuple(info.shape) != tuple(t.truth.shape):
        return Failure(
            ErrorClass.SHAPE_MISMATCH,
            f"{run}: output shape {info.shape} but the workload returns {list(t.truth.shape)}",
        )
    try:
        # float64 at most, plus the .npy header: anything larger is not the output it claims to be.
        data = read_job_file(job_dir, info.path, t.truth.size * 8 + 4096)
        candidate = np.load(io.BytesIO(data), allow_pickle=False)
    except (protocol.ProtocolViolation, ValueError, OSError, EOFError) as exc:
        return Failure(ErrorClass.PROTOCOL_VIOLATION, f"{run}: the output file is not a valid array ({exc})")
    if candidate.dtype.kind not in "biuf":  # the worker writes numbers; strings or objects are a forgery
        return Failure(ErrorClass.PROTOCOL_VIOLATION, f"{run}: the output file holds {candidate.dtype}, not numbers")
    if tuple(candidate.shape) != tuple(info.shape):
        return Failure(
            ErrorClass.PROTOCOL_VIOLATION,
            f"{run}: the output file holds shape {list(candidate.shape)}, not the {info.shape} its report claims",
        )
    if case.tier is not Tier.TPU:
        tampered = _probe_failure(job_dir, after_trace, info, index)
        if tampered:
            return tampered
    t0 = time.monotonic()
    report, cls, message = compare(candidate, info.dtype, t, index)
    if report:
        report.size = None if size == case.run_size else size
        evidence.seeds.append(report)
    evidence.stages.append(
        StageReport(
            stage=Stage.COMPARE,
            ok=cls is None,
            seconds=round(time.monotonic() - t0, 4),
            produced_by=_produced_by(case, Stage.COMPARE),
            detail=run,
        )
    )
    if cls is None:
        return None
    evidence.jaxbench_compatible = all(s.jaxbench_allclose for s in evidence.seeds) if evidence.seeds else None
    if size != case.run_size:  # the run-size seeds passed: say what only this run has
        message += (
            "; the seeds at the run size passed, and only this run sums over every reduction's full "
            "length: look for what full-length values reach (a clip or saturating cast, a running "
            "sum kept in 16 bits)"
        )
    return Failure(cls, f"{run}: {message}")
