"""`jaxbench-mcp workload validate`: whether a custom workload can be checked the way the 50 are.

For one module (or task folder), or every entry of a directory, in order; a step that cannot run because
an earlier one failed is skipped, saying so:

  contract       the module imports and declares the fields and functions the registry needs
  id             the id is not one of the 50 (nor, within a directory, another entry's)
  sizes trace    every size's create_inputs and reference trace; the reference returns one floating array
  divisibility   every size but full keeps full's divisibility (workloads.keeps_divisibility), or the
                 dimension that does not is named with what the difference hides
  seeds          hidden seeds change the inputs (else a kernel could return a remembered answer)
  truth          the truth is computed one precision level above the output dtype and is finite
  degenerate     all zeros, all ones, the truth's mean and an input passed through all fail the check
  budget         the reference runs at the small size within the interpret-mode budget
  tolerances     for imported formats: the format's own tolerance next to our calibrated one (reported)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxbench_mcp.catalog import formats as workload_formats, workloads

# The run stage allows this many seconds (jobs.Limits) for a check's seeds in interpret mode, which is
# commonly 10-50x slower than XLA on the CPU; the reference's own run at small size gets this share.
RUN_STAGE_SECONDS = 120.0
INTERPRET_SLOWDOWN = 20.0
VALIDATION_SEEDS = (43, 44)
SMALL_BYTES_LIMIT = 512 * 2**20


@dataclass
class Step:
    name: str
    ok: bool | None  # None: skipped, or reported only
    detail: str


@dataclass
class Report:
    path: Path
    workload_id: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.ok is not False for s in self.steps)

    def text(self) -> str:
        head = f"{'OK    ' if self.ok else 'BROKEN'} {self.workload_id or '?'}  ({self.path})"
        mark = {True: "pass", False: "FAIL", None: "note"}
        return "\n".join([head] + [f"  {mark[s.ok]:<4} {s.name:<13} {s.detail}" for s in self.steps])

    def as_dict(self) -> dict:
        return {
            "path": str(self.path),
            "workload_id": self.workload_id,
            "ok": self.ok,
            "steps": [{"name": s.name, "ok": s.ok, "detail": s.detail} for s in self.steps],
        }


def divisibility_gap(full: int, small: int, cap: int = 2048) -> str:
    """In words, what a small dimension that breaks keeps_divisibility hides about the full one."""
    if (full == 1) != (small == 1):
        return "one is 1 and the other is not: a broadcast at one size is a real axis at the other"
    block = 1
    while block <= cap:
        if (full % block == 0) != (small % block == 0):
            if full % block == 0:
                return (
                    f"a block of {block} divides the full {full} but not the small {small}: a kernel tiled "
                    "for full size fails or drops a remainder only at small size"
                )
            return (
                f"a block of {block} divides the small {small} but not the full {full}: a kernel that "
                "floor-divides by it passes at small size and drops a remainder at full size"
            )
        block *= 2
    return "powers of two of the two sizes differ"


def _dimensions(w: workloads.Workload, size: str) -> dict[str, int]:
    dims: dict[str, int] = {}
    for arg in w.input_specs(size):
        if arg.tensor is not None:
            dims.update({f"{arg.name}[{d}]": n for d, n in enumerate(arg.tensor.shape)})
    for k, out in enumerate(w.output_specs(size)):
        dims.update({f"output{k}[{d}]": n for d, n in enumerate(out.shape)})
    return dims


def _entries(path: Path) -> list[Path]:
    if path.is_file() or workload_formats.format_of(path) is not None:
        return [path]
    return workloads.custom_entries(path)


def validate(path: Path | str) -> list[Report]:
    """One report per entry of `path` (a module, a task folder, or a directory of them)."""
    path = Path(path).expanduser().resolve()
    if not path.exists():
        return [Report(path, None, [Step("contract", False, "no such file or directory")])]
    builtin = {w.id.lower(): w.id for w in workloads.all_workloads() if w.tier != "custom"}
    seen: dict[str, Path] = {}
    reports = []
    for number, entry in enumerate(_entries(path), start=5000):
        reports.append(_validate_one(entry, number, builtin, seen))
    if not reports:
        reports.append(Report(path, None, [Step("contract", False, "holds no workload module or task folder")]))
    return reports


def _validate_one(entry: Path, number: int, builtin: dict[str, str], seen: dict[str, Path]) -> Report:
    report = Report(entry)
    steps = report.steps
    try:
        w = workloads.load_custom(entry, number)
    except workloads.WorkloadDefinitionError as exc:
        steps.append(Step("contract", False, f"{exc.field}: {exc.problem}"))
        return report
    except Exception as exc:  # noqa: BLE001 - the user's module, reported
        steps.append(Step("contract", False, f"module: {type(exc).__name__}: {exc}"))
        return report
    report.workload_id = w.id
    optional = [
        name
        for name, present in (
            ("MODEL", hasattr(w.module, "MODEL")),
            ("flops", callable(getattr(w.module, "flops", None))),
            ("NOTES", bool(w.notes)),
        )
        if not present
    ]
    steps.append(
        Step(
            "contract",
            True,
            f"{w.source_format} format, operator {w.operator!r}, sizes {', '.join(w.sizes)}"
            + (f"; optional fields left out: {', '.join(optional)}" if optional else ""),
        )
    )
    if w.size_rule:
        steps.append(Step("small size", None, w.size_rule))
    clash = builtin.get(w.id.lower())
    if clash:
        steps.append(Step("id", False, f"{w.id!r} is the JAXBench workload {clash}: choose another id"))
        return report
    if w.id.lower() in seen:
        steps.append(Step("id", False, f"{w.id!r} is also the id of {seen[w.id.lower()]}"))
        return report
    seen[w.id.lower()] = entry
    steps.append(Step("id", True, f"{w.id!r} is free"))

    # Registered for the rest of the checks (the size and spec caches look workloads up by id).
    registry = workloads._registry()
    previous = registry.get(w.id)
    registry[w.id] = w
    try:
        _checks(w, steps)
    finally:
        if previous is None:
            registry.pop(w.id, None)
        else:
            registry[w.id] = previous
        for cached in (workloads._input_specs_cached, workloads._output_specs_cached, workloads._xla_flops):
            cached.cache_clear()
        workloads._jitted_create_inputs.cache_clear()
    return report


def _checks(w: workloads.Workload, steps: list[Step]) -> None:
    try:
        workloads._trace_check(w)
    except workloads.WorkloadDefinitionError as exc:
        steps.append(Step("sizes trace", False, f"{exc.field}: {exc.problem}"))
        return
    out = w.output_specs("full")[0]
    steps.append(
        Step(
            "sizes trace",
            True,
            f"{len(w.sizes)} sizes trace; output {list(out.shape)} {out.dtype} at full size; "
            f"FLOPs at full size {w.flops('full'):,} ({w.flops_source})",
        )
    )

    full_dims = _dimensions(w, "full")
    for size in w.sizes:
        if size == "full":
            continue
        dims = _dimensions(w, size)
        if dims.keys() != full_dims.keys():
            steps.append(Step("divisibility", False, f"size {size!r} has other arrays or ranks than full"))
            continue
        broken = {
            k: (full_dims[k], dims[k]) for k in dims if not workloads.keeps_divisibility(*(full_dims[k], dims[k]))
        }
        if broken:
            detail = "; ".join(f"{k}: {f} -> {s}: {divisibility_gap(f, s)}" for k, (f, s) in broken.items())
            steps.append(Step("divisibility", False, f"size {size!r}: {detail}"))
        else:
            steps.append(Step("divisibility", True, f"size {size!r} keeps every dimension's divisibility"))

    small_bytes = w.io_bytes("small")
    if small_bytes > SMALL_BYTES_LIMIT:
        steps.append(
            Step(
                "budget",
                False,
                f"the small size moves {small_bytes / 2**20:,.0f} MiB, over the interpret run's "
                f"{SMALL_BYTES_LIMIT / 2**20:,.0f} MiB: choose a smaller small size",
            )
        )
        return
    try:
        started = time.monotonic()
        inputs = [w.create_inputs("small", seed=s) for s in VALIDATION_SEEDS]
        inputs_seconds = (time.monotonic() - started) / len(VALIDATION_SEEDS)
    except Exception as exc:  # noqa: BLE001
        steps.append(Step("seeds", False, f"create_inputs fails at small size: {type(exc).__name__}: {exc}"))
        return
    floats = [
        i
        for i, x in enumerate(inputs[0])
        if hasattr(x, "dtype")
        and np.issubdtype(np.asarray(x).dtype, np.inexact)
        or str(getattr(x, "dtype", "")) == "bfloat16"
    ]
    differs = any(not np.array_equal(np.asarray(inputs[0][i]), np.asarray(inputs[1][i])) for i in floats)
    steps.append(
        Step(
            "seeds",
            differs,
            "hidden seeds draw different inputs"
            if differs
            else "the inputs are the same for every seed: a kernel could return a remembered output; draw them "
            "from the `seed` argument (imported formats: from jax.random.PRNGKey/key or numpy's generators, "
            "reached by module-level names)",
        )
    )

    from jaxbench_mcp.checking.checker import DEFAULT_SEEDS
    from jaxbench_mcp.checking.comparison import compare
    from jaxbench_mcp.checking.truth import truth_of

    try:
        truths = [truth_of(w, x) for x in inputs]
    except Exception as exc:  # noqa: BLE001
        steps.append(Step("truth", False, f"the reference fails at small size: {type(exc).__name__}: {exc}"))
        return
    t = truths[0]
    wide = "float64" if t.dtype == "float32" else "float32"
    finite = bool(np.isfinite(t.truth).all())
    if not finite:
        steps.append(
            Step("truth", False, f"the {wide} truth has {int((~np.isfinite(t.truth)).sum())} non-finite values")
        )
    elif t.baseline_error == 0.0:
        steps.append(
            Step(
                "truth",
                None,
                f"the {t.dtype} reference equals the {wide} truth exactly: it may compute in a "
                "fixed precision whatever its inputs; the tolerance is then a correct kernel's own rounding at the "
                "output's magnitude "
                f"({t.tolerance:.3g})",
            )
        )
    else:
        steps.append(
            Step(
                "truth",
                True,
                f"{t.dtype} output, truth in {wide}; the native reference is {t.baseline_error:.3g} "
                f"off it, so a kernel may be {t.tolerance:.3g} off (calibrated)",
            )
        )

    caught: list[str] = []  # names of the degenerate candidates the check fails
    passed: list[str] = []
    for k, (x, truth) in enumerate(zip(inputs, truths, strict=True)):
        for name, cand in _degenerate_candidates(w, x, truth).items():
            _, error, _ = compare(cand, truth.dtype, truth, k)
            (passed if error is None else caught).append(name)
    passed_names = sorted(set(passed))
    if passed_names and not w.degenerate_output:
        steps.append(
            Step(
                "degenerate",
                False,
                f"{', '.join(passed_names)} pass the check: the output is (near) constant or a "
                "copy of an input; change the inputs or the op (or declare DEGENERATE_OUTPUT = True and say why)",
            )
        )
    else:
        steps.append(
            Step(
                "degenerate",
                True if not passed_names else None,
                f"{', '.join(sorted(set(caught)))} are all caught"
                if not passed_names
                else f"{', '.join(passed_names)} pass, as DEGENERATE_OUTPUT declares",
            )
        )

    try:
        fn = w.jitted_reference()
        jax.block_until_ready(fn(*inputs[0]))  # compiled
        started = time.monotonic()
        jax.block_until_ready(fn(*inputs[1]))
        run_seconds = time.monotonic() - started
    except Exception as exc:  # noqa: BLE001
        steps.append(Step("budget", False, f"the reference fails at small size: {type(exc).__name__}: {exc}"))
        return
    allowed = RUN_STAGE_SECONDS / (DEFAULT_SEEDS * INTERPRET_SLOWDOWN)
    steps.append(
        Step(
            "budget",
            run_seconds <= allowed,
            f"the reference runs in {run_seconds:.3f} s at small size (inputs {inputs_seconds:.3f} s); allowed "
            f"{allowed:.1f} s: an interpret run is ~{INTERPRET_SLOWDOWN:g}x slower and the run stage gives "
            f"{RUN_STAGE_SECONDS:g} s for {DEFAULT_SEEDS} seeds",
        )
    )

    if w.format_tolerances:
        tol = w.format_tolerances
        atol, rtol = tol.get("atol"), tol.get("rtol")
        scale = float(np.max(np.abs(t.truth), initial=0.0))
        if isinstance(atol, (int, float)) and isinstance(rtol, (int, float)):
            theirs = (
                f"allclose(atol={atol}, rtol={rtol}): up to {atol + rtol * scale:.3g} "
                f"at the output's largest magnitude {scale:.3g}"
            )
        else:
            theirs = ", ".join(f"{k}={v}" for k, v in tol.items() if k != "source") or "none set"
        steps.append(
            Step(
                "tolerances",
                None,
                f"theirs ({tol.get('source')}): {theirs}; ours: max |error| <= {t.tolerance:.3g} "
                "(2x the native reference's own error against the truth at this seed, or a correct kernel's own "
                "rounding if larger)",
            )
        )


def _degenerate_candidates(w: workloads.Workload, inputs: tuple, truth) -> dict[str, np.ndarray]:
    def as_output(values) -> np.ndarray:
        rounded = np.asarray(jnp.asarray(values).astype(truth.dtype))
        return rounded.astype(np.float32) if jnp.issubdtype(rounded.dtype, jnp.floating) else rounded

    shape = truth.truth.shape
    made = {
        "zeros": as_output(np.zeros(shape)),
        "ones": as_output(np.ones(shape)),
        "mean": as_output(np.full(shape, float(np.mean(truth.truth)))),
    }
    for i, x in enumerate(inputs):
        if i not in w.static_argnums and hasattr(x, "shape") and int(np.prod(x.shape)) == int(np.prod(shape)):
            made["passthrough"] = as_output(np.asarray(x).reshape(shape))
            break
    return made


def reports_text(reports: list[Report]) -> str:
    ok = sum(r.ok for r in reports)
    return "\n\n".join(r.text() for r in reports) + f"\n\n{ok} of {len(reports)} valid"
