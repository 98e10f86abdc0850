"""Running candidates in child processes: warm spare workers, device slots, limits, and the queue.

One worker runs one candidate and is then discarded. Spare workers are started ahead of time (jax
imported, TPU compiler initialised) so that a check does not pay for that. Each worker gets a fresh
temporary directory, an environment scrubbed of everything but the basics, its own process group
(so a timeout kills everything it started), a cap on resident memory and on file size, and captured,
capped stdout/stderr.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jaxbench_mcp import targets

# Variables a worker may inherit; everything else (tokens, keys, cloud credentials) stays behind.
_ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "TZ", "PYENV_VERSION", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES",
                "TPU_WORKER_ID", "TPU_SKIP_MDS_QUERY")
_LOG_TAIL_BYTES = 20_000


@dataclass(frozen=True)
class Limits:
    """Wall-clock seconds per stage, and resources per worker."""

    warm_up: float = 180.0
    load: float = 30.0
    trace: float = 60.0
    lower: float = 60.0
    compile: float = 120.0
    run: float = 120.0
    measure: float = 300.0  # TPU host: warm-up and timed runs of one kernel at full size
    memory_bytes: int = 6 * 2**30
    max_file_bytes: int = 512 * 2**20

    def for_stage(self, stage: str) -> float:
        return getattr(self, stage)


@dataclass
class RunOutcome:
    events: list[dict]
    workdir: Path
    killed_for: str | None = None  # "timeout:<stage>" or "memory"
    returncode: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    seconds: float = 0.0

    @property
    def finished(self) -> bool:
        return any(e.get("event") == "finished" for e in self.events)

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def _scrubbed_env(home: Path, tier: targets.Tier) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_ALLOWED if k in os.environ}
    env.update(HOME=str(home), TMPDIR=str(home), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1")
    if tier is not targets.Tier.TPU:
        env["JAX_PLATFORMS"] = "cpu"  # interpret mode runs on the CPU; libtpu is used only to compile
    return env


def _group_rss_bytes(pgid: int) -> int:
    """Resident memory of every process in the worker's process group."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 of stat: process group id
                total += int(fields[21]) * page  # field 24: resident set size in pages
        except (OSError, IndexError, ValueError):
            continue
    return total


class Worker:
    """A started worker process, warming up or ready for one job."""

    def __init__(self, generation: str | None, tier: targets.Tier, limits: Limits, dump_schedules: bool = False):
        self.limits = limits
        self.workdir = Path(tempfile.mkdtemp(prefix="jaxbench-worker-"))
        read_fd, write_fd = os.pipe()
        self._stdout = open(self.workdir / "stdout.log", "wb")
        self._stderr = open(self.workdir / "stderr.log", "wb")
        env = _scrubbed_env(self.workdir, tier)
        env["JAXBENCH_WORKER_MAX_FILE_BYTES"] = str(limits.max_file_bytes)
        self.dump_dir = self.workdir / "dumps"
        if dump_schedules:
            # libtpu reads its flags once, at start: a worker that dumps schedules is started for it.
            self.dump_dir.mkdir()
            env["LIBTPU_INIT_ARGS"] = f"--xla_jf_dump_to={self.dump_dir}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jaxbench_mcp.worker", str(write_fd), generation or "-"],
            stdin=subprocess.PIPE, stdout=self._stdout, stderr=self._stderr, cwd=self.workdir, env=env,
            pass_fds=(write_fd,), start_new_session=True,
        )
        os.close(write_fd)
        self._events = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self.ready = False
        self.started = time.monotonic()

    def _read_events(self, timeout: float) -> list[dict] | None:
        """Events that arrive within `timeout` seconds; None once the pipe is closed."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._events, selectors.EVENT_READ)
            if not sel.select(timeout):
                return []
        chunk = os.read(self._events.fileno(), 65536)
        if not chunk:
            return None
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                events.append({"event": "garbled", "text": line[:200].decode(errors="replace")})
        return events

    def wait_ready(self) -> bool:
        deadline = self.started + self.limits.warm_up
        while not self.ready and time.monotonic() < deadline:
            events = self._read_events(min(1.0, max(0.0, deadline - time.monotonic())))
            if events is None:
                return False
            self.ready = any(e.get("event") == "ready" for e in events)
        return self.ready

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def tail(self, name: str) -> str:
        path = self.workdir / name
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")

    def run(self, job: dict, on_event: Callable[[dict], None]) -> RunOutcome:
        """Hand the job over and follow it to the end, enforcing the stage limits and memory cap."""
        t0 = time.monotonic()
        outcome = RunOutcome(events=[], workdir=self.workdir)
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        stage, deadline = "load", time.monotonic() + self.limits.load
        next_memory_check = 0.0
        while True:
            events = self._read_events(0.05)
            if events is None:
                break
            for event in events:
                outcome.events.append(event)
                on_event(event)
                if event.get("event") == "stage" and event.get("state") == "start":
                    stage = event["stage"]
                    deadline = time.monotonic() + self.limits.for_stage(stage)
            if outcome.finished:
                break
            if time.monotonic() > deadline:
                outcome.killed_for = f"timeout:{stage}"
                break
            if time.monotonic() >= next_memory_check:  # a /proc scan costs ~ms: not every 50 ms
                next_memory_check = time.monotonic() + 0.2
                if _group_rss_bytes(self.process.pid) > self.limits.memory_bytes:
                    outcome.killed_for = "memory"
                    break
        if outcome.killed_for or outcome.finished:
            # A finished worker has said all it will; its interpreter teardown is not worth waiting for.
            self.kill()
        else:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._stdout.close()
        self._stderr.close()
        self._events.close()
        outcome.returncode = self.process.returncode
        outcome.stdout_tail, outcome.stderr_tail = self.tail("stdout.log"), self.tail("stderr.log")
        outcome.seconds = time.monotonic() - t0
        return outcome


@dataclass
class WorkerPool:
    """Keeps `spares` warm workers; hands each out once and starts a replacement behind it."""

    generation: str | None
    tier: targets.Tier
    limits: Limits = field(default_factory=Limits)
    spares: int = 1
    _warm: list[Worker] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fill(self) -> None:
        with self._lock:
            while len(self._warm) < self.spares:
                self._warm.append(Worker(self.generation, self.tier, self.limits))

    def take(self) -> Worker:
        with self._lock:
            worker = self._warm.pop(0) if self._warm else Worker(self.generation, self.tier, self.limits)
        self.fill()
        return worker

    def close(self) -> None:
        with self._lock:
            for worker in self._warm:
                worker.kill()
                shutil.rmtree(worker.workdir, ignore_errors=True)
            self._warm.clear()


class JobQueue:
    """At most `slots` candidates run at once (1 on a TPU host: one device; else the CPU count)."""

    def __init__(self, slots: int):
        self.slots = slots
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
            self._semaphore.release()


def default_slots(tier: targets.Tier) -> int:
    return 1 if tier is targets.Tier.TPU else max(1, os.cpu_count() or 1)
