"""The degenerate-output audit: classic no-op candidates against every workload's trusted comparison.

For each workload and hidden seed, five outputs that a kernel could return without computing the
workload are judged exactly as a candidate's output is (checking/truth's truth_for + checking/comparison's compare, the
trusted side of a check; no worker runs):

  zeros     all zeros in the output dtype
  ones      all ones
  mean      a constant equal to the truth's own mean at that seed (an oracle constant)
  input     the first array input whose element count matches the output, reshaped and cast
  replay    the reference's output at seed 42 (JAXBench's published seed), replayed on another seed

Every one must be judged not correct. The margin is the candidate's worst error over the tolerance
(min over seeds): above 1 is caught, and the larger the safer.

Usage: python benchmarks/degenerate_audit.py [--seeds 1,7] [--workload ID ...]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np

CANDIDATES = ("zeros", "ones", "mean", "input", "replay")
DEFAULT_SEEDS = (1, 7)


def _as_output(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round to the output dtype, then widen to float32 as the worker hands outputs over."""
    import jax.numpy as jnp

    rounded = np.asarray(jnp.asarray(values).astype(dtype))
    return rounded.astype(np.float32) if jnp.issubdtype(rounded.dtype, jnp.floating) else rounded


def candidates(workload_id: str, truth, seed: int, replayed: np.ndarray) -> dict[str, np.ndarray | None]:
    """The no-op outputs for one seed; None where a candidate does not apply (no input of the output's size)."""
    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.checking.truth import inputs_for

    w = workloads.get_workload(workload_id)
    shape, dtype = truth.truth.shape, truth.dtype
    made = {
        "zeros": _as_output(np.zeros(shape), dtype),
        "ones": _as_output(np.ones(shape), dtype),
        "mean": _as_output(np.full(shape, float(np.mean(truth.truth))), dtype),
        "input": None,
        "replay": _as_output(replayed, dtype),
    }
    inputs = inputs_for(workload_id, "small", seed)
    for i, x in enumerate(inputs):
        if i not in w.static_argnums and hasattr(x, "shape") and int(np.prod(x.shape)) == int(np.prod(shape)):
            made["input"] = _as_output(np.asarray(x).reshape(shape), dtype)
            break
    return made


def audit_workload(workload_id: str, seeds=DEFAULT_SEEDS) -> list[dict]:
    """One row per candidate: {"workload", "candidate", "caught", "margin", "error", "tolerance",
    "error_class"}; margin = worst error / tolerance, the smallest over the seeds (inf for a NaN
    output); caught is None where the candidate does not apply."""
    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.checking.comparison import compare
    from jaxbench_mcp.checking.truth import inputs_for, truth_for

    w = workloads.get_workload(workload_id)
    inputs42 = inputs_for(workload_id, "small", 42)
    replayed = np.asarray(w.jitted_reference()(*inputs42)).astype(np.float64)
    rows = {
        name: {
            "workload": workload_id,
            "candidate": name,
            "caught": None,
            "margin": None,
            "error": None,
            "tolerance": None,
            "error_class": None,
        }
        for name in CANDIDATES
    }
    for index, seed in enumerate(seeds):
        truth = truth_for(workload_id, "small", seed)
        for name, out in candidates(workload_id, truth, seed, replayed).items():
            if out is None:
                continue
            report, error_class, _ = compare(out, truth.dtype, truth, index)
            caught = error_class is not None
            margin = report.max_abs_error / report.tolerance if report.tolerance > 0 else float("inf")
            if report.nan_count or report.inf_count:
                margin = float("inf")
            row = rows[name]
            # The weakest seed decides: a candidate is caught only if every seed catches it.
            if row["caught"] is None or margin < row["margin"]:
                row.update(
                    margin=margin,
                    error=report.max_abs_error,
                    tolerance=report.tolerance,
                    error_class=error_class.value if error_class else None,
                )
            row["caught"] = caught if row["caught"] is None else (row["caught"] and caught)
    return list(rows.values())


def main() -> None:
    from jaxbench_mcp.catalog import workloads

    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)))
    parser.add_argument("--workload", nargs="*")
    args = parser.parse_args()
    seeds = tuple(int(s) for s in args.seeds.split(","))
    ids = args.workload or [w.id for w in workloads.all_workloads()]
    start = time.perf_counter()
    print(f"seeds {seeds}; margin = worst |candidate - truth| / tolerance, the smallest over the seeds (> 1: caught)")
    print(f"{'workload':<58} " + " ".join(f"{c:>14}" for c in CANDIDATES))
    missed = []
    for wid in ids:
        rows = audit_workload(wid, seeds)
        cells = []
        for row in rows:
            if row["caught"] is None:
                cells.append(f"{'n/a':>14}")
                continue
            mark = "ok" if row["caught"] else "MISSED"
            cells.append(f"{mark + ' ' + _short(row['margin']):>14}")
            if not row["caught"]:
                missed.append((wid, row["candidate"]))
        print(f"{wid:<58} " + " ".join(cells), flush=True)
    print(f"{len(ids)} workloads in {time.perf_counter() - start:.0f} s; missed: {missed or 'none'}")


def _short(margin: float) -> str:
    if margin == float("inf"):
        return "inf"
    return f"{margin:.3g}x" if margin < 1e4 else f"{margin:.1e}x"


if __name__ == "__main__":
    main()
