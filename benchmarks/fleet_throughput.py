"""Throughput of a Ray fleet of 1 and of 2 simulated hosts on one fixed set of checks, as a ratio.

Each run starts a local Ray cluster on this machine (loopback only: a head that runs no checks, plus 1 or 2
nodes that offer the `jaxbench_host` resource), puts a server-side JaxBench with a RayExecutor in front of it,
submits the same checks all at once from threads (as many agents would), and times the first submission to the
last verdict. Each host checks one candidate at a time and keeps one warm worker, as a TPU host does.

What the ratio means depends on the machine: simulated hosts share this machine's cores, so on a small machine
the ratio says how much of the CPU one host leaves idle (worker start-up, the truth computation, compiles that
use one core) that a second host can fill, plus the fleet's own overhead. It is not the scaling of real hosts,
each of which brings its own chip and cores: that scaling is bounded by the hosts, not by this machine.

Usage: python benchmarks/fleet_throughput.py [--repeat 2]
"""

import os

# Before Ray is imported: loopback addresses only, no usage report, no memory monitor on a shared machine.
os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_memory_monitor_refresh_ms="0")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ray.cluster_utils import Cluster

from jaxbench_mcp import api
from jaxbench_mcp.fleet import ray_executor as fleet
from jaxbench_mcp.store import Store

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
# A fixed mix: two correct kernels (the full ladder: compile, three seeds in interpret mode, compare), one caught
# by the full-size coverage analysis before any compare, one that fails to load.
CHECKS = [
    ("12p_RMSNorm", "good_rmsnorm.py"),
    ("8p_GEMM", "bad_all_zeros.py"),
    ("12p_RMSNorm", "good_rmsnorm.py"),
    ("8p_GEMM", "bad_syntax.py"),
    ("8p_GEMM", "good_gemm_tiled.py"),
    ("8p_GEMM", "bad_all_zeros.py"),
]
NODE = {"num_cpus": 0, "object_store_memory": 80 * 2**20, "node_ip_address": "127.0.0.1"}


def run(hosts: int, checks: list[tuple[str, str]], home: Path) -> tuple[float, list[tuple[str, str | None]], set[str]]:
    """(seconds for all checks, their (status, error class), the hosts that ran them) on a fleet of `hosts`."""
    cluster = Cluster(initialize_head=True, head_node_args=dict(NODE))
    bench = None
    try:
        for _ in range(hosts):
            cluster.add_node(resources={fleet.HOST_RESOURCE: 1}, **NODE)
        store = Store(home / f"{hosts}-hosts.sqlite3")
        bench = api.JaxBench(
            store=store,
            executor=fleet.RayExecutor(cluster.address, checker_options={"slots": 1, "spares": 1}, cache=store),
        )
        bench.start()
        time.sleep(20)  # let every host's warm worker finish warming up: the timed checks start on warm hosts
        sources = {k: (KERNELS / k).read_text() for _, k in checks}
        started = time.perf_counter()
        with ThreadPoolExecutor(len(checks)) as pool:
            verdicts = list(pool.map(lambda c: bench.check_kernel(c[0], sources[c[1]]), checks))
        seconds = time.perf_counter() - started
        return (
            seconds,
            [(str(v.status), v.error_class and str(v.error_class)) for v in verdicts],
            {v.host for v in verdicts},
        )
    finally:
        if bench is not None:
            bench.close()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1, help="runs per fleet size (the best is kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        best: dict[int, float] = {}
        outcomes = {}
        for _ in range(args.repeat):
            for hosts in (1, 2):
                seconds, found, used = run(hosts, CHECKS, Path(home))
                print(
                    f"{hosts} host(s): {len(CHECKS)} checks in {seconds:.1f} s on {len(used)} host(s): {found}",
                    flush=True,
                )
                best[hosts] = min(best.get(hosts, seconds), seconds)
                outcomes.setdefault(hosts, found)
                assert found == outcomes[hosts], "the verdicts changed between runs"
    assert outcomes[1] == outcomes[2], f"1 host and 2 hosts disagree: {outcomes}"
    rate = {n: len(CHECKS) / s * 60 for n, s in best.items()}
    print(f"throughput: 1 host {rate[1]:.1f} checks/min, 2 hosts {rate[2]:.1f} checks/min")
    print(
        f"ratio 2 hosts / 1 host: {rate[2] / rate[1]:.2f}x  (this machine: {os.cpu_count()} cores shared by the "
        "simulated hosts, the server and the Ray processes; real hosts bring their own chips and cores)"
    )


if __name__ == "__main__":
    main()
