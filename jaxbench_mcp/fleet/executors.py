"""Where checks and profiles run. JaxBench (the single writer of the attempts store) hands every job to an
executor and records what comes back; an executor never touches the store.

  Executor       the protocol: what JaxBench needs from an executor, whichever it is.
  LocalExecutor  this host: its checker (sandboxed warm workers, device slots) and profiler.
  RayExecutor    a fleet of hosts on Ray, one actor per host (jaxbench_mcp.fleet.ray_executor; optional extra).

Both answer the same calls: check(CheckRequest) -> (Verdict, log text), profile(ProfileRequest, verdict) ->
Profile, and describe themselves (tier, default target, isolation, queue, and fleet() -> models.FleetInfo, or
None for a single host). The request arrives validated (jaxbench_mcp.requests) and is passed on unchanged. A
verdict or profile from a fleet names its host in `host`; a local one leaves it unset. Both raise
checking.Cancelled when `cancel` is set, and an agent's mistake (a target no host can serve...) as its own
exception; anything else they raise is the server's failure, which JaxBench turns into a server_error verdict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from jaxbench_mcp.catalog import targets
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.models import FleetInfo, Profile, QueueInfo, Verdict
from jaxbench_mcp.perf import profiling
from jaxbench_mcp.requests import CheckRequest, ProfileRequest
from jaxbench_mcp.sandbox.isolation import Isolation


@runtime_checkable
class Executor(Protocol):
    """What JaxBench needs from an executor (LocalExecutor and fleet/ray_executor.RayExecutor satisfy it)."""

    @property
    def tier(self) -> targets.Tier:
        """The tier its jobs get (on a fleet, the best tier a ready host offers)."""
        ...

    @property
    def default_target(self) -> str | None:
        """The TPU generation a job without targets compiles for (None: none; a plain CPU host)."""
        ...

    @property
    def isolation(self) -> Isolation | str:
        """How candidates are sandboxed (shown with str())."""
        ...

    def default_targets(self) -> list[str]:
        """[default_target], or [] when there is none: what a request without targets is resolved to."""
        ...

    def queue(self) -> QueueInfo: ...

    def fleet(self) -> FleetInfo | None:
        """The fleet behind the executor; None for a single host."""
        ...

    def start(self) -> None: ...

    def close(self) -> None: ...

    def check(
        self,
        request: CheckRequest,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[Verdict, str]:
        """The verdict and the attempt's log text."""
        ...

    def profile(
        self,
        request: ProfileRequest,
        verdict: Verdict,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Profile:
        """The profile of a checked candidate (`verdict`: its check's; a failed one is returned unprofiled)."""
        ...


class LocalExecutor:
    """Checks and profiles on this host."""

    def __init__(self, checker: Checker | None = None, cache=None):
        self.checker = checker or Checker()
        self.profiler = profiling.Profiler(self.checker, cache=cache)

    @property
    def tier(self) -> targets.Tier:
        return self.checker.tier

    @property
    def default_target(self) -> str | None:
        return self.checker.default_target

    @property
    def isolation(self) -> Isolation:
        return self.checker.isolation

    def default_targets(self) -> list[str]:
        return self.checker.default_targets()

    def queue(self) -> QueueInfo:
        q = self.checker.queue
        return QueueInfo(slots=q.slots, running=q.running, waiting=q.waiting)

    def fleet(self) -> None:
        """No fleet: a single host."""
        return None

    def start(self) -> None:
        self.checker.start()

    def close(self) -> None:
        self.checker.close()

    def check(
        self,
        request: CheckRequest,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[Verdict, str]:
        verdict, outcome = self.checker.check(request, on_progress, cancel)
        if outcome is None:  # no worker could start: the verdict says so
            return verdict, verdict.message
        outcome.cleanup()
        return verdict, outcome.log_text()

    def profile(
        self,
        request: ProfileRequest,
        verdict: Verdict,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Profile:
        return self.profiler.profile(request, verdict, on_progress=on_progress, cancel=cancel)


if TYPE_CHECKING:  # mypy checks that the local executor satisfies the protocol (RayExecutor's is checked beside it)

    def _satisfies(executor: LocalExecutor) -> Executor:
        return executor
