"""Pydantic models for everything that crosses a boundary (MCP results, CLI --json, the store).

Each result model has `summary()`: the short text that says the same thing as the structure, for
clients that read text rather than structured content.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


def text_of(model: BaseModel) -> str:
    """The plain-text rendering of a result model (docs pages carry theirs as `text`)."""
    return model.summary() if hasattr(model, "summary") else model.text


class Tensor(BaseModel):
    name: str = ""
    shape: list[int]
    dtype: str
    bytes: int


class StaticArg(BaseModel):
    name: str
    value: str = Field(description="A Python value passed as-is; the kernel must treat it as static")


class RooflineBound(BaseModel):
    generation: str
    peak_bf16_tflops: float
    hbm_gb_per_s: float
    lower_bound_us: float = Field(description="max(FLOPs / peak compute, HBM bytes / bandwidth)")
    bound_by: str = Field(description="'compute' or 'memory'")


class SizeSpec(BaseModel):
    size: str
    params: dict[str, int | float | list[int] | str]
    inputs: list[Tensor]
    static_inputs: list[StaticArg]
    outputs: list[Tensor]
    flops: int
    input_bytes: int
    output_bytes: int
    roofline: list[RooflineBound]


class WorkloadSummary(BaseModel):
    id: str
    tier: str
    model: str
    operator: str
    sizes: dict[str, dict[str, int | float | list[int] | str]]
    has_expert_reference: bool

    def summary(self) -> str:
        full = ", ".join(f"{k}={v}" for k, v in self.sizes["full"].items())
        return f"{self.id:<58} {self.tier:<11} {self.operator}  ({full})"


class WorkloadList(BaseModel):
    count: int
    workloads: list[WorkloadSummary]

    def summary(self) -> str:
        return "\n".join([f"{self.count} workloads"] + [w.summary() for w in self.workloads])


class WorkloadSpec(BaseModel):
    id: str
    tier: str
    model: str
    operator: str
    description: str
    contract: str = Field(description="What a candidate file must define")
    size: SizeSpec
    other_sizes: dict[str, dict[str, int | float | list[int] | str]]
    notes: list[str]
    degenerate_output: bool = Field(description="An all-zeros or constant output passes JAXBench's own check")
    has_expert_reference: bool
    reference_source: str
    expert_source: str | None = Field(None, description="The expert kernel's source, only where the server shows it")

    def summary(self) -> str:
        s = self.size
        args = [f"  {t.name}: {t.shape} {t.dtype}" for t in s.inputs] + [
            f"  {a.name}: {a.value} (static Python value)" for a in s.static_inputs
        ]
        outs = [f"  {list(t.shape)} {t.dtype}" for t in s.outputs]
        roof = [f"  {r.generation}: >= {r.lower_bound_us:,.1f} us ({r.bound_by}-bound)" for r in s.roofline]
        lines = [
            f"{self.id} ({self.tier}; {self.model}; {self.operator}) at size '{s.size}' {s.params}",
            self.description,
            self.contract,
            "inputs:",
            *args,
            "output:",
            *outs,
            f"FLOPs {s.flops:,}; bytes in {s.input_bytes:,}, out {s.output_bytes:,}",
            *(["roofline lower bound per TPU generation:", *roof] if roof else []),
            *(["notes:", *[f"  - {n}" for n in self.notes]] if self.notes else []),
            "reference (JAXBench baseline semantics):",
            self.reference_source.rstrip(),
            *(["expert kernel:", self.expert_source.rstrip()] if self.expert_source else []),
        ]
        return "\n".join(lines)


class QueueInfo(BaseModel):
    slots: int = Field(description="How many checks may run at once on this host")
    running: int
    waiting: int


class ServerInfo(BaseModel):
    tier: str
    tier_description: str
    jax_version: str
    jaxlib_version: str
    libtpu_version: str | None
    attached_tpu: str | None = Field(description="The generation of the attached TPU, if any")
    compile_targets: list[str] = Field(description="TPU generations this host can compile for")
    default_target: str | None
    workloads: int
    queue: QueueInfo

    def summary(self) -> str:
        targets = ", ".join(self.compile_targets) or "none (lowering only)"
        return "\n".join(
            [
                f"tier: {self.tier} - {self.tier_description}",
                f"jax {self.jax_version}, jaxlib {self.jaxlib_version}, libtpu {self.libtpu_version or 'not installed'}",
                f"attached TPU: {self.attached_tpu or 'none'}",
                f"compile targets: {targets} (default {self.default_target or 'none'})",
                f"workloads: {self.workloads}",
                f"check queue: {self.queue.running} running, {self.queue.waiting} waiting, {self.queue.slots} slots",
            ]
        )


# ---- check_kernel -------------------------------------------------------------------------------


class StageReport(BaseModel):
    stage: str = Field(description="load | trace | lower | compile | run | compare | policy")
    ok: bool
    seconds: float
    target: str | None = None
    produced_by: str = Field(description="Which tier produced this result, e.g. 'cpu_libtpu: deviceless XLA:TPU compile'")
    detail: str = ""


class KernelDescription(BaseModel):
    name: str
    grid: list[int | str]
    block_shapes: list[list[int | None]]
    dimension_semantics: list[str]
    num_scalar_prefetch: int
    num_scratch: int


class CompileReport(BaseModel):
    target: str
    ok: bool
    seconds: float
    code_size_bytes: int | None = None
    vmem_estimate_bytes: int | None = Field(None, description="Double-buffered blocks plus scratch, from the BlockSpecs")


class SeedReport(BaseModel):
    seed_index: int = Field(description="Seeds are hidden; only their order is reported")
    passed: bool
    max_abs_error: float
    max_rel_error: float
    tolerance: float = Field(description="Allowed max |candidate - truth|, calibrated from the native-dtype baseline")
    baseline_max_abs_error: float = Field(description="How far the workload's own native-dtype baseline is from the truth")
    worst_index: list[int]
    worst_candidate: float
    worst_truth: float
    nan_count: int
    inf_count: int
    jaxbench_allclose: bool = Field(description="JAXBench's own check: allclose(atol=rtol=1e-2) against the native baseline")


class Verdict(BaseModel):
    status: str
    error_class: str | None = None
    message: str = Field(description="The decisive lines; the full log is kept with the attempt")
    hint: str | None = None
    docs: list[str] = Field(default_factory=list, description="Doc sections to read: pass them to read_docs(topic=...)")
    workload_id: str
    size: str = Field(description="The size the run stage used (compiles always use the full size)")
    targets: list[str]
    tier: str
    attempt_id: int | None = None
    stages: list[StageReport] = Field(default_factory=list)
    pallas_calls: int = 0
    kernels: list[KernelDescription] = Field(default_factory=list)
    compiles: list[CompileReport] = Field(default_factory=list)
    seeds: list[SeedReport] = Field(default_factory=list)
    jaxbench_compatible: bool | None = Field(None, description="Would JAXBench's own check (allclose 1e-2) pass on every seed")
    warnings: list[str] = Field(default_factory=list)
    total_seconds: float = 0.0

    def summary(self) -> str:
        head = f"{self.status.upper()}" + (f" [{self.error_class}]" if self.error_class else "")
        lines = [f"{head}: {self.workload_id} (run at {self.size} size; compiled for {', '.join(self.targets) or 'no target'}; tier {self.tier})"]
        if self.message:
            lines.append(self.message)
        if self.hint:
            lines.append(f"fix: {self.hint}")
        if self.docs:
            lines.append("read: " + ", ".join(self.docs))
        for c in self.compiles:
            size = f", code {c.code_size_bytes:,} B" if c.code_size_bytes else ""
            vmem = f", VMEM ~{c.vmem_estimate_bytes / 2**20:.1f} MiB" if c.vmem_estimate_bytes else ""
            lines.append(f"compile {c.target}: {'ok' if c.ok else 'FAILED'} in {c.seconds:.2f}s{size}{vmem}")
        for s in self.seeds:
            lines.append(
                f"seed {s.seed_index}: {'ok' if s.passed else 'MISMATCH'} max|err| {s.max_abs_error:.3g} "
                f"(allowed {s.tolerance:.3g}; baseline {s.baseline_max_abs_error:.3g}) worst at {s.worst_index}"
                + (f", {s.nan_count} NaN, {s.inf_count} Inf" if s.nan_count or s.inf_count else "")
            )
        if self.jaxbench_compatible is not None:
            lines.append(f"JAXBench allclose(1e-2) check: {'pass' if self.jaxbench_compatible else 'fail'}")
        lines += [f"warning: {w}" for w in self.warnings]
        if self.attempt_id is not None:
            lines.append(f"attempt {self.attempt_id} (full log: list_attempts(attempt_id={self.attempt_id}))")
        return "\n".join(lines)


# ---- attempts -----------------------------------------------------------------------------------


class AttemptSummary(BaseModel):
    attempt_id: int
    kind: str
    workload_id: str
    state: str = Field(description="running | done | failed")
    status: str | None
    error_class: str | None
    created: str
    seconds: float | None


class AttemptDetail(AttemptSummary):
    verdict: Verdict | None
    profile: Profile | None = Field(None, description="For a profile attempt: the profile (its verdict is also in `verdict`)")
    source: str
    log_tail: str = Field(description="The end of the worker's events, stdout and stderr")

    def summary(self) -> str:
        head = f"attempt {self.attempt_id} ({self.kind} {self.workload_id}): {self.state}"
        body = self.profile.summary() if self.profile else self.verdict.summary() if self.verdict else ""
        return "\n".join(x for x in (head, body, "log tail:\n" + self.log_tail[-3000:] if self.log_tail else "") if x)


class AttemptList(BaseModel):
    attempts: list[AttemptSummary]
    detail: AttemptDetail | None = Field(None, description="The one attempt asked for by id, with its verdict and log")

    def summary(self) -> str:
        if self.detail is not None:
            return self.detail.summary()
        if not self.attempts:
            return "no attempts yet"
        return "\n".join(
            f"#{a.attempt_id} {a.created} {a.kind} {a.workload_id}: {a.status or a.state}"
            + (f" [{a.error_class}]" if a.error_class else "") for a in self.attempts
        )


class CheckOutcome(BaseModel):
    state: str = Field(description="'done' with a verdict, or 'running': ask list_attempts(attempt_id=...) later")
    attempt_id: int
    verdict: Verdict | None = None

    def summary(self) -> str:
        if self.verdict is not None:
            return self.verdict.summary()
        return (f"attempt {self.attempt_id} is still running; call list_attempts(attempt_id={self.attempt_id}) "
                "in a little while for the verdict")


# ---- profile_kernel -----------------------------------------------------------------------------


class KernelEstimate(BaseModel):
    name: str
    grid_steps: int
    grid_steps_exact: bool = Field(True, description="False when a grid dimension is known only at run time (counted as 1)")
    bundles_per_step: int = Field(description="Bundles in the kernel's final schedule (libtpu's dump)")
    slot_use: dict[str, float] = Field(description="Average use per bundle of each VLIW slot kind, as a fraction of capacity")
    hbm_bytes: int = Field(description="HBM bytes the BlockSpecs move over the grid, re-fetches included")
    hbm_bytes_exact: bool = Field(description="False when index maps depend on scalar prefetch or blocks stay in HBM")
    run_ratio: float = Field(1.0, description="Code a grid step runs / code in the schedule, averaged over the grid: "
                                              "below 1 when pl.when skips branches, above 1 when in-kernel loops repeat")
    run_ratio_exact: bool = Field(True, description="False when a predicate depends on data or a loop's trip count is unknown")
    compute_us: float
    memory_us: float
    overhead_us: float
    estimate_us: float
    bottleneck: str


class DeviceTiming(BaseModel):
    median_us: float
    min_us: float
    spread_pct: float = Field(description="(max - min) / median over the timed runs")
    iterations: int


class TargetEstimate(BaseModel):
    target: str
    kind: str = Field("static estimate", description="'measured', 'static estimate' or 'roofline only'")
    candidate_us: float | None = Field(description="The candidate's time: the measured median, or the estimate of its Pallas "
                                                   "kernels plus XLA's estimate of the work around them")
    outside_kernels_us: float | None = Field(None, description="Static estimate only: XLA's estimate of the candidate's work "
                                                               "outside its Pallas kernels (included in candidate_us)")
    xla_baseline_us: float | None = Field(description="The XLA baseline: measured median, or XLA's own cost-analysis estimate")
    expert_us: float | None = Field(None, description="The same for the expert kernel, if the workload has one")
    roofline_us: float = Field(description="Lower bound from FLOPs and the workload's input+output bytes")
    speedup_vs_xla: float | None = None
    speedup_vs_expert: float | None = None
    tflops_per_s: float | None = Field(None, description="The workload's FLOPs over candidate_us")
    hbm_gb_per_s: float | None = Field(None, description="The workload's input+output bytes over candidate_us")
    roofline_pct: float | None = Field(None, description="roofline_us / candidate_us, in percent")
    candidate_timing: DeviceTiming | None = None
    xla_timing: DeviceTiming | None = None
    expert_timing: DeviceTiming | None = None
    bottleneck: str | None = None
    kernels: list[KernelEstimate] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    docs: list[str] = Field(default_factory=list, description="Doc sections on reading this result: pass them to read_docs(topic=...)")
    error: str | None = None


class Profile(BaseModel):
    workload_id: str
    tier: str
    kind: str = Field(description="'measured' on a TPU host, 'static estimate' on a CPU host with libtpu, 'roofline only' on a plain CPU host")
    label: str
    verdict: Verdict = Field(description="The check that came first: only a correct kernel is profiled")
    targets: list[TargetEstimate] = Field(default_factory=list)
    attempt_id: int | None = None

    def summary(self) -> str:
        if self.verdict.status != "correct":
            return "NOT PROFILED: the kernel must pass check_kernel first.\n" + self.verdict.summary()
        lines = [f"{self.workload_id}: {self.kind.upper()} ({self.label})"]
        for t in self.targets:
            if t.error:
                lines.append(f"{t.target}: {t.error}")
                continue
            approx = "" if t.kind == "measured" else "~"
            fmt = lambda v, mark=approx: f"{mark}{v:,.1f} us" if v is not None else "n/a"  # noqa: E731
            lines.append(
                f"{t.target} ({t.kind}): candidate {fmt(t.candidate_us)} | XLA baseline {fmt(t.xla_baseline_us)} | "
                f"expert {fmt(t.expert_us)} | roofline >= {fmt(t.roofline_us, '')}; "
                + (f"speedup vs XLA {t.speedup_vs_xla:.2f}x" if t.speedup_vs_xla else "speedup vs XLA n/a")
                + (f", vs expert {t.speedup_vs_expert:.2f}x" if t.speedup_vs_expert else "")
                + (f"; {t.roofline_pct:.0f}% of roofline ({t.tflops_per_s:,.1f} TFLOP/s, {t.hbm_gb_per_s:,.0f} GB/s)" if t.roofline_pct else "")
                + (f"; bottleneck: {t.bottleneck}" if t.bottleneck else "")
            )
            for who, timing in (("candidate", t.candidate_timing), ("XLA", t.xla_timing), ("expert", t.expert_timing)):
                if timing:
                    lines.append(f"  {who}: median {timing.median_us:,.1f} us, min {timing.min_us:,.1f} us, "
                                 f"spread {timing.spread_pct:.1f}% over {timing.iterations} runs")
            if t.outside_kernels_us:
                lines.append(f"  XLA work outside the Pallas kernels: ~{t.outside_kernels_us:,.1f} us")
            for k in t.kernels:
                lines.append(f"  kernel {k.name}: {k.grid_steps} steps x {k.bundles_per_step} bundles"
                             + (f" x {k.run_ratio:.2f} run" if k.run_ratio != 1 else "") + f"; compute {k.compute_us:,.1f} us, "
                             f"HBM {k.memory_us:,.1f} us ({k.hbm_bytes / 2**20:,.0f} MiB{'' if k.hbm_bytes_exact else ', approx.'}), "
                             f"step overhead {k.overhead_us:,.1f} us -> {k.bottleneck}")
            lines += [f"  flag: {f}" for f in t.flags]
            if t.docs:
                lines.append("  read: " + ", ".join(t.docs))
        return "\n".join(lines)


class ProfileOutcome(BaseModel):
    state: str = Field(description="'done' with a profile, or 'running': ask list_attempts(attempt_id=...) later")
    attempt_id: int
    profile: Profile | None = None

    def summary(self) -> str:
        if self.profile is not None:
            return self.profile.summary()
        return (f"attempt {self.attempt_id} is still running; call list_attempts(attempt_id={self.attempt_id}) "
                "in a little while for the result")
