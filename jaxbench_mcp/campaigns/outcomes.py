"""The three outcomes of an agent's final kernel, for rewards: correct, the candidate's failure, or the
machinery's failure, which is never scored as the candidate's fault.

    outcome(status, machinery_failed=False)   "correct" | "candidate_failure" | "infra_failure"
    rewards(outcome, speedup)                 the reward variants: correct, fast_1, log_speedup

An infrastructure failure is a `server_error` verdict (the server's own machinery failed: a worker that did not
start, an internal error, a lost fleet host), or a call that never produced a verdict at all: the MCP call timed
out, the server's process died, the connection was lost. A trainer should drop or retry such a rollout, not
reward or punish it; `rewards` gives None there for that reason. Every other verdict that is not `correct`
(incorrect, invalid_kernel, lowering/compile/runtime errors, a stage timeout of the candidate, a crash of its
process, no_pallas) and no kernel at all are the candidate's failure.

Stdlib only (and the taxonomy): frameworks that drive agents import it without importing jax.
"""

from __future__ import annotations

import math
from typing import Literal

from jaxbench_mcp.taxonomy import Status

Outcome = Literal["correct", "candidate_failure", "infra_failure"]
CORRECT: Outcome = "correct"
CANDIDATE_FAILURE: Outcome = "candidate_failure"
INFRA_FAILURE: Outcome = "infra_failure"

# Verdict statuses that say the machinery failed, not the candidate (the taxonomy's own words).
INFRA_STATUSES = frozenset({Status.SERVER_ERROR.value})
# log-speedup is clipped to this range, so that one outlier (an estimate far off) cannot dominate a batch.
LOG_SPEEDUP_CLIP = math.log(100.0)


def outcome(status: str | None, machinery_failed: bool = False) -> Outcome:
    """The outcome of one final kernel's verdict. `status` None with `machinery_failed` False means the agent
    gave no kernel (its failure); with `machinery_failed` True, that no verdict came back (the machinery's)."""
    if machinery_failed:
        return INFRA_FAILURE
    if status is None:
        return CANDIDATE_FAILURE
    if status not in {s.value for s in Status}:
        raise ValueError(f"unknown verdict status {status!r}")
    if status in INFRA_STATUSES:
        return INFRA_FAILURE
    return CORRECT if status == Status.CORRECT else CANDIDATE_FAILURE


def rewards(result: Outcome, speedup: float | None = None) -> dict[str, float | None]:
    """The reward variants of one outcome: `correct` (1/0), `fast_1` (correct and faster than XLA, JAXBench's
    fast_1), `log_speedup` (log of the speedup over XLA when correct, clipped to +-log 100; 0 when not correct
    or not comparable). All None for an infrastructure failure: no reward is the candidate's."""
    if result == INFRA_FAILURE:
        return {"correct": None, "fast_1": None, "log_speedup": None}
    ok = result == CORRECT
    fast = ok and speedup is not None and speedup > 1.0
    log_speedup = 0.0
    if ok and speedup is not None and speedup > 0 and math.isfinite(speedup):
        log_speedup = max(-LOG_SPEEDUP_CLIP, min(LOG_SPEEDUP_CLIP, math.log(speedup)))
    return {"correct": float(ok), "fast_1": float(fast), "log_speedup": log_speedup}
