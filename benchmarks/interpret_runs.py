"""The run stage of a check, measured side by side in one run, as ratios.

A check runs the recorded small program in TPU interpret mode on 3 hidden seeds (and the full_reduction program
on one more where the workload has it), each run visiting the kernels' 'parallel' grid axes in an order of its
own. jax draws that order while it traces, so each run used to be a compile of its own; the orders are now drawn
while the program runs (jaxbench_mcp.internals.interpret.grid_orders) and the runs at one size share a compile.

  per run:  trace, lower and compile the interpreted program for every run, the order in its InterpretParams
  per size: one compile per size (targets.interpreted_on_cpu), each run's order drawn from its own seed

Both run the same programs with the worker's strict parameters and its uninitialised-memory probe, in this
process. Goal: per size < per run on every solution with more than one run per size.

Measured on a quiet 2-core host (best of two each, seconds for all of a check's runs, per run / per size):
12p_RMSNorm 0.93 / 0.37 (0.40x), 13p_Cross_Entropy 7.53 / 6.27 (0.83x), 1p_Flash_Attention 10.75 / 9.51 (0.88x),
10p_Sparse_MoE 34.02 / 30.99 (0.91x).
Usage: python benchmarks/interpret_runs.py [--workloads 12p_RMSNorm,13p_Cross_Entropy,1p_Flash_Attention,10p_Sparse_MoE]
"""

import argparse
import importlib.util
import os
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
SEEDS = (101, 102, 103)


def runs(workload_id: str) -> tuple[dict, list[tuple[str, list]]]:
    """The recorded program per size, and each run's (size, dynamic inputs), as a check has them."""
    import jax

    from jaxbench_mcp.catalog import targets, workloads

    w = workloads.get_workload(workload_id)
    spec = importlib.util.spec_from_file_location(f"bench_{workload_id}", ROOT / "solutions" / f"{workload_id}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sizes = ["small"] * len(SEEDS) + [workloads.FULL_REDUCTION] * (workloads.FULL_REDUCTION in w.sizes)
    static = tuple(w.static_argnums)
    with targets.chip_context("v6e"):
        programs = {
            size: jax.make_jaxpr(module.workload, static_argnums=static)(*workloads.abstract_inputs(w, size))
            for size in dict.fromkeys(sizes)
        }
    inputs = [
        (size, [a for i, a in enumerate(w.create_inputs(size, seed=seed)) if i not in static])
        for seed, size in zip([*SEEDS, SEEDS[-1] + 1], sizes, strict=False)
    ]
    return programs, inputs


def per_run(programs: dict, inputs: list) -> float:
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp.sandbox.worker import _uninitialised_probe, interpreted_with_probe

    probe = _uninitialised_probe()
    t0 = time.perf_counter()
    for seed, (size, args) in enumerate(inputs):
        params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True, random_seed=seed)
        interpreted_with_probe(programs[size], params, args, probe)(args, None)
    return time.perf_counter() - t0


def per_size(programs: dict, inputs: list) -> float:
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp.sandbox.worker import _uninitialised_probe, interpreted_with_probe

    probe = _uninitialised_probe()
    params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
    compiled: dict = {}
    t0 = time.perf_counter()
    for seed, (size, args) in enumerate(inputs):
        if size not in compiled:
            compiled[size] = interpreted_with_probe(programs[size], params, args, probe)
        compiled[size](args, seed)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="12p_RMSNorm,13p_Cross_Entropy,1p_Flash_Attention,10p_Sparse_MoE")
    args = parser.parse_args()
    per_run(*runs("12p_RMSNorm"))  # the process's one-off costs (first compiles, interpreter set-up), untimed
    print(f"{'workload':32} {'runs':>4} {'per run s':>10} {'per size s':>11} {'ratio':>6}")
    for workload_id in args.workloads.split(","):
        programs, inputs = runs(workload_id)
        # Alternated, so that neither order always runs first.
        old, new = per_run(programs, inputs), per_size(programs, inputs)
        new2, old2 = per_size(programs, inputs), per_run(programs, inputs)
        old, new = min(old, old2), min(new, new2)
        print(f"{workload_id:32} {len(inputs):>4} {old:>10.2f} {new:>11.2f} {new / old:>5.2f}x")


if __name__ == "__main__":
    main()
