"""A fleet of hosts on Ray: RayExecutor sends checks and profiles to one Ray actor per host.

Three kinds of process take part:

  server      JaxBench with a RayExecutor: the single writer of the attempts store. It reaches the fleet only
              through a pipe to its proxy; Ray itself never runs inside the server.
  proxy       a child process of the server, and the only Ray driver. It claims the hosts (one HostActor on
              each), places every job, relays progress and cancellation, and retries a job whose host died.
  host actor  one per host, on that host: a LocalExecutor (its checker with warm sandboxed workers, and its
              profiler). It returns verdicts and profiles as JSON and never writes any store.

A job travels as a typed message (jaxbench_mcp.fleet.protocol): the CheckRequest or ProfileRequest JaxBench
validated, JSON-ready across each process boundary and validated back into the same request on the other side.

Why a separate proxy process: measured with Ray 2.60, a driver whose cluster (its GCS) goes away terminates its
own process about 60 s later ("Failed to connect to GCS within 60 seconds ... The program will terminate"), and
`ray.init` on an address nobody answers waits without end. Inside the server, either would take the MCP session
down (or freeze it); in a child process it costs only the child, and the server falls back to local execution.
The pipe also keeps Ray's own printing away from the server's stdout, which belongs to MCP on stdio.

Claiming a host: a host is a Ray node that advertises the custom resource HOST_RESOURCE (`jaxbench_host`; start
it with `ray start --address HEAD:6379 --resources '{"jaxbench_host": 1}'`) or Ray's `TPU` resource (Ray sets
it by itself on a TPU VM). Its actor asks for one unit of `jaxbench_host` and for all of the node's `TPU` chips,
pinned to that node, so that while this server runs, no other Ray job and no second jaxbench server can take the
host's chip. (The actor itself never opens the TPU: it runs jax on the CPU; only the sandboxed worker that runs
a candidate takes the chip, as on a single host.)

Seeds and truths: hidden seeds are drawn, inputs built and truths computed inside the host actor's
Checker.check (checking.fresh_seed, inputs_for, truth_for) - on the actor's host, in the actor's process, which
is the trusted side, as the server is on a single host. The candidate runs in a sandboxed child process of the
actor and receives input arrays only. Seeds never travel: neither the proxy nor the server ever sees them, and a
verdict names seeds by their index only.

Placement by target: a job for a list of TPU generations goes to a ready host whose attached chip is one of them
(the first in the list that the fleet has), whose profile is then measured; else to any host that can compile
for TPU (a CPU host with libtpu, whose profile is a static estimate). Among the candidates the least loaded
host wins (in-flight jobs per slot), then the one used longest ago. A job without targets takes the fleet's
default target (the chip most TPU hosts carry, else v6e). Every verdict and profile names the host (`host`)
and the tier (`tier`) that produced it. A fleet where no host can serve a requested target says so at once
(NoHostForTarget, an error the agent can fix) instead of queueing the job.

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
import contextlib
import importlib.metadata
import itertools
import logging
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from jaxbench_mcp import __version__
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.fleet.protocol import JOB, ActorReply, FleetCheckJob, FleetJob, FleetProfileJob
from jaxbench_mcp.models import FleetHost, FleetInfo, Profile, QueueInfo, Verdict
from jaxbench_mcp.requests import CheckRequest, ProfileRequest

if TYPE_CHECKING:
    from jaxbench_mcp.fleet.executors import Executor

# The name it logged under before the rooms, so that log filters set up for the fleet keep matching.
logger = logging.getLogger("jaxbench_mcp.fleet")

# The custom resource a CPU host advertises to join the fleet (a TPU host may advertise Ray's TPU resource instead).
HOST_RESOURCE = "jaxbench_host"
TPU_RESOURCE = "TPU"
NAMESPACE = "jaxbench"
# How long start() waits for the hosts' actors to come up (process start, imports, sandbox probe).
CLAIM_TIMEOUT_SECONDS = 120.0
# A job is tried at most this often: once, then once more on another host if the first one died.
MAX_TRIES = 2
# How often the proxy asks an actor for new progress lines of a running job.
POLL_SECONDS = 0.25
# The proxy probes the GCS port this often; this many failures in a row mean the cluster is gone.
GCS_PROBE_SECONDS = 1.0
GCS_PROBE_FAILURES = 3
# At start, how long a host whose actor name is taken is asked again before the fleet gives up on it.
CLAIM_GRACE_SECONDS = 10.0
# How often the proxy looks for nodes that joined (or left) the cluster.
DISCOVER_SECONDS = 5.0
# Threads per host actor: long checks and the short calls that follow them (progress, cancel, queue) share them.
ACTOR_CONCURRENCY = 64
# A cancelled job whose proxy does not confirm within this time is given up as cancelled anyway.
CANCEL_GRACE_SECONDS = 30.0
# server_info waits this long for the fleet's live numbers before showing the last ones it has.
FLEET_INFO_SECONDS = 5.0

_CLAIMED = "claimed by another jaxbench server on this cluster"
_TIER_RANK = {str(targets.Tier.TPU): 2, str(targets.Tier.CPU_LIBTPU): 1, str(targets.Tier.CPU): 0}


class FleetUnavailable(RuntimeError):
    """The fleet cannot take a job: no cluster at the address, no host in it, or every host gone while this host
    cannot take the job over. The message says which."""


class NoLiveHost(FleetUnavailable):
    """No host of the fleet is up right now (the cluster itself may be)."""


class NoHostForTarget(targets.UnknownTarget):
    """No host of the fleet can serve the requested TPU generation(s); raised before anything is queued."""


# ---- placement (pure: the proxy's host table in, one host out) --------------------------------------


@dataclass
class HostView:
    """What placement and server_info know of one host."""

    node_id: str
    name: str
    state: str = "starting"  # starting | ready | dead | refused
    tier: str | None = None
    attached_tpu: str | None = None
    tpu_chips: int = 0
    slots: int = 1
    isolation: str | None = None
    inflight: int = 0  # jobs this fleet has placed on the host and not yet got back
    last_used: int = 0  # placement order, for the tie-break
    detail: str = ""

    def public(self, running: int = 0, waiting: int = 0) -> FleetHost:
        return FleetHost(
            name=self.name,
            node_id=self.node_id,
            state=self.state,
            tier=self.tier,
            attached_tpu=self.attached_tpu,
            tpu_chips=self.tpu_chips,
            slots=self.slots,
            running=running,
            waiting=waiting,
            in_flight=self.inflight,
            isolation=self.isolation,
            detail=self.detail,
        )


def place(hosts: list[HostView], generations: list[str], exclude: set[str] | frozenset[str] = frozenset()) -> HostView:
    """The host for a job for `generations` (TPU generations; empty: no compile target), skipping node ids in
    `exclude`.

    Raises NoLiveHost when no host is ready, NoHostForTarget when ready hosts exist but none can compile for TPU."""
    live = [h for h in hosts if h.state == "ready" and h.node_id not in exclude]
    if not live:
        down = [f"{h.name} ({h.state}{': ' + h.detail if h.detail else ''})" for h in hosts]
        raise NoLiveHost(
            "no host of the fleet is up" + (f"; hosts: {'; '.join(down)}" if down else " (the cluster has none)")
        )
    pool = live
    if generations:
        # A plain CPU host (no libtpu) lowers for TPU but compiles for no generation.
        able = [h for h in live if h.tier != str(targets.Tier.CPU)]
        if not able:
            raise NoHostForTarget(
                f"no host of the fleet can compile for {', '.join(generations)}: its hosts "
                f"({', '.join(h.name for h in live)}) are plain CPU hosts without libtpu. Omit the target for a "
                "lowering-only check, or add a host with libtpu or a TPU to the fleet"
            )
        pool = able
        for generation in generations:  # the first requested generation that some host carries decides
            carriers = [h for h in able if h.attached_tpu == generation]
            if carriers:
                pool = carriers
                break
    return min(pool, key=lambda h: (h.inflight / max(1, h.slots), h.last_used))


def fleet_tier(hosts: list[HostView], ready_only: bool = True) -> targets.Tier | None:
    """The best tier a (ready) host offers: what a job for the fleet's default target gets."""
    tiers = [h.tier for h in hosts if (h.state == "ready" or not ready_only) and h.tier]
    return targets.Tier(max(tiers, key=_TIER_RANK.__getitem__)) if tiers else None


def fleet_default_target(hosts: list[HostView]) -> str | None:
    ready = [h for h in hosts if h.state == "ready"]
    chips = collections.Counter(h.attached_tpu for h in ready if h.attached_tpu)
    if chips:
        return chips.most_common(1)[0][0]
    return targets.DEFAULT_CPU_TARGET if any(h.tier == str(targets.Tier.CPU_LIBTPU) for h in ready) else None


def fleet_info(
    address: str, hosts: list[HostView], queues: dict[str, tuple[int, int]], fallback: str | None
) -> FleetInfo:
    """server_info's view of the fleet; `queues` maps node id -> (running, waiting) as the hosts last said."""
    public = [h.public(*queues.get(h.node_id, (0, 0))) for h in hosts]
    ready = [h for h in public if h.state == "ready"]
    slots = sum(h.slots for h in ready)
    chips: dict[str, int] = {}
    for h in ready:
        if h.attached_tpu:
            chips[h.attached_tpu] = chips.get(h.attached_tpu, 0) + h.tpu_chips
    return FleetInfo(
        address=address,
        resource=HOST_RESOURCE,
        hosts=public,
        ready_hosts=len(ready),
        tpu_chips=sum(h.tpu_chips for h in ready),
        chips_by_generation=chips,
        queue_length=sum(h.waiting for h in ready),
        busy_share=(sum(h.running for h in ready) / slots) if slots else 0.0,
        fallback=fallback,
    )


# ---- the host actor (one per host, on that host) ----------------------------------------------------


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
        import atexit

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


# ---- the proxy (a child process of the server; the only Ray driver) ---------------------------------


@dataclass
class _Host:
    view: HostView
    actor: Any  # a Ray actor handle (Ray is imported only in this process's functions)
    ready_ref: Any = None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gcs_reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - anything that does not survive the pipe travels as its text
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class _Proxy:
    def __init__(self, conn: Connection, address: str, options: dict):
        self.conn = conn
        self.address = address
        self.options = options
        self.send_lock = threading.Lock()
        self.lock = threading.Lock()
        self.hosts: dict[str, _Host] = {}
        self.cancels: dict[str, threading.Event] = {}
        self.order = itertools.count(1)
        self.stopping = threading.Event()
        self.gcs_address = address
        self.remote_class: Any = None  # ray.remote(HostActor), made once Ray is imported

    def send(self, *message) -> None:
        with self.send_lock:
            try:
                self.conn.send(message)
            except (OSError, ValueError):
                pass  # the server is gone; the main loop ends on EOF

    # -- hosts --

    def views(self) -> list[HostView]:
        with self.lock:
            return [h.view for h in self.hosts.values()]

    def push_hosts(self) -> None:
        self.send("hosts", [vars(v).copy() for v in self.views()])

    def discover(self) -> None:
        """Start an actor on every alive node that offers a host resource and has none yet; mark gone nodes dead."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self.remote_class is None:
            self.remote_class = ray.remote(HostActor)
        alive = set()
        for node in ray.nodes():
            node_id, resources = node["NodeID"], node.get("Resources", {})
            if not node.get("Alive"):
                continue
            alive.add(node_id)
            chips = int(resources.get(TPU_RESOURCE, 0))
            if resources.get(HOST_RESOURCE, 0) < 1 and not chips:
                continue
            known = self.hosts.get(node_id)
            if known is not None and known.view.state == "dead" and not self.revive(known):
                continue
            # A host refused for a taken name is asked again: the name frees once the other server's actor is gone
            # (also the actor of this server's own previous run, which Ray reaps a moment after it ends).
            if known is not None and known.view.state != "dead" and not known.view.detail.startswith(_CLAIMED):
                continue
            claim = {HOST_RESOURCE: 1} if resources.get(HOST_RESOURCE, 0) >= 1 else {}
            if chips:
                claim[TPU_RESOURCE] = chips
            name = f"{node.get('NodeManagerHostname') or node.get('NodeManagerAddress')}-{node_id[:6]}"
            view = HostView(node_id=node_id, name=name, tpu_chips=chips)
            try:
                # The name is unique per node in the namespace: a second server on the same cluster finds it taken.
                actor = self.remote_class.options(
                    name=f"jaxbench-host-{node_id}",
                    namespace=NAMESPACE,
                    num_cpus=0,
                    resources=claim,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                    max_concurrency=ACTOR_CONCURRENCY,
                    max_restarts=0,
                    max_task_retries=0,
                ).remote(self.options.get("checker_options"))
            except ValueError as exc:
                view.state, view.detail = "refused", f"{_CLAIMED} ({_short(exc)})"
                with self.lock:
                    self.hosts[node_id] = _Host(view, None)
                continue
            with self.lock:
                self.hosts[node_id] = _Host(view, actor, actor.describe.remote())
        for host in list(self.hosts.values()):
            if host.view.node_id not in alive and host.view.state in ("ready", "starting"):
                host.view.state, host.view.detail = "dead", "its node left the cluster"

    def revive(self, host: _Host) -> bool:
        """A host marked dead whose node is still in the cluster: True when a new actor should be started on it.
        An actor that answers again (it was only unreachable for a moment) is simply ready again."""
        import ray
        from ray import exceptions as rx

        if host.actor is None:
            return True
        try:
            ray.get(host.actor.queue.remote(), timeout=2.0)
        except rx.ActorDiedError:
            return True  # the actor is gone for good, its node is not: claim the node afresh
        except Exception:  # noqa: BLE001 - still unreachable: ask again at the next round
            return False
        host.view.state, host.view.detail = "ready", f"answered again after: {host.view.detail}"
        return False

    def settle(self) -> bool:
        """Take in the description of every actor that came up (or failed to). True when anything changed."""
        import ray

        changed = False
        for host in list(self.hosts.values()):
            if host.ready_ref is None:
                continue
            done, _ = ray.wait([host.ready_ref], timeout=0)
            if not done:
                continue
            ref, host.ready_ref = host.ready_ref, None
            changed = True
            try:
                info = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - an actor that cannot start is a dead host, said in server_info
                host.view.state, host.view.detail = "dead", f"its actor failed to start: {_short(exc)}"
                continue
            v = host.view
            v.tier, v.attached_tpu, v.slots, v.isolation = (
                info["tier"],
                info["attached_tpu"],
                info["slots"],
                info["isolation"],
            )
            mine = (__version__, _version("jax"))
            if (info["jaxbench_mcp"], info["jax"]) != mine:
                v.state = "refused"
                v.detail = (
                    f"runs jaxbench-mcp {info['jaxbench_mcp']} with jax {info['jax']}, the server "
                    f"jaxbench-mcp {mine[0]} with jax {mine[1]}: its verdicts could differ"
                )
                self._release(host)
            else:
                v.state, v.detail = "ready", f"pid {info['pid']}, libtpu {info['libtpu'] or 'none'}"
        return changed

    def _release(self, host: _Host) -> None:
        import ray

        with contextlib.suppress(Exception):  # already gone
            ray.kill(host.actor)

    def mark_dead(self, host: _Host, reason: str) -> None:
        with self.lock:
            host.view.state, host.view.detail = "dead", reason
        self.push_hosts()

    def queues(self) -> dict[str, tuple[int, int]]:
        import ray

        ready = [(h.view.node_id, h.actor.queue.remote()) for h in list(self.hosts.values()) if h.view.state == "ready"]
        found: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + 2.0
        for node_id, ref in ready:
            with contextlib.suppress(Exception):  # a host that does not answer shows no queue
                found[node_id] = tuple(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())))
        return found

    # -- the run --

    def run(self) -> None:
        import ray

        if ":" in self.address and not _gcs_reachable(self.address, timeout=5.0):
            self.send("failed", f"nothing answers at {self.address}: give the Ray head's GCS address (HOST:6379)")
            return
        try:
            ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
        except Exception as exc:  # noqa: BLE001 - said to the server, which refuses to start
            self.send("failed", f"ray.init({self.address!r}) failed: {_short(exc)}")
            return
        with contextlib.suppress(Exception):  # else the given address serves the liveness probe
            self.gcs_address = ray.get_runtime_context().gcs_address or self.address
        began = time.monotonic()
        deadline = began + float(self.options.get("claim_timeout", CLAIM_TIMEOUT_SECONDS))
        next_discover = began
        while time.monotonic() < deadline:
            if time.monotonic() >= next_discover:
                self.discover()
                next_discover = time.monotonic() + 2.0
            self.settle()
            states = [h.view.state for h in self.hosts.values()]
            # Done when nothing is still starting, and either a host is ready or a taken name has had a few
            # seconds to free (the actor of a server that just ended is reaped a moment later).
            if "starting" not in states and ("ready" in states or time.monotonic() - began > CLAIM_GRACE_SECONDS):
                break  # (no host node at all is given the same few seconds: one may be joining)
            time.sleep(0.2)
        if not any(h.view.state == "ready" for h in self.hosts.values()):
            views = self.views()
            detail = "; ".join(f"{v.name}: {v.state} {v.detail}".strip() for v in views)
            self.send(
                "failed",
                (
                    f"no host of the Ray cluster at {self.address} came up within the claim timeout: {detail}"
                    if views
                    else f"the Ray cluster at {self.address} has no node with the {HOST_RESOURCE!r} or "
                    f"{TPU_RESOURCE!r} resource: start each host with ray start --address "
                    f"{self.address} --resources '{{\"{HOST_RESOURCE}\": 1}}'"
                ),
            )
            self.shutdown()
            return
        self.send("ready", [vars(v).copy() for v in self.views()])
        threading.Thread(target=self.monitor, daemon=True, name="fleet-monitor").start()
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            op = message[0]
            if op == "job":  # ("job", job id, a fleet.protocol job, JSON-ready)
                threading.Thread(
                    target=self.run_job, args=message[1:3], daemon=True, name=f"fleet-job-{message[1][:8]}"
                ).start()
            elif op == "cancel":
                self.cancel_event(message[1]).set()
            elif op == "fleet":  # asks every host for its queue: not on this loop, which must keep taking jobs
                threading.Thread(
                    target=lambda token=message[1]: self.send("fleet", token, self.fleet_snapshot()), daemon=True
                ).start()
            elif op == "close":
                break
        self.shutdown()

    def fleet_snapshot(self) -> dict:
        return fleet_info(self.address, self.views(), self.queues(), None).model_dump(mode="json")

    def monitor(self) -> None:
        failures, next_discover = 0, time.monotonic() + DISCOVER_SECONDS
        while not self.stopping.wait(GCS_PROBE_SECONDS):
            if _gcs_reachable(self.gcs_address):
                failures = 0
            else:
                failures += 1
                if failures >= GCS_PROBE_FAILURES:
                    self.send(
                        "lost",
                        f"the Ray cluster at {self.address} stopped answering (its GCS at {self.gcs_address} "
                        f"refused {failures} probes in a row)",
                    )
                    # A driver without its GCS ends itself within a minute anyway; end now, without a ray.shutdown
                    # that would wait on the dead GCS.
                    os._exit(3)
                continue
            try:
                changed = self.settle()
                if time.monotonic() >= next_discover:
                    next_discover = time.monotonic() + DISCOVER_SECONDS
                    before = [(v.node_id, v.state) for v in self.views()]
                    self.discover()
                    changed = changed or before != [(v.node_id, v.state) for v in self.views()]
                if changed:
                    self.push_hosts()
            except Exception:  # noqa: BLE001 - a failed round is tried again at the next one
                logger.warning("fleet monitor: %s", traceback.format_exc())

    def cancel_event(self, job_id: str) -> threading.Event:
        with self.lock:
            return self.cancels.setdefault(job_id, threading.Event())

    def run_job(self, job_id: str, job: dict) -> None:
        cancel = self.cancel_event(job_id)
        exclude: set[str] = set()
        try:
            message = JOB.validate_python(job)
            generations = list(message.request.targets)
            for attempt in range(1, MAX_TRIES + 1):
                if cancel.is_set():
                    self.send("cancelled", job_id)
                    return
                with self.lock:
                    try:
                        view = place([h.view for h in self.hosts.values()], generations, exclude)
                    except NoHostForTarget as exc:
                        chosen = None
                        failure: tuple = ("error", job_id, exc) if attempt == 1 else ("unavailable", job_id, str(exc))
                    except NoLiveHost as exc:
                        chosen, failure = None, ("unavailable", job_id, str(exc))
                    else:
                        chosen = self.hosts[view.node_id]
                        view.inflight += 1
                        view.last_used = next(self.order)
                if chosen is None:
                    self.send(*failure)
                    return
                self.send(
                    "try",
                    job_id,
                    {
                        "attempt": attempt,
                        "host": chosen.view.name,
                        "node_id": chosen.view.node_id,
                        "tier": chosen.view.tier,
                    },
                )
                try:
                    outcome = self.follow(
                        chosen, f"{job_id}-{attempt}", message.model_dump(mode="json"), job_id, cancel
                    )
                finally:
                    with self.lock:
                        chosen.view.inflight -= 1
                if outcome[0] == "died":
                    self.mark_dead(chosen, f"died during a job: {outcome[1]}")
                    self.send("died", job_id, {"attempt": attempt, "host": chosen.view.name, "reason": outcome[1]})
                    exclude.add(chosen.view.node_id)
                    if not _gcs_reachable(self.gcs_address):  # the whole cluster is going: no host to retry on
                        self.send("unavailable", job_id, f"the Ray cluster at {self.address} stopped answering")
                        return
                    continue
                self.send(outcome[0], job_id, *outcome[1:])
                return
            # Two hosts died under this job (a cluster being taken down does that, one node after the other).
            # The server runs it itself if it can: a verdict is worth more than a server_error.
            self.send("unavailable", job_id, f"the job's host died on each of its {MAX_TRIES} tries on the fleet")
        except Exception as exc:  # noqa: BLE001 - the proxy's own failure becomes the job's error, never silence
            self.send(
                "error", job_id, _picklable(RuntimeError(f"the fleet proxy failed: {traceback.format_exc()[-1500:]}"))
            )
            logger.error("fleet job %s: %s", job_id, exc)
        finally:
            with self.lock:
                self.cancels.pop(job_id, None)

    def follow(self, host: _Host, try_id: str, job: dict, job_id: str, cancel: threading.Event) -> tuple:
        """Run one try of a job (JSON-ready) on one host to its end, relaying progress and cancellation. Returns
        ('result', the ActorReply without its progress, JSON-ready), ('cancelled',), ('error', exception) or
        ('died', reason)."""
        import ray
        from ray import exceptions as rx

        host_lost = (
            rx.RayActorError,
            rx.WorkerCrashedError,
            rx.NodeDiedError,
            rx.ObjectLostError,
            rx.LocalRayletDiedError,
        )
        ref = host.actor.run.remote(try_id, job)
        relayed, cancel_sent = 0, False
        while True:
            if cancel.is_set() and not cancel_sent:
                host.actor.cancel.remote(try_id)
                cancel_sent = True
            done, _ = ray.wait([ref], timeout=POLL_SECONDS)
            if not done:
                try:
                    lines = ray.get(host.actor.progress.remote(try_id, relayed), timeout=5.0)
                except Exception:  # noqa: BLE001 - the job's own result says whether the host is gone
                    lines = []
                for line in lines:
                    self.send("progress", job_id, line)
                relayed += len(lines)
                continue
            try:
                reply = ActorReply.model_validate(ray.get(ref))
            except host_lost as exc:
                return ("died", _short(exc))
            except rx.RayTaskError as exc:
                cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else RuntimeError(str(exc))
                return ("error", _picklable(cause))
            for line in reply.progress[relayed:]:
                self.send("progress", job_id, line)
            return (
                ("cancelled",) if reply.cancelled else ("result", reply.model_dump(mode="json", exclude={"progress"}))
            )

    def shutdown(self) -> None:
        import ray

        self.stopping.set()
        live = [h for h in self.hosts.values() if h.actor is not None and h.view.state in ("ready", "starting")]
        with contextlib.suppress(Exception):  # killing the actors below ends their workers too
            ray.get([h.actor.close.remote() for h in live if h.view.state == "ready"], timeout=15)
        for host in live:
            self._release(host)
        with contextlib.suppress(Exception):  # exiting anyway
            ray.shutdown()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    # Ray's actor errors carry ids and addresses over several lines; the first and the last say what happened.
    return f"{type(exc).__name__}: " + (" ... ".join(dict.fromkeys([text[0], text[-1]])) if text else "")


def _proxy_main(fd: int) -> None:
    """Entry point of the proxy process (started by RayExecutor.start with the pipe's file descriptor)."""
    # Whatever Ray prints must not reach the server's stdout (MCP's channel on stdio): it was redirected at
    # spawn; make sure Python's own stdout goes to stderr too.
    sys.stdout = sys.stderr
    os.environ["JAX_PLATFORMS"] = "cpu"
    # Ctrl-C in a terminal reaches the whole process group: the server decides when this process ends (it closes
    # the pipe), so that the hosts' workers are stopped in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    conn = Connection(fd)
    _, address, options = conn.recv()
    _Proxy(conn, address, options).run()
    conn.close()


# ---- the executor (in the server) --------------------------------------------------------------------


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
        code = "import sys; from jaxbench_mcp.fleet.ray_executor import _proxy_main; _proxy_main(int(sys.argv[1]))"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, str(theirs.fileno())],
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
                from jaxbench_mcp.checking.checker import Checker
                from jaxbench_mcp.fleet import executors

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
        from jaxbench_mcp.checking.checker import Cancelled

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

    def _satisfies(executor: RayExecutor) -> Executor:
        return executor
