"""Attempts (every check and profile, with its verdict and full log) in a SQLite file."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    kind TEXT NOT NULL,              -- check | profile
    workload_id TEXT NOT NULL,
    state TEXT NOT NULL,             -- running | done | failed | cancelled | interrupted
    status TEXT,                     -- the verdict status once done
    error_class TEXT,
    source TEXT NOT NULL,
    result_json TEXT,                -- the Verdict (or profile) as JSON
    log TEXT NOT NULL DEFAULT '',    -- worker events, stdout and stderr tails
    seconds REAL,
    server TEXT                      -- "pid:start time" of the server process running it (finds what a dead one left)
);
CREATE INDEX IF NOT EXISTS attempts_by_workload ON attempts (workload_id, id);
-- Results that do not depend on a candidate (baseline and expert estimates and timings), keyed by workload,
-- target and the jax and libtpu versions (see profiling.Profiler).
CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL);
"""


def default_path() -> Path:
    base = os.environ.get("JAXBENCH_MCP_HOME") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "jaxbench-mcp"
    )
    return Path(base) / "attempts.sqlite3"


class InvalidText(ValueError):
    """Text that SQLite (UTF-8) cannot store: a lone UTF-16 surrogate. The message says where."""


def text_problem(text: str, what: str = "the source") -> str | None:
    """Why `text` cannot be stored as UTF-8 (a lone surrogate, which no UTF-8 file decodes to: a client that
    escaped invalid bytes or half of a pair as \\udXXX), with its line and column; None when it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        column = exc.start - (text.rfind("\n", 0, exc.start) + 1) + 1
        return (
            f"{what} is not valid Unicode: a lone surrogate U+{ord(text[exc.start]):04X} at line {line}, column "
            f"{column}; send the file's text as UTF-8 (a surrogate pair must be one character)"
        )
    return None


class Store:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(attempts)")}
        if "server" not in columns:  # a store written before the column existed
            self._db.execute("ALTER TABLE attempts ADD COLUMN server TEXT")
        self._lock = threading.Lock()
        self.interrupted = self._mark_interrupted()

    def _mark_interrupted(self) -> int:
        """Attempts left 'running' by a server that no longer runs (killed mid-check) become 'interrupted'. Another
        live server sharing this store keeps its own."""
        rows = self._db.execute("SELECT id, server FROM attempts WHERE state='running'").fetchall()
        dead = [row["id"] for row in rows if not _alive(row["server"])]
        self._db.executemany(
            "UPDATE attempts SET state='interrupted', log=log || ? WHERE id=?",
            [("\n== interrupted: the server stopped before this attempt finished ==", i) for i in dead],
        )
        return len(dead)

    def start(self, kind: str, workload_id: str, source: str) -> int:
        problem = text_problem(source)
        if problem:
            raise InvalidText(problem)
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO attempts (created, kind, workload_id, state, source, server) "
                "VALUES (?, ?, ?, 'running', ?, ?)",
                (time.time(), kind, workload_id, source, _identity(os.getpid())),
            )
            assert cur.lastrowid is not None  # set by the INSERT
            return int(cur.lastrowid)

    def finish(
        self, attempt_id: int, status: str, error_class: str | None, result: dict, log: str, seconds: float
    ) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE attempts SET state='done', status=?, error_class=?, result_json=?, log=?, seconds=? WHERE id=?",
                (status, error_class, json.dumps(result), log, seconds, attempt_id),
            )

    def fail(self, attempt_id: int, error: str) -> None:
        with self._lock:
            self._db.execute("UPDATE attempts SET state='failed', log=? WHERE id=?", (error, attempt_id))

    def cancel(self, attempt_id: int) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE attempts SET state='cancelled', log='cancelled by the caller; the worker was killed' "
                "WHERE id=? AND state='running'",
                (attempt_id,),
            )

    def cache_get(self, key: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM cache WHERE key=?", (key,)).fetchone()
        return json.loads(row["value"]) if row else None

    def cache_put(self, key: str, value: dict) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO cache (key, value, created) VALUES (?, ?, ?)",
                (key, json.dumps(value), time.time()),
            )

    def get(self, attempt_id: int) -> sqlite3.Row | None:
        with self._lock:
            return self._db.execute("SELECT * FROM attempts WHERE id=?", (attempt_id,)).fetchone()

    def recent(self, workload_id: str | None = None, limit: int = 20) -> list[sqlite3.Row]:
        with self._lock:
            if workload_id:
                return self._db.execute(
                    "SELECT * FROM attempts WHERE workload_id=? ORDER BY id DESC LIMIT ?", (workload_id, limit)
                ).fetchall()
            return self._db.execute("SELECT * FROM attempts ORDER BY id DESC LIMIT ?", (limit,)).fetchall()

    def close(self) -> None:
        self._db.close()


def _identity(pid: int) -> str | None:
    """A process's pid and start time: unlike a bare pid, never the same for two processes."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f"{pid}:{int(f.read().rsplit(b')', 1)[1].split()[19])}"
    except (OSError, IndexError, ValueError):
        return None


def _alive(server: str | None) -> bool:
    if not server or ":" not in server:
        return False
    return _identity(int(server.split(":", 1)[0])) == server
