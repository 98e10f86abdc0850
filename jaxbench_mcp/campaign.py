"""Campaigns: score a whole directory of candidate kernels the way papers report agent runs.

A run directory holds one file per attempt: RUN_DIR/<workload_id>.py, or several as RUN_DIR/<workload_id>/*.py.
`evaluate` checks each (and profiles the correct ones, through JaxBench.profile_kernel, which checks first),
keeps each result in the attempts store under a key of the candidate's content hash, workload, targets, tier
the jax/libtpu versions and a hash of the judging code (so an interrupted campaign resumes and an unchanged kernel
costs nothing, while a changed checker or estimator recomputes), and
writes RUN_DIR/results.json and RUN_DIR/summary.json. `report` turns them into a self-contained report.html
with charts; `compare` puts two runs side by side.

Conventions (each named in summary.json):
  best attempt   per workload: the correct attempt with the highest speedup vs XLA; else the first attempt
  correct rate   best attempts correct, over attempted workloads and over all 50
  fast_p         share of workloads whose best attempt is correct AND faster than the reference by more than
                 p (speedup > p), for p in 0, 1.0, 1.2, 2.0; vs XLA over attempted and over all 50, vs the
                 expert over attempted workloads that have an expert kernel
  geomean        geometric mean speedup vs XLA over solved (correct) workloads
  clipped        MaxKernel's convention: every attempted workload counts, failures and slowdowns as 1x
Estimated and measured speeds are never mixed: each speed metric is computed per speed kind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pydantic import BaseModel, Field

from jaxbench_mcp import expert_refs, targets, workloads

FAST_P = (0.0, 1.0, 1.2, 2.0)
RESULTS_FILE, SUMMARY_FILE, REPORT_FILE, CHART_FILE = "results.json", "summary.json", "report.html", "speedup.png"
_FAMILIES = (
    ("attention", ("attention", "mha", "retention", "state_space")),
    ("convolution", ("conv",)),
    ("matmul", ("matmul", "gemm", "bmm", "mlp", "moe", "dot")),
    ("normalization", ("norm",)),
    ("loss", ("cross_entropy",)),
)


class CampaignError(ValueError):
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
    target: str | None
    tier: str
    estimate_kind: str
    sha256: str
    attempt_id: int | None = None
    cached: bool = False


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
    by_category: dict[str, dict[str, float | int]]
    best: dict[str, str] = Field(description="workload -> its best attempt")

    def summary(self) -> str:
        pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
        lines = [
            f"{self.run_dir}: {self.attempts} attempts at {self.workloads_attempted} of {self.workloads_total} workloads "
            f"(tier {self.tier}, target {self.target or 'none'}, speeds: {self.speed_kind})"
            + (" -- INTERRUPTED, partial" if self.interrupted else ""),
            f"compiled {pct(self.compile_rate)} of attempts; correct {pct(self.correct_rate_attempted)} of attempted "
            f"workloads, {pct(self.correct_rate_all)} of all {self.workloads_total}",
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
        ]
        return "\n".join(lines)


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# ---- finding the attempts -----------------------------------------------------------------------


def discover(run_dir: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(workload id, file) per attempt, and one problem line per file that cannot be an attempt."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CampaignError(f"{run_dir} is not a directory: give the run directory that holds <workload_id>.py files")
    found, problems = [], []
    for path in sorted(run_dir.iterdir()):
        if path.name.startswith((".", "_")) or path.name in (RESULTS_FILE, SUMMARY_FILE, REPORT_FILE, CHART_FILE):
            continue
        files = sorted(path.glob("*.py")) if path.is_dir() else [path] if path.suffix == ".py" else []
        if not files:
            continue
        name = path.name if path.is_dir() else path.stem
        try:
            workload_id = workloads.get_workload(name).id
        except workloads.UnknownWorkload as exc:
            problems.append(f"{path.relative_to(run_dir)}: skipped, its name is not a workload id ({exc})")
            continue
        found += [(workload_id, f) for f in files]
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
    from jaxbench_mcp import assets

    h = hashlib.sha256()
    roots = (Path(__file__).resolve().parent, assets.asset_dir("workloads"), assets.asset_dir("tokamax_refs"))
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
    worst = max((s.max_abs_error for s in verdict.seeds), default=None)
    compiled = (
        bool(verdict.compiles) and all(c.ok for c in verdict.compiles)
        if target
        else verdict.status not in ("invalid_kernel", "lowering_error", "compile_error")
    )
    correct = verdict.status == "correct"
    return dict(
        workload_id=workload_id,
        status=verdict.status,
        error_class=verdict.error_class,
        message=verdict.message[:500],
        compiled=compiled and verdict.status != "server_error",
        correctness=Correctness(
            correct=correct,
            max_diff=worst,
            tolerance=min((s.tolerance for s in verdict.seeds), default=None),
            jaxbench_allclose=verdict.jaxbench_compatible,
        ),
        timings=Timings(
            kernel_us=entry.candidate_us if entry and correct else None,
            baseline_us=entry.xla_baseline_us if entry and correct else None,
            pallas_reference_us=entry.expert_us if entry and correct else None,
            method=profile.kind,
        ),
        speedup_vs_baseline=entry.speedup_vs_xla if entry and correct else None,
        speedup_vs_pallas=entry.speedup_vs_expert if entry and correct else None,
        target=target,
        tier=profile.tier,
        estimate_kind=profile.kind,
        attempt_id=profile.attempt_id,
    )


def evaluate(
    run_dir: Path | str,
    bench=None,
    target: str | None = None,
    force: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    jobs: int | None = None,
) -> Summary:
    """Score every attempt in run_dir; write results.json and summary.json there; return the summary.

    Up to `jobs` attempts run at once (default: as many as the executor has slots, e.g. one per fleet host).
    Results are cached in the bench's store; force re-runs them. On KeyboardInterrupt the attempts in flight
    are cancelled (their workers killed, nothing cached for them) and what finished is written, with
    summary.interrupted set, before the interrupt goes on."""
    from jaxbench_mcp import api

    run_dir = Path(run_dir)
    attempts, problems = discover(run_dir)
    own = bench is None
    bench = bench or api.JaxBench.one_shot()
    target = targets.check_generation(target) if target else (bench.executor.default_target or None)
    tier = str(bench.executor.tier)
    stop = threading.Event()

    def one(workload_id: str, path: Path) -> AttemptResult:
        source = path.read_text(errors="replace")
        key = _cache_key(source, workload_id, target, tier)
        kept = None if force else bench.store.cache_get(key)
        fields = kept if kept is not None else score(bench, workload_id, source, target, cancel=stop)
        if kept is None and fields["status"] != "server_error":  # the server's failure is worth retrying
            bench.store.cache_put(key, json.loads(json.dumps(fields, default=lambda m: m.model_dump(mode="json"))))
        return AttemptResult(
            attempt=str(path.relative_to(run_dir)), sha256=key.split("/")[1], cached=kept is not None, **fields
        )

    finished: dict[int, AttemptResult] = {}
    interrupted = False
    pool = ThreadPoolExecutor(max_workers=jobs or max(1, bench.executor.queue().slots), thread_name_prefix="campaign")
    try:
        futures = {pool.submit(one, *attempt): index for index, attempt in enumerate(attempts)}
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
            "clipped_geomean": "MaxKernel: geometric mean over all attempted workloads of max(1, speedup); failures count as 1x",
            "compile_rate": "share of attempts that loaded, traced, lowered and compiled for every target",
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
        by_category=categories,
        best={w: r.attempt for w, r in best.items()},
    )


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
    rows = [f"{'attempt':<48} {'status':<15} {'max_diff':>9} {'vs XLA':>8} {'vs expert':>9}"]
    for r in results:
        diff = "" if r.correctness.max_diff is None else f"{r.correctness.max_diff:.2g}"
        rows.append(
            f"{r.attempt[:48]:<48} {r.status:<15} {diff:>9} {_x(r.speedup_vs_baseline):>8} {_x(r.speedup_vs_pallas):>9}"
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
