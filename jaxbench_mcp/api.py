"""The library surface: one method per MCP tool and CLI command. The server and CLI only adapt it."""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable

import jax
import jaxlib

from jaxbench_mcp import profiling, specs, targets, workloads
from jaxbench_mcp.checking import DEFAULT_SEEDS, Checker
from jaxbench_mcp.jobs import Limits
from jaxbench_mcp.models import (AttemptDetail, AttemptList, AttemptSummary, Profile, QueueInfo, ServerInfo, Verdict,
                                 WorkloadList, WorkloadSpec)
from jaxbench_mcp.store import Store

_TIER_DESCRIPTIONS = {
    targets.Tier.TPU: "TPU attached: real compiles, real runs at full size, measured device time",
    targets.Tier.CPU_LIBTPU: "CPU host with libtpu: deviceless XLA:TPU compiles at full size, TPU interpret-mode runs "
                             "at small size, static performance estimates",
    targets.Tier.CPU: "plain CPU host: lowering for TPU only, TPU interpret-mode runs, roofline bounds only",
}


def list_workloads(tier: str | None = None, operator: str | None = None, has_expert: bool | None = None) -> WorkloadList:
    chosen = workloads.select(tier=tier, operator=operator, has_expert=has_expert)
    return WorkloadList(count=len(chosen), workloads=[specs.summarize(w) for w in chosen])


def get_workload(workload_id: str, size: str = "small", show_expert_source: bool = False) -> WorkloadSpec:
    """The spec; the expert kernel's source only when asked (JAXBench hides it from the agent)."""
    return specs.workload_spec(workloads.get_workload(workload_id), size, show_expert_source)


def _log_text(outcome) -> str:
    events = "\n".join(json.dumps(e) for e in outcome.events)
    return f"== events ==\n{events}\n== stdout ==\n{outcome.stdout_tail}\n== stderr ==\n{outcome.stderr_tail}"


class JaxBench:
    """A checker (warm workers, device slots) plus the attempt store."""

    def __init__(self, store: Store | None = None, checker: Checker | None = None):
        self.store = store or Store()
        self.checker = checker or Checker()

    @classmethod
    def one_shot(cls, store: Store | None = None, limits: Limits | None = None) -> JaxBench:
        """For a single CLI command: no spare workers beyond the one it uses."""
        return cls(store=store, checker=Checker(limits=limits, spares=0))

    def start(self) -> None:
        self.checker.start()

    def close(self) -> None:
        self.checker.close()
        self.store.close()

    def server_info(self) -> ServerInfo:
        tier = self.checker.tier
        return ServerInfo(
            tier=str(tier),
            tier_description=_TIER_DESCRIPTIONS[tier],
            jax_version=jax.__version__,
            jaxlib_version=jaxlib.__version__,
            libtpu_version=targets.libtpu_version(),
            attached_tpu=targets.attached_generation() if tier is targets.Tier.TPU else None,
            compile_targets=targets.compile_targets(tier),
            default_target=self.checker.default_target,
            workloads=len(workloads.all_workloads()),
            queue=QueueInfo(slots=self.checker.queue.slots, running=self.checker.queue.running, waiting=self.checker.queue.waiting),
        )

    def check_kernel(self, workload_id: str, source: str, targets_: list[str] | str | None = None, size: str | None = None,
                     seeds: int = DEFAULT_SEEDS, require_pallas: bool = True,
                     on_progress: Callable[[str], None] | None = None, on_attempt: Callable[[int], None] | None = None) -> Verdict:
        """Check one candidate; the attempt and its full log are stored whatever happens."""
        w = workloads.get_workload(workload_id)  # unknown ids fail before an attempt is recorded
        attempt_id = self.store.start("check", w.id, source)
        if on_attempt:
            on_attempt(attempt_id)
        try:
            verdict, outcome = self.checker.check(w.id, source, targets.parse_targets(targets_) if targets_ else None, size,
                                                  seeds, require_pallas, on_progress)
        except Exception as exc:
            self.store.fail(attempt_id, f"{type(exc).__name__}: {exc}")
            raise
        verdict.attempt_id = attempt_id
        self.store.finish(attempt_id, verdict.status, verdict.error_class, verdict.model_dump(mode="json"),
                          _log_text(outcome), verdict.total_seconds)
        outcome.cleanup()
        return verdict

    def profile_kernel(self, workload_id: str, source: str, targets_: list[str] | str | None = None,
                       on_progress: Callable[[str], None] | None = None, on_attempt: Callable[[int], None] | None = None) -> Profile:
        """Check first; a correct kernel is then measured (TPU host) or estimated (CPU host with libtpu) next to the
        XLA baseline and the expert kernel."""
        w = workloads.get_workload(workload_id)
        chosen = targets.parse_targets(targets_) if targets_ else self.checker.default_targets()
        attempt_id = self.store.start("profile", w.id, source)
        if on_attempt:
            on_attempt(attempt_id)
        progress = on_progress or (lambda _m: None)
        try:
            verdict = self.check_kernel(w.id, source, chosen or None, on_progress=on_progress)
            if verdict.status != "correct":
                progress("not profiled: the check failed")
            result = profiling.profile(self.checker, w.id, source, chosen, verdict, on_progress=progress)
        except Exception as exc:
            self.store.fail(attempt_id, f"{type(exc).__name__}: {exc}")
            raise
        result.attempt_id = attempt_id
        self.store.finish(attempt_id, verdict.status, verdict.error_class, result.model_dump(mode="json"), "", verdict.total_seconds)
        return result

    def in_background(self, method: Callable, *args, **kwargs) -> tuple[threading.Event, dict]:
        """Run check_kernel or profile_kernel on a thread.

        Returns (done, box); box gets 'attempt_id' as soon as the attempt exists, then 'result' or 'error'.
        """
        done, box, has_id = threading.Event(), {}, threading.Event()

        def remember(attempt_id: int) -> None:
            box["attempt_id"] = attempt_id
            has_id.set()

        def run() -> None:
            try:
                box["result"] = method(*args, on_attempt=remember, **kwargs)
            except Exception as exc:  # noqa: BLE001 - handed to the caller through the box
                box["error"] = exc
            finally:
                has_id.set()
                done.set()

        threading.Thread(target=run, daemon=True, name="jaxbench-job").start()
        has_id.wait()
        return done, box

    def list_attempts(self, workload_id: str | None = None, attempt_id: int | None = None, limit: int = 20) -> AttemptList:
        if attempt_id is not None:
            row = self.store.get(attempt_id)
            if row is None:
                raise UnknownAttempt(f"no attempt {attempt_id}; list_attempts() without an id shows the recent ones")
            result = json.loads(row["result_json"]) if row["result_json"] else None
            profile = Profile(**result) if result is not None and row["kind"] == "profile" else None
            verdict = profile.verdict if profile else Verdict(**result) if result else None
            detail = AttemptDetail(**_summary_fields(row), verdict=verdict, profile=profile, source=row["source"],
                                   log_tail=row["log"][-8000:])
            return AttemptList(attempts=[AttemptSummary(**_summary_fields(row))], detail=detail)
        if workload_id is not None:
            workload_id = workloads.get_workload(workload_id).id
        return AttemptList(attempts=[AttemptSummary(**_summary_fields(r)) for r in self.store.recent(workload_id, limit)])


class UnknownAttempt(LookupError):
    pass


def _summary_fields(row) -> dict:
    created = datetime.datetime.fromtimestamp(row["created"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return dict(attempt_id=row["id"], kind=row["kind"], workload_id=row["workload_id"], state=row["state"], status=row["status"],
                error_class=row["error_class"], created=created, seconds=row["seconds"])
