"""The fleet's proxy: a child process of the server, and the only Ray driver. It claims the hosts (one host actor,
jaxbench_mcp.fleet.actor, on each), places every job (jaxbench_mcp.fleet.placement), relays progress and
cancellation, and retries a job whose host died. The server's RayExecutor (jaxbench_mcp.fleet.ray_executor)
starts it as `python -m jaxbench_mcp.fleet.proxy FD`, FD being its end of a socket pair: the pipe, on which
the server sends the configuration, then jobs (fleet.protocol, JSON-ready), cancels and fleet queries, and the
proxy answers with hosts, tries, progress and results.

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

Ray is imported only inside this process's functions (and the actors'): importing the module needs no Ray.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import logging
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from jaxbench_mcp import __version__
from jaxbench_mcp.fleet.actor import HostActor
from jaxbench_mcp.fleet.placement import (
    HOST_RESOURCE,
    TPU_RESOURCE,
    HostView,
    NoHostForTarget,
    NoLiveHost,
    fleet_info,
    place,
)
from jaxbench_mcp.fleet.protocol import JOB, ActorReply

# The name it logged under before the rooms, so that log filters set up for the fleet keep matching.
logger = logging.getLogger("jaxbench_mcp.fleet")

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

_CLAIMED = "claimed by another jaxbench server on this cluster"


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


def main(fd: int) -> None:
    """The proxy process (`python -m jaxbench_mcp.fleet.proxy FD`, started by RayExecutor.start with its end of
    the pipe)."""
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


if __name__ == "__main__":
    main(int(sys.argv[1]))
