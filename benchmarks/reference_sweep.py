"""Time every workload's reference at small size: first call (trace + compile + run) and steady state.

Prints one row per workload and the totals; the goal is a sweep of all 50 in under 60 s on a 2-core host.
Usage: python benchmarks/reference_sweep.py [--repeats 5]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

from jaxbench_mcp.catalog import workloads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sweep_start = time.perf_counter()
    first_total = steady_total = inputs_total = 0.0
    print(f"{'workload':<58} {'inputs s':>9} {'first s':>8} {'steady ms':>10}")
    for w in workloads.all_workloads():
        t0 = time.perf_counter()
        inputs = jax.block_until_ready(w.create_inputs("small", seed=42))
        t1 = time.perf_counter()
        fn = w.jitted_reference()
        jax.block_until_ready(fn(*inputs))
        t2 = time.perf_counter()
        steady = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            jax.block_until_ready(fn(*inputs))
            steady.append(time.perf_counter() - t)
        median = statistics.median(steady)
        inputs_total, first_total, steady_total = inputs_total + t1 - t0, first_total + t2 - t1, steady_total + median
        print(f"{w.id:<58} {t1 - t0:>9.3f} {t2 - t1:>8.3f} {median * 1e3:>10.2f}")
    wall = time.perf_counter() - sweep_start
    print(
        f"\ninputs {inputs_total:.1f} s; first calls (with compilation) {first_total:.1f} s; "
        f"steady state {steady_total * 1e3:.0f} ms; whole sweep {wall:.1f} s (goal < 60 s)"
    )
    print(f"ratio first-call / steady-state: {first_total / steady_total:.0f}x")


if __name__ == "__main__":
    main()
