"""Pydantic models for everything that crosses a boundary (MCP results, CLI --json, the store).

Each result model has `summary()`: the short text that says the same thing as the structure, for
clients that read text rather than structured content.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, PlainSerializer, WithJsonSchema

from jaxbench_mcp.taxonomy import ErrorClass, Stage, Status

# Measured and computed numbers can be NaN or +-Inf (a kernel that never initialises its accumulator has
# NaN outputs, so its max error is Inf). Standard JSON has no such numbers and pydantic would write null,
# which an output schema saying "number" rejects, so an MCP client would drop the whole verdict. These
# types write them as the strings "nan", "inf", "-inf" (not null: null already means "not applicable",
# and an agent needs to tell NaN from Inf), the JSON schema says so, and reading accepts them back.
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_NUMBER_SCHEMA = [
    {"type": "number"},
    {"type": "string", "enum": list(_NON_FINITE), "description": "a non-finite value: NaN, +Inf or -Inf"},
]


def _write_real(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    return value


def _read_real(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in _NON_FINITE:
        return _NON_FINITE[value.strip().lower()]
    return value


def _read_required_real(value: Any) -> Any:
    # Attempts stored before these types wrote NaN and Inf as null: read them back as NaN.
    return math.nan if value is None else _read_real(value)


Real = Annotated[
    float,
    BeforeValidator(_read_required_real),
    PlainSerializer(_write_real, return_type=Any, when_used="json"),
    WithJsonSchema({"anyOf": _NUMBER_SCHEMA}),
]
OptionalReal = Annotated[
    float | None,
    BeforeValidator(_read_real),
    PlainSerializer(_write_real, return_type=Any, when_used="json"),
    WithJsonSchema({"anyOf": [*_NUMBER_SCHEMA, {"type": "null"}]}),
]


# The docs ablation's two arms (jaxbench_mcp.catalog.conditions).
ContextCondition = Literal["docs", "none"]


def plain_number(value: float | None, spec: str = ".3g") -> str:
    """A number for the text rendering, with NaN and Inf spelled out."""
    if value is None:
        return "n/a"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(value, spec)


def _vmem_phrase(compiled: int | None, estimated: int | None) -> str:
    """A compile line's VMEM: the compiler's figure when it gave one, with the estimate beside it."""
    mib = 2**20
    if compiled:
        beside = f", estimated ~{estimated / mib:.1f} MiB before compiling" if estimated else ""
        return f", VMEM {compiled / mib:.1f} MiB as compiled{beside}"
    return f", VMEM ~{estimated / mib:.1f} MiB (estimated)" if estimated else ""


def text_of(model: BaseModel) -> str:
    """The plain-text rendering of a result model (docs pages carry theirs as `text`)."""
    summary = getattr(model, "summary", None)
    return summary() if summary is not None else model.text  # type: ignore[attr-defined] # a docs page's own field


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
            # The flags of the structure, in words: the text must not know less than the structure.
            *(
                ["note: an all-zeros or constant output passes JAXBench's own check here"]
                if self.degenerate_output
                else []
            ),
            *(
                [
                    "other sizes: "
                    + "; ".join(
                        f"'{name}' " + ", ".join(f"{k}={v}" for k, v in params.items())
                        for name, params in self.other_sizes.items()
                    )
                ]
                if self.other_sizes
                else []
            ),
            "expert kernel: "
            + (
                "yes, shown below"
                if self.expert_source
                else "yes (source hidden)"
                if self.has_expert_reference
                else "none for this workload"
            ),
            "reference (JAXBench baseline semantics):",
            self.reference_source.rstrip(),
            *(["expert kernel:", self.expert_source.rstrip()] if self.expert_source else []),
        ]
        return "\n".join(lines)


class QueueInfo(BaseModel):
    slots: int = Field(description="How many checks may run at once on this host")
    running: int
    waiting: int


class FleetHost(BaseModel):
    name: str = Field(description="The host's name and the start of its Ray node id")
    node_id: str
    state: str = Field(description="ready | starting | dead | refused (claimed by another server, or other versions)")
    tier: str | None = None
    attached_tpu: str | None = None
    tpu_chips: int = 0
    slots: int = Field(1, description="Checks the host runs at once")
    running: int = 0
    waiting: int = 0
    in_flight: int = Field(0, description="Jobs this server placed on the host and has not got back yet")
    isolation: str | None = None
    detail: str = ""


class FleetInfo(BaseModel):
    """A fleet of hosts on Ray behind the server (jaxbench_mcp.fleet.ray_executor)."""

    address: str = Field(description="The Ray cluster's address")
    resource: str = Field(
        description="The Ray resource a CPU host advertises to join (a TPU host joins by Ray's TPU resource)"
    )
    hosts: list[FleetHost]
    ready_hosts: int
    tpu_chips: int = Field(description="TPU chips on the ready hosts")
    chips_by_generation: dict[str, int] = Field(default_factory=dict)
    queue_length: int = Field(description="Jobs waiting for a slot on the fleet's hosts")
    busy_share: float = Field(description="Running jobs over the slots of the ready hosts, 0 to 1")
    fallback: str | None = Field(
        None, description="Set once the cluster went away (why): jobs then run on the server's own host"
    )

    def summary_lines(self) -> list[str]:
        chips = ", ".join(f"{n} {g}" for g, n in sorted(self.chips_by_generation.items()))
        lines = [
            f"fleet: Ray cluster at {self.address}: {self.ready_hosts} of {len(self.hosts)} hosts ready, "
            f"{self.tpu_chips} TPU chips"
            + (f" ({chips})" if chips else "")
            + f", {self.queue_length} waiting, {self.busy_share:.0%} busy"
        ]
        if self.fallback:
            lines.append(f"fleet FALLEN BACK to local execution on the server's host: {self.fallback}")
        lines.extend(
            f"  host {h.name}: {h.state}, tier {h.tier or '?'}, TPU {h.attached_tpu or 'none'}"
            + (f" x{h.tpu_chips}" if h.tpu_chips else "")
            + f", {h.running} of {h.slots} slots running, "
            f"{h.waiting} waiting" + (f" ({h.detail})" if h.detail else "")
            for h in self.hosts
        )
        return lines


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
    isolation: str = Field(description="How candidate processes are isolated: bubblewrap | namespaces | process-only")
    fleet: FleetInfo | None = Field(
        None, description="The Ray fleet that runs this server's checks, if any (`serve --ray`)"
    )
    context: ContextCondition = Field(
        "docs", description="'docs': curated docs are served; 'none': the no-docs arm of the docs ablation"
    )
    provenance: dict[str, str] = Field(
        default_factory=dict,
        description="What results of this server depend on: JAXBench commit mirrored, tolerance rule, versions",
    )

    def summary(self) -> str:
        targets = ", ".join(self.compile_targets) or "none (lowering only)"
        return "\n".join(
            [
                f"tier: {self.tier} - {self.tier_description}",
                f"jax {self.jax_version}, jaxlib {self.jaxlib_version}, "
                f"libtpu {self.libtpu_version or 'not installed'}",
                f"attached TPU: {self.attached_tpu or 'none'}",
                f"compile targets: {targets} (default {self.default_target or 'none'})",
                f"workloads: {self.workloads}",
                f"check queue: {self.queue.running} running, {self.queue.waiting} waiting, {self.queue.slots} slots",
                f"candidate isolation: {self.isolation}",
                *(self.fleet.summary_lines() if self.fleet else []),
                f"context condition: {self.context}",
                *[f"provenance {k}: {v}" for k, v in self.provenance.items()],
            ]
        )


# ---- check_kernel -------------------------------------------------------------------------------


class StageReport(BaseModel):
    stage: Stage
    ok: bool
    seconds: Real
    target: str | None = None
    produced_by: str = Field(
        description="Which tier produced this result, e.g. 'cpu_libtpu: deviceless XLA:TPU compile'"
    )
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
    seconds: Real
    code_size_bytes: int | None = None
    vmem_estimate_bytes: int | None = Field(
        None,
        description="The largest kernel's VMEM estimated from its BlockSpecs before compiling: blocks at their padded "
        "sizes (double-buffered where their index changes over the grid), scratch, and the body's large values",
    )
    vmem_compiled_bytes: int | None = Field(
        None,
        description="The largest kernel's scoped VMEM as the compiler allocated it for this target (under the limit "
        "it compiled with); the figure to trust where it differs from vmem_estimate_bytes",
    )
    error: str | None = Field(None, description="Why this target's compile failed (its last decisive line)")


class SeedReport(BaseModel):
    seed_index: int = Field(description="Seeds are hidden; only their order is reported")
    size: str | None = Field(
        None,
        description="The size this seed ran at, when not the verdict's own: full_reduction (every reduction at "
        "its full length)",
    )
    passed: bool
    max_abs_error: Real
    max_rel_error: Real
    tolerance: Real = Field(description="Allowed max |candidate - truth|, calibrated from the native-dtype baseline")
    baseline_max_abs_error: Real = Field(
        description="How far the workload's own native-dtype baseline is from the truth"
    )
    worst_index: list[int]
    worst_candidate: Real
    worst_truth: Real
    nan_count: int
    inf_count: int
    jaxbench_allclose: bool = Field(
        description="JAXBench's own check: allclose(atol=rtol=1e-2) against the native baseline"
    )


class ConfigCheck(BaseModel):
    """One input configuration's check within a multi-configuration check (check_kernel with config='all')."""

    config: str = Field(description="The configuration (a key of the workload's sizes)")
    status: Status
    error_class: ErrorClass | None = None
    attempt_id: int | None = None
    max_abs_error: Real | None = Field(None, description="Worst |candidate - truth| over this configuration's seeds")
    tolerance: Real | None = None
    message: str = ""


class Verdict(BaseModel):
    # Enums, so that the output schema lists every value a client may meet.
    status: Status
    error_class: ErrorClass | None = None
    message: str = Field(description="The decisive lines; the full log is kept with the attempt")
    hint: str | None = None
    docs: list[str] = Field(default_factory=list, description="Doc sections to read: pass them to read_docs(topic=...)")
    workload_id: str
    size: str = Field(description="The size the run stage used (compiles always use the full size)")
    targets: list[str]
    tier: str
    isolation: str = Field(
        "process-only", description="How the candidate's process was isolated: bubblewrap | namespaces | process-only"
    )
    program_sha256: dict[str, str] = Field(
        default_factory=dict,
        description="Per target, the hash of the lowered program the "
        "server inspected; a profile must be of the same program",
    )
    attempt_id: int | None = None
    stages: list[StageReport] = Field(default_factory=list)
    pallas_calls: int = 0
    kernels: list[KernelDescription] = Field(default_factory=list)
    compiles: list[CompileReport] = Field(default_factory=list)
    seeds: list[SeedReport] = Field(default_factory=list)
    jaxbench_compatible: bool | None = Field(
        None, description="Would JAXBench's own check (allclose 1e-2) pass on every seed"
    )
    full_size_findings: list[str] = Field(
        default_factory=list,
        description="Regions of outputs no grid step writes and "
        "of inputs no grid step reads at full size, and outputs a 'parallel' grid axis revisits (from the kernels' "
        "index maps)",
    )
    pallas_work: str | None = Field(
        None, description="The Pallas kernels' share of the program's FLOPs and bytes at full size"
    )
    warnings: list[str] = Field(default_factory=list)
    not_covered: list[str] = Field(
        default_factory=list,
        description="What this tier's check cannot see (a CPU host runs no TPU): judge those parts on a TPU host",
    )
    total_seconds: Real = 0.0
    log_tail: str | None = Field(None, description="server_error only: the end of the server's log of this check")
    host: str | None = Field(
        None, description="The fleet host that produced this verdict (unset: the server's own host)"
    )
    configs: list[ConfigCheck] = Field(
        default_factory=list,
        description="A multi-configuration check: each configuration's result (this verdict is the first "
        "failing one's, or the last one's when all are correct)",
    )
    context: ContextCondition = Field("docs", description="The server's context condition when this was checked")

    def summary(self) -> str:
        head = f"{self.status.upper()}" + (f" [{self.error_class}]" if self.error_class else "")
        lines = [
            f"{head}: {self.workload_id} (run at {self.size} size; "
            f"compiled for {', '.join(self.targets) or 'no target'}; tier {self.tier}"
            + (f"; host {self.host}" if self.host else "")
            + ")"
        ]
        for c in self.configs:
            err = (
                f", max error {c.max_abs_error:.3g} (allowed {c.tolerance:.3g})" if c.max_abs_error is not None else ""
            )
            lines.append(f"config {c.config}: {c.status}{err} (attempt {c.attempt_id})")
        if self.message:
            lines.append(self.message)
        if self.hint:
            lines.append(f"fix: {self.hint}")
        if self.docs:
            lines.append("read: " + ", ".join(self.docs))
        for compiled in self.compiles:
            size = f", code {compiled.code_size_bytes:,} B" if compiled.code_size_bytes else ""
            vmem = _vmem_phrase(compiled.vmem_compiled_bytes, compiled.vmem_estimate_bytes)
            lines.append(
                f"compile {compiled.target}: {'ok' if compiled.ok else 'FAILED'} in {compiled.seconds:.2f}s{size}{vmem}"
                + (f": {compiled.error}" if compiled.error else "")
            )
        lines.extend(  # what the server saw of each pallas_call, as in the structure
            f"kernel {k.name}: grid {k.grid}, blocks {k.block_shapes}, "
            f"semantics {', '.join(k.dimension_semantics) or 'unset'}"
            for k in self.kernels
        )
        # NaN and Inf spelled out: a client that reads only this text must learn them as plainly as one that reads
        # the structure.
        lines.extend(
            f"seed {s.seed_index}{f' ({s.size})' if s.size else ''}: {'ok' if s.passed else 'MISMATCH'} "
            f"max|err| {plain_number(s.max_abs_error)} "
            f"(allowed {plain_number(s.tolerance)}; baseline {plain_number(s.baseline_max_abs_error)}) worst at "
            f"{s.worst_index}: candidate {plain_number(s.worst_candidate)}, truth {plain_number(s.worst_truth)}"
            + (
                f"; the output holds {s.nan_count:,} NaN and {s.inf_count:,} Inf values"
                if s.nan_count or s.inf_count
                else ""
            )
            for s in self.seeds
        )
        if self.jaxbench_compatible is not None:
            lines.append(f"JAXBench allclose(1e-2) check: {'pass' if self.jaxbench_compatible else 'fail'}")
        lines += [f"full size: {f}" for f in self.full_size_findings]
        if self.pallas_work:
            lines.append(f"work: {self.pallas_work}")
        lines += [f"warning: {w}" for w in self.warnings]
        if self.log_tail:
            lines.append("server log (end):\n" + self.log_tail)
        if self.attempt_id is not None:
            lines.append(f"attempt {self.attempt_id} (full log: list_attempts(attempt_id={self.attempt_id}))")
        return "\n".join(lines)


# ---- attempts -----------------------------------------------------------------------------------


class AttemptSummary(BaseModel):
    attempt_id: int
    kind: str
    workload_id: str
    state: str = Field(description="running | done | failed")
    status: Status | None
    error_class: ErrorClass | None
    created: str
    seconds: OptionalReal


class AttemptDetail(AttemptSummary):
    verdict: Verdict | None
    profile: Profile | None = Field(
        None, description="For a profile attempt: the profile (its verdict is also in `verdict`)"
    )
    source: str = Field(description="The candidate's source (head and tail only when very long)")
    log_tail: str = Field(description="The end of the worker's events, stdout and stderr")

    def summary(self) -> str:
        # The same source and log tail as the structure: a client that reads only text gets all of it.
        head = f"attempt {self.attempt_id} ({self.kind} {self.workload_id}): {self.state}"
        body = self.profile.summary() if self.profile else self.verdict.summary() if self.verdict else ""
        log = "log tail:\n" + self.log_tail if self.log_tail else ""
        return "\n".join(x for x in (head, body, log, "source:\n" + self.source) if x)


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
            + (f" [{a.error_class}]" if a.error_class else "")
            for a in self.attempts
        )


class CheckOutcome(BaseModel):
    state: Literal["done", "running"] = Field(
        description="'done' with a verdict, or 'running': ask list_attempts(attempt_id=...) later"
    )
    attempt_id: int
    verdict: Verdict | None = None

    def summary(self) -> str:
        if self.verdict is not None:
            return self.verdict.summary()
        return (
            f"attempt {self.attempt_id} is still running; call list_attempts(attempt_id={self.attempt_id}) "
            "in a little while for the verdict"
        )


# ---- profile_kernel -----------------------------------------------------------------------------


class KernelEstimate(BaseModel):
    name: str
    grid_steps: int
    grid_steps_exact: bool = Field(
        True,
        description="False when a grid dimension is known only at run time and not computable from the inputs "
        "(bounded by the blocks its index maps address)",
    )
    bundles_per_step: int = Field(description="Bundles in the kernel's final schedule (libtpu's dump)")
    slot_use: dict[str, Real] = Field(
        description="Average use per bundle of each VLIW slot kind, as a fraction of capacity"
    )
    hbm_bytes: int = Field(description="HBM bytes the BlockSpecs move over the grid, re-fetches included")
    hbm_written_bytes: int = Field(
        0, description="Of hbm_bytes, those written to HBM: on a v5e writes stream at ~0.8 of the peak, reads faster"
    )
    hbm_bytes_exact: bool = Field(description="False when index maps depend on scalar prefetch or blocks stay in HBM")
    run_ratio: Real = Field(
        1.0,
        description="Code a grid step runs / code in the schedule, averaged over the grid: "
        "below 1 when pl.when skips branches, above 1 when in-kernel loops repeat",
    )
    run_ratio_exact: bool = Field(
        True, description="False when a predicate depends on data or a loop's trip count is unknown"
    )
    compute_us: Real
    loop_wait_us: Real = Field(
        0.0,
        description="What trips of in-kernel loops the compiler kept rolled, waiting for their matmul and transpose "
        "results, add to estimate_us (a wait in compute_us that HBM time hides adds nothing; unrolling lets trips "
        "overlap it)",
    )
    memory_us: Real
    overhead_us: Real = Field(
        description="Grid steps x the wait of a step's DMAs beyond their bytes: added to the HBM time, hidden "
        "when compute is longer"
    )
    exposed_us: Real = Field(
        0.0,
        description="The part of min(compute, HBM) the pipeline does not hide (first fetch, "
        "last write-back, calibrated overlap loss, and steps that only move bytes while others compute)",
    )
    estimate_us: Real
    bottleneck: str
    floored: bool = Field(
        False,
        description="The replay could not follow the kernel (an unknown grid, trip count or predicate) and its "
        "count fell below the work its operands imply: estimate_us is that bound (reading every input and "
        "writing every output once, its matmul at the MXUs' peak), not the count",
    )
    runs: int = Field(
        1,
        description="How often the kernel runs (the loops around it); every term above is over all its runs, "
        "grid_steps and bundles_per_step are one run's",
    )


class DeviceTiming(BaseModel):
    median_us: Real
    min_us: Real
    spread_pct: Real = Field(description="(max - min) / median over the timed runs")
    iterations: int


class OutsideOpCost(BaseModel):
    """One XLA op of the candidate's program around its Pallas kernels, costed by its own roofline."""

    name: str
    opcode: str
    us: Real
    flops: Real
    bytes: Real = Field(description="HBM bytes of its operands and result per run (VMEM-resident buffers excluded)")
    count: int = Field(1, description="How often it runs (a while loop's known trip count)")


class TargetEstimate(BaseModel):
    target: str
    kind: str = Field("static estimate", description="'measured', 'static estimate' or 'roofline only'")
    candidate_us: OptionalReal = Field(
        description="The candidate's time: the measured median, or the estimate of its Pallas "
        "kernels plus XLA's estimate of the work around them"
    )
    outside_kernels_us: OptionalReal = Field(
        None,
        description="Static estimate only: XLA's estimate of the candidate's work "
        "outside its Pallas kernels (included in candidate_us)",
    )
    xla_baseline_us: OptionalReal = Field(
        description="The XLA baseline: measured median, or XLA's own cost-analysis estimate"
    )
    expert_us: OptionalReal = Field(None, description="The same for the expert kernel, if the workload has one")
    roofline_us: Real = Field(description="Lower bound from FLOPs and the workload's input+output bytes")
    speedup_vs_xla: OptionalReal = None
    speedup_vs_expert: OptionalReal = None
    tflops_per_s: OptionalReal = Field(None, description="The workload's FLOPs over candidate_us")
    hbm_gb_per_s: OptionalReal = Field(None, description="The workload's input+output bytes over candidate_us")
    roofline_pct: OptionalReal = Field(
        None,
        description="The candidate's peak fraction: roofline_us / candidate_us, in percent (the first figure to read; "
        "over 100 means fewer FLOPs than the workload's nominal count, or work the estimate missed)",
    )
    xla_roofline_pct: OptionalReal = Field(None, description="The XLA baseline's: roofline_us / xla_baseline_us, in %")
    expert_roofline_pct: OptionalReal = Field(None, description="The expert kernel's: roofline_us / expert_us, in %")
    aim_us: OptionalReal = Field(
        None,
        description="Set when the XLA baseline is implausible (far above its roofline, or below the bytes it must "
        "move): the time to aim for instead, a share of the roofline that real TPU kernels reach",
    )
    candidate_timing: DeviceTiming | None = None
    xla_timing: DeviceTiming | None = None
    expert_timing: DeviceTiming | None = None
    bottleneck: str | None = None
    kernels: list[KernelEstimate] = Field(default_factory=list)
    outside_ops: list[OutsideOpCost] = Field(
        default_factory=list,
        description="Static estimate only: the XLA work outside "
        "the kernels per op, largest first (at most 12; outside_kernels_us counts all)",
    )
    advice: list[str] = Field(
        default_factory=list,
        description="The one or two changes that address the bottleneck, with the doc section to read",
    )
    flags: list[str] = Field(default_factory=list)
    docs: list[str] = Field(
        default_factory=list, description="Doc sections on reading this result: pass them to read_docs(topic=...)"
    )
    error: str | None = None


class Profile(BaseModel):
    workload_id: str
    tier: str
    kind: str = Field(
        description="'measured' on a TPU host, 'static estimate' on a CPU host with libtpu, "
        "'roofline only' on a plain CPU host"
    )
    label: str
    verdict: Verdict = Field(description="The check that came first: only a correct kernel is profiled")
    targets: list[TargetEstimate] = Field(default_factory=list)
    attempt_id: int | None = None
    host: str | None = Field(
        None, description="The fleet host that produced this profile (unset: the server's own host)"
    )
    context: ContextCondition = Field("docs", description="The server's context condition when this was profiled")

    def summary(self) -> str:
        if self.verdict.status == Status.SERVER_ERROR:
            return (
                "NOT PROFILED: the server failed (not the kernel's doing); call profile_kernel again.\n"
                + self.verdict.summary()
            )
        if self.verdict.status != "correct":
            return "NOT PROFILED: the kernel must pass check_kernel first.\n" + self.verdict.summary()
        lines = [
            f"{self.workload_id}: {self.kind.upper()} ({self.label})" + (f" on host {self.host}" if self.host else "")
        ]
        for t in self.targets:
            if t.error:
                lines.append(f"{t.target}: {t.error}")
                continue
            approx = "" if t.kind == "measured" else "~"
            fmt = lambda v, mark=approx: f"{mark}{v:,.1f} us" if v is not None else "n/a"  # noqa: E731

            def share(us, mark=approx, roofline=t.roofline_us) -> str:
                # Every time is given first as a share of the roofline (its peak fraction).
                if us is None:
                    return "n/a"
                return f"{mark}{us:,.1f} us" + (f" = {100 * roofline / us:.0f}% of roofline" if roofline else "")

            above = (
                " (above 100%: fewer FLOPs than the workload's nominal count, or work the estimate missed; see flags)"
                if t.roofline_pct and t.roofline_pct > 100
                else ""
            )
            lines.append(
                f"{t.target} ({t.kind}): candidate {share(t.candidate_us)}{above}"
                + (f" ({t.tflops_per_s:,.1f} TFLOP/s, {t.hbm_gb_per_s:,.0f} GB/s)" if t.roofline_pct else "")
                + f" | XLA baseline {share(t.xla_baseline_us)} | expert {share(t.expert_us)} | "
                f"roofline >= {fmt(t.roofline_us, '')}; "
                + (f"speedup vs XLA {t.speedup_vs_xla:.2f}x" if t.speedup_vs_xla else "speedup vs XLA n/a")
                + (f", vs expert {t.speedup_vs_expert:.2f}x" if t.speedup_vs_expert else "")
                + (f"; bottleneck: {t.bottleneck}" if t.bottleneck else "")
            )
            if t.aim_us:
                lines.append(
                    f"  aim for {fmt(t.aim_us, '')}: {100 * t.roofline_us / t.aim_us:.0f}% of the roofline (XLA's "
                    "baseline figure is implausible here, so beating it says little)"
                )
            for who, timing in (("candidate", t.candidate_timing), ("XLA", t.xla_timing), ("expert", t.expert_timing)):
                if timing:
                    lines.append(
                        f"  {who}: median {timing.median_us:,.1f} us, min {timing.min_us:,.1f} us, "
                        f"spread {timing.spread_pct:.1f}% over {timing.iterations} runs"
                    )
            if t.outside_kernels_us:
                lines.append(
                    f"  XLA work outside the Pallas kernels: ~{t.outside_kernels_us:,.1f} us"
                    + (": " + _outside_ops_text(t.outside_ops) if t.outside_ops else "")
                )
            for k in t.kernels:
                lines.append(
                    f"  kernel {k.name}: {k.grid_steps} steps x {k.bundles_per_step} bundles"
                    + (f" x {k.run_ratio:.2f} run" if k.run_ratio != 1 else "")
                    + f"; compute {k.compute_us:,.1f} us, "
                    f"HBM {k.memory_us:,.1f} us "
                    f"({k.hbm_bytes / 2**20:,.0f} MiB, {k.hbm_written_bytes / 2**20:,.0f} written"
                    f"{'' if k.hbm_bytes_exact else ', approx.'}), "
                    f"step DMA waits {k.overhead_us:,.1f} us"
                    + (f", not overlapped {k.exposed_us:,.1f} us" if k.exposed_us else "")
                    + f" -> {k.bottleneck}"
                    + (
                        ""
                        if k.grid_steps_exact
                        else "; grid known only at run time (bounded by the blocks its index maps address)"
                    )
                    + ("" if k.run_ratio_exact else "; run ratio approximate (data-dependent branch or loop)")
                )
                if k.slot_use:
                    lines.append(
                        "    VLIW slot use per bundle: "
                        + ", ".join(f"{slot} {plain_number(use, '.0%')}" for slot, use in sorted(k.slot_use.items()))
                    )
            lines += [f"  do: {a}" for a in t.advice]
            lines += [f"  flag: {f}" for f in t.flags]
            if t.docs:
                lines.append("  read: " + ", ".join(t.docs))
        return "\n".join(lines)


def _outside_ops_text(ops: list[OutsideOpCost]) -> str:
    """The ops that take time, then a count of those that round to nothing (index arithmetic, tiny fusions)."""
    shown = [o for o in ops if round(o.us, 1) > 0]
    text = ", ".join(f"{o.opcode} {o.name} {o.us:,.1f} us" + (f" x{o.count}" if o.count > 1 else "") for o in shown)
    rest = len(ops) - len(shown)
    return text + (f"{', ' if shown else ''}{rest} more under 0.1 us" if rest else "")


class ProfileOutcome(BaseModel):
    state: Literal["done", "running"] = Field(
        description="'done' with a profile, or 'running': ask list_attempts(attempt_id=...) later"
    )
    attempt_id: int
    profile: Profile | None = None

    def summary(self) -> str:
        if self.profile is not None:
            return self.profile.summary()
        return (
            f"attempt {self.attempt_id} is still running; call list_attempts(attempt_id={self.attempt_id}) "
            "in a little while for the result"
        )
