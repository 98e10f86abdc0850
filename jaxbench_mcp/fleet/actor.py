"""The host actor: one per host of the fleet, on that host, started by the proxy (jaxbench_mcp.fleet.proxy) as a
threaded Ray actor. It is this host's LocalExecutor (its checker with warm sandboxed workers, and its profiler):
it takes typed jobs (jaxbench_mcp.fleet.protocol), returns verdicts and profiles as JSON-ready replies, and never
writes any store.

Seeds and truths: hidden seeds are drawn, inputs built and truths computed inside the actor's Checker.check
(checking/truth: fresh_seed, inputs_for, truth_of) - on the actor's host, in the actor's process, which is the trusted
side, as the server is on a single host. The candidate runs in a sandboxed child process of the actor and receives
input arrays only. Seeds never travel: neither the proxy nor the server ever sees them, and a verdict names seeds
by their index only.

Ray is not imported here: the proxy wraps the class with ray.remote.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import os
import socket
import threading

from jaxbench_mcp import __version__
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.fleet.protocol import JOB, ActorReply, FleetCheckJob, FleetProfileJob


class _ActorJob:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.cancel = threading.Event()
        self.lock = threading.Lock()

    def note(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def since(self, start: int) -> list[str]:
        with self.lock:
            return self.lines[start:]


class HostActor:
    """This host's LocalExecutor, as a threaded Ray actor (the proxy wraps it with ray.remote).

    Hidden seeds and truths live here: Checker.check draws and uses them in this process."""

    def __init__(self, checker_options: dict | None = None):
        # The actor computes truths with jax on the CPU; only a candidate's sandboxed worker may hold the chip.
        os.environ["JAX_PLATFORMS"] = "cpu"

        from jaxbench_mcp.checking import checker as checking
        from jaxbench_mcp.fleet import executors
        from jaxbench_mcp.sandbox import jobs

        options = dict(checker_options or {})
        if "tier" in options and options["tier"] is not None:
            options["tier"] = targets.Tier(options["tier"])
        jobs.sweep_stale_dirs()
        atexit.register(jobs.REGISTRY.kill_all)
        self.executor = executors.LocalExecutor(checking.Checker(**options))
        self.executor.start()
        self._jobs: dict[str, _ActorJob] = {}
        self._lock = threading.Lock()

    def _job(self, try_id: str) -> _ActorJob:
        with self._lock:
            return self._jobs.setdefault(try_id, _ActorJob())

    def _drop(self, try_id: str) -> None:
        with self._lock:
            self._jobs.pop(try_id, None)

    def describe(self) -> dict:
        def version(dist: str) -> str | None:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                return None

        checker = self.executor.checker
        return {
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "tier": str(checker.tier),
            "attached_tpu": targets.attached_generation(),
            "default_target": checker.default_target,
            "slots": checker.queue.slots,
            "isolation": str(checker.isolation),
            "jaxbench_mcp": __version__,
            "jax": version("jax"),
            "libtpu": targets.libtpu_version(),
        }

    def queue(self) -> tuple[int, int]:
        q = self.executor.queue()
        return q.running, q.waiting

    def progress(self, try_id: str, since: int) -> list[str]:
        with self._lock:
            job = self._jobs.get(try_id)
        return job.since(since) if job else []

    def cancel(self, try_id: str) -> None:
        # A cancel that arrives before its job starts leaves the event set for it: the job then stops at once.
        self._job(try_id).cancel.set()

    def run(self, try_id: str, job: dict) -> dict:
        """One try of a job (a fleet.protocol job, JSON-ready) to its end: the ActorReply, JSON-ready."""
        from jaxbench_mcp.checking.checker import Cancelled

        message = JOB.validate_python(job)
        state = self._job(try_id)
        try:
            match message:
                case FleetCheckJob(request=request):
                    verdict, log = self.executor.check(request, state.note, state.cancel)
                    reply = ActorReply(verdict=verdict, log=log, progress=state.since(0))
                case FleetProfileJob(request=request, verdict=checked):
                    profile = self.executor.profile(request, checked, state.note, state.cancel)
                    reply = ActorReply(profile=profile, progress=state.since(0))
        except Cancelled:
            reply = ActorReply(cancelled=True, progress=state.since(0))
        finally:
            self._drop(try_id)
        return reply.model_dump(mode="json")

    def close(self) -> None:
        from jaxbench_mcp.sandbox import jobs

        self.executor.close()
        jobs.REGISTRY.kill_all()
