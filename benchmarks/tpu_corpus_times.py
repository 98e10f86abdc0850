"""Device times of the whole corpus on an attached TPU: per workload, the XLA baseline, our solution and the expert
kernel, each timed with the product's own timer (perf/measuring: the TPU's profiler trace, fresh full-size inputs
for every run), and the solution's full-size output beside the baseline's on the same inputs.

Run it on a TPU host; it writes one JSON record (benchmarks/data/tpu_times_<generation>.json is such a record) that
benchmarks/measured_fidelity.py holds our static estimates against. It imports only the workload modules, the
solutions, the expert modules and perf/measuring, so it also runs under an older jax than the one the package pins
(the record says which jax measured it).

Usage: python benchmarks/tpu_corpus_times.py [--workloads 1p,8p] [--shard K/N] [--iterations 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxbench_mcp.catalog import workloads  # noqa: E402
from jaxbench_mcp.perf import measuring  # noqa: E402

# Seeds of the timed inputs: far from the ones JAXBench publishes (42) and from any check's.
FIRST_SEED = 5_000


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _experts() -> tuple[dict, dict]:
    """The expert modules by workload id, each loaded on its own: one that needs tokamax where it is not installed
    is left out with its error, and the others are still timed."""
    found, failed = {}, {}
    for path in sorted((ROOT / "tokamax_refs").glob("p*.py")):
        try:
            module = _load(path, f"expert_{path.stem}")
            found[module.WORKLOAD_ID] = module
        except Exception as exc:  # noqa: BLE001
            failed[path.stem] = f"import: {exc!r}"[:600]
    return found, failed


def _timed(fn, w, iterations: int) -> dict:
    """Median, min and spread of `fn`'s device time over fresh full-size inputs, or the error that stopped it."""
    t0 = time.perf_counter()
    try:
        samples = measuring.time_on_device(
            fn, w.static_argnums, lambda i: w.create_inputs("full", FIRST_SEED + i), iterations
        )
    except Exception as exc:  # noqa: BLE001 - recorded, the next kernel is timed anyway
        return {"error": "".join(traceback.format_exception_only(type(exc), exc)).strip()[-600:]}
    return {
        "median_us": samples.median_us,
        "min_us": samples.min_us,
        "spread_pct": samples.spread_pct,
        "runs": len(samples.samples_us),
        "wall_s": time.perf_counter() - t0,
    }


def _agreement(solution, w) -> dict:
    """How far the solution's full-size output lies from the baseline's on one input (both as run on the chip):
    the largest difference over the largest magnitude of the baseline's output. A sanity figure, not a verdict."""
    try:
        inputs = w.create_inputs("full", FIRST_SEED)
        static = tuple(w.static_argnums)
        ours = jax.jit(solution, static_argnums=static)(*inputs)
        theirs = jax.jit(w.module.reference, static_argnums=static)(*inputs)
        a = np.asarray(jax.tree_util.tree_leaves(ours)[0], dtype=np.float32)
        b = np.asarray(jax.tree_util.tree_leaves(theirs)[0], dtype=np.float32)
        if a.shape != b.shape:
            return {"error": f"shapes differ: {a.shape} against {b.shape}"}
        scale = float(np.max(np.abs(b))) or 1.0
        return {
            "max_abs_diff_over_max_abs": float(np.max(np.abs(a - b))) / scale,
            "finite": bool(np.isfinite(a).all()),
        }
    except Exception as exc:  # noqa: BLE001
        return {"error": "".join(traceback.format_exception_only(type(exc), exc)).strip()[-600:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="", help="comma-separated ids or prefixes (default: all 50)")
    parser.add_argument("--shard", default="1/1", help="K/N: the K-th of N equal slices of the workloads")
    parser.add_argument("--iterations", type=int, default=measuring.DEFAULT_ITERATIONS)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tpu_times.json"))
    args = parser.parse_args()

    if jax.default_backend() != "tpu":
        sys.exit(f"needs an attached TPU; this process runs on {jax.default_backend()}")
    chosen = [w for w in workloads.all_workloads() if w.tier != "custom"]
    if args.workloads:
        wanted = args.workloads.split(",")
        chosen = [w for w in chosen if any(w.id == x or w.id.startswith(x + "_") for x in wanted)]
    k, n = (int(x) for x in args.shard.split("/"))
    chosen = chosen[k - 1 :: n]

    device = jax.devices()[0]
    record = {
        "device_kind": device.device_kind,
        "jax": jax.__version__,
        "iterations": args.iterations,
        "warmup_runs": measuring.WARMUP_RUNS,
        "timer": "perf/measuring.time_on_device (TPU profiler trace, XLA Modules line)",
        "workloads": {},
    }
    experts, record["experts_not_loaded"] = _experts()
    for w in chosen:
        entry: dict = {}
        entry["xla"] = _timed(w.module.reference, w, args.iterations)
        try:
            solution = _load(ROOT / "solutions" / f"{w.id}.py", f"solution_{w.number}").workload
        except Exception as exc:  # noqa: BLE001
            entry["solution"] = {"error": f"import: {exc!r}"[:600]}
        else:
            entry["solution"] = _timed(solution, w, args.iterations)
            entry["agreement"] = _agreement(solution, w)
        if w.id in experts:
            entry["expert"] = _timed(experts[w.id].workload, w, args.iterations)
        record["workloads"][w.id] = entry
        summary = {
            part: round(v["median_us"], 1) if "median_us" in v else "error"
            for part, v in entry.items()
            if part != "agreement"
        }
        print(w.id, summary, entry.get("agreement"), flush=True)
        Path(args.out).write_text(json.dumps(record, indent=1))  # after each workload: a timeout keeps the rest
        jax.clear_caches()


if __name__ == "__main__":
    main()
