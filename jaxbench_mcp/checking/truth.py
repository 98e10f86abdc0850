"""The truth a candidate is judged against, built on the trusted side from hidden seeds.

The truth is the workload's reference evaluated one precision level above its output dtype (float32 for bf16
outputs, float64 for float32 ones) on the very inputs the worker gets. The tolerance is calibrated per workload
and seed: a candidate passes when its worst error is within TOLERANCE_FACTOR times the worst error of the
workload's own native-dtype baseline, and never tighter than a correct kernel's own rounding at the output's largest
magnitude: one ulp of the output's dtype for the final cast, plus ACCUMULATION_ULPS float32 ulps for accumulating in
an order other than the truth's (that part shows only in float32 outputs). The floor matters where the output has
few elements (a scalar loss): the baseline's error is then one signed sample that can land arbitrarily near the
truth (13p's baseline: 9 to 1160 x eps(float32) x |loss| over six seeds here; 0.19 once in CI).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jaxbench_mcp.catalog import workloads

TOLERANCE_FACTOR = 2.0
# 13p's correct fused kernel (128256-term logsumexps in float32) was off its scalar loss by up to 1.24 x eps(float32)
# x |loss| over 100 seeds, and by 1.17 in the CI run that failed it under a floor of one ulp.
ACCUMULATION_ULPS = 2.0


@dataclass(frozen=True)
class Truth:
    truth: np.ndarray  # float64
    baseline: np.ndarray  # the native-dtype reference, as float32
    dtype: str
    tolerance: float
    baseline_error: float


def fresh_seed() -> int:
    """A hidden seed from the OS: never 42 (the public one), never reused across checks."""
    return secrets.randbelow(2**31 - 1) + 43


def inputs_for(workload_id: str, size: str, seed: int) -> tuple:
    """The inputs for a hidden seed, built here: the worker gets the arrays, never the seed."""
    return workloads.get_workload(workload_id).create_inputs(size, seed=seed)


def truth_for(workload_id: str, size: str, seed: int) -> Truth:
    """The truth, the native baseline and the calibrated tolerance for one (workload, size, seed)."""
    return truth_of(workloads.get_workload(workload_id), inputs_for(workload_id, size, seed))


def truth_of(w, inputs: tuple) -> Truth:
    """The truth, the native baseline and the calibrated tolerance for one set of a workload's inputs."""
    baseline = _first_leaf(w.jitted_reference()(*inputs))
    wide = jnp.float64 if baseline.dtype == np.float32 or baseline.dtype == np.float64 else jnp.float32
    with jax.enable_x64(wide == jnp.float64):
        truth = _first_leaf(jax.jit(w.module.reference, static_argnums=w.static_argnums)(*_upcast(inputs, wide)))
    truth = truth.astype(np.float64)
    base32 = baseline.astype(np.float32)
    finite = np.isfinite(truth)
    baseline_error = float(np.max(np.abs(base32[finite] - truth[finite]), initial=0.0))
    scale = float(np.max(np.abs(truth[finite]), initial=0.0))
    floor = 0.0
    if jnp.issubdtype(baseline.dtype, jnp.floating):
        floor = (float(jnp.finfo(baseline.dtype).eps) + ACCUMULATION_ULPS * float(jnp.finfo(jnp.float32).eps)) * scale
    tolerance = max(TOLERANCE_FACTOR * baseline_error, floor)
    return Truth(
        truth=truth, baseline=base32, dtype=str(baseline.dtype), tolerance=tolerance, baseline_error=baseline_error
    )


def _upcast(inputs: tuple, dtype) -> tuple:
    return tuple(
        x.astype(dtype) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x for x in inputs
    )


def _first_leaf(out):
    return np.asarray(jax.tree_util.tree_leaves(out)[0])
