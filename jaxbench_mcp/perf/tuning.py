"""tune_kernel: block sizes chosen by the static estimate, the best few checked for correctness.

A candidate exposes its tunables as module-level assignments (`BM = 512`); `params` maps each name to the
values to try. Every variant is the candidate's source with those lines rewritten; each is compiled deviceless
for the target in the sandboxed worker with schedule dumps (a variant that does not fit VMEM fails to compile
and is reported with libtpu's sizes), estimated (jaxbench_mcp.perf.estimator, the same path as profile_kernel), and
the best `check_top` are checked like check_kernel (hidden seeds, interpret mode). Bounded: at most
`max_variants` variants (the hand-picked values first, then a deterministic spread of the rest) and
`max_seconds` of wall time; what was not reached is said. On a TPU host this is the same static ranking (the
estimate), not a measurement of every variant.

Also the CLI's `jaxbench-mcp estimate` and `jaxbench-mcp tune` (cli), and the adapter the MCP tool runs on.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.errors import BadRequest
from jaxbench_mcp.models import OptionalReal, Verdict
from jaxbench_mcp.perf import cost_model, estimator
from jaxbench_mcp.perf.profiling import SourceEstimate
from jaxbench_mcp.store import text_problem
from jaxbench_mcp.taxonomy import ErrorClass, Status

MAX_VARIANTS = 48
MAX_SECONDS = 900.0
# Variants compiled at once (each in its own sandboxed worker).
PARALLEL = 2


class TuneError(BadRequest):
    """A request the agent can fix (an unknown name, no values, too many)."""


class TuneVariant(BaseModel):
    params: dict[str, int | float | str | bool]
    hand_picked: bool = Field(False, description="The values the candidate file sets itself")
    status: str = Field(
        description="'estimated', 'vmem misfit', 'compile failed', 'timeout', 'no estimate' or 'not reached'"
    )
    estimate_us: OptionalReal = None
    bottleneck: str | None = None
    reason: str | None = Field(None, description="Why there is no estimate (VMEM sizes, the compile error)")
    check: str | None = Field(None, description="The correctness check of the best few: its status and attempt")


class TuneResult(BaseModel):
    workload_id: str
    target: str
    label: str = Field(description="What the numbers are: static estimates, not measurements")
    variants: list[TuneVariant] = Field(description="Ranked: estimated variants fastest first, then the rest")
    best: dict[str, int | float | str | bool] | None = Field(
        None, description="The fastest variant that passed its check"
    )
    best_us: OptionalReal = None
    hand_picked_us: OptionalReal = None
    best_source: str | None = Field(None, description="The candidate's source with the best values written in")
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    attempt_id: int | None = None

    def summary(self) -> str:
        lines = [f"{self.workload_id} on {self.target}: {len(self.variants)} variants ({self.label})"]
        for rank, v in enumerate(self.variants, 1):
            params = ", ".join(f"{k}={val}" for k, val in v.params.items())
            what = (
                f"~{v.estimate_us:,.1f} us ({v.bottleneck})"
                if v.estimate_us is not None
                else v.status + (f": {v.reason}" if v.reason else "")
            )
            lines.append(
                f"{rank:>3}. {params}{' [hand-picked]' if v.hand_picked else ''}: {what}"
                + (f"; check: {v.check}" if v.check else "")
            )
        if self.best is not None:
            gain = (
                f" ({self.hand_picked_us / self.best_us:.2f}x the hand-picked estimate)"
                if self.hand_picked_us and self.best_us
                else ""
            )
            lines.append(f"best that passed its check: {self.best} at ~{self.best_us:,.1f} us{gain}")
        else:
            lines.append("no variant both estimated and passed its check")
        lines += [f"note: {n}" for n in self.notes]
        if self.attempt_id is not None:
            lines.append(f"attempt {self.attempt_id}")
        return "\n".join(lines)


class TuneOutcome(BaseModel):
    state: str = Field(description="'done' with a result, or 'running': ask list_attempts(attempt_id=...) later")
    attempt_id: int
    result: TuneResult | None = None

    def summary(self) -> str:
        if self.result is not None:
            return self.result.summary()
        return (
            f"attempt {self.attempt_id} is still running; call list_attempts(attempt_id={self.attempt_id}) "
            "in a little while: its log holds the ranked table"
        )


def _assignment(name: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(name)}\s*(?::[^=]+)?=\s*(.+?)\s*(#.*)?$", re.M)


def with_params(source: str, params: dict) -> str:
    """The source with each `NAME = ...` module-level line set to its value."""
    for name, value in params.items():
        # A replacement string with its backslashes doubled is inserted literally (no group references).
        source = _assignment(name).sub(f"{name} = {value!r}".replace("\\", "\\\\"), source, count=1)
    return source


def variants_of(source: str, params: dict[str, list], max_variants: int) -> tuple[list[dict], dict, list[str]]:
    """The variants to try (the hand-picked one first), the hand-picked values, and notes."""
    if not params:
        raise TuneError("params is empty: give each tunable name (a module-level assignment) its candidate values")
    hand, notes = {}, []
    for name, values in params.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise TuneError(f"{name!r} is not a Python name")
        found = _assignment(name).search(source)
        if not found:
            raise TuneError(f"the source has no module-level assignment `{name} = ...` to tune")
        if not isinstance(values, list) or not values:
            raise TuneError(f"give {name} a non-empty list of values")
        try:
            hand[name] = ast.literal_eval(found.group(1))
        except (ValueError, SyntaxError):
            raise TuneError(f"`{name} = {found.group(1)}` is not a literal the tuner can replace") from None
    grid = [dict(zip(params, combo, strict=True)) for combo in itertools.product(*params.values())]
    rest = [v for v in grid if v != hand]
    if len(rest) + 1 > max_variants:
        step = len(rest) / (max_variants - 1)
        rest = [rest[int(i * step)] for i in range(max_variants - 1)]
        notes.append(
            f"{len(grid)} combinations: {max_variants} tried (the hand-picked values and an even spread of "
            "the rest); narrow the values to try the others"
        )
    return [hand] + rest, hand, notes


class Tuner:
    """tune_kernel on a JaxBench (its executor's profiler and checker, its attempt store)."""

    def __init__(self, bench):
        self.bench = bench

    def submit_tune(
        self,
        workload_id: str,
        source: str,
        params: dict[str, list],
        target: str | None = None,
        check_top: int = 3,
        max_variants: int = MAX_VARIANTS,
        on_progress: Callable[[str], None] | None = None,
    ):
        """tune_kernel as a background job of the bench (api.BackgroundJob: attempt id, future, cancel)."""
        return self.bench.submit(
            self.tune_kernel, workload_id, source, params, target, check_top, max_variants, on_progress=on_progress
        )

    def tune_kernel(
        self,
        workload_id: str,
        source: str,
        params: dict[str, list],
        target: str | None = None,
        check_top: int = 3,
        max_variants: int = MAX_VARIANTS,
        max_seconds: float = MAX_SECONDS,
        on_progress: Callable[[str], None] | None = None,
        on_attempt: Callable[[int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> TuneResult:
        bench = self.bench
        w = workloads.get_workload(workload_id)
        problem = text_problem(source)
        if problem:
            raise TuneError(problem)
        generation = targets.check_generation(target) if target else (bench.executor.default_targets() or [None])[0]
        if generation is None:
            raise TuneError(
                "this host compiles for no TPU generation (no libtpu): tune_kernel needs a CPU host with "
                "libtpu or a TPU host"
            )
        if not 1 <= max_variants <= 256:
            raise TuneError("max_variants must be between 1 and 256")
        chosen, hand, notes = variants_of(source, params, max_variants)
        profiler = getattr(bench.executor, "profiler", None)
        if profiler is None:
            raise TuneError("tune_kernel runs on this host's own workers (not on a fleet)")
        attempt_id = bench.store.start("tune", w.id, source)
        if on_attempt:
            on_attempt(attempt_id)
        progress = on_progress or (lambda _m: None)
        started = time.monotonic()
        refs = profiler.reference_estimates(w.id, [generation])[generation]
        if not refs.get("calibration_bundles"):
            bench.store.fail(attempt_id, "the calibration kernel could not be compiled")
            raise TuneError(f"no calibration for {generation}: compiling the calibration kernel failed")
        spb = {generation: cost_model.seconds_per_bundle(generation, refs["calibration_bundles"])}
        results: list[TuneVariant | None] = [None] * len(chosen)
        done = [0]

        def one(i: int) -> None:
            if cancel is not None and cancel.is_set() or time.monotonic() - started > max_seconds:
                return
            found = profiler.estimate_source(w.id, with_params(source, chosen[i]), [generation], spb, cancel)[
                generation
            ]
            variant = results[i] = _variant(chosen[i], chosen[i] == hand, found)
            done[0] += 1
            progress(
                f"variant {done[0]}/{len(chosen)}: {chosen[i]} -> "
                + (f"~{variant.estimate_us:,.1f} us" if variant.estimate_us is not None else variant.status)
            )

        progress(f"compiling and estimating {len(chosen)} variants for {generation}")
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(one, range(len(chosen))))
        variants = [
            r
            or TuneVariant(
                params=chosen[i],
                hand_picked=chosen[i] == hand,
                status="not reached",
                reason=f"the {max_seconds:.0f} s budget ran out",
            )
            for i, r in enumerate(results)
        ]
        if any(r is None for r in results):
            notes.append(f"{sum(r is None for r in results)} variants were not reached within {max_seconds:.0f} s")
        variants.sort(key=lambda v: (v.estimate_us is None, v.estimate_us or 0.0))
        best = None
        for v in [v for v in variants if v.estimate_us is not None][: max(0, check_top)]:
            if cancel is not None and cancel.is_set():
                break
            progress(f"checking {v.params}")
            verdict: Verdict = bench.check_kernel(w.id, with_params(source, v.params), [generation], cancel=cancel)
            v.check = f"{verdict.status} (attempt {verdict.attempt_id})"
            if verdict.status == "correct" and best is None:
                best = v
        hand_us = next((v.estimate_us for v in variants if v.hand_picked), None)
        result = TuneResult(
            workload_id=w.id,
            target=generation,
            variants=variants,
            notes=notes,
            hand_picked_us=hand_us,
            label="STATIC ESTIMATES from deviceless compiles (a ranking of variants, not measured times)",
            best=best.params if best else None,
            best_us=best.estimate_us if best else None,
            best_source=with_params(source, best.params) if best else None,
            seconds=time.monotonic() - started,
            attempt_id=attempt_id,
        )
        status = "correct" if best else _failed_status(variants)
        bench.store.finish(attempt_id, status, None, None, result.summary(), result.seconds)
        return result


def _failed_status(variants: list[TuneVariant]) -> str:
    """A tune with no correct variant: a stage timeout when no variant got an estimate and a time limit stopped them
    (not a fault of the kernel), `vmem_overflow` when every one overflowed, else `invalid_kernel`."""
    if any(v.estimate_us is not None for v in variants):
        return "invalid_kernel"
    reasons = [(v.reason or "").lower() for v in variants]
    if any(r.startswith("timeout") or "time limit" in r or "budget ran out" in r for r in reasons):
        return ErrorClass.STAGE_TIMEOUT.value
    if variants and all(v.status == "vmem misfit" for v in variants):
        return ErrorClass.VMEM_OVERFLOW.value
    return Status.INVALID_KERNEL.value  # a status (ErrorClass has no such member: reaching this raised before)


def _variant(params: dict, hand: bool, found) -> TuneVariant:
    if isinstance(found, SourceEstimate):
        return TuneVariant(
            params=params,
            hand_picked=hand,
            status="estimated",
            estimate_us=found.total_us,
            bottleneck=found.estimate.bottleneck,
        )
    text = str(found)
    if "vmem" in text.lower() and ("out of VMEM" in text or "vmem_overflow" in text):
        return TuneVariant(params=params, hand_picked=hand, status="vmem misfit", reason=text[:400])
    status = (
        "compile failed"
        if text.startswith("compile failed")
        else ("timeout" if text.startswith("timeout") else "no estimate")
    )
    return TuneVariant(params=params, hand_picked=hand, status=status, reason=text[:400])


# ---- the CLI: `jaxbench-mcp estimate` and `jaxbench-mcp tune` --------------------------------------------------


def cli(args) -> int:
    if args.command == "estimate":
        path, _, function = args.function.rpartition(":")
        if not path or not function:
            raise TuneError("give the function as FILE.py:FUNCTION")
        if not Path(path).is_file():
            raise TuneError(f"no file at {path}")
        generations = targets.parse_targets(args.target) or [targets.DEFAULT_CPU_TARGET]
        results = estimator.estimate_file(
            Path(path).read_text(), function, estimator.parse_args(args.args), generations
        )
        if args.json:
            print(
                json.dumps(
                    {
                        g: (r.model_dump(mode="json") if not isinstance(r, str) else {"error": r})
                        for g, r in results.items()
                    },
                    indent=2,
                )
            )
        else:
            print("\n".join(r.summary() if not isinstance(r, str) else f"{g}: {r}" for g, r in results.items()))
        return 0 if all(not isinstance(r, str) for r in results.values()) else 1
    from jaxbench_mcp import api

    if not args.kernel.is_file():
        raise TuneError(f"no kernel file at {args.kernel}")
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise TuneError(f"--params is not JSON: {exc}") from None
    bench = api.JaxBench.one_shot()
    try:
        result = Tuner(bench).tune_kernel(
            args.workload,
            args.kernel.read_text(),
            params,
            args.target,
            args.check_top,
            args.max_variants,
            on_progress=lambda m: print(m, file=sys.stderr),
        )
    finally:
        bench.close()
    print(result.model_dump_json(indent=2) if args.json else result.summary())
    return 0 if result.best is not None else 1
