"""The check ladder: hand a candidate to a worker, compare its outputs with the truth, give a verdict.

The trusted side of a check lives here. The truth is the workload's reference evaluated one
precision level above its output dtype (float32 for bf16 outputs, float64 for float32 ones) on the
very inputs the worker built from hidden seeds. The tolerance is calibrated per workload and seed:
a candidate passes when its worst error is within twice the worst error of the workload's own
native-dtype baseline (never tighter than one ulp of the output's largest magnitude).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.checking import error_catalog
from jaxbench_mcp.checking.comparison import jaxbench_allclose
from jaxbench_mcp.internals import libtpu, tracebacks
from jaxbench_mcp.models import CompileReport, KernelDescription, SeedReport, StageReport, Verdict
from jaxbench_mcp.perf import cost_model
from jaxbench_mcp.requests import DEFAULT_SEEDS as DEFAULT_SEEDS, CheckRequest
from jaxbench_mcp.sandbox import isolation as sandbox, protocol
from jaxbench_mcp.sandbox.jobs import JobQueue, Limits, RunOutcome, Worker, WorkerPool, WorkerStartFailed, default_slots
from jaxbench_mcp.taxonomy import ErrorClass, Stage, Status, status_of

_TOLERANCE_FACTOR = 2.0
_MESSAGE_LINES = 8


@dataclass(frozen=True)
class Truth:
    truth: np.ndarray  # float64
    baseline: np.ndarray  # the native-dtype reference, as float32
    dtype: str
    tolerance: float
    baseline_error: float


def _upcast(inputs: tuple, dtype) -> tuple:
    import jax.numpy as jnp

    return tuple(
        x.astype(dtype) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x for x in inputs
    )


def _first_leaf(out):
    import jax

    return np.asarray(jax.tree_util.tree_leaves(out)[0])


def inputs_for(workload_id: str, size: str, seed: int) -> tuple:
    """The inputs for a hidden seed, built here: the worker gets the arrays, never the seed."""
    return workloads.get_workload(workload_id).create_inputs(size, seed=seed)


def write_inputs(inputs: tuple, directory: Path, prefix: str) -> list[protocol.InputFile | protocol.StaticInput]:
    """Inputs as raw files plus shape/dtype; static Python values travel in the description."""
    described: list[protocol.InputFile | protocol.StaticInput] = []
    for i, x in enumerate(inputs):
        if not hasattr(x, "shape"):
            described.append(protocol.StaticInput(static=x))
            continue
        path = directory / f"{prefix}_{i}.bin"
        path.write_bytes(np.asarray(x).tobytes())
        described.append(protocol.InputFile(file=path.name, shape=list(x.shape), dtype=str(x.dtype)))
    return described


def fresh_seed() -> int:
    """A hidden seed from the OS: never 42 (the public one), never reused across checks."""
    return secrets.randbelow(2**31 - 1) + 43


def read_job_file(directory: Path, name: str, max_bytes: int) -> bytes:
    """A file the worker wrote, read defensively: a bare name, no link, a regular file, bounded in size."""
    if "/" in name or name.startswith("."):
        raise protocol.ProtocolViolation(f"the file name {name!r} is not a bare file name")
    try:
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise protocol.ProtocolViolation(f"{name} cannot be opened as a plain file ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise protocol.ProtocolViolation(f"{name} is not a regular file")
        if info.st_size > max_bytes:
            raise protocol.ProtocolViolation(f"{name} has {info.st_size:,} bytes; at most {max_bytes:,} were expected")
        return f.read(max_bytes + 1)[:max_bytes]


def truth_for(workload_id: str, size: str, seed: int) -> Truth:
    """The truth, the native baseline and the calibrated tolerance for one (workload, size, seed)."""
    return truth_of(workloads.get_workload(workload_id), inputs_for(workload_id, size, seed))


def truth_of(w, inputs: tuple) -> Truth:
    """The truth, the native baseline and the calibrated tolerance for one set of a workload's inputs."""
    import jax
    import jax.numpy as jnp

    baseline = _first_leaf(w.jitted_reference()(*inputs))
    wide = jnp.float64 if baseline.dtype == np.float32 or baseline.dtype == np.float64 else jnp.float32
    with jax.enable_x64(wide == jnp.float64):
        truth = _first_leaf(jax.jit(w.module.reference, static_argnums=w.static_argnums)(*_upcast(inputs, wide)))
    truth = truth.astype(np.float64)
    base32 = baseline.astype(np.float32)
    finite = np.isfinite(truth)
    baseline_error = float(np.max(np.abs(base32[finite] - truth[finite]), initial=0.0))
    scale = float(np.max(np.abs(truth[finite]), initial=0.0))
    ulp = float(jnp.finfo(baseline.dtype).eps) if jnp.issubdtype(baseline.dtype, jnp.floating) else 0.0
    tolerance = max(_TOLERANCE_FACTOR * baseline_error, ulp * scale)
    return Truth(
        truth=truth, baseline=base32, dtype=str(baseline.dtype), tolerance=tolerance, baseline_error=baseline_error
    )


def compare(
    candidate: np.ndarray, candidate_dtype: str, t: Truth, seed_index: int
) -> tuple[SeedReport | None, ErrorClass | None, str]:
    """Compare one output with the truth: (report, error class or None, message)."""
    if tuple(candidate.shape) != tuple(t.truth.shape):
        return (
            None,
            ErrorClass.SHAPE_MISMATCH,
            f"output shape {list(candidate.shape)} but the workload returns {list(t.truth.shape)}",
        )
    if candidate_dtype != t.dtype:
        return None, ErrorClass.DTYPE_MISMATCH, f"output dtype {candidate_dtype} but the workload returns {t.dtype}"
    cand = candidate.astype(np.float64)
    finite = np.isfinite(t.truth)
    if finite.all() and np.isfinite(cand).all():  # the usual case, in half the passes over the arrays
        bad = np.zeros((), bool)
        diff = np.abs(cand - t.truth)
        nan_count = inf_count = 0
    else:
        bad = finite & ~np.isfinite(cand)
        diff = np.where(finite, np.abs(np.nan_to_num(cand, nan=np.inf) - t.truth), 0.0)
        nan_count, inf_count = int(np.isnan(cand).sum()), int(np.isinf(cand).sum())
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    max_abs = float(diff[worst]) if diff.size else 0.0
    rel = diff / np.maximum(np.abs(t.truth), 1e-30)
    if not finite.all():
        rel = np.where(finite, rel, 0.0)  # a NaN truth would make its (zero) diff NaN here
    report = SeedReport(
        seed_index=seed_index,
        passed=bool(not bad.any() and max_abs <= t.tolerance),
        max_abs_error=max_abs,
        max_rel_error=float(rel.max(initial=0.0)),
        tolerance=t.tolerance,
        baseline_max_abs_error=t.baseline_error,
        worst_index=[int(i) for i in worst],
        worst_candidate=float(cand[worst]) if diff.size else 0.0,
        worst_truth=float(t.truth[worst]) if diff.size else 0.0,
        nan_count=nan_count,
        inf_count=inf_count,
        jaxbench_allclose=jaxbench_allclose(candidate, t.baseline),
    )
    if bad.any():
        where = [int(i) for i in np.argwhere(bad)[0]]
        return (
            report,
            ErrorClass.NAN_OUTPUT,
            (
                f"{int(bad.sum())} of {bad.size} outputs are NaN/Inf where the truth is finite (first at {where}); "
                "uninitialised memory reads as NaN here, so this usually means an accumulator or output block "
                "that is never initialised or never written"
            ),
        )
    if not report.passed:
        return (
            report,
            ErrorClass.WRONG_VALUES,
            (
                f"max |candidate - truth| = {max_abs:.4g} at {report.worst_index} (candidate {report.worst_candidate:.5g}, "
                f"truth {report.worst_truth:.5g}); allowed {t.tolerance:.3g}, which is {_TOLERANCE_FACTOR:g}x the "
                f"native-dtype baseline's own error {t.baseline_error:.3g}"
            ),
        )
    return report, None, ""


# ---- the decisive lines of an error -----------------------------------------------------------

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def decisive_lines(text: str) -> str:
    """The candidate's own frames and the final exception lines, not the whole traceback."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    own = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m and m.group(1).endswith("candidate.py"):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            own.append(f"candidate.py line {m.group(2)}, in {m.group(3)}: {code}")
    tail_start = max((i for i, l in enumerate(lines) if _FRAME.match(l)), default=-1) + 1
    tail = [l for l in lines[tail_start:] if not l.startswith(("    ", "  File", "Traceback", "---", "The above"))]
    tail = [l for l in tail if not tracebacks.is_jax_noise(l)]
    picked = own[-2:] + (tail or lines[-3:])
    return "\n".join(l[:400] for l in picked[:_MESSAGE_LINES])


# ---- the checker ------------------------------------------------------------------------------

# A lowered module bigger than this is no candidate's program.
_MAX_MODULE_BYTES = 64 * 2**20
# The parent counts Mosaic kernels in the lowered module itself: this op carries each one.
_MOSAIC_OP = "tpu_custom_call"


def _compile_error_line(text: str) -> str | None:
    """One line for one target's failed compile: the VMEM sizes when it ran out of VMEM, else its last decisive line."""
    sizes = libtpu.vmem_overflow_sizes(text)
    if sizes:
        return f"out of VMEM: {sizes}"
    early = text.find(protocol.EARLY_VMEM_REFUSAL)  # the worker's refusal of a hopeless kernel
    if early >= 0:
        return text[early:].splitlines()[0][:300]
    lines = decisive_lines(text).splitlines() if text.strip() else []
    return lines[-1][:300] if lines else None


def compile_failure(text: str) -> str:
    """One line for a failed compile in a profile or estimate: its class and, for a VMEM overflow, the sizes."""
    sizes = libtpu.vmem_overflow_sizes(text)
    detail = f"out of VMEM: {sizes}" if sizes else decisive_lines(text).splitlines()[-1]
    return f"compile failed ({error_catalog.classify('compile', text).error_class}): {detail[:300]}"


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class Cancelled(Exception):
    """The caller cancelled the check; its worker has been killed."""


def _produced_by(tier: targets.Tier, stage: Stage) -> str:
    if stage in (Stage.COMPARE, Stage.POLICY):
        return "server (trusted process)"
    if stage is Stage.COMPILE:
        return (
            "tpu: XLA:TPU compile for the attached chip"
            if tier is targets.Tier.TPU
            else "cpu_libtpu: deviceless XLA:TPU compile"
        )
    if stage is Stage.RUN:
        return (
            "tpu: real run on the attached chip"
            if tier is targets.Tier.TPU
            else f"{tier}: TPU interpret mode on the CPU"
        )
    if stage is Stage.LOWER:
        return f"{tier}: jax lowering for TPU (Mosaic)"
    return f"{tier}: candidate process"


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


def inspect_module(job_dir: Path, module_file: str) -> tuple[int, str]:
    """(Mosaic kernels, sha256) of a lowered module the worker wrote, read and counted here, in the parent."""
    text = read_job_file(job_dir, module_file, _MAX_MODULE_BYTES)
    return text.count(_MOSAIC_OP.encode()), hashlib.sha256(text).hexdigest()


# What a check on a host without a TPU cannot see; every verdict of such a host lists it (README, Threat model).
NOT_COVERED_WITHOUT_TPU = (
    "platform-keyed code beyond the queries answered as on a TPU (jax.default_backend(), jax.devices(), the TPU_* "
    "variables): jax's config, backend objects and /dev still show a CPU host",
    "numerics at the full size: the run uses a smaller size (full-size coverage, program and work are judged "
    "without running; where the workload has a full_reduction size, one more seed runs with every reduction at "
    "its full length)",
    "the worker's account of the program it traced and lowered: it is produced beside the candidate's own code",
)


class Checker:
    """Owns the warm worker pool and the device slots of this host; `check` is safe from many threads."""

    def __init__(
        self,
        tier: targets.Tier | None = None,
        limits: Limits | None = None,
        spares: int | None = None,
        slots: int | None = None,
    ):
        self.tier = tier or targets.detect_tier()
        self.limits = limits or Limits()
        self.isolation = sandbox.detect()
        self.default_target = (
            targets.DEFAULT_CPU_TARGET if self.tier is targets.Tier.CPU_LIBTPU else targets.attached_generation()
        )
        self.queue = JobQueue(slots or default_slots(self.tier))
        if spares is None:
            # Only one process can hold a TPU: there, the next worker starts when the last one is done.
            spares = 0 if self.tier is targets.Tier.TPU else self.queue.slots
        self.pool = WorkerPool(
            self.default_target if self.tier is targets.Tier.CPU_LIBTPU else None, self.tier, self.limits, spares
        )

    def start(self) -> None:
        self.pool.fill()

    def close(self) -> None:
        self.pool.close()

    def default_targets(self) -> list[str]:
        return [self.default_target] if self.default_target else []

    # ---- running any job ----

    def _ready_worker(self, dump_schedules: bool) -> Worker:
        """A worker that said 'ready'; a worker that fails to start is replaced once before giving up."""
        tail = ""
        for _ in range(2):
            worker = Worker(None, self.tier, self.limits, dump_schedules=True) if dump_schedules else self.pool.take()
            if worker.wait_ready():
                return worker
            tail = worker.tail("stderr.log")[-2000:]
            worker.dispose()
        raise WorkerStartFailed(f"the checker's worker failed to start twice; its stderr ends with:\n{tail}")

    def run_job(
        self,
        make_job: Callable[
            [Path], protocol.CheckJob | protocol.ProfileJob | protocol.MeasureJob | protocol.ReferenceJob
        ],
        source: str | None,
        on_event: Callable[[protocol.StageEvent], None] = lambda _e: None,
        cancel: threading.Event | None = None,
        dump_schedules: bool = False,
    ) -> RunOutcome:
        """Every kind of job: take a queue slot, then a ready worker, write the candidate and the job's files
        into its directory, and follow it to the end. Raises Cancelled or WorkerStartFailed."""

        def in_slot() -> RunOutcome:
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            try:
                worker = self._ready_worker(dump_schedules)
                try:
                    if source is not None:
                        (worker.job_dir / "candidate.py").write_text(source)
                    job = make_job(worker.job_dir)
                except BaseException:
                    worker.dispose()
                    raise
                if cancel is not None:
                    worker.cancelled = cancel
                outcome = worker.run(job, on_event)
            finally:
                if not dump_schedules:
                    self.pool.refill()
            if outcome.killed_for == "cancelled":
                outcome.cleanup()
                raise Cancelled()
            return outcome

        return self.queue.run(in_slot)

    # ---- check ----

    def check(
        self,
        request: CheckRequest,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[Verdict, RunOutcome | None]:
        """The verdict on one candidate, and the worker's outcome (None when no worker could start: the verdict
        is then a server_error). Raises Cancelled when `cancel` is set before the end. The request was validated
        when it was made (jaxbench_mcp.requests); what is checked here is what this host can do."""
        started = time.monotonic()
        w = workloads.get_workload(request.workload_id)
        source, size, seeds, require_pallas = request.source, request.size, request.seeds, request.require_pallas
        chosen = list(request.targets) or self.default_targets()
        if chosen and self.tier is targets.Tier.CPU:
            raise targets.UnknownTarget(
                "this host has no libtpu, so it cannot compile for a TPU generation; install jax[tpu] or omit targets"
            )
        run_size = size or ("full" if self.tier is targets.Tier.TPU else "small")
        w.size_params(run_size)
        # Fresh hidden seeds for every check: an answer remembered from one check is worth nothing in the next.
        hidden = [fresh_seed() for _ in range(seeds)]
        # Below full size, one more seed runs where every reduction has its full length: what only full-length
        # sums reach (magnitudes, rounding that grows with the length) is judged by values, not by analysis.
        reduction = workloads.FULL_REDUCTION in w.sizes and run_size not in ("full", workloads.FULL_REDUCTION)
        runs = [(seed, run_size) for seed in hidden] + ([(fresh_seed(), workloads.FULL_REDUCTION)] if reduction else [])
        progress = on_progress or (lambda _msg: None)

        def on_event(event: protocol.StageEvent) -> None:
            if event.state != "start":
                where = f" {event.target}" if event.target else ""
                seed = f" seed {event.seed_index}" if event.seed_index is not None else ""
                progress(f"{event.stage}{where}{seed}: {event.state}")

        def make_job(job_dir: Path) -> protocol.CheckJob:
            # Built field by field: the seeds stay here; the worker gets the arrays they produce.
            return protocol.CheckJob(
                workload_id=w.id,
                targets=chosen,
                size=run_size,
                interpret=self.tier is not targets.Tier.TPU,
                inputs=[write_inputs(inputs[seed], job_dir, f"input_{k}") for k, seed in enumerate(hidden)],
                full_reduction=write_inputs(inputs[runs[-1][0]], job_dir, f"input_{len(hidden)}")
                if reduction
                else None,
                # Orders in which interpret mode visits "parallel" grid axes: fresh for every check.
                shuffle_seeds=[secrets.randbelow(2**31) for _ in runs],
            )

        progress("queued")
        # The truth is needed only after the run; compute it meanwhile, on the server's side.
        # Seeds are fresh for every check, so nothing is cached across checks: a check holds its own inputs and
        # truths, and lets them go when it ends (a server's memory stays flat over thousands of checks).
        inputs = {seed: inputs_for(w.id, size, seed) for seed, size in runs}
        truths: dict[int, Truth] = {}
        truth = threading.Thread(
            target=lambda: truths.update({s: truth_of(w, inputs[s]) for s, _ in runs}), daemon=True
        )
        truth.start()
        verdict = Verdict(
            status=Status.CORRECT,
            message="",
            workload_id=w.id,
            size=run_size,
            targets=chosen,
            tier=str(self.tier),
            isolation=str(self.isolation),
            not_covered=list(NOT_COVERED_WITHOUT_TPU) if self.tier is not targets.Tier.TPU else [],
        )
        try:
            outcome = self.run_job(make_job, source, on_event, cancel)
        except WorkerStartFailed as exc:
            self._fail(verdict, ErrorClass.WORKER_START_FAILED, str(exc))
            verdict.total_seconds = time.monotonic() - started
            return verdict, None
        truth.join()
        try:
            self._judge(verdict, w, [(truths[s], size) for s, size in runs], outcome, require_pallas, progress)
        except BaseException:  # the caller never sees this outcome: its directory goes now
            outcome.cleanup()
            raise
        verdict.total_seconds = time.monotonic() - started
        return verdict, outcome

    @staticmethod
    def _fail(
        verdict: Verdict, cls: ErrorClass | None, text: str, stage: Stage | None = None, preface: str = ""
    ) -> None:
        diagnosis = error_catalog.classify(stage, text) if cls is None else error_catalog.diagnosis_for(cls)
        diagnosis = error_catalog.refine_for_kernels(diagnosis, verdict.kernels)
        verdict.error_class = diagnosis.error_class
        verdict.status = status_of(diagnosis.error_class)
        verdict.message = preface + (decisive_lines(text) if cls is None else text)
        verdict.hint, verdict.docs = diagnosis.hint, list(diagnosis.doc_refs)

    # ---- turning the worker's events into a verdict ----

    def _judge(
        self, verdict: Verdict, w, truths: list[tuple[Truth, str]], outcome: RunOutcome, require_pallas: bool, progress
    ) -> None:
        """`truths`: per run (the hidden seeds, then the full_reduction run if any), its truth and size."""
        failures: list[tuple[ErrorClass | None, str, Stage | None]] = []  # (class, message, stage for the catalog)
        outputs: dict[int, protocol.Output] = {}
        mosaic_kernels: dict[str, int] = {}
        traced: protocol.Traced | None = None
        vmem = None
        for e in outcome.stage_events():
            if e.state == "start":
                continue
            ok = e.state == "done"
            verdict.stages.append(
                StageReport(
                    stage=e.stage,
                    ok=ok,
                    seconds=round(e.seconds, 4),
                    target=e.target,
                    produced_by=_produced_by(self.tier, e.stage),
                )
            )
            if e.traced is not None:
                traced = e.traced
                kernels = e.traced.kernels
                verdict.kernels = [
                    KernelDescription(
                        name=k.name,
                        grid=k.grid,
                        block_shapes=[b.block_shape for b in k.blocks],
                        dimension_semantics=k.dimension_semantics,
                        num_scalar_prefetch=k.num_scalar_prefetch,
                        num_scratch=k.num_scratch,
                    )
                    for k in kernels
                ]
                verdict.pallas_calls = len(kernels)
                vmem = max((cost_model.vmem_bytes(k) for k in kernels), default=None)
                if e.traced.platform_queries:
                    verdict.warnings.append(
                        f"workload() asked which platform it runs on ({', '.join(e.traced.platform_queries)}) while it "
                        f"was imported and traced; it was answered as on a TPU {verdict.targets[0] if verdict.targets else ''}"
                        ": a kernel computes the same thing on every platform".replace(" :", ":")
                    )
                if e.traced.host_callbacks:
                    failures.append(
                        (
                            ErrorClass.HOST_CALLBACK,
                            "workload calls back into Python on the host "
                            f"({', '.join(sorted(set(e.traced.host_callbacks)))}); the computation must run on the TPU",
                            None,
                        )
                    )
            if e.lowered is not None and e.lowered.module_file:
                try:
                    count, digest = inspect_module(outcome.job_dir, e.lowered.module_file)
                except protocol.ProtocolViolation as exc:
                    failures.append(
                        (ErrorClass.PROTOCOL_VIOLATION, f"the lowered module for {e.target or 'TPU'}: {exc}", None)
                    )
                    continue
                mosaic_kernels[e.target or "tpu"] = count
                verdict.program_sha256[e.target or "tpu"] = digest
            if e.stage is Stage.COMPILE:
                verdict.compiles.append(
                    CompileReport(
                        target=e.target,
                        ok=ok,
                        seconds=round(e.seconds, 3),
                        code_size_bytes=e.compiled.code_size_bytes if e.compiled else None,
                        vmem_estimate_bytes=vmem or None,
                        error=None if ok else _compile_error_line(e.text or ""),
                    )
                )
            if e.output is not None:
                outputs[e.seed_index] = e.output
            if not ok:
                cls = ErrorClass(e.error_class) if e.error_class else None
                if cls is not None:
                    text = e.text if cls is ErrorClass.MISSING_WORKLOAD else decisive_lines(e.text or "")
                    failures.append((cls, text or "", None))
                else:
                    failures.append((None, e.text or "", e.stage))

        failed_compiles = [c.target for c in verdict.compiles if not c.ok]
        if outcome.violation:
            failures.insert(
                0,
                (
                    ErrorClass.PROTOCOL_VIOLATION,
                    f"the candidate's process broke the worker protocol: {outcome.violation}; the run was stopped",
                    None,
                ),
            )
        elif outcome.killed_for and not failures:
            failures.append(self._killed(outcome.killed_for))
        if not failures and not outcome.finished:
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
            if signal_number:
                failures.append(
                    (
                        ErrorClass.KILLED_BY_SIGNAL,
                        f"the candidate's process died from signal {_signal_name(signal_number)}",
                        None,
                    )
                )
            else:
                failures.append(
                    (
                        ErrorClass.EXITED,
                        f"the candidate's process exited with status {code} before the check finished",
                        None,
                    )
                )

        if not failures and traced is None and outcome.finished:
            failures.append(
                (ErrorClass.PROTOCOL_VIOLATION, "the worker reported 'finished' before tracing the candidate", None)
            )
        if not failures:
            failures += self._full_size(w, traced, verdict)
            progress("compare")
            failure = self._compare(w, truths, outcome, outputs, verdict)
            if failure:
                failures.append(failure)

        # Both accounts must show a kernel: the recorded program's (the trace) and the lowered module's.
        if not failures and require_pallas and not (any(mosaic_kernels.values()) and verdict.pallas_calls):
            failures.append(
                (
                    ErrorClass.NO_PALLAS_CALL,
                    (
                        "no Pallas kernel in workload(): the lowered program holds no Mosaic "
                        "kernel (tpu_custom_call); this benchmark asks for a Pallas kernel"
                        + (
                            f" (the trace listed {verdict.pallas_calls} pallas_call(s) that did not reach the program)"
                            if verdict.pallas_calls
                            else ""
                        )
                    )
                    if not any(mosaic_kernels.values())
                    else "no Pallas kernel in workload(): its recorded program holds no pallas_call, although the "
                    "lowered module the worker wrote names one; this benchmark asks for a Pallas kernel",
                    None,
                )
            )
        if not failures and require_pallas and traced is not None and traced.work is not None:
            failure = self._work_share(w, traced.work, verdict)
            if failure:
                failures.append(failure)

        if w.degenerate_output:
            verdict.warnings.append(
                "this workload's output is near-constant: an all-zeros or constant output passes JAXBench's own check (see the workload notes)"
            )
        if failures:
            cls, text, stage = failures[0]
            preface = ""
            if stage is Stage.COMPILE and len(verdict.compiles) > 1:
                ok_targets = [c.target for c in verdict.compiles if c.ok]
                preface = (
                    f"compile failed for {', '.join(failed_compiles)}"
                    + (f" (ok for {', '.join(ok_targets)})" if ok_targets else "")
                    + f"; the first failure ({failed_compiles[0]}):\n"
                )
            self._fail(verdict, cls, text, stage, preface)

    @staticmethod
    def _full_size(w, traced: protocol.Traced | None, verdict: Verdict) -> list[tuple[ErrorClass, str, None]]:
        """What holds at full size although the run was small: the same program at both sizes, and every output
        element written and every dense input element read by some grid step (in that order of precedence)."""
        from jaxbench_mcp.analysis import coverage

        if traced is None:
            return []
        failures = []
        for size, outline in ((verdict.size, traced.run_outline), (workloads.FULL_REDUCTION, traced.reduction_outline)):
            difference = (
                coverage.first_difference(outline, traced.outline, (f"{size} size", "full size"))
                if traced.outline is not None and outline is not None
                else None
            )
            if difference is not None:
                failures.append(
                    (
                        ErrorClass.SIZE_DEPENDENT_PROGRAM,
                        f"workload() traces to a different program at the {size} size than at full size: "
                        f"{difference['text']}",
                        None,
                    )
                )
                break
        if traced.coverage is not None:
            for finding in traced.coverage.findings:
                verdict.full_size_findings.append(finding.message)
                if finding.kind == "parallel_revisit":
                    failures += Checker._parallel_revisit(finding.message, verdict)
                    continue
                if finding.kind == "unread_input" and finding.operand.split(" (")[0] in w.sparse_inputs:
                    verdict.warnings.append(
                        f"{finding.message} ({finding.operand.split(' (')[0]} is sparse: a kernel may skip parts of it)"
                    )
                    continue
                cls = {
                    "unwritten_output": ErrorClass.UNWRITTEN_OUTPUT,
                    "low_precision_accumulation": ErrorClass.LOW_PRECISION_ACCUMULATION,
                }.get(finding.kind, ErrorClass.UNREAD_INPUT)
                failures.append((cls, finding.message, None))
        # An unwritten output decides over an unread input: it is the more direct fault.
        failures.sort(
            key=lambda f: [
                ErrorClass.SIZE_DEPENDENT_PROGRAM,
                ErrorClass.UNWRITTEN_OUTPUT,
                ErrorClass.LOW_PRECISION_ACCUMULATION,
                ErrorClass.UNREAD_INPUT,
                ErrorClass.PARALLEL_REDUCTION_AXIS,
            ].index(f[0])
        )
        return failures[:1]

    @staticmethod
    def _parallel_revisit(message: str, verdict: Verdict) -> list[tuple[ErrorClass, str, None]]:
        """Wrong where a chip splits parallel axes across its TensorCores (megacore: v4, v5p); elsewhere the steps
        run in order on one core, so the result holds there and the label is only warned about."""
        split = [t for t in verdict.targets if targets.cores_per_device(t) > 1]
        if split:
            return [
                (
                    ErrorClass.PARALLEL_REDUCTION_AXIS,
                    f"{message}; on {', '.join(split)} two TensorCores split the axis and overwrite each other's partial results",
                    None,
                )
            ]
        verdict.warnings.append(
            f"{message}: right on {', '.join(verdict.targets) or 'this host'} (one TensorCore runs the steps in order) "
            'but wrong on megacore chips (v4, v5p), which split parallel axes across two cores; mark it "arbitrary"'
        )
        return []

    @staticmethod
    def _work_share(w, work: protocol.Work, verdict: Verdict) -> tuple[ErrorClass, str, None] | None:
        from jaxbench_mcp.analysis import coverage

        share = coverage.work_share(
            {"flops": work.kernel_flops, "bytes": work.kernel_bytes, "exact": work.exact},
            None if work.outside_flops is None else {"flops": work.outside_flops, "bytes": work.outside_bytes},
        )
        judged = coverage.judge_work_share(share, w.flops("full"), w.io_bytes("full"))
        verdict.pallas_work = judged["reason"]
        if judged["error_class"]:
            return (ErrorClass.PALLAS_NOT_DOING_THE_WORK, judged["reason"], None)
        return None

    def _killed(self, killed_for: str) -> tuple[ErrorClass, str, None]:
        if killed_for == "memory":
            return (
                ErrorClass.MEMORY_LIMIT,
                f"the worker exceeded the memory limit of {self.limits.memory_bytes / 2**30:.1f} GiB and was killed",
                None,
            )
        if killed_for == "disk":
            return (
                ErrorClass.PROTOCOL_VIOLATION,
                f"the candidate wrote more than {self.limits.max_job_dir_bytes / 2**30:.1f} GiB into "
                "its job directory, /tmp and /dev/shm and was killed",
                None,
            )
        if killed_for == "files":
            return (
                ErrorClass.PROTOCOL_VIOLATION,
                f"the candidate created more than {self.limits.max_job_dir_entries:,} files and folders in "
                "its job directory, /tmp and /dev/shm and was killed",
                None,
            )
        stage = killed_for.split(":", 1)[1]
        if stage == "overall":
            return (ErrorClass.STAGE_TIMEOUT, "the job ran past its overall time limit; the worker was killed", None)
        return (
            ErrorClass.STAGE_TIMEOUT,
            f"stage '{stage}' ran longer than its limit of {self.limits.for_stage(Stage(stage)):.0f} s; "
            "the worker was killed",
            None,
        )

    @staticmethod
    def _probe_failure(outcome: RunOutcome, info: protocol.Output, index: int) -> tuple[ErrorClass, str, None] | None:
        """Interpret mode's strictness was in force in this seed's run: the probe kernel, run in the same program
        under the same parameters, read memory it never wrote, which must come out NaN."""
        failure = (
            ErrorClass.PROTOCOL_VIOLATION,
            f"seed {index}: interpret mode's strictness was not in force during the run (a probe kernel that reads "
            "uninitialised memory did not read NaN): the candidate's process changed jax's interpreter",
            None,
        )
        if info.probe_path is None:
            return failure
        try:
            data = read_job_file(outcome.job_dir, info.probe_path, 8 * 1024 * 8 + 4096)
            probe = np.load(io.BytesIO(data), allow_pickle=False)
        except (protocol.ProtocolViolation, ValueError, OSError, EOFError):
            return failure
        if probe.dtype.kind != "f" or probe.size == 0 or not np.isnan(probe).all():
            return failure
        return None

    def _compare(
        self,
        w,
        truths: list[tuple[Truth, str]],
        outcome: RunOutcome,
        outputs: dict[int, protocol.Output],
        verdict: Verdict,
    ):
        for index, (t, size) in enumerate(truths):
            info = outputs.get(index)
            run = f"seed {index}" if size == verdict.size else f"seed {index} ({_size_text(w, size, verdict.size)})"
            if info is None and outcome.finished:
                return (
                    ErrorClass.PROTOCOL_VIOLATION,
                    "the worker reported 'finished' before every seed's run was done",
                    None,
                )
            if info is None:
                return (ErrorClass.EXITED, "the candidate's process stopped before producing every output", None)
            if info.leaves != 1:
                return (
                    ErrorClass.SHAPE_MISMATCH,
                    f"workload() returns {info.leaves} arrays; this workload returns exactly one",
                    None,
                )
            if tuple(info.shape) != tuple(t.truth.shape):
                return (
                    ErrorClass.SHAPE_MISMATCH,
                    f"{run}: output shape {info.shape} but the workload returns {list(t.truth.shape)}",
                    None,
                )
            try:
                # float64 at most, plus the .npy header: anything larger is not the output it claims to be.
                data = read_job_file(outcome.job_dir, info.path, t.truth.size * 8 + 4096)
                candidate = np.load(io.BytesIO(data), allow_pickle=False)
            except (protocol.ProtocolViolation, ValueError, OSError, EOFError) as exc:
                return (
                    ErrorClass.PROTOCOL_VIOLATION,
                    f"{run}: the output file is not a valid array ({exc})",
                    None,
                )
            if candidate.dtype.kind not in "biuf":  # the worker writes numbers; strings or objects are a forgery
                return (
                    ErrorClass.PROTOCOL_VIOLATION,
                    f"{run}: the output file holds {candidate.dtype}, not numbers",
                    None,
                )
            if tuple(candidate.shape) != tuple(info.shape):
                return (
                    ErrorClass.PROTOCOL_VIOLATION,
                    f"{run}: the output file holds shape {list(candidate.shape)}, "
                    f"not the {info.shape} its report claims",
                    None,
                )
            if self.tier is not targets.Tier.TPU:
                tampered = self._probe_failure(outcome, info, index)
                if tampered:
                    return tampered
            t0 = time.monotonic()
            report, cls, message = compare(candidate, info.dtype, t, index)
            if report:
                report.size = None if size == verdict.size else size
                verdict.seeds.append(report)
            verdict.stages.append(
                StageReport(
                    stage=Stage.COMPARE,
                    ok=cls is None,
                    seconds=round(time.monotonic() - t0, 4),
                    produced_by=_produced_by(self.tier, Stage.COMPARE),
                    detail=run,
                )
            )
            if cls is not None:
                verdict.jaxbench_compatible = all(s.jaxbench_allclose for s in verdict.seeds) if verdict.seeds else None
                if size != verdict.size:  # the run-size seeds passed: say what only this run has
                    message += (
                        "; the seeds at the run size passed, and only this run sums over every reduction's full "
                        "length: look for what full-length values reach (a clip or saturating cast, a running "
                        "sum kept in 16 bits)"
                    )
                return (cls, f"{run}: {message}", None)
        verdict.jaxbench_compatible = all(s.jaxbench_allclose for s in verdict.seeds)
        return None
