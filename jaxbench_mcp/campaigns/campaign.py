"""Campaigns: score a whole directory of candidate kernels the way papers report agent runs.

A run directory holds one file per attempt: RUN_DIR/<workload_id>.py, or several as RUN_DIR/<workload_id>/*.py.
`evaluate` checks each (and profiles the correct ones, through JaxBench.profile_kernel, which checks first),
keeps each result in the attempts store under a key of the candidate's content hash, workload, targets, tier
the jax/libtpu versions and a hash of the judging code (so an interrupted campaign resumes and an unchanged kernel
costs nothing, while a changed checker or estimator recomputes), and
writes RUN_DIR/results.json and RUN_DIR/summary.json. `report` turns them into a self-contained report.html
with charts; `compare` puts two runs side by side.

A run directory may also hold trajectories: each sample's ordered attempts, as an agent made them,
RUN_DIR/<workload_id>/<sample>/*.py with an optional RUN_DIR/<workload_id>/<sample>/trajectory.json:

    {"model": "provider/name", "context": "docs" | "none",
     "attempts": [{"file": "attempt_001.py", "turn": 3}, {"file": "attempt_002.py", "turn": 7}]}

(without it the sample's *.py files are its attempts in name order, e.g. attempt_001.py, attempt_002.py).
RUN_DIR/run.json may give the run's "model" and "context" once for all samples. A flat RUN_DIR/<workload_id>.py,
and each RUN_DIR/<workload_id>/<name>.py, is a sample of one attempt. `evaluate` keeps every sample's order.

Conventions (each named in summary.json):
  best attempt   per workload: the correct attempt with the highest speedup vs XLA; else the first attempt
  correct rate   best attempts correct, over attempted workloads and over all 50
  fast_p         share of workloads whose best attempt is correct AND faster than the reference by more than
                 p (speedup > p), for p in 0, 1.0, 1.2, 2.0; vs XLA over attempted and over all 50, vs the
                 expert over attempted workloads that have an expert kernel
  geomean        geometric mean speedup vs XLA over solved (correct) workloads
  clipped        MaxKernel's convention: every attempted workload counts, failures and slowdowns as 1x
  per-sample correctness   JAXBench's: correct attempts / all attempts (every generated kernel a sample)
  solved samples           samples (trajectories) with at least one correct attempt / all samples
  pass@k         per workload with n >= k samples, c of them solved: 1 - C(n-c, k) / C(n, k) (the unbiased
                 estimator of Chen et al. 2021), averaged over those workloads
  to first correct         per solved sample, the 1-based index of its first correct attempt (checks) and
                           that attempt's turn (turns, where trajectory.json gives them): mean and median
Estimated and measured speeds are never mixed: each speed metric is computed per speed kind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pydantic import BaseModel, Field

from jaxbench_mcp.campaigns import provenance
from jaxbench_mcp.catalog import assets, conditions, expert_refs, targets, workloads
from jaxbench_mcp.errors import AgentError

FAST_P = (0.0, 1.0, 1.2, 2.0)
RESULTS_FILE, SUMMARY_FILE, REPORT_FILE, CHART_FILE = "results.json", "summary.json", "report.html", "speedup.png"
TRAJECTORY_FILE, RUN_FILE = "trajectory.json", "run.json"
PASS_AT_K = (1, 2, 5, 10)
# A run whose attempts name no condition (no run.json, trajectory.json or --context).
UNRECORDED = "unrecorded"
_FAMILIES = (
    ("attention", ("attention", "mha", "retention", "state_space")),
    ("convolution", ("conv",)),
    ("matmul", ("matmul", "gemm", "bmm", "mlp", "moe", "dot")),
    ("normalization", ("norm",)),
    ("loss", ("cross_entropy",)),
)


class CampaignError(AgentError, ValueError):
    """A run directory that cannot be evaluated as it is (the message says what to change)."""


def operator_family(operator: str) -> str:
    name = operator.lower()
    return next((family for family, words in _FAMILIES if any(w in name for w in words)), "other")


class Timings(BaseModel):
    kernel_us: float | None = None
    baseline_us: float | None = None
    pallas_reference_us: float | None = None
    method: str = Field(description="'measured', 'static estimate' or 'roofline only': how these times were obtained")


class Correctness(BaseModel):
    correct: bool
    max_diff: float | None = Field(None, description="Worst |candidate - truth| over the hidden seeds")
    tolerance: float | None = None
    jaxbench_allclose: bool | None = Field(
        None, description="JAXBench's own allclose(1e-2) against the native baseline"
    )


class AttemptResult(BaseModel):
    """One attempt: JAXBench's `evaluate --json` fields, then ours."""

    attempt: str = Field(description="The file, relative to the run directory")
    workload_id: str
    status: str
    error_class: str | None = None
    message: str = ""
    compiled: bool = Field(description="Loaded, traced, lowered and compiled for every target")
    correctness: Correctness
    timings: Timings
    speedup_vs_baseline: float | None = None
    speedup_vs_pallas: float | None = None
    roofline_pct: float | None = Field(
        None, description="The kernel's peak fraction: the workload's roofline over its time, in percent"
    )
    target: str | None
    tier: str
    estimate_kind: str
    sha256: str
    attempt_id: int | None = None
    cached: bool = False
    sample: str = Field("", description="The sample (trajectory) this attempt belongs to")
    index: int = Field(1, description="1-based position of the attempt in its sample")
    turn: int | None = Field(None, description="The agent's turn that produced it (from trajectory.json)")
    model: str | None = None
    context: str = Field(UNRECORDED, description="The condition the attempt was made in: docs | none")
    workload_sha256: str | None = Field(None, description="Content hash of the workload module it was judged by")
    provenance: dict[str, str] = Field(
        default_factory=dict, description="jaxbench_mcp.campaigns.provenance at evaluation"
    )


class Summary(BaseModel):
    run_dir: str
    attempts: int
    workloads_attempted: int
    workloads_total: int
    tier: str
    target: str | None
    speed_kind: str = Field(description="How speeds were obtained; never mixed within one summary")
    interrupted: bool = False
    conventions: dict[str, str]
    compile_rate: float
    correct_rate_attempted: float
    correct_rate_all: float
    status_counts: dict[str, int]
    fast_p_vs_xla_attempted: dict[str, float]
    fast_p_vs_xla_all: dict[str, float]
    fast_p_vs_expert: dict[str, float]
    expert_workloads_attempted: int
    geomean_speedup_vs_xla_solved: float | None
    clipped_geomean_speedup_vs_xla: float | None
    median_roofline_pct_solved: float | None = Field(
        None, description="Median peak fraction (roofline / time, in percent) over solved workloads"
    )
    roofline_pct_solved: dict[str, float] = Field(
        default_factory=dict, description="Share of solved workloads at or above 25%, 50% and 75% of their roofline"
    )
    by_category: dict[str, dict[str, float | int]]
    best: dict[str, str] = Field(description="workload -> its best attempt")
    samples: int = 0
    per_sample_correctness: float = Field(0.0, description="JAXBench's: correct attempts / all attempts")
    solved_sample_rate: float = Field(0.0, description="samples with a correct attempt / all samples")
    pass_at_k: dict[str, float] = Field(default_factory=dict, description="k -> mean unbiased pass@k")
    pass_at_k_workloads: dict[str, int] = Field(default_factory=dict, description="k -> workloads with n >= k")
    checks_to_first_correct: dict[str, float] | None = Field(None, description="mean, median, samples")
    turns_to_first_correct: dict[str, float] | None = Field(None, description="mean, median, samples")
    model: str | None = None
    context: str = UNRECORDED
    provenance: dict[str, str] = Field(default_factory=dict)
    workload_sha256: dict[str, str] = Field(default_factory=dict, description="workload -> module content hash")

    def summary(self) -> str:
        def pct(x):
            return f"{100 * x:.1f}%"

        lines = [
            f"{self.run_dir}: {self.attempts} attempts at {self.workloads_attempted} of {self.workloads_total} "
            f"workloads (tier {self.tier}, target {self.target or 'none'}, speeds: {self.speed_kind})"
            + (" -- INTERRUPTED, partial" if self.interrupted else ""),
            f"compiled {pct(self.compile_rate)} of attempts; correct {pct(self.correct_rate_attempted)} of attempted "
            f"workloads, {pct(self.correct_rate_all)} of all {self.workloads_total}",
            "peak fraction (share of the roofline) over solved: "
            + (
                f"median {self.median_roofline_pct_solved:.0f}%; "
                + ", ".join(f">= {k}%: {pct(v)}" for k, v in self.roofline_pct_solved.items())
                if self.median_roofline_pct_solved is not None
                else "n/a"
            ),
            "fast_p vs XLA (attempted / all): "
            + ", ".join(
                f"p={p}: {pct(self.fast_p_vs_xla_attempted[p])} / {pct(self.fast_p_vs_xla_all[p])}"
                for p in self.fast_p_vs_xla_all
            ),
            f"fast_p vs expert ({self.expert_workloads_attempted} attempted workloads with one): "
            + ", ".join(f"p={p}: {pct(v)}" for p, v in self.fast_p_vs_expert.items()),
            f"geomean speedup vs XLA over solved: {_x(self.geomean_speedup_vs_xla_solved)}; clipped (MaxKernel, "
            f"failures and slowdowns = 1x): {_x(self.clipped_geomean_speedup_vs_xla)}",
            "status: " + ", ".join(f"{k} {v}" for k, v in sorted(self.status_counts.items())),
            f"context {self.context}"
            + (f", model {self.model}" if self.model else "")
            + f": per-sample correctness {pct(self.per_sample_correctness)} of {self.attempts} attempts; "
            f"{pct(self.solved_sample_rate)} of {self.samples} samples solved; "
            + ", ".join(
                f"pass@{k} {pct(v)} ({self.pass_at_k_workloads[k]} workloads)" for k, v in self.pass_at_k.items()
            ),
        ]
        for name, value in (("checks", self.checks_to_first_correct), ("turns", self.turns_to_first_correct)):
            if value:
                lines.append(
                    f"{name} to first correct: mean {value['mean']:.2f}, median {value['median']:g} "
                    f"over {value['samples']:g} solved samples"
                )
        return "\n".join(lines)


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# ---- finding the attempts -----------------------------------------------------------------------


class Found(BaseModel):
    """One attempt found in a run directory, with its place in its sample."""

    workload_id: str
    path: Path
    sample: str
    index: int = 1
    turn: int | None = None
    model: str | None = None
    context: str | None = None


def _read_meta(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CampaignError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CampaignError(f"{path}: must hold a JSON object")
    context = data.get("context")
    if context is not None and context not in ("docs", "none"):
        raise CampaignError(f"{path}: context must be 'docs' or 'none', not {context!r}")
    return data


def _trajectory(workload_id: str, folder: Path, run_dir: Path, defaults: dict) -> list[Found]:
    meta = _read_meta(folder / TRAJECTORY_FILE) if (folder / TRAJECTORY_FILE).is_file() else {}
    sample = str(folder.relative_to(run_dir))
    model, context = meta.get("model", defaults.get("model")), meta.get("context", defaults.get("context"))
    if "attempts" in meta:
        steps = meta["attempts"]
        if not isinstance(steps, list) or not all(isinstance(x, dict) and "file" in x for x in steps):
            raise CampaignError(f"{folder / TRAJECTORY_FILE}: attempts must be a list of {{'file': ..., 'turn': ...}}")
        found = []
        for index, step in enumerate(steps, 1):
            path = folder / step["file"]
            if path.parent != folder or not path.is_file():
                raise CampaignError(f"{folder / TRAJECTORY_FILE}: attempt {step['file']!r} is not a file of {sample}")
            found.append(
                Found(
                    workload_id=workload_id,
                    path=path,
                    sample=sample,
                    index=index,
                    turn=step.get("turn"),
                    model=model,
                    context=context,
                )
            )
        return found
    return [
        Found(workload_id=workload_id, path=path, sample=sample, index=index, model=model, context=context)
        for index, path in enumerate(sorted(folder.glob("*.py")), 1)
    ]


def discover(run_dir: Path) -> tuple[list[Found], list[str]]:
    """Every attempt, in its sample's order, and one problem line per file that cannot be an attempt."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CampaignError(f"{run_dir} is not a directory: give the run directory that holds <workload_id>.py files")
    defaults = _read_meta(run_dir / RUN_FILE) if (run_dir / RUN_FILE).is_file() else {}
    found: list[Found] = []
    problems: list[str] = []
    for path in sorted(run_dir.iterdir()):
        if path.name.startswith((".", "_")) or path.name in (RESULTS_FILE, SUMMARY_FILE, REPORT_FILE, CHART_FILE):
            continue
        files = sorted(path.glob("*.py")) if path.is_dir() else [path] if path.suffix == ".py" else []
        samples = (
            sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
            if path.is_dir()
            else []
        )
        if not files and not samples:
            continue
        name = path.name if path.is_dir() else path.stem
        try:
            workload_id = workloads.get_workload(name).id
        except workloads.UnknownWorkload as exc:
            problems.append(f"{path.relative_to(run_dir)}: skipped, its name is not a workload id ({exc})")
            continue
        found += [
            Found(
                workload_id=workload_id,
                path=f,
                sample=str(f.relative_to(run_dir).with_suffix("")),
                model=defaults.get("model"),
                context=defaults.get("context"),
            )
            for f in files
        ]
        for folder in samples:
            found += _trajectory(workload_id, folder, run_dir, defaults)
    if not found:
        raise CampaignError(
            f"{run_dir} holds no attempt: put one file per attempt as <workload_id>.py or "
            "<workload_id>/<name>.py (e.g. 8p_GEMM.py)" + (f"; skipped: {'; '.join(problems)}" if problems else "")
        )
    return found, problems


# ---- scoring ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _judge_digest() -> str:
    """A hash of what decides a result besides the candidate: this package (the check, the estimate), the
    workloads and the expert kernels. A result cached by other code is not this code's result."""
    h = hashlib.sha256()
    roots = (assets.PACKAGE_DIR, assets.asset_dir("workloads"), assets.asset_dir("tokamax_refs"))
    for root in (*roots, *workloads.custom_dirs()):  # custom workloads decide their results too
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml", ".json") and p.is_file()):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _cache_key(source: str, workload_id: str, target: str | None, tier: str) -> str:
    import jax

    digest = hashlib.sha256(source.encode()).hexdigest()
    versions = f"jax-{jax.__version__}/libtpu-{targets.libtpu_version()}/judge-{_judge_digest()}"
    return f"campaign/{digest}/{workload_id}/{target}/{tier}/{versions}"


def score(bench, workload_id: str, source: str, target: str | None, cancel: threading.Event | None = None) -> dict:
    """Check one attempt and, when correct, profile it (profile_kernel checks first): its AttemptResult fields."""
    profile = bench.profile_kernel(workload_id, source, [target] if target else None, cancel=cancel)
    verdict = profile.verdict
    # Held-out shapes: a kernel correct at the run size is checked at each further named configuration of the
    # workload too (kernels specialised to one shape are the commonest hack after no-ops); the first failure
    # is the attempt's verdict, and a failing attempt gets no speedup.
    for name in workloads.get_workload(workload_id).configs if verdict.status == "correct" else ():
        held = bench.check_kernel(workload_id, source, [target] if target else None, config=name, cancel=cancel)
        if held.status != "correct":
            held.message = f"held-out configuration {name!r}: {held.message}"
            verdict = held
            break
    entry = next((t for t in profile.targets if t.target == target), profile.targets[0] if profile.targets else None)
    run_seeds = [s for s in verdict.seeds if s.size is None]  # the full_reduction run has its own scale
    worst = max((s.max_abs_error for s in run_seeds), default=None)
    compiled = (
        bool(verdict.compiles) and all(c.ok for c in verdict.compiles)
        if target
        else verdict.status not in ("invalid_kernel", "lowering_error", "compile_error")
    )
    correct = verdict.status == "correct"
    return {
        "workload_id": workload_id,
        "status": verdict.status,
        "error_class": verdict.error_class,
        "message": verdict.message[:500],
        "compiled": compiled and verdict.status != "server_error",
        "correctness": Correctness(
            correct=correct,
            max_diff=worst,
            tolerance=min((s.tolerance for s in run_seeds), default=None),
            jaxbench_allclose=verdict.jaxbench_compatible,
        ),
        "timings": Timings(
            kernel_us=entry.candidate_us if entry and correct else None,
            baseline_us=entry.xla_baseline_us if entry and correct else None,
            pallas_reference_us=entry.expert_us if entry and correct else None,
            method=profile.kind,
        ),
        "speedup_vs_baseline": entry.speedup_vs_xla if entry and correct else None,
        "speedup_vs_pallas": entry.speedup_vs_expert if entry and correct else None,
        "roofline_pct": entry.roofline_pct if entry and correct else None,
        "target": target,
        "tier": profile.tier,
        "estimate_kind": profile.kind,
        "attempt_id": profile.attempt_id,
    }


def evaluate(
    run_dir: Path | str,
    bench=None,
    target: str | None = None,
    force: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    jobs: int | None = None,
    context: str | None = None,
    model: str | None = None,
) -> Summary:
    """Score every attempt in run_dir; write results.json and summary.json there; return the summary.

    Up to `jobs` attempts run at once (default: as many as the executor has slots, e.g. one per fleet host).
    Results are cached in the bench's store; force re-runs them. On KeyboardInterrupt the attempts in flight
    are cancelled (their workers killed, nothing cached for them) and what finished is written, with
    summary.interrupted set, before the interrupt goes on.

    `context` and `model` say under which condition and by which model the attempts were made (the campaign's
    condition; run.json and trajectory.json may say it instead, and must not say otherwise)."""
    from jaxbench_mcp import api

    run_dir = Path(run_dir)
    attempts, problems = discover(run_dir)
    if context is not None:
        context = conditions.check_context(context)
        clash = sorted({str(a.path.relative_to(run_dir)) for a in attempts if a.context not in (None, context)})
        if clash:
            raise CampaignError(f"--context {context} contradicts the context recorded for {', '.join(clash[:3])}")
    attempts = [a.model_copy(update={"context": a.context or context, "model": a.model or model}) for a in attempts]
    own = bench is None
    bench = bench or api.JaxBench.one_shot()
    target = targets.check_generation(target) if target else (bench.executor.default_target or None)
    tier = str(bench.executor.tier)
    stop = threading.Event()

    def one(found: Found) -> AttemptResult:
        workload_id, path = found.workload_id, found.path
        source = path.read_text(errors="replace")
        key = _cache_key(source, workload_id, target, tier)
        kept = None if force else bench.store.cache_get(key)
        fields = kept if kept is not None else score(bench, workload_id, source, target, cancel=stop)
        if kept is None and fields["status"] != "server_error":  # the server's failure is worth retrying
            bench.store.cache_put(key, json.loads(json.dumps(fields, default=lambda m: m.model_dump(mode="json"))))
        return AttemptResult(
            attempt=str(path.relative_to(run_dir)),
            sha256=key.split("/")[1],
            cached=kept is not None,
            sample=found.sample,
            index=found.index,
            turn=found.turn,
            model=found.model,
            context=found.context or UNRECORDED,
            workload_sha256=provenance.workload_hash(workload_id),
            provenance=provenance.provenance(found.context or UNRECORDED),
            **fields,
        )

    finished: dict[int, AttemptResult] = {}
    interrupted = False
    pool = ThreadPoolExecutor(max_workers=jobs or max(1, bench.executor.queue().slots), thread_name_prefix="campaign")
    try:
        futures = {pool.submit(one, attempt): index for index, attempt in enumerate(attempts)}
        if progress:
            progress(0, len(attempts), "")
        for future in as_completed(futures):
            index = futures[future]
            finished[index] = future.result()
            if progress:
                progress(
                    len(finished), len(attempts), finished[index].attempt if len(finished) < len(attempts) else "done"
                )
    except BaseException:  # Ctrl-C, or an attempt that failed outright: what finished is still written
        interrupted = True
        stop.set()  # the attempts in flight raise Cancelled within about a second
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        results = [finished[i] for i in sorted(finished)]
        summary = summarize(run_dir, results, tier, target, interrupted)
        (run_dir / RESULTS_FILE).write_text(
            json.dumps({"problems": problems, "attempts": [r.model_dump(mode="json") for r in results]}, indent=2)
        )
        (run_dir / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2))
        if own:
            bench.close()
    return summary


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def best_attempts(results: list[AttemptResult]) -> dict[str, AttemptResult]:
    best: dict[str, AttemptResult] = {}
    for r in results:
        current = best.get(r.workload_id)
        rank = (r.correctness.correct, r.speedup_vs_baseline or 0.0)
        if current is None or rank > (current.correctness.correct, current.speedup_vs_baseline or 0.0):
            best[r.workload_id] = r
    return best


def summarize(
    run_dir: Path, results: list[AttemptResult], tier: str, target: str | None, interrupted: bool = False
) -> Summary:
    total = len(workloads.all_workloads())
    best = best_attempts(results)
    kinds = {r.estimate_kind for r in best.values() if r.correctness.correct}
    if len(kinds) > 1:  # one tier per campaign makes this impossible; refuse rather than mix
        raise CampaignError(f"speeds of different kinds ({', '.join(sorted(kinds))}) cannot be summarised together")
    solved = [r for r in best.values() if r.correctness.correct]
    with_expert = [w for w in best if expert_refs.has_expert(w)]

    def fast(p: float, pool, speed) -> int:
        return sum(1 for r in pool if r.correctness.correct and (speed(r) or 0.0) > p)

    attempted = list(best.values())
    categories: dict[str, dict[str, float | int]] = {}
    for label, key in (("tier", lambda w: w.tier), ("family", lambda w: operator_family(w.operator))):
        for r in attempted:
            name = f"{label}:{key(workloads.get_workload(r.workload_id))}"
            cat = categories.setdefault(name, {"attempted": 0, "correct": 0})
            cat["attempted"] += 1
            cat["correct"] += int(r.correctness.correct)
    for cat in categories.values():
        cat["correct_rate"] = cat["correct"] / cat["attempted"]
    trials = sample_metrics(results)
    peaks = [r.roofline_pct for r in solved if r.roofline_pct]
    return Summary(
        run_dir=str(run_dir),
        attempts=len(results),
        workloads_attempted=len(best),
        workloads_total=total,
        tier=tier,
        target=target,
        speed_kind=next(iter(kinds), "none (no correct attempt)"),
        interrupted=interrupted,
        conventions={
            "best_attempt": "per workload, the correct attempt with the highest speedup vs XLA, else the first attempt",
            "fast_p": "share of workloads whose best attempt is correct and has speedup > p",
            "fast_p_vs_expert": "over attempted workloads that have an expert kernel",
            "geomean": "geometric mean of speedup vs XLA over workloads whose best attempt is correct",
            "peak_fraction": "roofline / time in percent (the workload's FLOPs at peak and its input+output bytes at "
            "HBM bandwidth): read first; over 100% means fewer FLOPs than nominal or missed work",
            "clipped_geomean": (
                "MaxKernel: geometric mean over all attempted workloads of max(1, speedup); failures count as 1x"
            ),
            "compile_rate": "share of attempts that loaded, traced, lowered and compiled for every target",
            "per_sample_correctness": "JAXBench's: correct attempts / all attempts",
            "solved_sample_rate": "samples (trajectories) with at least one correct attempt / all samples",
            "pass_at_k": "per workload with n >= k samples, c solved: 1 - C(n-c,k)/C(n,k); mean over those workloads",
            "to_first_correct": "per solved sample: the 1-based index (checks) and turn of its first correct attempt",
        },
        compile_rate=sum(r.compiled for r in results) / len(results) if results else 0.0,
        correct_rate_attempted=len(solved) / len(best) if best else 0.0,
        correct_rate_all=len(solved) / total,
        status_counts={s: sum(1 for r in results if r.status == s) for s in sorted({r.status for r in results})},
        fast_p_vs_xla_attempted={
            str(p): fast(p, attempted, lambda r: r.speedup_vs_baseline) / len(best) if best else 0.0 for p in FAST_P
        },
        fast_p_vs_xla_all={str(p): fast(p, attempted, lambda r: r.speedup_vs_baseline) / total for p in FAST_P},
        fast_p_vs_expert={
            str(p): fast(p, [best[w] for w in with_expert], lambda r: r.speedup_vs_pallas) / len(with_expert)
            if with_expert
            else 0.0
            for p in FAST_P
        },
        expert_workloads_attempted=len(with_expert),
        geomean_speedup_vs_xla_solved=_geomean([r.speedup_vs_baseline for r in solved if r.speedup_vs_baseline]),
        clipped_geomean_speedup_vs_xla=_geomean(
            [max(1.0, r.speedup_vs_baseline or 1.0) if r.correctness.correct else 1.0 for r in attempted]
        ),
        median_roofline_pct_solved=statistics.median(peaks) if peaks else None,
        roofline_pct_solved={str(p): sum(v >= p for v in peaks) / len(peaks) for p in (25, 50, 75)} if peaks else {},
        by_category=categories,
        best={w: r.attempt for w, r in best.items()},
        **trials,
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _spread(values: list[int]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"mean": sum(values) / len(values), "median": float(median), "samples": float(len(values))}


def sample_metrics(results: list[AttemptResult]) -> dict:
    """The per-sample metrics of summary.json (see the module's conventions), plus the run's model, condition,
    provenance and workload hashes. Mixed conditions or models in one run are refused, as mixed speed kinds are."""
    samples: dict[str, list[AttemptResult]] = {}
    for r in results:
        samples.setdefault(r.sample or r.attempt, []).append(r)
    for attempts in samples.values():
        attempts.sort(key=lambda r: r.index)
    per_workload: dict[str, list[bool]] = {}
    checks, turns = [], []
    for attempts in samples.values():
        first = next((r for r in attempts if r.correctness.correct), None)
        per_workload.setdefault(attempts[0].workload_id, []).append(first is not None)
        if first is not None:
            checks.append(first.index)
            if first.turn is not None:
                turns.append(first.turn)
    pass_k, pass_k_workloads = {}, {}
    for k in PASS_AT_K:
        eligible = [solved for solved in per_workload.values() if len(solved) >= k]
        if eligible:
            pass_k[str(k)] = sum(pass_at_k(len(x), sum(x), k) for x in eligible) / len(eligible)
            pass_k_workloads[str(k)] = len(eligible)
    contexts = {r.context for r in results}
    if len(contexts) > 1:
        raise CampaignError(
            f"attempts made under different context conditions ({', '.join(sorted(contexts))}) cannot be "
            "summarised together: put each condition in its own run directory and compare them"
        )
    models = {r.model for r in results if r.model}
    if len(models) > 1:
        raise CampaignError(f"attempts by different models ({', '.join(sorted(models))}) in one run: split the run")
    provenance = next((r.provenance for r in results if r.provenance), {})
    return {
        "samples": len(samples),
        "per_sample_correctness": sum(r.correctness.correct for r in results) / len(results) if results else 0.0,
        "solved_sample_rate": sum(sum(x) for x in per_workload.values()) / len(samples) if samples else 0.0,
        "pass_at_k": pass_k,
        "pass_at_k_workloads": pass_k_workloads,
        "checks_to_first_correct": _spread(checks),
        "turns_to_first_correct": _spread(turns),
        "model": next(iter(models), None),
        "context": next(iter(contexts), UNRECORDED),
        "provenance": provenance,
        "workload_sha256": {r.workload_id: r.workload_sha256 for r in results if r.workload_sha256},
    }


def load(run_dir: Path | str) -> tuple[list[AttemptResult], Summary]:
    run_dir = Path(run_dir)
    try:
        data = json.loads((run_dir / RESULTS_FILE).read_text())
        summary = Summary.model_validate_json((run_dir / SUMMARY_FILE).read_text())
    except FileNotFoundError as exc:
        raise CampaignError(
            f"{run_dir} has no {exc.filename and Path(exc.filename).name}: run `jaxbench-mcp evaluate {run_dir}` first"
        ) from None
    return [AttemptResult(**a) for a in data["attempts"]], summary


def table(results: list[AttemptResult]) -> str:
    """A compact per-attempt table for a terminal."""
    rows = [f"{'attempt':<48} {'status':<15} {'max_diff':>9} {'roofline':>8} {'vs XLA':>8} {'vs expert':>9}"]
    for r in results:
        diff = "" if r.correctness.max_diff is None else f"{r.correctness.max_diff:.2g}"
        peak = f"{r.roofline_pct:.0f}%" if r.roofline_pct else "n/a"
        rows.append(
            f"{r.attempt[:48]:<48} {r.status:<15} {diff:>9} {peak:>8} {_x(r.speedup_vs_baseline):>8} "
            f"{_x(r.speedup_vs_pallas):>9}"
        )
    return "\n".join(rows)


class ProgressBar:
    """Workloads done and an ETA on a terminal's stderr; silent when stderr is not a terminal."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.started = time.monotonic()

    def __call__(self, done: int, total: int, name: str) -> None:
        if not self.stream.isatty():
            return
        elapsed = time.monotonic() - self.started
        eta = f"ETA {elapsed / done * (total - done):.0f}s" if done else "ETA --"
        width = 30
        filled = int(width * done / total) if total else width
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {eta} {name[:40]:<40}")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()
