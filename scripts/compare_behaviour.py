"""Record what the checker, the static analyses and the estimator say about every known candidate, and compare
two such records: the evidence that a refactor changed no behaviour.

Candidates: the 50 solutions (solutions/*.py), tests/kernels/*.py, the tests/hostile/*.py whose `# expect:`
header names a status and that need no placeholders filled in (no `__NAME__`), and the expert references
(tokamax_refs/, found through jaxbench_mcp.catalog.expert_refs). Per candidate it records

  check     the verdict of a sandboxed check (jaxbench_mcp.checking.checker.Checker, default target, 1 seed), reduced
            to what does not depend on the hidden seeds: status, error_class, the message's first line,
            full_size_findings, pallas_work, warnings, the kernels and compiles (floats and temporary paths
            in texts are replaced by placeholders, since a seed moves the numbers; jaxbench_compatible is left
            out: it flips between seeds near its tolerance);
  trace     the candidate traced in a helper process (not sandboxed: hostile files that attack the host are
            never on the list) at full and small size, as the worker traces it, and what
            coverage.program_structure, coverage.full_size_coverage, coverage.program_work, coverage.kernel_work
            and kernel_analysis.describe_kernels say about it;
  estimate  for the expert references and a few solutions (--estimate-solutions), the v6e static estimate of
            profile_kernel's path (profiling.Profiler.profile after a correct check).

Run from the repository root with its virtual environment:

  .venv/bin/python scripts/compare_behaviour.py record /tmp/before.json          # everything (long)
  .venv/bin/python scripts/compare_behaviour.py record /tmp/before.json --only 'solutions/8p_*,expert/*'
  .venv/bin/python scripts/compare_behaviour.py record /tmp/x.json --parts check  # one part only
  .venv/bin/python scripts/compare_behaviour.py list                              # the candidates' keys
  .venv/bin/python scripts/compare_behaviour.py diff /tmp/before.json /tmp/after.json

`record` is incremental: the file is rewritten after every result, and a second run with the same file does
only what is missing (a part that failed to run is retried; --redo runs the selection again). Keep the file
outside the repository. `diff` prints every difference (timings and the run's metadata aside) and exits 1 when
there is any, 0 when the records agree on every candidate and part both hold.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("check", "trace", "estimate")
ESTIMATE_TARGET = "v6e"
DEFAULT_ESTIMATE_SOLUTIONS = 8
TRACE_TIMEOUT_S = 60.0
# Verdict fields that move with the hidden seeds and so are neither recorded nor compared: JAXBench's own allclose
# (1e-2 against the bf16 baseline) flips between seeds for kernels near it (flash attention: both ways, one run
# to the next).
SEED_DEPENDENT = frozenset({"jaxbench_compatible"})
_PLACEHOLDER = re.compile(r"__[A-Z][A-Z0-9_]*__")
_HEADER = re.compile(r"^# expect: workload=(\S+) status=(\S+)", re.MULTILINE)
_FLOAT = re.compile(r"(?<![\w.])-?(?:\d+\.\d*|\.\d+|\d+)(?:e[+-]?\d+)|(?<![\w.])-?\d+\.\d+")
_TMP = re.compile(r"/tmp/[^\s'\"),]+")
# Where a seed's worst element lies, and the grid step an interpret run (whose "parallel" axes are shuffled per
# check) reached first: positions that move with the seeds.
_POSITION = re.compile(r"(?<=at )\[[\d, ]+\]|(?<=iteration )\([\d, ]+\)")
_INTEGER_VALUE = re.compile(r"(?<=candidate )-?\d+(?=, truth)")  # a value that happens to be whole


# ---- the candidates ------------------------------------------------------------------------------


def candidates() -> list[dict]:
    """Every candidate as {key, kind, path, workload_id}; keys are stable across checkouts."""
    found = [
        {"key": f"solutions/{path.name}", "kind": "solution", "path": str(path), "workload_id": path.stem}
        for path in sorted((ROOT / "solutions").glob("*.py"))
    ]
    for folder in ("tests/kernels", "tests/hostile"):
        for path in sorted((ROOT / folder).glob("*.py")):
            text = path.read_text()
            header = _HEADER.search(text)
            if header is None or _PLACEHOLDER.search(text):
                continue
            found.append(
                {"key": f"{folder}/{path.name}", "kind": folder, "path": str(path), "workload_id": header.group(1)}
            )
    from jaxbench_mcp.catalog import expert_refs, workloads

    for w in workloads.all_workloads():
        module = expert_refs.expert_module(w.id)
        if module is not None:
            found.append({"key": f"expert/{w.id}", "kind": "expert", "path": module.__file__, "workload_id": w.id})
    return found


def estimated_keys(cands: list[dict], solutions: int) -> set[str]:
    """The expert references and the first `solutions` solutions of workloads that have one (their baseline and
    expert estimates are then shared with the expert's own)."""
    experts = {c["workload_id"] for c in cands if c["kind"] == "expert"}
    chosen = {c["key"] for c in cands if c["kind"] == "expert"}
    chosen |= set([c["key"] for c in cands if c["kind"] == "solution" and c["workload_id"] in experts][:solutions])
    return chosen


# ---- normalising --------------------------------------------------------------------------------------


def _text(value: str | None, numbers: bool = False) -> str | None:
    """A text with its temporary paths replaced, and its floats too unless `numbers` (seed-independent texts)."""
    if value is None:
        return None
    if not numbers:
        value = _INTEGER_VALUE.sub("<num>", _POSITION.sub("<pos>", _FLOAT.sub("<num>", value)))
    return _TMP.sub("<tmp>", value)


def _round(value):
    """Floats to 6 significant digits, recursively: the records compare values, not float noise."""
    if isinstance(value, float):
        return value if value != value or value in (float("inf"), float("-inf")) else float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def verdict_record(verdict) -> dict:
    """The seed-independent part of a Verdict."""
    first = (verdict.message or "").strip().splitlines()
    return {
        "status": str(verdict.status),
        "error_class": str(verdict.error_class) if verdict.error_class else None,
        "message": _text(first[0] if first else ""),
        "full_size_findings": [_text(f, numbers=True) for f in verdict.full_size_findings],
        "pallas_work": _text(verdict.pallas_work, numbers=True),
        "warnings": [_text(w) for w in verdict.warnings],
        "targets": list(verdict.targets),
        "pallas_calls": verdict.pallas_calls,
        "kernels": _round([k.model_dump(mode="json") for k in verdict.kernels]),
        "compiles": [
            {k: _text(v) if isinstance(v, str) else v for k, v in c.items() if k not in ("seconds",)}
            for c in (c.model_dump(mode="json") for c in verdict.compiles)
        ],
        "stages": [
            {
                "stage": str(s.stage),
                "ok": s.ok,
                "target": s.target,
                "produced_by": s.produced_by,
                "detail": _text(s.detail),
            }
            for s in verdict.stages
        ],
        "hint": verdict.hint,
        "docs": list(verdict.docs),
    }


# ---- the in-process trace (run in a helper process) --------------------------------------------------


def trace_record(path: str, workload_id: str) -> dict:
    """What the static analyses say about the candidate at `path`, traced as the worker traces it."""
    import hashlib

    import jax

    from jaxbench_mcp.analysis import coverage, kernels as kernel_analysis
    from jaxbench_mcp.catalog import targets, workloads
    from jaxbench_mcp.sandbox import tpu_facade, worker

    w = workloads.get_workload(workload_id)
    static = tuple(w.static_argnums)
    chip = targets.DEFAULT_CPU_TARGET
    facade = tpu_facade.TpuFacade(chip, targets.device_kind(chip), targets.cores_per_device(chip))
    found: dict = {}
    with facade:
        module, failure = worker.load_candidate(Path(path))
        if failure:
            return {"load_failed": failure[0]}
        closed = {}
        for size in ("full", "small"):
            try:
                with targets.chip_context(chip):
                    closed[size] = jax.make_jaxpr(module.workload, static_argnums=static)(
                        *workloads.abstract_inputs(w, size)
                    )
            except Exception as exc:  # noqa: BLE001 - recorded
                found[f"trace_{size}_failed"] = type(exc).__name__
    found["platform_queries"] = sorted(facade.queries)
    names = [n for i, n in enumerate(w.input_names) if i not in w.static_argnums]

    def attempt(name, fn):
        try:
            found[name] = _round(json.loads(json.dumps(fn(), default=str)))
        except Exception as exc:  # noqa: BLE001 - recorded
            found[name] = {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}

    if "full" in closed:
        full = closed["full"]
        attempt("outline", lambda: coverage.program_structure(full))
        attempt("coverage", lambda: coverage.full_size_coverage(full, input_names=names))
        attempt("program_work", lambda: coverage.program_work(full))
        attempt("kernel_work", lambda: coverage.kernel_work(full))
        attempt("kernels", lambda: kernel_analysis.describe_kernels(full.jaxpr))
    if "small" in closed:
        small_outline = coverage.program_structure(closed["small"])
        found["small_outline_sha256"] = hashlib.sha256(json.dumps(small_outline).encode()).hexdigest()
        found["small_outline_equals_full"] = small_outline == found.get("outline")
    return found


def _trace_server() -> None:
    """--trace-server: one JSON request per line on stdin ({key, path, workload_id}), one JSON answer per line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # a candidate's prints must not corrupt the answers
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = trace_record(request["path"], request["workload_id"])
        except BaseException as exc:  # noqa: BLE001 - recorded, the next one goes on
            result = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
        out.write(json.dumps({"key": request["key"], "trace": result}) + "\n")
        out.flush()


class TraceHelper:
    """A helper process that traces candidates one at a time; restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--trace-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=str(ROOT),
        )

    def trace(self, cand: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        request = {k: cand[k] for k in ("key", "path", "workload_id")}
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TRACE_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            return {"failed": "the trace helper died or timed out" if ready else f"timeout {TRACE_TIMEOUT_S:.0f} s"}
        return json.loads(line)["trace"]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# ---- recording ----------------------------------------------------------------------------------------


class Record:
    """The JSON file, rewritten (atomically) after every result."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.data = json.loads(path.read_text()) if path.exists() else {"meta": {}, "results": {}, "cache": {}}

    def has(self, key: str, part: str) -> bool:
        entry = self.data["results"].get(key, {}).get(part)
        return entry is not None and "harness_error" not in entry

    def put(self, key: str, part: str, value: dict, seconds: float) -> None:
        with self.lock:
            self.data["results"].setdefault(key, {})[part] = value
            self.data["results"][key].setdefault("seconds", {})[part] = round(seconds, 1)
            self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        tmp.replace(self.path)


class PersistentCache:
    """profiling's cache (baseline and expert estimates) kept in the record, so that a resumed run reuses them;
    a new record starts empty, so two records never share one."""

    def __init__(self, record: Record) -> None:
        self.record = record

    def cache_get(self, key: str) -> dict | None:
        return self.record.data["cache"].get(key)

    def cache_put(self, key: str, value: dict) -> None:
        with self.record.lock:
            self.record.data["cache"][key] = value


def _select(cands: list[dict], only: str | None) -> list[dict]:
    if not only:
        return cands
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    return [c for c in cands if any(fnmatch.fnmatch(c["key"], p) for p in patterns)]


def record(args) -> int:
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.perf import profiling
    from jaxbench_mcp.requests import CheckRequest, ProfileRequest

    cands = _select(candidates(), args.only)
    estimated = estimated_keys(candidates(), args.estimate_solutions)
    parts = [p for p in args.parts.split(",") if p]
    rec = Record(Path(args.output))
    started = time.monotonic()
    rec.data["meta"].setdefault("runs", []).append(
        {
            "root": str(ROOT),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "only": args.only,
            "parts": parts,
            "tier": str(targets.detect_tier()),
        }
    )
    rec.save()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:7.0f} s] {message}", file=sys.stderr, flush=True)

    if "trace" in parts:
        helper = TraceHelper()
        try:
            for cand in cands:
                if rec.has(cand["key"], "trace") and not args.redo:
                    continue
                t0 = time.monotonic()
                result = helper.trace(cand)
                rec.put(cand["key"], "trace", result, time.monotonic() - t0)
                say(f"trace {cand['key']}: {'failed' if 'failed' in result else 'ok'} ({time.monotonic() - t0:.0f} s)")
        finally:
            helper.close()

    wants_check = "check" in parts
    wants_estimate = "estimate" in parts
    if wants_check or wants_estimate:
        checker = Checker(slots=args.jobs)
        checker.start()
        profiler = profiling.Profiler(checker, cache=PersistentCache(rec))
        # An expert's own item first: the solutions of its workload then reuse its baseline and expert estimates.
        order = sorted(cands, key=lambda c: (c["kind"] != "expert", c["key"]))

        def one(cand: dict) -> None:
            key = cand["key"]
            need_check = wants_check and (args.redo or not rec.has(key, "check"))
            need_estimate = wants_estimate and key in estimated and (args.redo or not rec.has(key, "estimate"))
            if not (need_check or need_estimate):
                return
            source = Path(cand["path"]).read_text()
            t0 = time.monotonic()
            try:
                verdict, outcome = checker.check(CheckRequest.of(cand["workload_id"], source, seeds=1))
                if outcome is not None:
                    outcome.cleanup()
            except Exception as exc:  # noqa: BLE001 - recorded: a harness failure, not a verdict
                rec.put(key, "check", {"harness_error": f"{type(exc).__name__}: {exc}"}, time.monotonic() - t0)
                say(f"check {key}: harness error {exc}")
                return
            if need_check:
                rec.put(key, "check", verdict_record(verdict), time.monotonic() - t0)
                say(f"check {key}: {verdict.status} {verdict.error_class or ''} ({time.monotonic() - t0:.0f} s)")
            if need_estimate:
                t1 = time.monotonic()
                try:
                    profile = profiler.profile(
                        ProfileRequest.of(cand["workload_id"], source, [ESTIMATE_TARGET]), verdict
                    )
                    value = {
                        "status": str(verdict.status),
                        "targets": _round([t.model_dump(mode="json") for t in profile.targets]),
                    }
                except Exception as exc:  # noqa: BLE001 - recorded
                    value = {"harness_error": f"{type(exc).__name__}: {exc}"}
                rec.put(key, "estimate", value, time.monotonic() - t1)
                say(f"estimate {key}: ({time.monotonic() - t1:.0f} s)")

        try:
            with ThreadPoolExecutor(args.jobs) as pool:
                for future in [pool.submit(one, c) for c in order]:
                    future.result()
        finally:
            checker.close()
            rec.save()
    rec.data["meta"]["runs"][-1]["seconds"] = round(time.monotonic() - started)
    rec.save()
    say(f"done: {len(cands)} candidates, {time.monotonic() - started:.0f} s, {args.output}")
    return 0


# ---- diff ----------------------------------------------------------------------------------------------


def _differences(a, b, where: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k in SEED_DEPENDENT:
                continue
            if k not in a:
                out.append(f"{where}.{k}: only in B: {json.dumps(b[k])[:300]}")
            elif k not in b:
                out.append(f"{where}.{k}: only in A: {json.dumps(a[k])[:300]}")
            else:
                out += _differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")]
    if (
        isinstance(a, str)
        and isinstance(b, str)
        and " check." in where
        and (where.endswith(".message") or ".warnings[" in where)
    ):
        a, b = _text(a), _text(b)  # records made before a placeholder was added compare as if made after it
    if a != b:
        return [f"{where}:\n    A: {json.dumps(a)[:400]}\n    B: {json.dumps(b)[:400]}"]
    return []


def diff(args) -> int:
    a = json.loads(Path(args.a).read_text())["results"]
    b = json.loads(Path(args.b).read_text())["results"]
    found, compared = [], 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            found.append(f"{key}: only in {'B' if key not in a else 'A'}")
            continue
        for part in PARTS:
            if part in a[key] and part in b[key]:
                compared += 1
                found += _differences(a[key][part], b[key][part], f"{key} {part}")
            elif part in a[key] or part in b[key]:
                found.append(f"{key} {part}: only in {'A' if part in a[key] else 'B'}")
    for line in found:
        print(line)
    print(f"{compared} parts compared, {len(found)} differences", file=sys.stderr)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--trace-server"]:
        _trace_server()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record (or complete) a behaviour file")
    rec.add_argument("output")
    rec.add_argument("--only", help="comma-separated glob patterns over keys, e.g. 'solutions/8p_*,expert/*'")
    rec.add_argument("--parts", default=",".join(PARTS), help="check,trace,estimate (default: all)")
    rec.add_argument("--jobs", type=int, default=2, help="checks at once (default 2)")
    rec.add_argument("--estimate-solutions", type=int, default=DEFAULT_ESTIMATE_SOLUTIONS)
    rec.add_argument("--redo", action="store_true", help="run the selection again even where recorded")
    sub.add_parser("list", help="print the candidates' keys")
    d = sub.add_parser("diff", help="print the differences between two records")
    d.add_argument("a")
    d.add_argument("b")
    args = parser.parse_args(argv)
    if args.command == "record":
        return record(args)
    if args.command == "diff":
        return diff(args)
    cands = candidates()
    estimated = estimated_keys(cands, DEFAULT_ESTIMATE_SOLUTIONS)
    for c in cands:
        print(c["key"], c["workload_id"], "(+estimate)" if c["key"] in estimated else "")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
