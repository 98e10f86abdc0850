"""The hostile corpus (tests/hostile/*.py) against the sandbox (issue #10).

Every candidate gets the verdict its `# expect:` header names, and after each one: the attempts store is
intact (row count, integrity, a checksum of every earlier row), nothing was written outside the job
directory (marker-named files, sentinel files), no process of the candidate survives (its marker in a
command line, a job directory as cwd or in a command line), its job directory is gone, no connection
reached the test's listeners, and the stored log is bounded. After the whole corpus the same server answers a
good kernel correctly; between the attacks, the corpus's own cases that expect "correct" show the same.

The checks run in a separate server process (this file run as a script, `serve`), as the MCP server
would: it holds a secret in its environment and in its memory for the candidates to look for, and a
candidate that kills its server kills that process, not pytest. Candidates are never run outside it.

Only on a host where the checker uses bubblewrap: without it several candidates here (kill(-1), writes
as root) would hurt the host, which is exactly what the fallbacks do not prevent (README, Threat model).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

HOSTILE = Path(__file__).parent / "hostile"
REPO = Path(__file__).resolve().parent.parent
GOOD = (Path(__file__).parent / "kernels" / "good_rmsnorm.py").read_text()
_HEADER = re.compile(r"^# expect: workload=(\S+) status=(\S+)(?: error_class=(\S+))?", re.MULTILINE)
_ATTACK = re.compile(r"^# attack: (.+)$", re.MULTILINE)
_HARNESS = re.compile(r"^# harness: (\S+)$", re.MULTILINE)
# A stored log never holds more than this (jobs.LOG_KEEP_CHARS plus the cut notice).
_MAX_LOG_CHARS = 64_000 + 200
_REPLY_SECONDS = 300

SECRET_ENV = "JAXBENCH_HOSTILE_SECRET"


def _limits(short: bool):
    from jaxbench_mcp.sandbox.jobs import Limits
    from jaxbench_mcp.taxonomy import Stage

    if short:  # for the deadline test: the whole job may take 3 + 3 + (3 + 3) + 3 x 3 = 21 s
        return Limits(stage_seconds={s: 3.0 for s in Stage if s not in (Stage.COMPARE, Stage.POLICY)})
    return Limits(
        stage_seconds={**Limits().stage_seconds, Stage.LOAD: 40.0, Stage.TRACE: 30.0, Stage.LOWER: 30.0},
        memory_bytes=3 * 2**29,
        max_file_bytes=64 * 2**20,
        max_job_dir_bytes=192 * 2**20,
        max_processes=256,
    )


SHORT_OVERALL_SECONDS = 21


@dataclass(frozen=True)
class Case:
    name: str
    workload: str
    status: str
    error_class: str | None
    attack: str
    harness: str
    text: str


def corpus() -> list[Case]:
    cases = []
    for path in sorted(HOSTILE.glob("*.py")):
        text = path.read_text()
        m, attack, harness = _HEADER.search(text[:300]), _ATTACK.search(text[:600]), _HARNESS.search(text[:800])
        assert m and attack, f"{path.name} needs '# expect:' and '# attack:' headers"
        cases.append(
            Case(
                path.stem,
                m.group(1),
                m.group(2),
                m.group(3),
                attack.group(1),
                harness.group(1) if harness else "",
                text,
            )
        )
    return cases


# ---- the server process ---------------------------------------------------------------------------


def serve(store_path: str) -> None:
    """A checker and an attempts store behind a line protocol on stdin/stdout: {"id", "workload", "source",
    "checker"} in, {"id", "verdict" | "error", "seeds", "roots", "live"} out."""
    sys.path.insert(0, str(REPO))
    import traceback

    from jaxbench_mcp.api import JaxBench
    from jaxbench_mcp.checking import checker as checking
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.sandbox import jobs
    from jaxbench_mcp.store import Store

    held_secret = os.environ[SECRET_ENV].encode() * 3  # the secret in this process's memory, for read_server_memory
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # nothing else may write on the reply channel
    local = threading.local()

    real_fresh_seed, real_run = checking.fresh_seed, jobs.Worker.run

    def fresh_seed() -> int:
        seed = real_fresh_seed()
        local.seeds.append(seed)
        return seed

    def run(self, job, on_event, then=None, earlier=None):
        local.roots.append(str(self.root))
        return real_run(self, job, on_event, then, earlier)

    checking.fresh_seed, jobs.Worker.run = fresh_seed, run
    store = Store(store_path)
    checkers = {
        "main": Checker(limits=_limits(False), spares=1, slots=2),
        "short": Checker(limits=_limits(True), spares=0, slots=1),
    }
    benches = {name: JaxBench(store=store, checker=c) for name, c in checkers.items()}
    checkers["main"].start()
    lock = threading.Lock()

    def reply(message: dict) -> None:
        with lock:
            out.write(json.dumps(message) + "\n")

    def live() -> list[dict]:
        return [{"root": str(w.root), "pids": w.pids()} for w in jobs.REGISTRY.live()]

    def handle(request: dict) -> None:
        local.seeds, local.roots = [], []
        answer: dict = {"id": request["id"]}
        try:
            verdict = benches[request.get("checker") or "main"].check_kernel(request["workload"], request["source"])
            answer["verdict"] = verdict.model_dump(mode="json")
        except BaseException:  # noqa: BLE001 - the test reports it
            answer["error"] = traceback.format_exc()[-3000:]
        answer.update(seeds=local.seeds, roots=local.roots, live=live())
        reply(answer)

    reply(
        {
            "ready": True,
            "pid": os.getpid(),
            "isolation": str(checkers["main"].isolation),
            "secret_len": len(held_secret),
        }
    )
    threads = []
    for line in sys.stdin:
        thread = threading.Thread(target=handle, args=(json.loads(line),), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout=_REPLY_SECONDS)
    for bench in benches.values():
        bench.checker.close()
    jobs.REGISTRY.kill_all()
    store.close()


class Server:
    """The test's side of `serve`: one request per check, answered on a reader thread."""

    def __init__(self, store: Path, env: dict, log: Path):
        with open(log, "w") as stderr:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [sys.executable, __file__, "serve", str(store)],
                cwd=REPO,
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._ids = iter(range(1, 10**9))
        self.requests = 0
        self.roots: set[str] = set()
        self.dead = False
        hello = self.process.stdout.readline()
        self.hello = json.loads(hello) if hello else {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            with self._lock:
                future = self._pending.pop(message["id"], None)
            if future:
                future.set_result(message)
        self.dead = True
        with self._lock:
            for future in self._pending.values():
                future.set_result({"error": f"the server process died (exit status {self.process.poll()})"})
            self._pending.clear()

    def check(self, workload: str, source: str, checker: str = "main") -> dict:
        future: Future = Future()
        with self._lock:
            if self.dead:
                return {
                    "error": f"the server process is dead (exit status {self.process.poll()})",
                    "roots": [],
                    "seeds": [],
                }
            request_id = next(self._ids)
            self._pending[request_id] = future
            self.requests += 1
            self.process.stdin.write(
                json.dumps({"id": request_id, "workload": workload, "source": source, "checker": checker}) + "\n"
            )
            self.process.stdin.flush()
        try:
            answer = future.result(timeout=_REPLY_SECONDS)
        except TimeoutError:
            answer = {"error": f"no answer within {_REPLY_SECONDS} s"}
        self.roots.update(answer.get("roots", []))
        return answer

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ---- what the test watches ------------------------------------------------------------------------


class Listeners:
    """TCP and UDP on 127.0.0.1, a filesystem and an abstract unix socket: whatever reaches them is recorded."""

    def __init__(self, directory: Path, abstract: str):
        self.received: list[str] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.unix_path = str(directory / "listener.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        self.abstract_name = abstract
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + abstract)
        self.abstract.listen()
        for name, sock in (("tcp", self.tcp), ("unix", self.unix), ("abstract", self.abstract)):
            threading.Thread(target=self._accept, args=(name, sock), daemon=True).start()
        threading.Thread(target=self._datagrams, daemon=True).start()

    def _accept(self, name: str, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                data = conn.recv(200)
            except OSError:
                data = b""
            conn.close()
            self.received.append(f"{name}: {data[:80]!r}")

    def _datagrams(self) -> None:
        while True:
            try:
                data = self.udp.recv(200)
            except OSError:
                return
            self.received.append(f"udp: {data[:80]!r}")

    def close(self) -> None:
        for sock in (self.tcp, self.udp, self.unix, self.abstract):
            sock.close()


def _row_digest(row) -> str:
    return hashlib.sha256(json.dumps(tuple(row), default=str).encode()).hexdigest()


class StoreWatch:
    """Checksums of every finished attempt, checked again after each candidate."""

    def __init__(self, path: Path):
        self.path = path
        self.digests: dict[int, str] = {}
        self._lock = threading.Lock()

    def _rows(self):
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
        db.row_factory = sqlite3.Row
        try:
            ok = db.execute("PRAGMA integrity_check").fetchone()[0]
            return ok, db.execute("SELECT * FROM attempts ORDER BY id").fetchall()
        finally:
            db.close()

    def check(self, attempt_id: int | None) -> list[str]:
        with self._lock:
            if not self.path.exists():
                return [f"the attempts store {self.path} is gone"]
            try:
                ok, rows = self._rows()
            except sqlite3.DatabaseError as exc:
                return [f"the attempts store cannot be read: {exc}"]
            problems = [] if ok == "ok" else [f"the attempts store fails its integrity check: {ok}"]
            by_id = {row["id"]: row for row in rows}
            for known, digest in self.digests.items():
                if known not in by_id:
                    problems.append(f"attempt {known} was deleted from the store")
                elif _row_digest(by_id[known]) != digest:
                    problems.append(f"attempt {known} was changed in the store")
            if attempt_id is not None:
                row = by_id.get(attempt_id)
                if row is None or row["state"] != "done":
                    problems.append(
                        f"attempt {attempt_id} is not stored as done ({row['state'] if row else 'missing'})"
                    )
                elif len(row["log"]) > _MAX_LOG_CHARS:
                    problems.append(f"attempt {attempt_id} stored a log of {len(row['log']):,} characters")
            for row in rows:
                if row["state"] != "running":
                    self.digests.setdefault(row["id"], _row_digest(row))
            return problems

    def log(self, attempt_id: int | None) -> str:
        if attempt_id is None:
            return ""
        try:
            return next((row["log"] for row in self._rows()[1] if row["id"] == attempt_id), "")
        except sqlite3.DatabaseError:
            return ""

    def count(self) -> int:
        return len(self._rows()[1])


def _marker_processes(needles: list[str], roots: list[str]) -> list[str]:
    """Processes whose command line names a needle or a job directory, or whose cwd is inside a job directory."""
    hits = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if any(n in cmdline for n in needles) or any(r in cmdline or cwd.startswith(r) for r in roots):
            hits.append(f"pid {entry}: {cmdline[:120]!r} (cwd {cwd})")
    return hits


@dataclass
class Watch:
    run: str  # the run's marker; every candidate's marker starts with it
    home: Path
    state: Path
    outside: Path  # a folder outside the job directory that deep_dirs links to
    sentinels: dict[Path, tuple[bytes, int]]

    def places(self) -> list[Path]:
        import sysconfig

        return [
            Path("/tmp"),
            Path("/var/tmp"),
            Path("/dev/shm"),
            Path("/"),
            Path("/work"),
            self.home,
            self.home / ".local" / "state",
            REPO,
            REPO / "jaxbench_mcp",
            REPO / "workloads",
            REPO / "tests",
            REPO / ".venv",
            Path(sys.prefix),
            Path(sysconfig.get_paths()["purelib"]),
            Path(sys.base_prefix),
            self.state,
            self.outside,
        ]

    def written_outside(self, marker: str) -> list[str]:
        hits = [str(p / n) for p in dict.fromkeys(self.places()) if p.is_dir() for n in os.listdir(p) if marker in n]
        for path, (content, mtime) in self.sentinels.items():
            try:
                if path.read_bytes() != content or path.stat().st_mtime_ns != mtime:
                    hits.append(f"sentinel {path} was changed")
            except OSError:
                hits.append(f"sentinel {path} is gone")
        return hits


def _selected() -> list[Case]:
    """The corpus, or the names in JAXBENCH_HOSTILE_ONLY (comma-separated) while working on a few."""
    only = {n for n in os.environ.get("JAXBENCH_HOSTILE_ONLY", "").split(",") if n}
    return [c for c in corpus() if not only or c.name in only]


# ---- running the corpus ----------------------------------------------------------------------------


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _run_case(case: Case, server: Server, store: StoreWatch, watch: Watch, listeners: Listeners, values: dict) -> dict:
    marker = f"{watch.run}-{case.name}"
    source = _fill(case.text, {**values, "__MARKER__": marker})
    checker = "short" if case.harness == "checker=short" else "main"
    answers, problems = [], []
    if case.harness == "replay":  # a check first, whose hidden seeds the candidate then replays
        first = server.check(case.workload, GOOD)
        problems += store.check(first.get("verdict", {}).get("attempt_id"))
        source = source.replace("__SEEDS__", repr(first.get("seeds", [])))
        if len(first.get("seeds", [])) != 3:
            problems.append(f"the first check's seeds were not reported: {first.get('error', '')[-500:]}")
    answers.extend(server.check(case.workload, source, checker) for _ in range(2 if case.harness == "runs=2" else 1))
    verdicts, evidence = [], []
    for answer in answers:
        verdict = answer.get("verdict")
        if verdict is None:
            problems.append(f"no verdict: {answer.get('error', '')[-1500:]}")
            verdicts.append((None, None))
            continue
        verdicts.append((verdict["status"], verdict["error_class"]))
        if verdict.get("isolation") != "bubblewrap":
            problems.append(f"checked with isolation {verdict.get('isolation')!r}")
        if checker == "short" and verdict["total_seconds"] > SHORT_OVERALL_SECONDS + 10:
            problems.append(
                f"the job ran {verdict['total_seconds']:.0f} s, past its overall limit of {SHORT_OVERALL_SECONDS} s"
            )
        problems += store.check(verdict.get("attempt_id"))
        log = store.log(verdict.get("attempt_id"))
        evidence += [line[:200] for line in log.splitlines() if line.startswith("HOSTILE")][:12]
        evidence.append(f"verdict message: {verdict.get('message', '')[:400]}")
    roots = [r for a in answers for r in a.get("roots", [])]
    for _ in range(30):  # a finished worker is torn down behind its verdict; give that and zombies a moment
        survivors = _marker_processes([marker], roots)
        if not survivors:
            break
        time.sleep(0.1)
    problems += [f"a process survived: {s}" for s in survivors]
    problems += [f"job directory left behind: {r}" for r in roots if os.path.lexists(r)]
    problems += [f"written outside the job directory: {w}" for w in watch.written_outside(marker)]
    if listeners.received:
        problems.append(f"the test's listeners were reached: {listeners.received}")
    return {"verdicts": verdicts, "problems": problems, "evidence": evidence, "roots": roots}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    from jaxbench_mcp.sandbox import isolation as sandbox

    if sandbox.detect() is not sandbox.Isolation.BUBBLEWRAP:
        pytest.skip("the hostile corpus runs only where the checker uses bubblewrap (see the module docstring)")
    base = tmp_path_factory.mktemp("hostile")
    state, outside = base / "state", base / "outside"
    state.mkdir()
    outside.mkdir()
    run = "jbh" + secrets.token_hex(4)
    home = Path(os.path.expanduser("~"))
    sentinels = {}
    for path in (
        Path("/tmp") / f"{run}.sentinel",
        home / f"{run}.sentinel",
        REPO / ".venv" / f"{run}.sentinel",
        state / f"{run}.sentinel",
        outside / f"{run}.sentinel",
    ):
        content = secrets.token_bytes(32)
        path.write_bytes(content)
        sentinels[path] = (content, path.stat().st_mtime_ns)
    watch = Watch(run, home, state, outside, sentinels)
    listeners = Listeners(base, f"{run}-abstract")
    store_path = state / "attempts.sqlite3"
    secret = "JBSECRET-" + secrets.token_hex(16)
    env = {**os.environ, SECRET_ENV: secret, "JAXBENCH_MCP_HOME": str(state)}
    server = Server(store_path, env, base / "server.log")
    # One inotify instance of this (the server's) uid for the whole run: a candidate that gets every instance
    # of fs.inotify.max_user_instances has a quota of its own (inotify_bomb).
    inotify = _inotify_instance()
    results: dict = {}
    try:
        if server.hello.get("isolation") != "bubblewrap":
            pytest.fail(f"the server did not start with bubblewrap: {server.hello} (log: {base / 'server.log'})")
        store = StoreWatch(store_path)
        first = server.check("12p_RMSNorm", GOOD)  # a finished attempt in the store before any attack
        assert (first.get("verdict") or {}).get("status") == "correct", first
        store.check(first["verdict"]["attempt_id"])
        values = {
            "__PORT__": str(listeners.port),
            "__UNIX_SOCKET__": listeners.unix_path,
            "__ABSTRACT_SOCKET__": listeners.abstract_name,
            "__STORE__": str(store_path),
            "__REPO__": str(REPO),
            "__HOME__": str(home),
            "__SENTINELS__": repr([str(p) for p in sentinels]),
            "__SENTINEL_DIR__": str(outside),
        }
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:  # two checks at a time, as two agents would
            futures = {c.name: pool.submit(_run_case, c, server, store, watch, listeners, values) for c in _selected()}
            for name, future in futures.items():
                results[name] = future.result()
        results["_seconds"] = time.monotonic() - started
        # The same server still answers, and answers right. Between the attacks, the corpus's own cases that
        # expect "correct" (a third of it, spread through the run) show the same.
        after = server.check("12p_RMSNorm", GOOD)
        results["_after"] = {"answer": after, "problems": store.check((after.get("verdict") or {}).get("attempt_id"))}
        results["_store_rows"] = (store.count(), server.requests)
        if os.environ.get("JAXBENCH_HOSTILE_REPORT"):  # verdicts, problems and evidence of every case, as JSON
            Path(os.environ["JAXBENCH_HOSTILE_REPORT"]).write_text(json.dumps(results, indent=1, default=str))
        yield results, server, watch
    finally:
        server.close()
        listeners.close()
        if inotify is not None:
            os.close(inotify)
        _clean_up(run, server, watch)


def _inotify_instance() -> int | None:
    import ctypes

    fd = ctypes.CDLL(None, use_errno=True).inotify_init1(0)
    return fd if fd >= 0 else None


def _clean_up(run: str, server: Server, watch: Watch) -> None:
    """Whatever got through is removed: only what carries this run's marker, or what this run's server made."""
    for hit in _marker_processes([run], sorted(server.roots)):
        try:
            os.kill(int(hit.split()[1].rstrip(":")), 9)
        except (ProcessLookupError, ValueError):
            pass
    for root in server.roots:
        if os.path.lexists(root):
            subprocess.run(["rm", "-rf", "--one-file-system", root], check=False)  # deep trees too
    for place in watch.places():
        if place.is_dir():
            for name in os.listdir(place):
                if f"{run}-" in name and not (place / name).is_dir():
                    (place / name).unlink(missing_ok=True)
    for path in watch.sentinels:
        path.unlink(missing_ok=True)
        Path(f"{path}-{run}").unlink(missing_ok=True)


# ---- the tests ------------------------------------------------------------------------------------


def test_the_corpus_covers_every_attack_of_issue_10():
    names = {c.name for c in corpus()}
    required = {
        "read_server_environ",
        "read_server_memory",
        "read_store",
        "wreck_store",
        "read_expert_sources",
        "write_outside",
        "network_connect",
        "disk_huge_file",
        "disk_many_files",
        "kill_parent",
        "kill_everything",
        "kill_group",
        "orphan_setsid",
        "orphan_double_fork",
        "memory_bomb_setsid",
        "forge_unknown_stage",
        "forge_duplicate_event",
        "forge_deadline_reset",
        "forge_event_flood",
        "forge_huge_line",
        "forge_kernel_claim",
        "forge_finished_early",
        "program_symlink",
        "program_fifo",
        "program_huge",
        "program_crafted",
        "replay_seen_inputs",
    }
    assert required <= names, required - names
    # The sandbox's attacks run on the cheapest workload; the verdict's (issue #20) need a long reduction too.
    assert all(c.workload == "12p_RMSNorm" for c in corpus() if not c.name.startswith("game_"))
    assert {c.workload for c in corpus()} <= {"12p_RMSNorm", "8p_GEMM"}


def test_the_corpus_covers_every_mechanism_of_issue_20():
    names = {c.name for c in corpus()}
    required = {
        "game_interpret_switch",  # 1: the run is a different program from the one judged
        "game_call_counter",
        "game_stack_frames",
        "game_lenient_interpret_params",  # 2: interpret-mode strictness lives in the candidate's process
        "game_platform_keyed",  # 3
        "game_size_branch_in_body",  # 4: the same program at every size
        "game_size_literal",
        "game_full_size_clip",  # 5: full-size numerics (the full_reduction run)
        "game_reduction_shape_keyed",  # and the same program there
        "game_bf16_accumulator",
        "game_pallas_sliver",  # 6: the Pallas kernels do the work
        "game_gemm_in_scan",
        "game_work_in_loop",
        "tmp_many_files",  # 7: hardening
        "shm_many_files",
        "inotify_bomb",
    }
    assert required <= names, required - names


def test_the_watchers_see_what_they_look_for(tmp_path):
    """The post-checks themselves: a marked process, a marked file and a changed sentinel are all reported."""
    run = "jbh" + secrets.token_hex(4)
    sleeper = subprocess.Popen([f"{run}-probe", "30"], executable=shutil.which("sleep"))
    sentinel = tmp_path / "sentinel"
    sentinel.write_bytes(b"x")
    watch = Watch(run, tmp_path, tmp_path, tmp_path, {sentinel: (b"x", sentinel.stat().st_mtime_ns)})
    try:
        for _ in range(40):  # right after exec the command line may still read empty
            if _marker_processes([f"{run}-probe"], []):
                break
            time.sleep(0.05)
        assert _marker_processes([f"{run}-probe"], []) and not _marker_processes([f"{run}-other"], [])
        assert _marker_processes(
            [], [str(REPO)]
        )  # a process whose cwd is inside a watched directory (pytest's own is skipped)
        (tmp_path / f"{run}-probe-written").write_text("x")
        sentinel.write_bytes(b"y")
        assert len(watch.written_outside(f"{run}-probe")) == 2
    finally:
        sleeper.kill()
        sleeper.wait()


# A candidate whose header says '# known gap: WHY' gets through today, for a reason the README's threat model
# names ("Not defended"). It stays in the corpus as a strict xfail: the day it is caught, the test says so.
_KNOWN_GAP = re.compile(r"^# known gap: (.+)$", re.MULTILINE)


# A gap only where workers keep the server's host uid (sandbox.host_uids() is None: a server that is not root, or
# a root server whose Python installation another uid cannot read, such as one under a 0700 /root).
_GAP_WITHOUT_OWN_UID = re.compile(r"^# known gap without a host uid of its own: (.+)$", re.MULTILINE)


def _params():
    from jaxbench_mcp.sandbox import isolation as sandbox

    for case in corpus():
        gap = _KNOWN_GAP.search(case.text[:1000])
        if gap is None and sandbox.detect() is sandbox.Isolation.BUBBLEWRAP and sandbox.host_uids() is None:
            gap = _GAP_WITHOUT_OWN_UID.search(case.text[:1000])
        yield pytest.param(case.name, marks=pytest.mark.xfail(strict=True, reason=gap.group(1))) if gap else case.name


@pytest.mark.parametrize("name", list(_params()))
def test_hostile_candidate_gets_its_verdict_and_leaves_nothing(hostile, name):
    results, _server, _watch = hostile
    case = next(c for c in corpus() if c.name == name)
    if name not in results:
        pytest.skip("not selected by JAXBENCH_HOSTILE_ONLY")
    result = results[name]
    evidence = "\n  ".join(result["evidence"])
    expected = (case.status, case.error_class)
    assert all(v == expected for v in result["verdicts"]), (
        f"{case.attack}\n  got {result['verdicts']}, expected {expected}\n  {evidence}"
    )
    assert not result["problems"], f"{case.attack}\n  " + "\n  ".join(result["problems"]) + f"\n  {evidence}"


def test_the_server_answers_a_good_kernel_right_after_the_whole_corpus(hostile):
    results, _server, _watch = hostile
    answer, problems = results["_after"]["answer"], results["_after"]["problems"]
    verdict = answer.get("verdict") or {}
    assert verdict.get("status") == "correct", verdict.get("message") or answer.get("error", "")[-800:]
    assert not problems, problems


def test_every_attempt_is_stored_once(hostile):
    results, _server, _watch = hostile
    rows, requests = results["_store_rows"]
    assert rows == requests


def test_the_server_leaves_nothing_when_it_closes(hostile):
    _results, server, _watch = hostile
    server.close()
    assert server.process.returncode == 0
    assert not glob.glob(f"/sys/fs/cgroup/*/jaxbench-{server.hello['pid']}-*")
    assert not [r for r in server.roots if os.path.lexists(r)]


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2])
