"""Load: several MCP clients checking kernels at once over streamable HTTP on 127.0.0.1.

Starts `jaxbench-mcp serve --transport http` on a free loopback port with a fresh attempts store, then runs
CLIENTS concurrent SDK clients, each sending CHECKS check_kernel calls (good and bad kernels mixed, each
waited for through list_attempts when it outlasts the call budget). Prints, side by side:
  answers received / calls sent (goal: all), attempts recorded / calls sent (goal: all, each once),
  verdicts that match the kernel's expected verdict, and the server's resident memory after the first
  round of checks and at the end (goal: flat, i.e. a ratio near 1).

Usage: python benchmarks/http_load.py [--clients 4] [--checks 10]
"""

import argparse
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

ROOT = Path(__file__).resolve().parent.parent
# (workload, kernel, expected status): fast to check, good and bad mixed.
KERNELS = [
    ("12p_RMSNorm", "good_rmsnorm.py", "correct"),
    ("8p_GEMM", "bad_syntax.py", "invalid_kernel"),
    ("8p_GEMM", "good_gemm_tiled.py", "correct"),
    ("8p_GEMM", "bad_plain_xla.py", "no_pallas"),
    ("8p_GEMM", "bad_missing_acc_init.py", "incorrect"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def _client(url: str, index: int, checks: int, results: list) -> None:
    async with Client(url) as client:
        for k in range(checks):
            workload, name, expected = KERNELS[(index + k) % len(KERNELS)]
            source = (ROOT / "tests" / "kernels" / name).read_text()
            reply = (
                await client.call_tool("check_kernel", {"workload_id": workload, "source": source, "seeds": 1})
            ).structured_content
            while reply["state"] == "running":
                await anyio.sleep(2)
                detail = (
                    await client.call_tool("list_attempts", {"attempt_id": reply["attempt_id"]})
                ).structured_content["detail"]
                if detail["state"] != "running":
                    reply = {"state": "done", "attempt_id": reply["attempt_id"], "verdict": detail["verdict"]}
            results.append(
                (reply["attempt_id"], reply["verdict"]["status"] if reply.get("verdict") else None, expected)
            )


async def _round(url: str, clients: int, checks: int, results: list) -> None:
    async with anyio.create_task_group() as group:
        for index in range(clients):
            group.start_soon(_client, url, index, checks, results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--checks", type=int, default=10)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as home:
        server = subprocess.Popen(
            [sys.executable, "-m", "jaxbench_mcp", "serve", "--transport", "http", "--port", str(port)],
            env={**os.environ, "JAXBENCH_MCP_HOME": home},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.5)
            warmup: list = []
            anyio.run(_round, url, args.clients, 1, warmup)
            rss_start = _rss_mib(server.pid)
            results: list = []
            t0 = time.monotonic()
            anyio.run(_round, url, args.clients, args.checks, results)
            seconds = time.monotonic() - t0
            rss_end = _rss_mib(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
        rows = sqlite3.connect(Path(home) / "attempts.sqlite3").execute("SELECT id, state FROM attempts").fetchall()
    sent = args.clients * args.checks
    ids = [r[0] for r in results]
    recorded = {i for i, state in rows if state == "done"}
    print(
        f"{args.clients} clients x {args.checks} checks over HTTP in {seconds:.0f} s "
        f"({sent / seconds * 60:.1f} checks/min)"
    )
    print(f"  answers: {len(results)} / {sent} sent; lost: {sent - len(results)}")
    print(f"  attempts recorded done: {len(recorded & set(ids))} / {sent}; duplicated ids: {len(ids) - len(set(ids))}")
    print(f"  verdicts as expected: {sum(status == expected for _, status, expected in results)} / {len(results)}")
    print(
        f"  server RSS: {rss_start:.0f} MiB after the warm-up round, {rss_end:.0f} MiB at the end "
        f"= {rss_end / rss_start:.2f}x"
    )


if __name__ == "__main__":
    main()
