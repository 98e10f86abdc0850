"""A fleet of hosts on Ray: RayExecutor sends checks and profiles to one Ray actor per host.

Three kinds of process take part, each in a module of its own:

  server      JaxBench with a RayExecutor (this module): the single writer of the attempts store. It reaches the
              fleet only through a pipe to its proxy; Ray itself never runs inside the server.
  proxy       a child process of the server (jaxbench_mcp.fleet.proxy, started as `python -m`), and the only Ray
              driver. It claims the hosts (one HostActor on each), places every job (jaxbench_mcp.fleet.placement),
              relays progress and cancellation, and retries a job whose host died.
  host actor  one per host, on that host (jaxbench_mcp.fleet.actor): a LocalExecutor (its checker with warm
              sandboxed workers, and its profiler). It returns verdicts and profiles as JSON and never writes any
              store.

A job travels as a typed message (jaxbench_mcp.fleet.protocol): the CheckRequest or ProfileRequest JaxBench
validated, JSON-ready across each process boundary and validated back into the same request on the other side.
Why the proxy is a process of its own, and how a host is claimed: jaxbench_mcp.fleet.proxy. Where seeds and
truths live (on the hosts, never travelling): jaxbench_mcp.fleet.actor. How a host is chosen:
jaxbench_mcp.fleet.placement. Every verdict and profile names the host (`host`) and the tier (`tier`) that
produced it.

Faults:
  - A host (node or actor) that dies mid-job: the job is retried once on another host, with fresh hidden
    seeds; the attempt's log records both tries, and the verdict warns that it was retried. Should the second
    host die too (a cluster being taken down loses its nodes one after the other), the job runs on the
    server's own host if it can (below), else it becomes a server_error verdict whose log names both hosts.
  - No live host left while the cluster itself is up: the job runs on the server's own host, if it can
    (below), and the verdict says so. Hosts that join later are claimed within seconds (DISCOVER_SECONDS).
  - The cluster goes away (the proxy cannot reach the GCS, or the proxy process ends): the executor falls
    back to local execution for good (restart the server to rejoin), says so in server_info (`fleet.fallback`)
    and in every verdict it produces from then on (a warning and `host: '<name> (local fallback)'`). Jobs in
    flight at that moment are retried locally. The server's own host can take over only what its tier allows:
    a plain CPU host cannot compile for a TPU generation, and such a job becomes a server_error saying why.
  - Nothing is recorded by the fleet: the server records each attempt once, whatever happened on the way.

Versions: each host imports jaxbench_mcp from its own installation (Ray ships no code here), so every host must
run the same jaxbench-mcp and jax versions as the server; a host whose versions differ is not used, and
server_info says why.

Ray is imported only inside the proxy and the host actors: `import jaxbench_mcp.fleet.ray_executor` works without Ray.
"""

from __future__ import annotations

import collections
import logging
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from jaxbench_mcp.catalog import targets
from jaxbench_mcp.checking.checker import Cancelled, Checker
from jaxbench_mcp.fleet import executors
from jaxbench_mcp.fleet.placement import (
    HOST_RESOURCE as HOST_RESOURCE,
    FleetUnavailable as FleetUnavailable,
    HostView,
    NoHostForTarget as NoHostForTarget,
    fleet_default_target,
    fleet_info,
    fleet_tier,
)
from jaxbench_mcp.fleet.protocol import ActorReply, FleetCheckJob, FleetJob, FleetProfileJob
from jaxbench_mcp.fleet.proxy import CLAIM_TIMEOUT_SECONDS
from jaxbench_mcp.models import FleetInfo, Profile, QueueInfo, Verdict
from jaxbench_mcp.requests import CheckRequest, ProfileRequest

# The name it logged under before the rooms, so that log filters set up for the fleet keep matching.
logger = logging.getLogger("jaxbench_mcp.fleet")

# A cancelled job whose proxy does not confirm within this time is given up as cancelled anyway.
CANCEL_GRACE_SECONDS = 30.0
# server_info waits this long for the fleet's live numbers before showing the last ones it has.
FLEET_INFO_SECONDS = 5.0
# How the proxy process is started: a module, with its end of the pipe as the argument.
PROXY_MODULE = "jaxbench_mcp.fleet.proxy"


@dataclass
class _Job:
    id: str
    kind: str
    inbox: queue.Queue = field(default_factory=queue.Queue)
    tries: list[dict] = field(default_factory=list)

    def history(self) -> str:
        """The tries so far, as the head of the attempt's log."""
        lines = []
        for t in self.tries:
            where = f"try {t['attempt']} on host {t['host']} (tier {t.get('tier')})"
            if "died" in t:
                lines.append(f"== fleet: {where}: the host died mid-{self.kind}: {t['died']} ==")
                if t.get("progress"):
                    lines.append("   its progress until then: " + "; ".join(t["progress"]))
            else:
                lines.append(f"== fleet: {where} ==")
        return "\n".join(lines) + ("\n" if lines else "")


class RayExecutor:
    """Checks and profiles on a fleet of hosts on Ray (see the module docstring): the executor interface of
    jaxbench_mcp.fleet.executors, backed by a proxy process that drives Ray."""

    def __init__(
        self,
        address: str,
        checker_options: dict | None = None,
        claim_timeout: float = CLAIM_TIMEOUT_SECONDS,
        cache=None,
    ):
        """`address`: the Ray head's GCS address (HOST:6379, or 'auto' on a node of the cluster). `checker_options`:
        passed to each host's Checker (e.g. slots, spares) and to the local fallback's. `cache`: the profiler cache
        of the local fallback (the server's store)."""
        self.address = address
        self.checker_options = dict(checker_options or {})
        self.claim_timeout = claim_timeout
        self.cache = cache
        self._proc: subprocess.Popen | None = None
        self._conn: Any = None  # the pipe to the proxy (a multiprocessing Connection) once started
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._replies: dict[str, queue.Queue] = {}
        self._hosts: list[HostView] = []
        self._fallback: str | None = None
        self._local = None
        self._local_started = False
        self._closed = False

    # -- life --

    def start(self) -> None:
        """Start the proxy and wait until the fleet has at least one ready host. Raises FleetUnavailable otherwise:
        a fleet that is not there at start is a setup mistake to be told, not hidden behind a fallback. Starting
        a started executor does nothing (the CLI starts the fleet before the server's lifespan starts it again)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self._closed, self._fallback, self._local_started = False, None, False
        ours, theirs = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", PROXY_MODULE, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=2,
            close_fds=True,
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send(
            ("config", self.address, {"checker_options": self.checker_options, "claim_timeout": self.claim_timeout})
        )
        wait = self.claim_timeout + 60.0  # imports and ray.init come before the claim timeout starts
        deadline = time.monotonic() + wait
        message = None
        while time.monotonic() < deadline and message is None:
            try:
                if self._conn.poll(0.5):
                    message = self._conn.recv()
            except (EOFError, OSError):
                break
            if message is None and self._proc.poll() is not None:
                break
        if message is None or message[0] != "ready":
            reason = (
                message[1]
                if message
                else (
                    f"the fleet's Ray driver exited with status {self._proc.poll()}"
                    if self._proc.poll() is not None
                    else f"the Ray cluster at {self.address} did not answer within {wait:.0f} s"
                )
            )
            self._conn.close()  # a proxy waiting for its next message ends on this; one stuck in ray.init is stopped
            self._stop_proxy(grace=5.0)
            raise FleetUnavailable(reason)
        self._hosts = [HostView(**h) for h in message[1]]
        threading.Thread(target=self._read, daemon=True, name="fleet-reader").start()
        logger.info("fleet at %s: %s", self.address, self.describe())

    def describe(self) -> str:
        """One line on the fleet's hosts, for the operator."""
        return (
            ", ".join(f"{h.name} ({h.state}, {h.tier}, TPU {h.attached_tpu or 'none'})" for h in self._hosts)
            or "no host"
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._conn is not None:
            self._send("close")
        self._stop_proxy()
        if self._local is not None:
            self._local.close()
            self._local = None

    def _stop_proxy(self, grace: float = 20.0) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._conn is not None and not self._conn.closed:
            self._conn.close()

    # -- the pipe --

    def _send(self, *message) -> bool:
        with self._send_lock:
            try:
                self._conn.send(message)
                return True
            except (OSError, ValueError, AttributeError):
                return False

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError, ValueError):
                if not self._closed:
                    code = self._proc.poll() if self._proc else None
                    self._fall_back(f"the fleet's Ray driver process ended (exit status {code})")
                return
            op = message[0]
            if op in ("progress", "try", "died", "result", "cancelled", "error", "unavailable"):
                with self._lock:
                    job = self._jobs.get(message[1])
                if job is not None:
                    job.inbox.put((op, *message[2:]))
            elif op == "hosts":
                self._hosts = [HostView(**h) for h in message[1]]
            elif op == "fleet":
                box = self._replies.get(message[1])
                if box is not None:
                    box.put(message[2])
            elif op == "lost":
                self._fall_back(message[1])

    def _fall_back(self, reason: str) -> None:
        """From now on every job runs on this host: the cluster is gone. Jobs in flight are told so at once."""
        with self._lock:
            if self._fallback is not None:
                return
            self._fallback = reason
            jobs = list(self._jobs.values())
            for h in self._hosts:
                h.state, h.detail = (
                    ("dead", "the cluster is gone") if h.state in ("ready", "starting") else (h.state, h.detail)
                )
        logger.error("fleet at %s is gone (%s): falling back to local execution", self.address, reason)
        for job in jobs:
            job.inbox.put(("unavailable", reason))

    # -- description --

    def _local_executor(self):
        """This host's executor, for the fallback (started on first use)."""
        with self._lock:
            if self._local is None:
                # The hosts' slots, spares and limits, but this host's own tier: a tier forced on the hosts
                # describes them, not the server's machine.
                options = {k: v for k, v in self.checker_options.items() if k != "tier"}
                self._local = executors.LocalExecutor(Checker(**options), cache=self.cache)
                self._local_started = False
            return self._local

    def _started_local(self):
        local = self._local_executor()
        with self._lock:
            if not self._local_started:
                local.start()
                self._local_started = True
        return local

    @property
    def fallback(self) -> str | None:
        return self._fallback

    @property
    def tier(self) -> targets.Tier:
        if self._fallback is not None:
            return self._local_executor().tier
        # With no host up right now, the best tier the fleet had still describes what its jobs will get.
        return fleet_tier(self._hosts) or fleet_tier(self._hosts, ready_only=False) or targets.Tier.CPU

    @property
    def default_target(self) -> str | None:
        if self._fallback is not None:
            return self._local_executor().default_target
        return fleet_default_target(self._hosts)

    @property
    def isolation(self) -> str:
        if self._fallback is not None:
            return str(self._local_executor().isolation)
        kinds = collections.defaultdict(list)
        for h in self._hosts:
            if h.state == "ready" and h.isolation:
                kinds[h.isolation].append(h.name)
        if len(kinds) == 1:
            return next(iter(kinds))
        return (
            "mixed: " + "; ".join(f"{k} on {', '.join(v)}" for k, v in kinds.items())
            if kinds
            else "unknown (no host up)"
        )

    def default_targets(self) -> list[str]:
        return [self.default_target] if self.default_target else []

    def fleet(self) -> FleetInfo:
        if self._fallback is None:
            token = uuid.uuid4().hex
            box: queue.Queue = queue.Queue()
            self._replies[token] = box
            try:
                if self._send("fleet", token):
                    return FleetInfo.model_validate(box.get(timeout=FLEET_INFO_SECONDS))
            except queue.Empty:
                pass
            finally:
                self._replies.pop(token, None)
        return fleet_info(self.address, list(self._hosts), {}, self._fallback)

    def queue(self) -> QueueInfo:
        if self._fallback is not None:
            return self._local_executor().queue()
        info = self.fleet()
        ready = [h for h in info.hosts if h.state == "ready"]
        return QueueInfo(
            slots=sum(h.slots for h in ready), running=sum(h.running for h in ready), waiting=info.queue_length
        )

    # -- jobs --

    def _run(
        self,
        message: FleetJob,
        on_progress: Callable[[str], None] | None,
        cancel: threading.Event | None,
    ) -> tuple[str, Any, _Job]:
        """Hand a job to the fleet and follow it: ('fleet', the actor's ActorReply, job) or ('local', why, job) when
        the job must run here. Raises Cancelled, the job's own error or NoHostForTarget."""
        kind = message.kind
        progress = on_progress or (lambda _m: None)
        job = _Job(uuid.uuid4().hex, kind)
        with self._lock:
            if self._fallback is not None:
                return "local", self._fallback, job
            self._jobs[job.id] = job
        try:
            if not self._send("job", job.id, message.model_dump(mode="json")):
                self._fall_back("the pipe to the fleet's Ray driver is closed")
                return "local", self._fallback, job
            cancel_sent_at = None
            host = "fleet"
            while True:
                if cancel is not None and cancel.is_set() and cancel_sent_at is None:
                    self._send("cancel", job.id)
                    cancel_sent_at = time.monotonic()
                if cancel_sent_at is not None and time.monotonic() - cancel_sent_at > CANCEL_GRACE_SECONDS:
                    raise Cancelled()
                try:
                    op, *rest = job.inbox.get(timeout=0.1)
                except queue.Empty:
                    continue
                if op == "progress":
                    if job.tries:  # kept for the log, should this try's host die
                        job.tries[-1].setdefault("progress", []).append(rest[0])
                    progress(f"[{host}] {rest[0]}")
                elif op == "try":
                    job.tries.append(dict(rest[0]))
                    host = rest[0]["host"]
                    progress(
                        f"{kind} placed on host {host} (tier {rest[0]['tier']})"
                        + (" - retry" if rest[0]["attempt"] > 1 else "")
                    )
                elif op == "died":
                    job.tries[-1]["died"] = rest[0]["reason"]
                    progress(
                        f"host {rest[0]['host']} died mid-{kind} ({rest[0]['reason'][:200]}); retrying on another host"
                    )
                elif op == "result":
                    return "fleet", ActorReply.model_validate(rest[0]), job
                elif op == "cancelled":
                    raise Cancelled()
                elif op == "error":
                    raise rest[0]
                elif op == "unavailable":
                    if job.tries and "died" not in job.tries[-1]:  # the cluster went away under this try
                        job.tries[-1]["died"] = rest[0]
                    return "local", rest[0], job
        finally:
            with self._lock:
                self._jobs.pop(job.id, None)

    def _local_or_refuse(self, why: str, generations: list[str], job: _Job):
        """The local executor for a job the fleet cannot take, when this host can take it."""
        local = self._started_local()
        if generations and local.tier is targets.Tier.CPU:
            raise FleetUnavailable(
                f"{why}; this server's own host has no libtpu, so it cannot compile for "
                f"{', '.join(generations)} in the fleet's place\n{job.history()}"
            )
        return local

    @staticmethod
    def _local_note(kind: str, why: str) -> str:
        return f"the Ray fleet could not take this {kind} ({why}); it ran on the server's own host"

    def check(
        self,
        request: CheckRequest,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[Verdict, str]:
        chosen = list(request.targets)
        where, result, job = self._run(FleetCheckJob(request=request), on_progress, cancel)
        if where == "fleet":
            verdict = result.verdict
            verdict.host = job.tries[-1]["host"]
            log = result.log
        else:
            local = self._local_or_refuse(str(result), chosen, job)
            verdict, log = local.check(request, on_progress, cancel)
            verdict.host = f"{socket.gethostname()} (local fallback)"
            verdict.warnings.append(self._local_note("check", str(result)))
            log = f"== fleet: {self._local_note('check', str(result))} ==\n{log}"
        dead = [t["host"] for t in job.tries if "died" in t]
        if dead:
            verdict.warnings.append(
                f"host {', '.join(dead)} died during this check; it was retried on {verdict.host} "
                "with fresh hidden seeds (the log has both tries)"
            )
        return verdict, job.history() + log

    def profile(
        self,
        request: ProfileRequest,
        verdict: Verdict,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Profile:
        chosen = list(request.targets)
        where, result, job = self._run(FleetProfileJob(request=request, verdict=verdict), on_progress, cancel)
        if where == "fleet":
            profile = result.profile
            profile.host = job.tries[-1]["host"]
        else:
            local = self._local_or_refuse(str(result), chosen, job)
            profile = local.profile(request, verdict, on_progress=on_progress, cancel=cancel)
            profile.host = f"{socket.gethostname()} (local fallback)"
            profile.label = f"{profile.label} [{self._local_note('profile', str(result))}]"
        if any("died" in t for t in job.tries):
            dead = ", ".join(t["host"] for t in job.tries if "died" in t)
            profile.label = f"{profile.label} [host {dead} died during this profile; it was retried on {profile.host}]"
        return profile


if TYPE_CHECKING:  # mypy checks that the fleet's executor satisfies the protocol JaxBench uses

    def _satisfies(executor: RayExecutor) -> executors.Executor:
        return executor
