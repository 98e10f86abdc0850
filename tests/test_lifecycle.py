"""Workers' lives: idle hand-over, cancellation, shutdown by EOF and SIGTERM, kill -9 of the server, the store
after a crash. These start real sandboxed workers."""

import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from jaxbench_mcp import api
from jaxbench_mcp.checking.checker import SPARES_ENV, Cancelled, Checker
from jaxbench_mcp.requests import CheckRequest
from jaxbench_mcp.sandbox import isolation as sandbox, jobs
from jaxbench_mcp.store import Store

KERNELS = Path(__file__).parent / "kernels"
GOOD = (KERNELS / "good_rmsnorm.py").read_text()
HANG = (KERNELS / "bad_hang_call.py").read_text()  # spins forever in Python while being traced

pytestmark = pytest.mark.slow


def _alive(pids) -> list[int]:
    return [p for p in pids if sandbox.running(p)]


def test_jaxbench_mcp_spares_sets_the_spare_workers_and_a_bad_value_says_what_to_give(monkeypatch):
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.checking.checker import spares_from_env

    monkeypatch.delenv(SPARES_ENV, raising=False)
    assert spares_from_env(targets.Tier.CPU_LIBTPU, 2) == 4 and spares_from_env(targets.Tier.TPU, 1) == 0
    monkeypatch.setenv(SPARES_ENV, "1")
    assert spares_from_env(targets.Tier.CPU_LIBTPU, 2) == 1
    assert Checker(spares=None, slots=1).pool.spares == 1
    for bad in ("-1", "two", "65", "²"):
        monkeypatch.setenv(SPARES_ENV, bad)
        with pytest.raises(ValueError, match="a whole number of spare workers from 0 to 64"):
            spares_from_env(targets.Tier.CPU_LIBTPU, 2)


def test_a_spare_that_idled_past_its_warm_up_budget_still_takes_the_next_check():
    checker = Checker(spares=1, slots=1)
    checker.start()
    try:
        spare = checker.pool._warm[False][0]  # one spare: not a tracer, so it takes the job after the trace
        with selectors.DefaultSelector() as sel:  # wait until its 'ready' is in the pipe, unread
            sel.register(spare._events, selectors.EVENT_READ)
            assert sel.select(180), "the spare never got ready"
        spare.started -= checker.limits.warm_up + 1  # as if it had idled past the budget (the agent was writing)
        verdict, outcome = checker.check(CheckRequest.of("12p_RMSNorm", GOOD))
        outcome.cleanup()
        assert verdict.status == "correct", verdict.summary()
    finally:
        checker.close()


def test_a_tracer_warms_up_for_tracing_alone_and_any_other_worker_for_compiling_and_interpreting(monkeypatch):
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.sandbox import worker

    paid: list[str] = []
    monkeypatch.setattr(targets, "deviceless_compile", lambda *a, **k: paid.append("compile"))

    def interpreted(*args, **kwargs):
        paid.append("interpret")
        return lambda inputs, order_seed: None  # the compiled run, which the warm-up then runs once

    monkeypatch.setattr(targets, "interpreted_on_cpu", interpreted)
    worker.warm_up("v6e", tracer=True)  # it records the warm-up kernel: what a trace job does
    assert paid == []
    worker.warm_up("v6e")
    assert paid == ["compile", "interpret"]


def test_no_spare_warms_up_beside_a_running_check_and_one_is_ready_after_it():
    checker = Checker(spares=2, slots=1)  # a tracer and a worker for the job after the trace
    checker.start()
    started_during_check: list[set] = []

    def look(message: str) -> None:
        if message.startswith(("load", "run")):  # the trace job's stage, then the check job's
            started_during_check.append(set(jobs.REGISTRY.live()) - spares)

    try:
        assert checker.pool.wait_warm(), "the first spares never got ready"
        spares = set(jobs.REGISTRY.live())
        assert len(spares) == 2 and [len(kept) for kept in checker.pool._warm.values()] == [1, 1]
        # The tracer's process is told its role (the last argument), the other one is not.
        assert [kept[0].process.args[-1] == "trace" for kept in checker.pool._warm.values()] == [False, True]
        verdict, outcome = checker.check(CheckRequest.of("12p_RMSNorm", GOOD), on_progress=look)
        outcome.cleanup()
        assert verdict.status == "correct", verdict.summary()
        assert len(started_during_check) == 4, started_during_check  # load, then three seeds
        assert not any(started_during_check), "a replacement worker started while the check ran"
        deadline = time.monotonic() + 10
        while sum(map(len, checker.pool._warm.values())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        refilled = [len(kept) for kept in checker.pool._warm.values()]
        assert checker.pool.wait_warm() and refilled == [1, 1], f"spares after the check ended: {refilled}"
    finally:
        checker.close()


def test_spares_are_warmed_only_when_the_last_job_ends_with_none_waiting():
    """Checks that follow each other without a pause (a campaign, two agents) warm no spare between them: its
    warm-up would take CPU from the check beside it, for less than it saves the next one."""
    idle: list[tuple[int, int]] = []
    queue = jobs.JobQueue(1, on_idle=lambda: idle.append((queue.running, queue.waiting)))
    entered, release = threading.Event(), threading.Event()

    def hold():
        entered.set()
        release.wait(10)

    first = threading.Thread(target=queue.run, args=(hold,))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=queue.run, args=(lambda: None,))
    second.start()
    deadline = time.monotonic() + 10
    while queue.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.waiting == 1
    release.set()
    first.join(10)
    second.join(10)
    assert idle == [(0, 0)], idle  # once, after the second: the first ended with one waiting

    idle.clear()
    entered.clear()
    release.clear()
    two = jobs.JobQueue(2, on_idle=lambda: idle.append((two.running, two.waiting)))
    first = threading.Thread(target=two.run, args=(hold,))
    first.start()
    assert entered.wait(10)
    two.run(lambda: None)
    assert idle == [], "a spare was warmed while a job still ran"
    release.set()
    first.join(10)
    assert idle == [(0, 0)], idle


def test_cancel_kills_the_worker_within_a_second_and_records_the_attempt_as_cancelled(tmp_path):
    bench = api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=Checker(spares=0, slots=1))
    loaded = threading.Event()
    job = bench.submit_check(
        "8p_GEMM", HANG, on_progress=lambda m: loaded.set() if m.startswith("load: done") else None
    )
    try:
        assert job.attempt_id is not None and not job.done()
        assert loaded.wait(120), "the worker never loaded the candidate"
        # The candidate's tracer, and the worker for the job after it, started beside it (no spare was ready).
        workers = jobs.REGISTRY.live()
        roles = sorted(("trace" in w.process.args, w.process.args[-1]) for w in workers)
        assert roles == [(False, "cold"), (True, "cold")], roles  # both started for this check: no warm-up kernel
        pids = [pid for worker in workers for pid in worker.pids()]
        t0 = time.monotonic()
        job.cancel()
        with pytest.raises(Cancelled):
            job.future.result(timeout=5)
        took = time.monotonic() - t0
        assert took < 1.0, f"cancel took {took:.2f}s"
        assert not _alive(pids) and not any(worker.root.exists() for worker in workers)
        row = bench.store.get(job.attempt_id)
        assert row["state"] == "cancelled"
    finally:
        bench.close()


def _serve(tmp_path: Path) -> subprocess.Popen:
    """The server as an operator starts it: with its default spare workers (conftest turns them off elsewhere)."""
    env = dict(os.environ, JAXBENCH_MCP_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path))
    env.pop(SPARES_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-m", "jaxbench_mcp.frontends.cli", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )


def _initialize(server: subprocess.Popen) -> None:
    """The MCP handshake over stdio: after it, the server's lifespan has started its spare workers."""
    for message in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ):
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 1


def _worker_dirs(tmp_path: Path, pid: int) -> list[Path]:
    return list(tmp_path.glob(f"jaxbench-worker-{pid}-*"))


def _wait_for_spares(tmp_path: Path, server: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _worker_dirs(tmp_path, server.pid):
        time.sleep(0.2)
    assert _worker_dirs(tmp_path, server.pid), "the server started no spare worker"
    return sandbox.process_tree(server.pid)[1:]


@pytest.mark.parametrize("how", ["stdin EOF", "SIGTERM"])
def test_server_shutdown_leaves_no_worker_and_no_directory(tmp_path, how):
    server = _serve(tmp_path)
    try:
        _initialize(server)
        children = _wait_for_spares(tmp_path, server)
        assert children
        if how == "SIGTERM":
            server.send_signal(signal.SIGTERM)
        else:
            server.stdin.close()
        server.wait(timeout=30)
        time.sleep(0.5)
        assert not _alive(children), f"workers outlived the server: {_alive(children)}"
        assert not _worker_dirs(tmp_path, server.pid)
    finally:
        if server.poll() is None:
            server.kill()


def test_kill_9_mid_check_keeps_finished_attempts_and_the_restart_marks_the_interrupted_one(tmp_path):
    store_path = tmp_path / "attempts.sqlite3"
    script = textwrap.dedent(f"""
        from jaxbench_mcp import api
        from jaxbench_mcp.checking.checker import Checker
        from jaxbench_mcp.store import Store
        bench = api.JaxBench(store=Store({str(store_path)!r}), checker=Checker(spares=0, slots=1))
        print(bench.check_kernel("12p_RMSNorm", {GOOD!r}).status, flush=True)
        bench.check_kernel("8p_GEMM", {HANG!r})
    """)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout.readline().strip() == b"correct"
        deadline = time.monotonic() + 120
        sandboxed: list[int] = []
        while time.monotonic() < deadline and not sandboxed:  # the hanging check's worker is running
            time.sleep(0.5)
            sandboxed = sandbox.process_tree(proc.pid)[1:]
        assert sandboxed
        time.sleep(3)
        proc.kill()
        proc.wait()
        time.sleep(1)
        if sandbox.detect() is sandbox.Isolation.BUBBLEWRAP:  # --die-with-parent: the sandbox goes with the server
            assert not _alive(sandboxed), _alive(sandboxed)
    finally:
        if proc.poll() is None:
            proc.kill()
    store = Store(store_path)
    try:
        assert store.interrupted == 1
        first, second = store.get(1), store.get(2)
        assert (
            first["state"] == "done"
            and first["status"] == "correct"
            and json.loads(first["result_json"])["status"] == "correct"
        )
        assert second["state"] == "interrupted"
    finally:
        store.close()
    # The next server start removes what the killed one left in the temporary directory.
    os.environ["TMPDIR"], previous = str(tmp_path), os.environ.get("TMPDIR")
    try:
        import tempfile

        tempfile.tempdir = None
        assert _worker_dirs(tmp_path, proc.pid)
        assert jobs.sweep_stale_dirs() >= 1
        assert not _worker_dirs(tmp_path, proc.pid)
    finally:
        os.environ.pop("TMPDIR") if previous is None else os.environ.__setitem__("TMPDIR", previous)
        tempfile.tempdir = None


def test_a_store_keeps_a_live_servers_running_attempts(tmp_path):
    path = tmp_path / "attempts.sqlite3"
    live = Store(path)
    mine = live.start("check", "8p_GEMM", "source")
    other = Store(path)  # a second server on the same store, while the first is alive
    assert other.interrupted == 0 and other.get(mine)["state"] == "running"
    other.close()
    live.close()
