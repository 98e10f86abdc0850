"""The check ladder: hand a candidate to a worker, compare its outputs with the truth, give a verdict.

The trusted side of a check lives here. The truth is the workload's reference evaluated one
precision level above its output dtype (float32 for bf16 outputs, float64 for float32 ones) on the
very inputs the worker built from hidden seeds. The tolerance is calibrated per workload and seed:
a candidate passes when its worst error is within twice the worst error of the workload's own
native-dtype baseline (never tighter than one ulp of the output's largest magnitude).
"""

from __future__ import annotations

import functools
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxbench_mcp import error_catalog, targets, workloads
from jaxbench_mcp.comparison import jaxbench_allclose
from jaxbench_mcp.jobs import JobQueue, Limits, RunOutcome, WorkerPool, default_slots
from jaxbench_mcp.models import CompileReport, KernelDescription, SeedReport, StageReport, Verdict
from jaxbench_mcp.taxonomy import ErrorClass, STATUS_OF, Status

DEFAULT_SEEDS = 3
_TOLERANCE_FACTOR = 2.0
_MESSAGE_LINES = 8


@dataclass(frozen=True)
class Truth:
    truth: np.ndarray  # float64
    baseline: np.ndarray  # the native-dtype reference, as float32
    dtype: str
    tolerance: float
    baseline_error: float


def _upcast(inputs: tuple, dtype) -> tuple:
    import jax.numpy as jnp

    return tuple(
        x.astype(dtype) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x for x in inputs
    )


def _first_leaf(out):
    import jax

    return np.asarray(jax.tree_util.tree_leaves(out)[0])


@functools.lru_cache(maxsize=256)
def inputs_for(workload_id: str, size: str, seed: int) -> tuple:
    """The inputs for a hidden seed, built here: the worker gets the arrays, never the seed."""
    return workloads.get_workload(workload_id).create_inputs(size, seed=seed)


def write_inputs(inputs: tuple, directory: Path, prefix: str) -> list[dict]:
    """Inputs as raw files plus shape/dtype; static Python values travel in the description."""
    described = []
    for i, x in enumerate(inputs):
        if not hasattr(x, "shape"):
            described.append({"static": x})
            continue
        path = directory / f"{prefix}_{i}.bin"
        path.write_bytes(np.asarray(x).tobytes())
        described.append({"file": path.name, "shape": list(x.shape), "dtype": str(x.dtype)})
    return described


@functools.lru_cache(maxsize=256)
def truth_for(workload_id: str, size: str, seed: int) -> Truth:
    """The truth, the native baseline and the calibrated tolerance for one (workload, size, seed)."""
    import jax
    import jax.numpy as jnp

    w = workloads.get_workload(workload_id)
    inputs = inputs_for(workload_id, size, seed)
    baseline = _first_leaf(w.jitted_reference()(*inputs))
    wide = jnp.float64 if baseline.dtype == np.float32 or baseline.dtype == np.float64 else jnp.float32
    with jax.enable_x64(wide == jnp.float64):
        truth = _first_leaf(jax.jit(w.module.reference, static_argnums=w.static_argnums)(*_upcast(inputs, wide)))
    truth = truth.astype(np.float64)
    base32 = baseline.astype(np.float32)
    finite = np.isfinite(truth)
    baseline_error = float(np.max(np.abs(base32[finite] - truth[finite]), initial=0.0))
    scale = float(np.max(np.abs(truth[finite]), initial=0.0))
    ulp = float(jnp.finfo(baseline.dtype).eps) if jnp.issubdtype(baseline.dtype, jnp.floating) else 0.0
    tolerance = max(_TOLERANCE_FACTOR * baseline_error, ulp * scale)
    return Truth(truth=truth, baseline=base32, dtype=str(baseline.dtype), tolerance=tolerance, baseline_error=baseline_error)


def compare(candidate: np.ndarray, candidate_dtype: str, t: Truth, seed_index: int) -> tuple[SeedReport | None, ErrorClass | None, str]:
    """Compare one output with the truth: (report, error class or None, message)."""
    if tuple(candidate.shape) != tuple(t.truth.shape):
        return None, ErrorClass.SHAPE_MISMATCH, f"output shape {list(candidate.shape)} but the workload returns {list(t.truth.shape)}"
    if candidate_dtype != t.dtype:
        return None, ErrorClass.DTYPE_MISMATCH, f"output dtype {candidate_dtype} but the workload returns {t.dtype}"
    cand = candidate.astype(np.float64)
    finite = np.isfinite(t.truth)
    bad = finite & ~np.isfinite(cand)
    diff = np.where(finite, np.abs(np.nan_to_num(cand, nan=np.inf) - t.truth), 0.0)
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    max_abs = float(diff.max(initial=0.0))
    rel = diff / np.maximum(np.abs(t.truth), 1e-30)
    report = SeedReport(
        seed_index=seed_index,
        passed=bool(not bad.any() and max_abs <= t.tolerance),
        max_abs_error=max_abs,
        max_rel_error=float(np.where(finite, rel, 0.0).max(initial=0.0)),
        tolerance=t.tolerance,
        baseline_max_abs_error=t.baseline_error,
        worst_index=[int(i) for i in worst],
        worst_candidate=float(cand[worst]) if diff.size else 0.0,
        worst_truth=float(t.truth[worst]) if diff.size else 0.0,
        nan_count=int(np.isnan(cand).sum()),
        inf_count=int(np.isinf(cand).sum()),
        jaxbench_allclose=jaxbench_allclose(candidate, t.baseline),
    )
    if bad.any():
        where = [int(i) for i in np.argwhere(bad)[0]]
        return report, ErrorClass.NAN_OUTPUT, (
            f"{int(bad.sum())} of {bad.size} outputs are NaN/Inf where the truth is finite (first at {where}); "
            "uninitialised memory reads as NaN here, so this usually means an accumulator or output block "
            "that is never initialised or never written"
        )
    if not report.passed:
        return report, ErrorClass.WRONG_VALUES, (
            f"max |candidate - truth| = {max_abs:.4g} at {report.worst_index} (candidate {report.worst_candidate:.5g}, "
            f"truth {report.worst_truth:.5g}); allowed {t.tolerance:.3g}, which is {_TOLERANCE_FACTOR:g}x the "
            f"native-dtype baseline's own error {t.baseline_error:.3g}"
        )
    return report, None, ""


# ---- the decisive lines of an error -----------------------------------------------------------

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def decisive_lines(text: str) -> str:
    """The candidate's own frames and the final exception lines, not the whole traceback."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    own = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m and m.group(1).endswith("candidate.py"):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            own.append(f"candidate.py line {m.group(2)}, in {m.group(3)}: {code}")
    tail_start = max((i for i, l in enumerate(lines) if _FRAME.match(l)), default=-1) + 1
    tail = [l for l in lines[tail_start:] if not l.startswith(("    ", "  File", "Traceback", "---", "The above"))]
    tail = [l for l in tail if "jax._src" not in l and "JAX_TRACEBACK_FILTERING" not in l]
    picked = own[-2:] + (tail or lines[-3:])
    return "\n".join(l[:400] for l in picked[:_MESSAGE_LINES])


# ---- the checker ------------------------------------------------------------------------------


def _produced_by(tier: targets.Tier, stage: str) -> str:
    if stage in ("compare", "policy"):
        return "server (trusted process)"
    if stage == "compile":
        return "tpu: XLA:TPU compile for the attached chip" if tier is targets.Tier.TPU else "cpu_libtpu: deviceless XLA:TPU compile"
    if stage == "run":
        return "tpu: real run on the attached chip" if tier is targets.Tier.TPU else f"{tier}: TPU interpret mode on the CPU"
    if stage == "lower":
        return f"{tier}: jax lowering for TPU (Mosaic)"
    return f"{tier}: candidate process"


def _vmem_estimate(kernel: dict) -> int:
    """Blocks are double-buffered by the pipeline; scratch is allocated once."""
    import jax.numpy as jnp

    total = kernel["scratch_bytes"]
    for block in kernel["blocks"]:
        if block["in_hbm"]:
            continue
        n = int(np.prod([d or 1 for d in block["block_shape"]], dtype=np.int64))
        total += 2 * n * jnp.dtype(block["dtype"]).itemsize
    return int(total)


class Checker:
    """Owns the warm worker pool and the device slots of this host; `check` is safe from many threads."""

    def __init__(self, tier: targets.Tier | None = None, limits: Limits | None = None, spares: int | None = None,
                 slots: int | None = None):
        self.tier = tier or targets.detect_tier()
        self.limits = limits or Limits()
        self.default_target = (targets.DEFAULT_CPU_TARGET if self.tier is targets.Tier.CPU_LIBTPU
                                else targets.attached_generation())
        self.queue = JobQueue(slots or default_slots(self.tier))
        if spares is None:
            # Only one process can hold a TPU: there, the next worker starts when the last one is done.
            spares = 0 if self.tier is targets.Tier.TPU else self.queue.slots
        self.pool = WorkerPool(self.default_target if self.tier is targets.Tier.CPU_LIBTPU else None, self.tier, self.limits, spares)
        # Hidden seeds: drawn once per checker from the OS, never 42, never shown to the candidate.
        self._seeds = [secrets.randbelow(2**31 - 1) + 43 for _ in range(16)]

    def start(self) -> None:
        self.pool.fill()

    def close(self) -> None:
        self.pool.close()

    def default_targets(self) -> list[str]:
        return [self.default_target] if self.default_target else []

    def check(self, workload_id: str, source: str, targets_: list[str] | None = None, size: str | None = None,
              seeds: int = DEFAULT_SEEDS, require_pallas: bool = True,
              on_progress: Callable[[str], None] | None = None) -> tuple[Verdict, RunOutcome]:
        started = time.monotonic()
        w = workloads.get_workload(workload_id)
        chosen = targets.parse_targets(targets_) if targets_ else self.default_targets()
        if chosen and self.tier is targets.Tier.CPU:
            raise targets.UnknownTarget("this host has no libtpu, so it cannot compile for a TPU generation; "
                                        "install jax[tpu] or omit targets")
        run_size = size or ("full" if self.tier is targets.Tier.TPU else "small")
        w.size_params(run_size)
        if not 1 <= seeds <= len(self._seeds):
            raise ValueError(f"seeds must be between 1 and {len(self._seeds)}")
        hidden = self._seeds[:seeds]
        job = {"workload_id": w.id, "source": source, "targets": chosen, "size": run_size, "seeds": hidden,
               "interpret": self.tier is not targets.Tier.TPU,
               # Orders in which interpret mode visits "parallel" grid axes: fresh for every check.
               "shuffle_seeds": [secrets.randbelow(2**31) for _ in hidden]}
        progress = on_progress or (lambda _msg: None)

        def on_event(event: dict) -> None:
            if event.get("event") == "stage" and event.get("state") != "start":
                where = f" {event['target']}" if event.get("target") else ""
                seed = f" seed {event['seed_index']}" if "seed_index" in event else ""
                progress(f"{event['stage']}{where}{seed}: {event['state']}")

        progress("queued")
        # The truth is needed only after the run; compute it meanwhile, on the server's side.
        truth = threading.Thread(target=lambda: [truth_for(w.id, run_size, s) for s in hidden], daemon=True)
        truth.start()
        outcome = self.queue.run(lambda: self._run_in_worker(dict(job), on_event))
        truth.join()
        verdict = self._verdict(w, job, outcome, require_pallas, progress)
        verdict.total_seconds = time.monotonic() - started
        return verdict, outcome

    def _run_in_worker(self, job: dict, on_event: Callable[[dict], None]) -> RunOutcome:
        worker = self.pool.take()
        seeds = job.pop("seeds")
        job["inputs"] = [write_inputs(inputs_for(job["workload_id"], job["size"], seed), worker.workdir, f"input_{k}")
                         for k, seed in enumerate(seeds)]
        if not worker.wait_ready():
            worker.kill()
            raise RuntimeError(f"a checker worker failed to start; its stderr ends with:\n{worker.tail('stderr.log')[-2000:]}")
        return worker.run(job, on_event)

    # ---- turning the worker's events into a verdict ----

    def _verdict(self, w, job: dict, outcome: RunOutcome, require_pallas: bool, progress) -> Verdict:
        verdict = Verdict(status=Status.CORRECT, message="", workload_id=w.id, size=job["size"], targets=job["targets"],
                          tier=str(self.tier))
        failure: tuple[ErrorClass, str, str | None] | None = None  # (class, message, stage for the catalog)
        outputs: dict[int, dict] = {}
        vmem = None
        for e in outcome.events:
            if e.get("event") != "stage" or e.get("state") == "start":
                continue
            stage, ok = e["stage"], e["state"] == "done"
            verdict.stages.append(StageReport(stage=stage, ok=ok, seconds=round(e.get("seconds", 0.0), 4), target=e.get("target"),
                                              produced_by=_produced_by(self.tier, stage)))
            if stage == "trace" and ok:
                verdict.kernels = [KernelDescription(name=k["name"], grid=k["grid"], block_shapes=[b["block_shape"] for b in k["blocks"]],
                                                     dimension_semantics=k["dimension_semantics"], num_scalar_prefetch=k["num_scalar_prefetch"],
                                                     num_scratch=k["num_scratch"]) for k in e["kernels"]]
                verdict.pallas_calls = len(e["kernels"])
                vmem = max((_vmem_estimate(k) for k in e["kernels"]), default=None)
                if e["host_callbacks"]:
                    failure = (ErrorClass.HOST_CALLBACK, f"workload calls back into Python on the host ({', '.join(sorted(set(e['host_callbacks'])))}); "
                               "the computation must run on the TPU", None)
            if stage == "compile":
                verdict.compiles.append(CompileReport(target=e["target"], ok=ok, seconds=round(e.get("seconds", 0.0), 3),
                                                      code_size_bytes=e.get("code_size_bytes"), vmem_estimate_bytes=vmem or None))
            if stage == "run" and ok:
                outputs[e["seed_index"]] = e["output"]
            if not ok and failure is None:
                if stage == "load":
                    cls = ErrorClass(e["error_class"])
                    failure = (cls, decisive_lines(e["text"]) if cls is not ErrorClass.MISSING_WORKLOAD else e["text"], None)
                else:
                    failure = (None, e["text"], stage)

        if failure is None and outcome.killed_for:
            if outcome.killed_for == "memory":
                failure = (ErrorClass.MEMORY_LIMIT, f"the worker exceeded the memory limit of {self.limits.memory_bytes / 2**30:.1f} GiB and was killed", None)
            else:
                stage = outcome.killed_for.split(":", 1)[1]
                failure = (ErrorClass.STAGE_TIMEOUT, f"stage '{stage}' ran longer than its limit of {self.limits.for_stage(stage):.0f} s; the worker was killed", None)
        if failure is None and not outcome.finished:
            code = outcome.returncode
            if code is not None and code < 0:
                import signal as _signal

                failure = (ErrorClass.KILLED_BY_SIGNAL, f"the candidate's process died from signal {_signal.Signals(-code).name}", None)
            else:
                failure = (ErrorClass.EXITED, f"the candidate's process exited with status {code} before the check finished", None)

        if failure is None:
            progress("compare")
            failure = self._compare(w, job, outcome, outputs, verdict)

        if failure is None and require_pallas and verdict.pallas_calls == 0:
            failure = (ErrorClass.NO_PALLAS_CALL, "no pallas_call found in workload(): this benchmark asks for a Pallas kernel", None)

        if w.degenerate_output:
            verdict.warnings.append("this workload's output is near-constant: an all-zeros or constant output passes JAXBench's own check (see the workload notes)")
        if failure is not None:
            cls, text, stage = failure
            diagnosis = error_catalog.classify(stage, text) if cls is None else error_catalog.diagnosis_for(cls)
            verdict.error_class = diagnosis.error_class
            verdict.status = STATUS_OF[ErrorClass(diagnosis.error_class)]
            verdict.message = decisive_lines(text) if cls is None else text
            verdict.hint, verdict.docs = diagnosis.hint, list(diagnosis.doc_refs)
        return verdict

    def _compare(self, w, job: dict, outcome: RunOutcome, outputs: dict[int, dict], verdict: Verdict):
        for index, seed in enumerate(job["seeds"]):
            info = outputs.get(index)
            if info is None:
                return (ErrorClass.EXITED, "the candidate's process stopped before producing every output", None)
            if info["leaves"] != 1:
                return (ErrorClass.SHAPE_MISMATCH, f"workload() returns {info['leaves']} arrays; this workload returns exactly one", None)
            candidate = np.load(outcome.workdir / info["path"], allow_pickle=False)
            t0 = time.monotonic()
            report, cls, message = compare(candidate, info["dtype"], truth_for(w.id, job["size"], seed), index)
            if report:
                verdict.seeds.append(report)
            verdict.stages.append(StageReport(stage="compare", ok=cls is None, seconds=round(time.monotonic() - t0, 4),
                                              produced_by=_produced_by(self.tier, "compare"), detail=f"seed {index}"))
            if cls is not None:
                verdict.jaxbench_compatible = all(s.jaxbench_allclose for s in verdict.seeds) if verdict.seeds else None
                return (cls, f"seed {index}: {message}", None)
        verdict.jaxbench_compatible = all(s.jaxbench_allclose for s in verdict.seeds)
        return None
