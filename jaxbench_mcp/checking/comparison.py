"""Comparing a candidate's outputs with the truth. Runs in a trusted process, never the candidate's."""

import numpy as np

from jaxbench_mcp.checking.truth import ACCUMULATION_ULPS, TOLERANCE_FACTOR, Truth
from jaxbench_mcp.models import SeedReport
from jaxbench_mcp.taxonomy import ErrorClass

# JAXBench's own check (harness/correctness.py): allclose on float32-cast outputs.
JAXBENCH_ATOL = 1e-2
JAXBENCH_RTOL = 1e-2


def jaxbench_allclose(candidate, baseline) -> bool:
    cand = np.asarray(candidate, dtype=np.float32)
    base = np.asarray(baseline, dtype=np.float32)
    return cand.shape == base.shape and bool(np.allclose(cand, base, atol=JAXBENCH_ATOL, rtol=JAXBENCH_RTOL))


def constant_output_passes(baseline) -> bool:
    """Whether all zeros, or the output's own mean everywhere, passes JAXBench's check."""
    base = np.asarray(baseline, dtype=np.float32)
    return jaxbench_allclose(np.zeros_like(base), base) or jaxbench_allclose(np.full_like(base, base.mean()), base)


def compare(
    candidate: np.ndarray, candidate_dtype: str, t: Truth, seed_index: int
) -> tuple[SeedReport | None, ErrorClass | None, str]:
    """Compare one output with the truth: (report, error class or None, message)."""
    if tuple(candidate.shape) != tuple(t.truth.shape):
        return (
            None,
            ErrorClass.SHAPE_MISMATCH,
            f"output shape {list(candidate.shape)} but the workload returns {list(t.truth.shape)}",
        )
    if candidate_dtype != t.dtype:
        return None, ErrorClass.DTYPE_MISMATCH, f"output dtype {candidate_dtype} but the workload returns {t.dtype}"
    cand = candidate.astype(np.float64)
    finite = np.isfinite(t.truth)
    if finite.all() and np.isfinite(cand).all():  # the usual case, in half the passes over the arrays
        bad = np.zeros((), bool)
        diff = np.abs(cand - t.truth)
        nan_count = inf_count = 0
    else:
        bad = finite & ~np.isfinite(cand)
        diff = np.where(finite, np.abs(np.nan_to_num(cand, nan=np.inf) - t.truth), 0.0)
        nan_count, inf_count = int(np.isnan(cand).sum()), int(np.isinf(cand).sum())
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    max_abs = float(diff[worst]) if diff.size else 0.0
    rel = diff / np.maximum(np.abs(t.truth), 1e-30)
    if not finite.all():
        rel = np.where(finite, rel, 0.0)  # a NaN truth would make its (zero) diff NaN here
    report = SeedReport(
        seed_index=seed_index,
        passed=bool(not bad.any() and max_abs <= t.tolerance),
        max_abs_error=max_abs,
        max_rel_error=float(rel.max(initial=0.0)),
        tolerance=t.tolerance,
        baseline_max_abs_error=t.baseline_error,
        worst_index=[int(i) for i in worst],
        worst_candidate=float(cand[worst]) if diff.size else 0.0,
        worst_truth=float(t.truth[worst]) if diff.size else 0.0,
        nan_count=nan_count,
        inf_count=inf_count,
        jaxbench_allclose=jaxbench_allclose(candidate, t.baseline),
    )
    if bad.any():
        where = [int(i) for i in np.argwhere(bad)[0]]
        return (
            report,
            ErrorClass.NAN_OUTPUT,
            (
                f"{int(bad.sum())} of {bad.size} outputs are NaN/Inf where the truth is finite (first at {where}); "
                "uninitialised memory reads as NaN here, so this usually means an accumulator or output block "
                "that is never initialised or never written"
            ),
        )
    if not report.passed:
        return (
            report,
            ErrorClass.WRONG_VALUES,
            (
                f"max |candidate - truth| = {max_abs:.4g} at {report.worst_index} "
                f"(candidate {report.worst_candidate:.5g}, "
                f"truth {report.worst_truth:.5g}); allowed {t.tolerance:.3g}, {_allowance(t)}"
            ),
        )
    return report, None, ""


def _allowance(t: Truth) -> str:
    """Where the tolerance comes from: the baseline's error, or the rounding floor when that is larger."""
    if t.tolerance > TOLERANCE_FACTOR * t.baseline_error * (1 + 1e-9):
        return (
            "the floor of a correct kernel's own rounding at the output's largest magnitude (one ulp of its dtype "
            f"plus {ACCUMULATION_ULPS:g} float32 ulps), since {TOLERANCE_FACTOR:g}x the native-dtype baseline's "
            f"own error {t.baseline_error:.3g} is smaller"
        )
    return f"which is {TOLERANCE_FACTOR:g}x the native-dtype baseline's own error {t.baseline_error:.3g}"
