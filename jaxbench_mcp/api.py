"""What the frontends share: the workloads as specs (list_workloads, get_workload) and JaxBench, which owns the
checker (or a fleet executor), the attempts store and background jobs, and runs check_kernel, profile_kernel
and list_attempts. The MCP server and the CLI adapt it to their channels; read_docs is served from catalog/docs.py,
tune_kernel from perf/tuning.py, and campaigns from campaigns/campaign.py.

check_kernel and profile_kernel take the caller's arguments, validate them once into a frozen CheckRequest or
ProfileRequest (jaxbench_mcp.requests) and hand that to the executor (fleet/executors.Executor). A long job runs
in the background as a BackgroundJob (submit_check, submit_profile, or submit for any such call): its attempt id
as soon as the attempt exists, its result as a concurrent.futures.Future, and cancel()."""

from __future__ import annotations

import atexit
import datetime
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, cast

import jax
import jaxlib

from jaxbench_mcp.campaigns import provenance
from jaxbench_mcp.catalog import conditions, expert_refs, targets as target_catalog, workloads
from jaxbench_mcp.catalog.workloads import Workload
from jaxbench_mcp.checking.checker import Cancelled, Checker
from jaxbench_mcp.errors import AgentError, BadRequest as BadRequest, UnknownAttempt
from jaxbench_mcp.fleet import executors
from jaxbench_mcp.models import (
    AttemptDetail,
    AttemptList,
    AttemptSummary,
    ConfigCheck,
    Profile,
    RooflineBound,
    ServerInfo,
    SizeSpec,
    StaticArg,
    Tensor,
    Verdict,
    WorkloadList,
    WorkloadSpec,
    WorkloadSummary,
)
from jaxbench_mcp.perf import profiling
from jaxbench_mcp.requests import (
    DEFAULT_SEEDS,
    MAX_SEEDS as MAX_SEEDS,
    CheckRequest,
    ProfileRequest,
    check_source as check_source,
)
from jaxbench_mcp.sandbox import isolation as sandbox, jobs, protocol
from jaxbench_mcp.sandbox.jobs import Limits
from jaxbench_mcp.store import Store
from jaxbench_mcp.taxonomy import ERROR_CLASSES, ErrorClass, Status

logger = logging.getLogger(__name__)

# How much of a server_error's log travels inside its verdict (the attempt keeps the whole log).
_SERVER_LOG_TAIL_CHARS = 3000
# list_attempts(attempt_id=...) returns at most this much of the log and of the source (head and tail), so
# that one attempt stays well inside an MCP client's result budget.
ATTEMPT_LOG_CHARS = 6000
ATTEMPT_SOURCE_CHARS = 10000

_TIER_DESCRIPTIONS = {
    target_catalog.Tier.TPU: "TPU attached: real compiles, real runs at full size, measured device time",
    target_catalog.Tier.CPU_LIBTPU: "CPU host with libtpu: deviceless XLA:TPU compiles at full size, TPU "
    "interpret-mode runs at small size, static performance estimates",
    target_catalog.Tier.CPU: "plain CPU host: lowering for TPU only, TPU interpret-mode runs, roofline bounds only",
}


# ---- workloads as boundary models (what list/show/get_workload return) ----

CANDIDATE_CONTRACT = (
    "A candidate is a Python file that defines `workload(*inputs)`: it takes exactly the inputs listed "
    "below, in order, and returns an array of the output's shape and dtype. It is traced and compiled at "
    "full size and run at small size, so derive block sizes from the input shapes."
)


def _jsonable(params: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def summarize(w: Workload) -> WorkloadSummary:
    return WorkloadSummary(
        id=w.id,
        tier=w.tier,
        model=w.model,
        operator=w.operator,
        sizes={name: _jsonable(params) for name, params in w.sizes.items()},
        has_expert_reference=w.has_expert_reference,
    )


def size_spec(w: Workload, size: str) -> SizeSpec:
    args = w.input_specs(size)
    inputs = [
        Tensor(name=a.name, shape=list(a.tensor.shape), dtype=a.tensor.dtype, bytes=a.tensor.nbytes)
        for a in args
        if a.tensor
    ]
    outputs = [Tensor(shape=list(t.shape), dtype=t.dtype, bytes=t.nbytes) for t in w.output_specs(size)]
    flops = w.flops(size)
    in_bytes, out_bytes = sum(t.bytes for t in inputs), sum(t.bytes for t in outputs)
    # The roofline needs only jax's chip table, so every tier shows it.
    roofline = []
    for gen in target_catalog.GENERATIONS:
        chip = target_catalog.chip_facts(gen)
        seconds, bound = target_catalog.roofline_seconds(flops, in_bytes + out_bytes, gen)
        roofline.append(
            RooflineBound(
                generation=gen,
                peak_bf16_tflops=chip.peak_bf16_flops / 1e12,
                hbm_gb_per_s=chip.hbm_bytes_per_second / 1e9,
                lower_bound_us=seconds * 1e6,
                bound_by=bound,
            )
        )
    return SizeSpec(
        size=size,
        params=_jsonable(w.size_params(size)),
        inputs=inputs,
        static_inputs=[StaticArg(name=a.name, value=repr(a.static_value)) for a in args if a.tensor is None],
        outputs=outputs,
        flops=flops,
        input_bytes=in_bytes,
        output_bytes=out_bytes,
        roofline=roofline,
    )


def workload_spec(w: Workload, size: str, show_expert_source: bool = False) -> WorkloadSpec:
    return WorkloadSpec(
        id=w.id,
        tier=w.tier,
        model=w.model,
        operator=w.operator,
        description=w.description,
        contract=CANDIDATE_CONTRACT,
        size=size_spec(w, size),
        other_sizes={name: _jsonable(p) for name, p in w.sizes.items() if name != size},
        notes=list(w.notes),
        degenerate_output=w.degenerate_output,
        has_expert_reference=w.has_expert_reference,
        reference_source=w.reference_source(),
        expert_source=expert_refs.expert_source(w.id) if show_expert_source else None,
    )


def list_workloads(
    tier: str | None = None, operator: str | None = None, has_expert: bool | None = None
) -> WorkloadList:
    chosen = workloads.select(tier=tier, operator=operator, has_expert=has_expert)
    return WorkloadList(count=len(chosen), workloads=[summarize(w) for w in chosen])


def get_workload(workload_id: str, size: str = "small", show_expert_source: bool = False) -> WorkloadSpec:
    """The spec; the expert kernel's source only when asked (JAXBench hides it from the agent)."""
    return workload_spec(workloads.get_workload(workload_id), size, show_expert_source)


class BackgroundJob[R]:
    """A check, profile or tune running on a thread of its own (JaxBench.submit and its kin make them).

    `future`: the call's result or its exception (an AgentError for a refused request, Cancelled once cancelled).
    `attempt_id`: the attempt the job recorded, as soon as it exists; with several (a check of every
    configuration), the latest; None when the request was refused before an attempt was recorded.
    `cancel()`: kills the job's worker; the attempt is recorded as cancelled and the future ends in Cancelled.
    (The future's own cancel() cannot stop a job that is running: call the job's.)"""

    def __init__(self, name: str = "job"):
        self.name = name
        self.future: Future[R] = Future()
        self._cancel = threading.Event()
        self._attempt_id: int | None = None
        self._has_attempt = threading.Event()

    @property
    def attempt_id(self) -> int | None:
        return self._attempt_id

    def cancel(self) -> None:
        self._cancel.set()

    def done(self) -> bool:
        return self.future.done()

    def wait_attempt(self, timeout: float | None = None) -> int | None:
        """The attempt id once the attempt exists or the job has ended (None then: no attempt was recorded)."""
        self._has_attempt.wait(timeout)
        return self._attempt_id

    def _remember(self, attempt_id: int) -> None:
        self._attempt_id = attempt_id
        self._has_attempt.set()

    def _start(self, call: Callable[..., R], args: tuple, kwargs: dict) -> None:
        self.future.set_running_or_notify_cancel()  # from here on, future.cancel() is refused

        def run() -> None:
            try:
                result = call(*args, on_attempt=self._remember, cancel=self._cancel, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future, whatever it is
                self.future.set_exception(exc)
            else:
                self.future.set_result(result)
            finally:
                self._has_attempt.set()

        threading.Thread(target=run, daemon=True, name=f"jaxbench-{self.name}").start()
        self._has_attempt.wait()


class JaxBench:
    """An executor (this host's checker, or a fleet) plus the attempt store, which only this object writes."""

    def __init__(
        self,
        store: Store | None = None,
        checker: Checker | None = None,
        executor: executors.Executor | None = None,
        context: str = "docs",
    ):
        self.store = store or Store()
        self.executor: executors.Executor = executor or executors.LocalExecutor(checker or Checker(), cache=self.store)
        # The docs ablation's condition (jaxbench_mcp.catalog.conditions): recorded with every result this bench stores.
        self.context = conditions.check_context(context)

    @property
    def checker(self) -> Checker:
        """This host's checker (local executors only)."""
        if not isinstance(self.executor, executors.LocalExecutor):
            raise TypeError(f"a {type(self.executor).__name__} has no checker of this host's")
        return self.executor.checker

    @classmethod
    def one_shot(cls, store: Store | None = None, limits: Limits | None = None) -> JaxBench:
        """For a single CLI command: no spare workers beyond the one it uses."""
        return cls(store=store, checker=Checker(limits=limits, spares=0))

    def start(self) -> None:
        atexit.register(jobs.REGISTRY.kill_all)
        jobs.sweep_stale_dirs()
        sandbox.Cgroup.sweep_stale()
        self.executor.start()

    def close(self) -> None:
        """Stop every worker of this process (spares and running jobs) and remove their directories."""
        self.executor.close()
        jobs.REGISTRY.kill_all()
        self.store.close()

    def server_info(self) -> ServerInfo:
        tier = self.executor.tier
        return ServerInfo(
            tier=str(tier),
            tier_description=_TIER_DESCRIPTIONS[tier],
            jax_version=jax.__version__,
            jaxlib_version=jaxlib.__version__,
            libtpu_version=target_catalog.libtpu_version(),
            attached_tpu=target_catalog.attached_generation() if tier is target_catalog.Tier.TPU else None,
            compile_targets=target_catalog.compile_targets(tier),
            default_target=self.executor.default_target,
            workloads=len(workloads.all_workloads()),
            queue=self.executor.queue(),
            isolation=str(self.executor.isolation),
            fleet=self.executor.fleet(),
            context=self.context,
            provenance=provenance.provenance(self.context),
        )

    def check_kernel(
        self,
        workload_id: str,
        source: str,
        targets: list[str] | str | None = None,
        size: str | None = None,
        seeds: int = DEFAULT_SEEDS,
        require_pallas: bool = True,
        on_progress: Callable[[str], None] | None = None,
        on_attempt: Callable[[int], None] | None = None,
        cancel: threading.Event | None = None,
        config: str | None = None,
    ) -> Verdict:
        """Check one candidate; the attempt and its full log are stored whatever happens.

        `config` runs at a named input configuration of the workload (a key of its sizes) instead of `size`;
        'all' runs one check per configuration this tier can run (see runnable_configs) and returns the first
        failing verdict (else the last), listing each configuration's result in `configs`.

        Mistakes in the request (unknown id, size or target) raise before an attempt is recorded. Once it is
        recorded, a failure of the server's own machinery (a worker that does not start, a bug) comes back as a
        `server_error` verdict with the attempt id and the end of the log, never as a bare exception."""
        # With a configuration, `size` is ignored, as it always was: each configuration is a size of its own.
        request = self.check_request(
            workload_id, source, targets, size if config is None else None, seeds, require_pallas
        )
        if config is not None:
            return self._check_configs(request, config, on_progress, on_attempt, cancel)
        return self.check(request, on_progress, on_attempt, cancel)

    def check_request(
        self,
        workload_id: str,
        source: str,
        targets: Sequence[str] | str | None = None,
        size: str | None = None,
        seeds: int = DEFAULT_SEEDS,
        require_pallas: bool = True,
    ) -> CheckRequest:
        """A caller's arguments as a CheckRequest, the targets resolved to this bench's executor's default when
        none are named. Raises the AgentError of the first mistake in them."""
        return CheckRequest.of(
            workload_id, source, targets, size, seeds, require_pallas, default_targets=self.executor.default_targets()
        )

    def profile_request(
        self, workload_id: str, source: str, targets: Sequence[str] | str | None = None
    ) -> ProfileRequest:
        """A caller's arguments as a ProfileRequest (targets resolved as check_request's)."""
        return ProfileRequest.of(workload_id, source, targets, default_targets=self.executor.default_targets())

    def check(
        self,
        request: CheckRequest,
        on_progress: Callable[[str], None] | None = None,
        on_attempt: Callable[[int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Verdict:
        """check_kernel for a validated request: record the attempt, hand the request to the executor, store
        what comes back (a server_error verdict for a failure of the server's machinery)."""
        attempt_id = self.store.start("check", request.workload_id, request.source)
        if on_attempt:
            on_attempt(attempt_id)
        started = time.monotonic()
        try:
            verdict, log = self.executor.check(request, on_progress, cancel)
        except Cancelled:
            self.store.cancel(attempt_id)
            raise
        except AgentError as exc:
            self.store.fail(attempt_id, f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # noqa: BLE001 - the server's failure becomes a verdict the agent can read
            run_size = request.size or ("full" if self.executor.tier is target_catalog.Tier.TPU else "small")
            return cast(
                Verdict,
                self._server_error(
                    "check",
                    attempt_id,
                    request.workload_id,
                    list(request.targets),
                    run_size,
                    exc,
                    time.monotonic() - started,
                ),
            )
        verdict.attempt_id = attempt_id
        verdict.context = self.context
        self.store.finish(
            attempt_id, verdict.status, verdict.error_class, verdict.model_dump(mode="json"), log, verdict.total_seconds
        )
        return verdict

    def runnable_configs(self, workload_id: str) -> list[str]:
        """The configurations a check with config='all' runs here: all of them on a TPU; elsewhere all but
        'full', which an interpret-mode run on the CPU cannot afford (full size is still traced and compiled).
        Never 'full_reduction': every check below full size runs it already."""
        w = workloads.get_workload(workload_id)
        on_tpu = self.executor.tier is target_catalog.Tier.TPU
        return [name for name in w.sizes if (on_tpu or name != "full") and name != workloads.FULL_REDUCTION]

    def _check_configs(
        self,
        request: CheckRequest,
        config: str,
        on_progress: Callable[[str], None] | None,
        on_attempt: Callable[[int], None] | None,
        cancel: threading.Event | None,
    ) -> Verdict:
        w = workloads.get_workload(request.workload_id)
        if config != "all" and config not in w.sizes:
            raise workloads.UnknownSize(
                f"unknown configuration {config!r} for {w.id}; choose 'all' or one of {', '.join(w.sizes)}"
            )
        names = self.runnable_configs(w.id) if config == "all" else [config]
        progress = on_progress or (lambda _m: None)
        verdicts: list[tuple[str, Verdict]] = []
        for name in names:
            progress(f"configuration {name}")
            # The size is one of the workload's own: the request stays valid as it is.
            at_size = request.model_copy(update={"size": name})
            verdicts.append((name, self.check(at_size, on_progress, on_attempt, cancel)))
        if len(verdicts) == 1:
            return verdicts[0][1]
        failing = [v for _, v in verdicts if v.status != "correct"]
        combined = (failing[0] if failing else verdicts[-1][1]).model_copy(deep=True)
        combined.configs = [
            ConfigCheck(
                config=name,
                status=v.status,
                error_class=v.error_class,
                attempt_id=v.attempt_id,
                # The configuration's own seeds (the full_reduction run has its own error and tolerance).
                max_abs_error=max((s.max_abs_error for s in v.seeds if s.size is None), default=None),
                tolerance=min((s.tolerance for s in v.seeds if s.size is None), default=None),
                message=v.message.splitlines()[0] if v.message else "",
            )
            for name, v in verdicts
        ]
        verdict_of = ", ".join(f"{c.config} {c.status}" for c in combined.configs)
        combined.message = (
            f"configurations: {verdict_of}. "
            + (f"This verdict is configuration {combined.size!r}'s. " if failing else "")
            + combined.message
        )
        return combined

    def profile_kernel(
        self,
        workload_id: str,
        source: str,
        targets: list[str] | str | None = None,
        on_progress: Callable[[str], None] | None = None,
        on_attempt: Callable[[int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Profile:
        """Check first; a correct kernel is then measured (TPU host) or estimated (CPU host with libtpu) next to the
        XLA baseline and the expert kernel."""
        return self.profile(self.profile_request(workload_id, source, targets), on_progress, on_attempt, cancel)

    def profile(
        self,
        request: ProfileRequest,
        on_progress: Callable[[str], None] | None = None,
        on_attempt: Callable[[int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Profile:
        """profile_kernel for a validated request: the check (an attempt of its own), then the profile."""
        attempt_id = self.store.start("profile", request.workload_id, request.source)
        if on_attempt:
            on_attempt(attempt_id)
        progress = on_progress or (lambda _m: None)
        started = time.monotonic()
        verdict = None
        try:
            verdict = self.check(request.check_request(), on_progress=on_progress, cancel=cancel)
            if verdict.status != "correct":
                progress("not profiled: the check failed")
            result = self.executor.profile(request, verdict, on_progress=progress, cancel=cancel)
        except Cancelled:
            self.store.cancel(attempt_id)
            raise
        except AgentError as exc:
            self.store.fail(attempt_id, f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # noqa: BLE001 - the server's failure becomes a result the agent can read
            return cast(
                Profile,
                self._server_error(
                    "profile",
                    attempt_id,
                    request.workload_id,
                    list(request.targets),
                    verdict.size if verdict else "small",
                    exc,
                    time.monotonic() - started,
                    checked=verdict,
                ),
            )
        result.attempt_id = attempt_id
        result.context = self.context
        self.store.finish(
            attempt_id, verdict.status, verdict.error_class, result.model_dump(mode="json"), "", verdict.total_seconds
        )
        return result

    def _server_error(
        self,
        kind: str,
        attempt_id: int,
        workload_id: str,
        chosen: list[str],
        size: str,
        exc: Exception,
        seconds: float,
        checked: Verdict | None = None,
    ) -> Verdict | Profile:
        """Record and return the verdict for a failure of the server's machinery (not of the candidate).

        The error class comes from the exception when it names one (`error_class`, e.g. a worker that did not
        start), else internal_error. The attempt stores the whole traceback; the verdict carries its end."""
        error_class = ErrorClass(getattr(exc, "error_class", None) or ErrorClass.INTERNAL_ERROR)
        info = ERROR_CLASSES[error_class]
        log = "".join(traceback.format_exception(exc))
        logger.error("attempt %d (%s %s): server error: %s", attempt_id, kind, workload_id, log)
        first_line = (str(exc).strip().splitlines() or [""])[0][:500]  # the log keeps the rest
        passed = (
            f"the check passed (attempt {checked.attempt_id}) but "
            if checked and checked.status == Status.CORRECT
            else ""
        )
        verdict = Verdict(
            status=info.status,
            error_class=error_class,
            message=f"{passed}the server failed to {kind} the kernel: {type(exc).__name__}: {first_line}",
            hint=info.hint,
            docs=list(info.docs),
            workload_id=workload_id,
            size=size,
            targets=list(chosen),
            tier=str(self.executor.tier),
            isolation=str(self.executor.isolation),
            attempt_id=attempt_id,
            total_seconds=seconds,
            log_tail=log[-_SERVER_LOG_TAIL_CHARS:],
            context=self.context,
        )
        result = (
            verdict
            if kind == "check"
            else Profile(
                workload_id=workload_id,
                tier=str(self.executor.tier),
                kind=profiling.PROFILE_KINDS[self.executor.tier],
                label="not profiled: the server failed",
                verdict=verdict,
                attempt_id=attempt_id,
                context=self.context,
            )
        )
        self.store.finish(attempt_id, verdict.status, verdict.error_class, result.model_dump(mode="json"), log, seconds)
        return result

    # ---- background jobs ----

    def submit[R](self, call: Callable[..., R], /, *args: Any, **kwargs: Any) -> BackgroundJob[R]:
        """Run `call(*args, **kwargs)` on a thread of its own as a BackgroundJob; returns once the job's attempt
        exists or the job has ended (a request refused before an attempt was recorded: attempt_id None, the
        AgentError in the future).

        `call` is check_kernel, profile_kernel or any call of the same shape (perf/tuning's tune_kernel): it takes
        `on_attempt` (called with each attempt id it records) and `cancel` (a threading.Event), which the job
        passes; the caller passes the rest, `on_progress` among them."""
        job: BackgroundJob[R] = BackgroundJob(getattr(call, "__name__", "job"))
        job._start(call, args, kwargs)
        return job

    def submit_check(
        self,
        workload_id: str,
        source: str,
        targets: list[str] | str | None = None,
        size: str | None = None,
        seeds: int = DEFAULT_SEEDS,
        require_pallas: bool = True,
        on_progress: Callable[[str], None] | None = None,
        config: str | None = None,
    ) -> BackgroundJob[Verdict]:
        """check_kernel as a BackgroundJob."""
        return self.submit(
            self.check_kernel,
            workload_id,
            source,
            targets,
            size,
            seeds,
            require_pallas,
            on_progress=on_progress,
            config=config,
        )

    def submit_profile(
        self,
        workload_id: str,
        source: str,
        targets: list[str] | str | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> BackgroundJob[Profile]:
        """profile_kernel as a BackgroundJob."""
        return self.submit(self.profile_kernel, workload_id, source, targets, on_progress=on_progress)

    def list_attempts(
        self, workload_id: str | None = None, attempt_id: int | None = None, limit: int = 20
    ) -> AttemptList:
        if attempt_id is not None:
            row = self.store.get(attempt_id)
            if row is None:
                raise UnknownAttempt(f"no attempt {attempt_id}; list_attempts() without an id shows the recent ones")
            result = json.loads(row["result_json"]) if row["result_json"] else None
            profile = Profile(**result) if result is not None and row["kind"] == "profile" else None
            verdict = profile.verdict if profile else Verdict(**result) if result else None
            detail = AttemptDetail(
                **_summary_fields(row),
                verdict=verdict,
                profile=profile,
                source=protocol.cut_text(row["source"], ATTEMPT_SOURCE_CHARS),
                log_tail=row["log"][-ATTEMPT_LOG_CHARS:],
            )
            return AttemptList(attempts=[AttemptSummary(**_summary_fields(row))], detail=detail)
        if workload_id is not None:
            workload_id = workloads.get_workload(workload_id).id
        return AttemptList(
            attempts=[AttemptSummary(**_summary_fields(r)) for r in self.store.recent(workload_id, limit)]
        )


def _summary_fields(row) -> dict:
    created = datetime.datetime.fromtimestamp(row["created"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {
        "attempt_id": row["id"],
        "kind": row["kind"],
        "workload_id": row["workload_id"],
        "state": row["state"],
        "status": row["status"],
        "error_class": row["error_class"],
        "created": created,
        "seconds": row["seconds"],
    }
