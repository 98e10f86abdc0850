"""The check ladder's driver: fresh hidden seeds, their inputs and truths, one job in a sandboxed worker, and the
judge's verdict on what came back.

This module owns the host's workers and device slots and moves a check through them; what the truth is lives in
checking/truth, how outputs are compared in checking/comparison, and how the verdict is decided in checking/judge.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.checking import judge
from jaxbench_mcp.checking.truth import fresh_seed, inputs_for, truth_of
from jaxbench_mcp.internals import jaxpr_codec
from jaxbench_mcp.models import Verdict
from jaxbench_mcp.requests import DEFAULT_SEEDS as DEFAULT_SEEDS, CheckRequest
from jaxbench_mcp.sandbox import isolation as sandbox, protocol
from jaxbench_mcp.sandbox.jobs import (
    JobQueue,
    Limits,
    RunOutcome,
    Then,
    Worker,
    WorkerPool,
    WorkerStartFailed,
    default_slots,
    read_job_file,
)
from jaxbench_mcp.taxonomy import ErrorClass, Stage, Status


def describe_inputs(inputs: tuple, prefix: str) -> list[protocol.InputFile | protocol.StaticInput]:
    """Inputs as the files write_inputs makes, with shape and dtype (known before the arrays are computed);
    static Python values travel in the description."""
    return [
        protocol.InputFile(file=f"{prefix}_{i}.bin", shape=list(x.shape), dtype=str(x.dtype))
        if hasattr(x, "shape")
        else protocol.StaticInput(static=x)
        for i, x in enumerate(inputs)
    ]


def write_inputs(inputs: tuple, directory: Path, prefix: str) -> None:
    """The array inputs as raw files (what describe_inputs names)."""
    for i, x in enumerate(inputs):
        if hasattr(x, "shape"):
            (directory / f"{prefix}_{i}.bin").write_bytes(np.asarray(x).tobytes())


class Cancelled(Exception):
    """The caller cancelled the check; its worker has been killed."""


class CompileReadings:
    """What profiles' own checks read for a static estimate (the full-size trace, each target's compile), per
    (sha256 of the lowered program, generation): the profile that follows its check estimates the program the check
    compiled and judged instead of compiling it again. A profile comes right after its check: a few are kept."""

    KEPT = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str], tuple[protocol.ProfileTrace, protocol.ProfileCompile]] = OrderedDict()

    def keep(self, programs: dict[str, str], events: list[protocol.StageEvent]) -> None:
        trace = next((e.profile_trace for e in events if e.profile_trace is not None), None)
        if trace is None:
            return
        with self._lock:
            for e in events:
                if e.profile_compile is not None and e.profile_compile.schedules and e.target in programs:
                    key = (programs[e.target], e.target)
                    self._kept[key] = (trace, e.profile_compile)
                    self._kept.move_to_end(key)
            while len(self._kept) > self.KEPT:
                self._kept.popitem(last=False)

    def find(
        self, program_sha256: str, generation: str
    ) -> tuple[protocol.ProfileTrace, protocol.ProfileCompile] | None:
        with self._lock:
            return self._kept.get((program_sha256, generation))


# Spare workers kept warm (an operator's setting). Fewer save memory (a warm tracer holds ~0.25 GB, a warm judging
# worker ~0.5 GB) and the CPU of their warm-up, at the price of a slower check when none is ready.
SPARES_ENV = "JAXBENCH_MCP_SPARES"
MAX_SPARES = 64


def spares_from_env(tier: targets.Tier, slots: int) -> int:
    """JAXBENCH_MCP_SPARES, or the default: none on a TPU host (only one process can hold the TPU, so the next
    worker starts when the last one is done), elsewhere two per slot (a check takes a tracer for the candidate's
    trace, and a worker for the rest)."""
    value = os.environ.get(SPARES_ENV)
    if value is None or value == "":
        return 0 if tier is targets.Tier.TPU else 2 * slots
    if not (value.isascii() and value.isdigit()) or int(value) > MAX_SPARES:
        raise ValueError(f"{SPARES_ENV}={value!r}: give a whole number of spare workers from 0 to {MAX_SPARES}")
    return int(value)


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
        slots = slots or default_slots(self.tier)
        if spares is None:
            spares = spares_from_env(self.tier, slots)
        self.pool = WorkerPool(
            self.default_target if self.tier is targets.Tier.CPU_LIBTPU else None, self.tier, self.limits, spares
        )
        # Spares are warmed only when the host has nothing else to do (WorkerPool).
        self.queue = JobQueue(slots, on_idle=self.pool.refill)
        self.readings = CompileReadings()

    def start(self) -> None:
        self.pool.fill()

    def close(self) -> None:
        self.pool.close()

    def default_targets(self) -> list[str]:
        return [self.default_target] if self.default_target else []

    # ---- running any job ----

    def _worker(self, dump_schedules: bool = False, tracer: bool = False) -> Worker:
        """A worker, started or starting: a spare, or one started now (a schedule-dumping one always is)."""
        if dump_schedules:
            return Worker(None, self.tier, self.limits, dump_schedules=True, warm=False)
        return self.pool.take(tracer)

    def _ready_worker(
        self, dump_schedules: bool = False, tracer: bool = False, started: Worker | None = None
    ) -> Worker:
        """A worker that said 'ready' (`started`, when one was started ahead for this job); a worker that fails to
        start is replaced once before giving up. A tracer is for a trace job (it warms up for tracing alone, and
        leaves a TPU alone)."""
        tail = ""
        for _ in range(2):
            worker, started = started or self._worker(dump_schedules, tracer), None
            if worker.wait_ready():
                return worker
            tail = worker.tail("stderr.log")[-2000:]
            worker.dispose()
        raise WorkerStartFailed(f"the checker's worker failed to start twice; its stderr ends with:\n{tail}")

    def _start(self, worker: Worker, job, cancel, on_event, then=None, earlier=None) -> RunOutcome:
        if cancel is not None:
            worker.cancelled = cancel
        outcome = worker.run(job, on_event, then, earlier)
        if outcome.killed_for == "cancelled":
            outcome.cleanup()
            raise Cancelled()
        return outcome

    def _trace(self, trace: protocol.TraceJob, source: str, on_event, cancel) -> tuple[RunOutcome, dict[str, bytes]]:
        """The candidate's own process: it loads and traces the candidate, and writes the recorded programs. Its
        outcome, and the program files read across the wall (none when it ended any other way: its outcome is
        then the job's, with its load or trace failure, violation or kill)."""
        worker = self._ready_worker(tracer=True)
        try:
            (worker.job_dir / "candidate.py").write_text(source)
        except BaseException:
            worker.dispose()
            raise
        outcome = self._start(worker, trace, cancel, on_event)
        written = outcome.programs()
        if written is None or outcome.violation or outcome.killed_for or not outcome.finished:
            return outcome, {}
        files: dict[str, bytes] = {}
        for program in written.programs:
            if program.file is not None:
                try:
                    files[program.file] = read_job_file(outcome.job_dir, program.file, jaxpr_codec.MAX_BYTES)
                except protocol.ProtocolViolation as exc:
                    outcome.violation = f"its recorded program: {exc}"
                    return outcome, {}
        return outcome, files

    def run_job(
        self,
        make_job: Callable[[Path, protocol.Programs | None], protocol.Job],
        source: str | None,
        on_event: Callable[[protocol.StageEvent], None] = lambda _e: None,
        cancel: threading.Event | None = None,
        dump_schedules: bool = False,
        then: Then | None = None,
        trace: protocol.TraceJob | None = None,
    ) -> RunOutcome:
        """Every kind of job: take a queue slot, then a ready worker, write the candidate and the job's files
        into its directory, and follow it to the end; `then(job_dir, send, ended)` writes more files while the
        worker runs (jaxbench_mcp.sandbox.jobs.Worker.run). With `trace`, the candidate's code runs only in a trace job
        of its own, first; the job itself runs in a second worker, on the program files that one wrote, and never
        sees the candidate (make_job gets what the trace job wrote). Raises Cancelled or WorkerStartFailed."""

        def in_slot() -> RunOutcome:
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            earlier: RunOutcome | None = None
            ahead: Worker | None = None
            try:
                files: dict[str, bytes] = {}
                if trace is not None and source is not None:
                    # With no spare ready for the job, its worker starts now, beside the trace job, not after it
                    # (with the cold start: 3.85 s for a small check against 6.21 s, benchmarks/check_latency.py).
                    if dump_schedules or not self.pool.has_spare():
                        ahead = self._worker(dump_schedules)
                    earlier, files = self._trace(trace, source, on_event, cancel)
                    if not files:
                        outcome, earlier = earlier, None  # the trace's outcome is the job's
                        return outcome
                worker, ahead = self._ready_worker(dump_schedules, started=ahead), None
                try:
                    if earlier is not None:
                        for name, data in files.items():
                            (worker.job_dir / name).write_bytes(data)
                    elif source is not None:
                        (worker.job_dir / "candidate.py").write_text(source)
                    job = make_job(worker.job_dir, earlier.programs() if earlier is not None else None)
                except BaseException:
                    worker.dispose()
                    raise
                return self._start(worker, job, cancel, on_event, then, earlier)
            finally:
                if ahead is not None:  # the trace job failed, or was cancelled: its job never ran
                    ahead.dispose()
                if earlier is not None:
                    earlier.cleanup()

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
        # A profile's own check compiles with schedule dumps in a worker started for it, and keeps what it read for
        # the generations the profile estimates (on a TPU host, those it is not: the attached one is timed).
        attached = targets.attached_generation() if self.tier is targets.Tier.TPU else None
        estimating = self.tier is not targets.Tier.CPU and request.estimate and any(g != attached for g in chosen)

        run_ends: queue.Queue[protocol.StageEvent] = queue.Queue()
        stopped = threading.Event()  # the runs were stopped before the last
        traced: list[protocol.Traced] = []  # what the judging worker's trace stage found

        def on_event(event: protocol.StageEvent) -> None:
            if event.traced is not None:
                traced.append(event.traced)
            if event.stage is Stage.RUN and event.state != "start":
                run_ends.put(event)
            if event.state != "start":
                where = f" {event.target}" if event.target else ""
                seed = f" seed {event.seed_index}" if event.seed_index is not None else ""
                progress(f"{event.stage}{where}{seed}: {event.state}")

        def make_job(job_dir: Path, recorded: protocol.Programs | None) -> protocol.CheckJob:
            # Built field by field: the seeds stay here; the worker gets the arrays they produce.
            assert recorded is not None  # run with a trace job
            return protocol.CheckJob(
                workload_id=w.id,
                targets=chosen,
                programs=recorded.programs,
                platform_queries=recorded.platform_queries,
                size=run_size,
                interpret=self.tier is not targets.Tier.TPU,
                inputs=[describe_inputs(inputs[seed], f"input_{k}") for k, seed in enumerate(hidden)],
                full_reduction=describe_inputs(inputs[runs[-1][0]], f"input_{len(hidden)}") if reduction else None,
                # Orders in which interpret mode visits "parallel" grid axes: fresh for every check.
                shuffle_seeds=[secrets.randbelow(2**31) for _ in runs],
                estimate=estimating,
            )

        def worth_another_run(index: int, job_dir: Path, ended: threading.Event) -> bool:
            # Run `index`'s output is judged as soon as it is written, exactly as the verdict will judge it. Once
            # it is wrong (the comparison stops at the first wrong seed), or the recorded program already rules
            # 'correct' out, the runs after it would only cost time: a failing check is what an agent iterates on.
            while True:
                try:
                    event = run_ends.get(timeout=0.1)
                    break
                except queue.Empty:
                    if ended.is_set() and run_ends.empty():  # the worker ended without this run's end
                        return False
            if event.state != "done" or event.output is None or event.seed_index != index:
                return False
            seed, size = runs[index]
            found = judge.judge_output(
                case, truths[seed].result(), size, index, event.output, job_dir, True, judge.Evidence()
            )
            return found is None and not (traced and judge.cannot_be_correct(case, traced[0]))

        def write_input_files(
            job_dir: Path, send: Callable[[protocol.ParentMessage], object], ended: threading.Event
        ) -> None:
            # After the job is sent: the worker traces and compiles, which need no inputs, while they are computed
            # and written, run by run (the last, a full_reduction run, is the largest); a run starts once the one
            # before it leaves the verdict open.
            for k, (seed, _) in enumerate(runs):
                write_inputs(inputs[seed], job_dir, f"input_{k}")
                if k and not worth_another_run(k - 1, job_dir, ended):
                    stopped.set()
                    send(protocol.StopRuns())
                    return
                send(protocol.InputsReady(inputs_ready=k))

        # The candidate runs only here: traced once per size the analyses and the runs use, never again.
        trace = protocol.TraceJob(
            workload_id=w.id,
            sizes=list(dict.fromkeys(["full", run_size] + ([workloads.FULL_REDUCTION] if reduction else []))),
            chip=chosen[0] if chosen else targets.DEFAULT_CPU_TARGET,
        )
        progress("queued")
        # The truth is needed only after the run; compute it meanwhile, on the server's side.
        # Seeds are fresh for every check, so nothing is cached across checks: a check holds its own inputs and
        # truths, and lets them go when it ends (a server's memory stays flat over thousands of checks).
        inputs = {seed: inputs_for(w.id, size, seed) for seed, size in runs}
        truth_thread = ThreadPoolExecutor(1, thread_name_prefix="truth")
        truths = {seed: truth_thread.submit(truth_of, w, inputs[seed]) for seed, _ in runs}
        case = judge.Case(w, run_size, chosen, self.tier, self.isolation, self.limits, require_pallas)
        try:
            try:
                outcome = self.run_job(
                    make_job, source, on_event, cancel, dump_schedules=estimating, then=write_input_files, trace=trace
                )
            except WorkerStartFailed as exc:
                failed = judge.Evidence(failures=[judge.Failure(ErrorClass.WORKER_START_FAILED, str(exc))])
                return judge.verdict(case, failed, time.monotonic() - started), None
            try:
                evidence = judge.collect(
                    case, [(truths[s].result, size) for s, size in runs], outcome, progress, stopped.is_set()
                )
            except BaseException:  # the caller never sees this outcome: its directory goes now
                outcome.cleanup()
                raise
        finally:  # the truths of the runs after a wrong one are never needed
            truth_thread.shutdown(wait=False, cancel_futures=True)
        verdict = judge.verdict(case, evidence, time.monotonic() - started)
        if estimating and verdict.status == Status.CORRECT:
            self.readings.keep(verdict.program_sha256, outcome.stage_events())
        return verdict, outcome
