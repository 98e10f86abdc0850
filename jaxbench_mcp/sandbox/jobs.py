"""Running candidates in sandboxed child processes: warm spare workers, device slots, limits, the queue,
and the registry of every live worker (so that cancel, shutdown and signals leave nothing behind).

One worker runs one job and is then discarded. Spare workers are started ahead of time (jax imported,
TPU compiler initialised) so that a check does not pay for that. Each worker gets a fresh directory
of its own: `job/` inside it is the only place the sandbox (jaxbench_mcp.sandbox.isolation) can write, and its
stdout/stderr logs sit beside it, out of the candidate's reach. What the worker says comes through a
pipe as events (jaxbench_mcp.sandbox.protocol), each validated before it counts.
"""

from __future__ import annotations

import functools
import os
import queue
import selectors
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from jaxbench_mcp.catalog import targets
from jaxbench_mcp.internals import libtpu
from jaxbench_mcp.sandbox import isolation as sandbox, protocol
from jaxbench_mcp.taxonomy import Stage

# Variables a worker may inherit; everything else (tokens, keys, cloud credentials) stays behind.
_ENV_ALLOWED = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "TPU_ACCELERATOR_TYPE",
    "TPU_WORKER_HOSTNAMES",
    "TPU_WORKER_ID",
    "TPU_SKIP_MDS_QUERY",
    # The operator's custom workload directories (workloads.CUSTOM_ENV): the worker's registry must hold the
    # same workloads as the server's; isolation.py mounts each directory read-only.
    "JAXBENCH_MCP_WORKLOADS",
)
_LOG_TAIL_BYTES = 20_000
# What runs beside a job once it is sent (Worker.run): then(job_dir, send, ended).
Then = Callable[[Path, Callable[[protocol.ParentMessage], object], threading.Event], None]
# The stored event log of one job keeps this much of its head and tail.
LOG_KEEP_CHARS = 64_000

_DEFAULT_STAGE_SECONDS = MappingProxyType(
    {
        Stage.LOAD: 30.0,
        Stage.TRACE: 60.0,
        Stage.LOWER: 60.0,
        Stage.COMPILE: 120.0,
        Stage.RUN: 120.0,
        Stage.MEASURE: 300.0,
    }
)


@dataclass(frozen=True)
class Limits:
    """Wall-clock seconds per stage, and resources per worker."""

    stage_seconds: Mapping[Stage, float] = _DEFAULT_STAGE_SECONDS
    warm_up: float = 180.0
    memory_bytes: int = 6 * 2**30
    max_file_bytes: int = 512 * 2**20
    # All the files of one job together (the job directory is polled; a writer is killed past this).
    max_job_dir_bytes: int = 2 * 2**30
    # Files and folders in it: empty files cost the host's inodes, not bytes (a job writes a few hundred at most).
    max_job_dir_entries: int = 20_000
    max_processes: int = 512

    def for_stage(self, stage: Stage) -> float:
        return self.stage_seconds[stage]

    def overall_seconds(self, job) -> float:
        """The most a whole job may take, whatever its events say: the sum of the stages it can run."""
        s = self.stage_seconds
        if isinstance(job, protocol.CheckJob):
            n = max(1, len(job.targets))
            return (
                s[Stage.LOAD]
                + s[Stage.TRACE]
                + n * (s[Stage.LOWER] + s[Stage.COMPILE])
                + (len(job.inputs) + (job.full_reduction is not None)) * s[Stage.RUN]
            )
        if isinstance(job, protocol.MeasureJob):
            return s[Stage.LOAD] + s[Stage.TRACE] + s[Stage.LOWER] + s[Stage.MEASURE]
        if isinstance(job, protocol.TraceJob):
            return s[Stage.LOAD] + s[Stage.TRACE]
        return s[Stage.LOAD] + s[Stage.TRACE] + max(1, len(job.targets)) * s[Stage.COMPILE]


@dataclass
class RunOutcome:
    events: list  # the accepted protocol events, in order
    job_dir: Path
    isolation: sandbox.Isolation
    killed_for: str | None = None  # "timeout:<stage>", "timeout:overall", "memory", "disk", "files", "cancelled"
    violation: str | None = None  # why the event stream broke the protocol
    returncode: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    seconds: float = 0.0
    # Judged from a trace job's recorded programs (Worker.run's `earlier`): this process never ran candidate code.
    after_trace: bool = False
    _root: Path | None = None
    _reaped: threading.Event | None = None  # set once a finished worker, torn down behind its verdict, is gone

    @property
    def finished(self) -> bool:
        return any(isinstance(e, protocol.Finished) for e in self.events)

    def stage_events(self) -> list[protocol.StageEvent]:
        return [e for e in self.events if isinstance(e, protocol.StageEvent)]

    def programs(self) -> protocol.Programs | None:
        """A trace job's result, if it sent one."""
        return next((e for e in self.events if isinstance(e, protocol.Programs)), None)

    def log_text(self) -> str:
        events = "\n".join(e.model_dump_json(exclude_none=True) for e in self.events)
        text = (
            f"== isolation: {self.isolation} ==\n== events ==\n{events}\n"
            + (f"== protocol violation ==\n{self.violation}\n" if self.violation else "")
            + f"== stdout ==\n{self.stdout_tail}\n== stderr ==\n{self.stderr_tail}"
        )
        return protocol.cut_text(text, LOG_KEEP_CHARS)

    def cleanup(self) -> None:
        if self._reaped is not None:
            self._reaped.wait(10)  # nothing may write into the directory while it is removed
        sandbox.remove_tree(self._root or self.job_dir)


def _scrubbed_env(home: str, tier: targets.Tier, cpu_only: bool = False) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_ALLOWED if k in os.environ}
    env.update(HOME=home, TMPDIR="/tmp", PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    # The sandbox has no network: libtpu must not ask the cloud metadata server for the chip's details (on a
    # TPU host they come from the server's environment, TPU_ACCELERATOR_TYPE and friends, passed above).
    env["TPU_SKIP_MDS_QUERY"] = "1"
    if tier is not targets.Tier.TPU or cpu_only:
        env["JAX_PLATFORMS"] = "cpu"  # interpret mode runs on the CPU; libtpu is used only to compile
    return env


def _dir_usage(paths: list[Path], max_entries: int) -> tuple[int, int]:
    """Bytes in files and number of entries under `paths` together; the walk stops once past max_entries (its
    cost grows with the count)."""
    total = entries = 0
    for path in paths:
        for root, dirs, files in os.walk(path):
            entries += len(dirs) + len(files)
            if entries > max_entries:
                return total, entries
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    pass
    return total, entries


def read_job_file(directory: Path, name: str, max_bytes: int) -> bytes:
    """A file the worker wrote, read by the parent across the wall, defensively: a bare name, no link, a regular
    file, bounded in size."""
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


class WorkerStartFailed(RuntimeError):
    """A worker did not get ready: the server's trouble, not the candidate's."""


class Registry:
    """Every live worker of this process, so that shutdown, signals and cancellation can end them all."""

    def __init__(self) -> None:
        self._workers: set[Worker] = set()
        self._lock = threading.Lock()

    def add(self, worker: Worker) -> None:
        with self._lock:
            self._workers.add(worker)

    def discard(self, worker: Worker) -> None:
        with self._lock:
            self._workers.discard(worker)

    def live(self) -> list[Worker]:
        with self._lock:
            return list(self._workers)

    def kill_all(self) -> None:
        for worker in self.live():
            worker.dispose()


REGISTRY = Registry()
_DIR_PREFIX = "jaxbench-worker-"


def install_shutdown_handlers() -> None:
    """For the server process: on SIGTERM and SIGINT kill every live worker, remove its directory and exit at
    once. A clean interpreter exit could hang on the thread that reads stdin, and finished attempts are
    already committed; one left running is marked interrupted by the next start."""

    def on_signal(number, _frame):
        REGISTRY.kill_all()
        os._exit(128 + number)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)


def sweep_stale_dirs() -> int:
    """Remove worker directories that a server which no longer runs left behind (killed with SIGKILL)."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"{_DIR_PREFIX}*-*"):
        pid = path.name.removeprefix(_DIR_PREFIX).split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            sandbox.remove_tree(path)
            removed += 1
    return removed


class _Spawner:
    """Starts every worker from one thread that lives as long as the process. bwrap's --die-with-parent (the
    kernel's parent-death signal) fires when the *thread* that started the child exits, so a worker started
    from a short-lived thread (a request's) would be killed with it."""

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        threading.Thread(target=self._serve, daemon=True, name="jaxbench-spawner").start()

    def _serve(self) -> None:
        while True:
            start, box, done = self._requests.get()
            try:
                box["process"] = start()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc
            done.set()

    def start(self, start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        box: dict = {}
        done = threading.Event()
        self._requests.put((start, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["process"]


_SPAWNER = _Spawner()


class Worker:
    """A started worker process, warming up or ready for one job."""

    def __init__(
        self,
        generation: str | None,
        tier: targets.Tier,
        limits: Limits,
        dump_schedules: bool = False,
        isolation: sandbox.Isolation | None = None,
        # For a trace job: it warms up for tracing alone, and needs no TPU (on a TPU host one process at a time
        # holds it).
        tracer: bool = False,
        # A spare warms up on a kernel of its own, off any check's path; a worker started for a job waiting now
        # only imports: the job's own first compile and run pay the one-off costs, and the warm-up kernel's
        # would come on top.
        warm: bool = True,
    ):
        self.limits = limits
        self.isolation = isolation or sandbox.detect()
        self.root = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-"))
        os.chmod(self.root, 0o711)  # a worker under a host uid of its own reaches job/, tmp/ and shm/ by name only
        self.job_dir = self.root / "job"
        self.job_dir.mkdir()
        os.chmod(self.job_dir, 0o777)  # the sandbox's uid must be able to write here
        # The sandbox's /tmp and /dev/shm (bubblewrap): host folders beside the job directory, polled with it, so
        # that files there count against the same byte and entry caps (a tmpfs of the sandbox's own is not seen
        # by the poll, and its memory by no RSS count).
        self.scratch_dirs: list[Path] = []
        if self.isolation is sandbox.Isolation.BUBBLEWRAP:
            self.scratch_dirs = [self.root / "tmp", self.root / "shm"]
            for d in self.scratch_dirs:
                d.mkdir()
                os.chmod(d, 0o1777)
        uids = sandbox.host_uids() if self.isolation is sandbox.Isolation.BUBBLEWRAP else None
        self.host_uid = uids.acquire() if uids else None
        inside = sandbox.INSIDE_JOB_DIR if self.isolation is sandbox.Isolation.BUBBLEWRAP else str(self.job_dir)
        read_fd, write_fd = os.pipe()
        self._stdout = open(self.root / "stdout.log", "wb")
        self._stderr = open(self.root / "stderr.log", "wb")
        env = _scrubbed_env(inside, tier, cpu_only=tracer)
        if dump_schedules:
            # libtpu reads its flags once, at start: a worker that dumps schedules is started for it.
            (self.job_dir / "dumps").mkdir()
            os.chmod(self.job_dir / "dumps", 0o777)
            env["LIBTPU_INIT_ARGS"] = libtpu.dump_flag(f"{inside}/dumps")
        self.cgroup = sandbox.Cgroup.create(limits.memory_bytes + 2**30, limits.max_processes)
        cpu_seconds = int(limits.warm_up + sum(limits.stage_seconds.values()) * 4) * (os.cpu_count() or 1)
        try:
            self.process = _SPAWNER.start(
                lambda: sandbox.launch(
                    [sys.executable, "-m", "jaxbench_mcp.sandbox.worker", str(write_fd), generation or "-"]
                    + (["trace"] if tracer else [])
                    + ([] if warm else ["cold"]),
                    self.job_dir,
                    env,
                    self._stdout,
                    self._stderr,
                    (write_fd,),
                    self.isolation,
                    limits.max_file_bytes,
                    cpu_seconds,
                    address_space_bytes=max(64 * 2**30, 4 * limits.memory_bytes),
                    cgroup=self.cgroup,
                    tmp_dir=self.scratch_dirs[0] if self.scratch_dirs else None,
                    shm_dir=self.scratch_dirs[1] if self.scratch_dirs else None,
                    host_uid=self.host_uid,
                    max_processes=limits.max_processes,
                )
            )
        except BaseException:
            self._release_uid()
            raise
        finally:
            os.close(write_fd)
        self._events = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self.ready = False
        self.started = time.monotonic()
        self.cancelled = threading.Event()
        self._disposed = False
        REGISTRY.add(self)

    def _read_lines(self, timeout: float) -> list[bytes] | None:
        """Complete lines that arrive within `timeout` seconds; None once the pipe is closed."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._events, selectors.EVENT_READ)
            if not sel.select(timeout):
                return []
        chunk = os.read(self._events.fileno(), 65536)
        if not chunk:
            return None
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > protocol.MAX_EVENT_BYTES:
            lines.append(self._buffer)  # parse_event rejects it by its length
            self._buffer = b""
        return lines

    def wait_ready(self) -> bool:
        """Wait for the worker's 'ready'. The budget counts from its start, but a worker that got ready long ago
        (a spare that sat idle) is always heard: the pipe is read at least once."""
        deadline = self.started + self.limits.warm_up
        while not self.ready:
            lines = self._read_lines(min(1.0, max(0.0, deadline - time.monotonic())))
            if lines is None:
                return False
            for line in lines:
                try:
                    event = protocol.parse_event(line)
                except protocol.ProtocolViolation:
                    return False  # nothing but trusted warm-up code has run yet: a broken worker
                if isinstance(event, protocol.Ready):
                    self.ready = True
                else:
                    return False
            if not self.ready and time.monotonic() >= deadline:
                return False
        return self.process.poll() is None

    def pids(self) -> list[int]:
        found = set(sandbox.process_tree(self.process.pid))
        if self.cgroup is not None:
            found.update(self.cgroup.pids())
        return sorted(found)

    def kill(self, wait: bool = True) -> list[int]:
        """Kill the worker and everything it started (its process group, its tree, its cgroup); with wait, return
        once they are gone. The pids it signalled."""
        pids = [self.process.pid, *self.pids()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill_all(wait=False)
        if wait:
            self._wait_gone(pids)
        return pids

    def _wait_gone(self, pids: list[int]) -> None:
        """Wait for the signalled pids, then empty the cgroup (killing what forked meanwhile) until it is."""
        self.process.wait()
        sandbox.wait_dead(pids, timeout=2.0)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def dispose(self) -> None:
        """Kill, release the cgroup and remove the directory: for a worker that will never report again."""
        if self._disposed:
            return
        self._disposed = True
        self.kill()
        self._release()
        sandbox.remove_tree(self.root)

    def _reap(self, pids: list[int], done: threading.Event) -> None:
        try:
            self._wait_gone(pids)
            self._release()
        finally:
            done.set()

    def _release(self) -> None:
        """Release what a dead worker still holds: its cgroup, its pipes and logs, its place in the registry."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        for f in (self._stdout, self._stderr, self._events):
            f.close()
        self._disposed = True
        self._release_uid()
        REGISTRY.discard(self)

    def _release_uid(self) -> None:
        """The host uid goes back to the pool once no process of this worker runs under it."""
        uids = sandbox.host_uids() if self.host_uid is not None else None
        if uids is not None and self.host_uid is not None:
            uids.release(self.host_uid)
        self.host_uid = None

    def tail(self, name: str) -> str:
        with open(self.root / name, "rb") as f:
            f.seek(max(0, (self.root / name).stat().st_size - _LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")

    def run(
        self,
        job,
        on_event: Callable[[protocol.StageEvent], None],
        then: Then | None = None,
        earlier: RunOutcome | None = None,
    ) -> RunOutcome:
        """Hand the job over and follow it to the end, enforcing the protocol, the stage and overall deadlines, the
        memory and disk caps, and cancellation. Whatever happens, the worker is dead when this returns or raises.
        `then(job_dir, send, ended)`, when given, runs beside the worker once the job is sent (a check's input
        files and its verdict on each output), telling the worker through `send`; `ended` is set once the worker
        has said all it will (or was stopped), so that nothing waits on it after; what `then` raises is raised
        here, as the parent's failure. `earlier`: the
        trace job this one goes on from; its stage events open this job's log, which goes on in its trace stage,
        and its logs come first in the outcome's."""
        t0 = time.monotonic()
        outcome = RunOutcome(
            events=[], job_dir=self.job_dir, isolation=self.isolation, after_trace=earlier is not None, _root=self.root
        )
        log = protocol.EventLog(job)
        for event in earlier.stage_events() if earlier is not None else []:
            log.accept(event)
        feeder = _Feeder(self.process.stdin, None if then is None else functools.partial(then, self.job_dir))
        try:
            feeder.send_job(job)
            self._follow(job, log, outcome, on_event, Stage.TRACE if earlier is not None else Stage.LOAD)
            feeder.ended.set()
            feeder.join()
        except BaseException:
            self.kill()
            feeder.ended.set()
            feeder.join(raising=False)  # what ended the run is the error to raise
            outcome.cleanup()
            raise
        finally:
            outcome.events = log.events
            self._end(outcome, finished=log.finished)
        outcome.returncode = self.process.returncode
        outcome.stdout_tail, outcome.stderr_tail = self.tail("stdout.log"), self.tail("stderr.log")
        outcome.seconds = time.monotonic() - t0
        if earlier is not None:
            outcome.stdout_tail = f"{earlier.stdout_tail}\n== judge ==\n{outcome.stdout_tail}"
            outcome.stderr_tail = f"{earlier.stderr_tail}\n== judge ==\n{outcome.stderr_tail}"
            outcome.seconds += earlier.seconds
        return outcome

    def _follow(self, job, log: protocol.EventLog, outcome: RunOutcome, on_event, stage: Stage) -> None:
        t0 = time.monotonic()
        overall_deadline = t0 + self.limits.overall_seconds(job)
        deadline = t0 + self.limits.for_stage(stage)
        next_check = 0.0
        while outcome.killed_for is None and outcome.violation is None:
            lines = self._read_lines(0.05)
            if lines is None:
                return
            for line in lines:
                try:
                    event = protocol.parse_event(line)
                    log.accept(event)
                except protocol.ProtocolViolation as exc:
                    outcome.violation = str(exc)
                    return
                if isinstance(event, protocol.StageEvent):
                    on_event(event)
                    if event.state == "start":  # a new stage (each can start once per target and seed)
                        stage, deadline = event.stage, time.monotonic() + self.limits.for_stage(event.stage)
            if log.finished:
                return
            now = time.monotonic()
            if self.cancelled.is_set():
                outcome.killed_for = "cancelled"
            elif now > min(deadline, overall_deadline):
                outcome.killed_for = f"timeout:{stage}" if deadline <= overall_deadline else "timeout:overall"
            elif now >= next_check:  # a /proc scan costs ~ms: not every 50 ms
                next_check = now + 0.2
                if sandbox.rss_bytes(self.pids()) > self.limits.memory_bytes:
                    outcome.killed_for = "memory"
                else:
                    size, entries = _dir_usage([self.job_dir, *self.scratch_dirs], self.limits.max_job_dir_entries)
                    if size > self.limits.max_job_dir_bytes:
                        outcome.killed_for = "disk"
                    elif entries > self.limits.max_job_dir_entries:
                        outcome.killed_for = "files"

    def _end(self, outcome: RunOutcome, finished: bool) -> None:
        """Kill what is left, read the cgroup's OOM record, release the cgroup and the pipes."""
        if not (outcome.killed_for or outcome.violation or finished):
            try:  # it closed its pipe: give its interpreter a moment to exit by itself
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # A finished worker has said all it will; its teardown is not worth waiting for. Whatever it left running
        # goes with it.
        if finished and not (outcome.killed_for or outcome.violation):
            # What it left in its directory is data to judge, not proof, whether or not it still runs, so the
            # verdict need not wait for the kernel to tear a jax process down (~40 ms): a thread finishes the kill
            # (late forks included) and the release behind it, and cleanup() waits for that thread.
            pids = self.kill(wait=False)
            outcome._reaped = threading.Event()
            threading.Thread(target=self._reap, args=(pids, outcome._reaped), daemon=True, name="reap").start()
            return
        self.kill()
        if self.cgroup is not None and outcome.killed_for is None and not finished and self.cgroup.oom_killed():
            outcome.killed_for = "memory"
        self._release()


class _Feeder:
    """What the parent writes to a worker's stdin: the job, then (from a thread beside the run) what `then` sends.
    A worker that ended first is no error; a failure of `then` itself is the parent's, raised by join()."""

    def __init__(
        self, stdin, then: Callable[[Callable[[protocol.ParentMessage], object], threading.Event], None] | None
    ):
        assert stdin is not None  # the worker is started with stdin=PIPE
        self._stdin, self._then = stdin, then
        self.ended = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def send_job(self, job) -> None:
        if self._write(protocol.JobEnvelope(job=job)) and self._then is not None:
            self._thread = threading.Thread(target=self._feed, daemon=True, name="feed")
            self._thread.start()
        else:
            self._close()

    def join(self, raising: bool = True) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if raising and self._error is not None:
            error, self._error = self._error, None
            raise error

    def _feed(self) -> None:
        try:
            assert self._then is not None
            self._then(self._write, self.ended)
        except BaseException as exc:  # noqa: BLE001 - handed to join()
            self._error = exc
        finally:
            self._close()

    def _write(self, message) -> bool:
        try:
            self._stdin.write(message.model_dump_json().encode() + b"\n")
            self._stdin.flush()
            return True
        except (BrokenPipeError, ValueError):  # the worker ended (or its pipe was closed by a kill)
            return False

    def _close(self) -> None:
        try:
            self._stdin.close()
        except (BrokenPipeError, OSError):
            pass


@dataclass
class WorkerPool:
    """Keeps `spares` warm workers and hands each out once: half of them (rounded down) tracers, for the trace job
    that starts every check, the rest for the jobs after it. Replacements are started when the host's last job
    ends (`refill`, called by JobQueue.on_idle), not when a spare is taken: a warm-up (about a CPU-second) running
    beside a check slowed it by up to 2x on a 2-core host, while an agent's think time between checks easily covers
    it. Where checks follow each other without a pause (a campaign, two agents), no spare is warmed: each worker
    starts for its job, skipping the warm-up kernel, which costs more CPU than it saves the job."""

    generation: str | None
    tier: targets.Tier
    limits: Limits = field(default_factory=Limits)
    spares: int = 1
    _warm: dict[bool, list[Worker]] = field(default_factory=lambda: {False: [], True: []})  # keyed by tracer
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def _start(self, tracer: bool, warm: bool) -> Worker:
        # A tracer is told no generation: it compiles nothing, so it has no compiler to warm up.
        return Worker(None if tracer else self.generation, self.tier, self.limits, tracer=tracer, warm=warm)

    def fill(self) -> None:
        with self._lock:
            for tracer, wanted in ((False, self.spares - self.spares // 2), (True, self.spares // 2)):
                while not self._closed and len(self._warm[tracer]) < wanted:
                    self._warm[tracer].append(self._start(tracer, warm=True))

    def take(self, tracer: bool = False) -> Worker:
        """A spare, or else a worker started now for a job that waits for it (which skips the warm-up kernel)."""
        with self._lock:
            kept = self._warm[tracer]
            return kept.pop(0) if kept else self._start(tracer, warm=False)

    def has_spare(self, tracer: bool = False) -> bool:
        with self._lock:
            return bool(self._warm[tracer])

    def wait_warm(self) -> bool:
        """Block until every spare said 'ready' (or failed to); whether all are ready. For a caller that starts no
        check meanwhile (a benchmark, a test): the spares' pipes are read here."""
        with self._lock:
            spares = self._warm[False] + self._warm[True]
        return all(worker.wait_ready() for worker in spares)

    def refill(self) -> None:
        """Top the spares up in the background: the caller (a check that just ended) is not held up by spawning."""
        threading.Thread(target=self.fill, daemon=True, name="jaxbench-refill").start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for kept in self._warm.values():
                for worker in kept:
                    worker.dispose()
                kept.clear()


class JobQueue:
    """At most `slots` candidates run at once (1 on a TPU host: one device; else the CPU count). `on_idle` is called
    when the last job running ends with none waiting."""

    def __init__(self, slots: int, on_idle: Callable[[], None] | None = None):
        self.slots, self.on_idle = slots, on_idle
        self._semaphore = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self.running = 0
        self.waiting = 0

    def run(self, fn: Callable[[], RunOutcome]) -> RunOutcome:
        with self._lock:
            self.waiting += 1
        self._semaphore.acquire()
        with self._lock:
            self.waiting -= 1
            self.running += 1
        try:
            return fn()
        finally:
            with self._lock:
                self.running -= 1
                idle = self.running == 0 and self.waiting == 0
            self._semaphore.release()
            if idle and self.on_idle is not None:
                self.on_idle()


def default_slots(tier: targets.Tier) -> int:
    return 1 if tier is targets.Tier.TPU else max(1, os.cpu_count() or 1)
