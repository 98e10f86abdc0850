"""Latency of one check, measured side by side in one run, as ratios.

  unavoidable: the work a check cannot skip, done inline in this process: trace the candidate once at full
               size, once at small size and, where the workload has one, once at its full_reduction size;
               lower + deviceless compile the recorded full-size program for v6e, then run the recorded small
               program in TPU interpret mode on 3 seeds and the full_reduction program on one more, each
               beside the uninitialised-memory probe, compiled once per size (what the worker does since the
               candidate is traced only once per size, and since grid orders are drawn at run time)
  warm:        Checker.check on a warm checker (two sandboxed spare workers ready: one traces the candidate,
               the other judges the recorded programs), as the server does; its fresh hidden seeds' truth is
               computed while the judging worker compiles
  cold:        a one-shot `jaxbench-mcp check` CLI process (imports jax, starts a worker, computes the truth)
  on demand:   Checker.check with no spare ready (a TPU host's every check: one process holds the chip; a
               burst of checks past the spares): the judging worker starts beside the trace job and skips the
               warm-up kernel, as the checker does
  serial:      the same, but the judging worker starts once the trace job is done and warms up first (the
               checker before it started that worker ahead, cold)
The isolation the checker uses (bubblewrap where installed) is printed with the figures, and the host's CPU-seconds
(/proc/stat: run it on a quiet host) per check warm, counting the two spares' start and warm-up kernel, against on
demand: the warm-up buys latency with CPU, which is why spares are warmed only when the host is idle
(jaxbench_mcp.sandbox.jobs.WorkerPool).

Goals: warm <= 1.3x unavoidable; cold >= 3x warm; on demand < serial.
Usage: python benchmarks/check_latency.py [--kernel tests/kernels/good_rmsnorm.py --workload 12p_RMSNorm] [--repeats 3]
       (a workload with a full_reduction size: --kernel solutions/8p_GEMM.py --workload 8p_GEMM)
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent


def unavoidable(workload_id: str, kernel: Path, seeds: list[int]) -> float:
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp.catalog import targets, workloads
    from jaxbench_mcp.sandbox.worker import _uninitialised_probe, interpreted_with_probe

    w = workloads.get_workload(workload_id)
    spec = importlib.util.spec_from_file_location(f"bench_candidate_{time.monotonic_ns()}", kernel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sizes = ["small"] * len(seeds)
    if workloads.FULL_REDUCTION in w.sizes:
        seeds, sizes = [*seeds, seeds[-1] + 1], [*sizes, workloads.FULL_REDUCTION]
    # Input creation is not part of the timed work.
    inputs = [w.create_inputs(size, seed=s) for s, size in zip(seeds, sizes, strict=True)]
    static = tuple(w.static_argnums)
    probe = _uninitialised_probe()
    t0 = time.perf_counter()
    with targets.chip_context("v6e"):
        programs = {
            size: jax.make_jaxpr(module.workload, static_argnums=static)(*workloads.abstract_inputs(w, size))
            for size in ["full", *dict.fromkeys(sizes)]
        }
    full_args = [a for i, a in enumerate(workloads.abstract_inputs(w, "full")) if i not in static]
    targets.deviceless_compile(targets.replay(programs["full"]), full_args, "v6e")
    params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
    compiled: dict = {}
    for seed, size, args in zip(seeds, sizes, inputs, strict=True):
        dynamic = [a for i, a in enumerate(args) if i not in static]
        if size not in compiled:
            compiled[size] = interpreted_with_probe(programs[size], params, dynamic, probe)
        compiled[size](dynamic, seed)
    return time.perf_counter() - t0


def host_cpu_seconds() -> float:
    """Every process's user and system time on this host so far (the spares and workers are other processes)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def on_demand(workload_id: str, source: str, serial: bool) -> float:
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.requests import CheckRequest

    checker = Checker(spares=0, slots=1)
    if serial:
        pool = checker.pool
        pool.has_spare = lambda tracer=False: True  # type: ignore[method-assign]  # nothing starts ahead
        pool.take = lambda tracer=False: pool._start(tracer, warm=True)  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        verdict, outcome = checker.check(CheckRequest.of(workload_id, source))
        seconds = time.perf_counter() - t0
        outcome.cleanup()
        assert verdict.status == "correct", verdict.summary()
        return seconds
    finally:
        checker.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="12p_RMSNorm")
    parser.add_argument("--kernel", type=Path, default=ROOT / "tests/kernels/good_rmsnorm.py")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.requests import CheckRequest

    source = args.kernel.read_text()
    checker = Checker(slots=1)  # its spares, as the server keeps them: two per slot (trace, then judge)
    checker.start()
    # Warms this process's reference compile, as a server's first check does.
    checker.check(CheckRequest.of(args.workload, source))[1].cleanup()
    hidden = [101, 102, 103]  # any seeds: the unavoidable work does not depend on them
    unavoidable(args.workload, args.kernel, hidden)  # warm this process's jax caches like the worker's warm-up

    inline, warm, cold, ahead, serial, warm_cpu, ahead_cpu = [], [], [], [], [], [], []
    checker.queue.on_idle = None  # the spares are refilled below, where their CPU is counted
    checker.pool.wait_warm()
    for _ in range(args.repeats):
        c0 = host_cpu_seconds()
        ahead.append(on_demand(args.workload, source, serial=False))
        ahead_cpu.append(host_cpu_seconds() - c0)
        serial.append(on_demand(args.workload, source, serial=True))
        inline.append(unavoidable(args.workload, args.kernel, hidden))
        c0 = host_cpu_seconds()
        t0 = time.perf_counter()
        verdict, outcome = checker.check(CheckRequest.of(args.workload, source))
        warm.append(time.perf_counter() - t0)
        outcome.cleanup()
        assert verdict.status == "correct", verdict.summary()
        checker.pool.fill()  # the two spares the check took, started and warmed as after an agent's think time
        checker.pool.wait_warm()
        warm_cpu.append(host_cpu_seconds() - c0)
        with tempfile.TemporaryDirectory() as home:
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "jaxbench_mcp.frontends.cli",
                    "check",
                    "--workload",
                    args.workload,
                    "--kernel",
                    str(args.kernel),
                ],
                check=True,
                capture_output=True,
                env={**os.environ, "JAXBENCH_MCP_HOME": home},
            )
            cold.append(time.perf_counter() - t0)
    checker.close()
    u, w, c = statistics.median(inline), statistics.median(warm), statistics.median(cold)
    print(f"{args.workload} with {args.kernel.name}, median of {args.repeats}, isolation {checker.isolation}:")
    print(f"  unavoidable work inline: {u:.2f} s")
    print(f"  warm check:              {w:.2f} s  = {w / u:.2f}x unavoidable (goal <= 1.3x)")
    print(f"  cold one-shot CLI check: {c:.2f} s  = {c / w:.2f}x warm (goal >= 3x)")
    a, s = statistics.median(ahead), statistics.median(serial)
    print(f"  on demand (no spare):    {a:.2f} s  = {a / s:.2f}x serial {s:.2f} s (goal < 1)")
    wc, ac = statistics.median(warm_cpu), statistics.median(ahead_cpu)
    print(
        f"  host CPU per check:      warm {wc:.2f} s (with its spares' warm-up) = {wc / ac:.2f}x on demand {ac:.2f} s"
    )


if __name__ == "__main__":
    main()
