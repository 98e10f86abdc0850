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
    state TEXT NOT NULL,             -- running | done | failed
    status TEXT,                     -- the verdict status once done
    error_class TEXT,
    source TEXT NOT NULL,
    result_json TEXT,                -- the Verdict (or profile) as JSON
    log TEXT NOT NULL DEFAULT '',    -- worker events, stdout and stderr tails
    seconds REAL
);
CREATE INDEX IF NOT EXISTS attempts_by_workload ON attempts (workload_id, id);
"""


def default_path() -> Path:
    base = os.environ.get("JAXBENCH_MCP_HOME") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "jaxbench-mcp")
    return Path(base) / "attempts.sqlite3"


class Store:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def start(self, kind: str, workload_id: str, source: str) -> int:
        with self._lock:
            cur = self._db.execute("INSERT INTO attempts (created, kind, workload_id, state, source) VALUES (?, ?, ?, 'running', ?)",
                                   (time.time(), kind, workload_id, source))
            return int(cur.lastrowid)

    def finish(self, attempt_id: int, status: str, error_class: str | None, result: dict, log: str, seconds: float) -> None:
        with self._lock:
            self._db.execute("UPDATE attempts SET state='done', status=?, error_class=?, result_json=?, log=?, seconds=? WHERE id=?",
                             (status, error_class, json.dumps(result), log, seconds, attempt_id))

    def fail(self, attempt_id: int, error: str) -> None:
        with self._lock:
            self._db.execute("UPDATE attempts SET state='failed', log=? WHERE id=?", (error, attempt_id))

    def get(self, attempt_id: int) -> sqlite3.Row | None:
        with self._lock:
            return self._db.execute("SELECT * FROM attempts WHERE id=?", (attempt_id,)).fetchone()

    def recent(self, workload_id: str | None = None, limit: int = 20) -> list[sqlite3.Row]:
        with self._lock:
            if workload_id:
                return self._db.execute("SELECT * FROM attempts WHERE workload_id=? ORDER BY id DESC LIMIT ?", (workload_id, limit)).fetchall()
            return self._db.execute("SELECT * FROM attempts ORDER BY id DESC LIMIT ?", (limit,)).fetchall()

    def close(self) -> None:
        self._db.close()
