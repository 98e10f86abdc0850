"""The worker protocol: what the trusted parent hands a worker (a job) and what the worker may say back
(events), as pydantic models that both sides import, and the parent's reading of an event stream.

The worker runs next to hostile code, so everything it says is data to validate, never proof. The
parent builds every job field by field (nothing it did not mean to send, hidden seeds above all, can
travel), and `EventLog` accepts an event only if it parses as one of these models, names a known
stage, and is the first of its kind; anything else ends the run as a protocol violation.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal

import jax
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from jaxbench_mcp.internals.libtpu import BranchKind as _BranchKind
from jaxbench_mcp.taxonomy import Stage

# An event line longer than this is a violation, not data: real events are a few kilobytes.
MAX_EVENT_BYTES = 256 * 1024
# More events than any real job sends (5 targets x 4 stages + 17 runs x 2 + a few).
MAX_EVENTS = 400
# Failure texts are cut (head and tail kept) to this many characters by the worker.
MAX_TEXT_CHARS = 20_000
# How the worker's compile report begins a refusal of a kernel too big for VMEM (worker.HOPELESS_VMEM), which the
# parent finds in it; here, so that the checker does not import the worker.
EARLY_VMEM_REFUSAL = "out of VMEM, refused before compiling"
# How a judge's trace report begins when the candidate's recorded program could not be rebuilt from its file.
PROGRAM_REFUSED = "the program the candidate's process recorded could not be rebuilt"

_OUTPUT_NAME = re.compile(r"output_\d{1,2}\.npy")
_PROBE_NAME = re.compile(r"probe_\d{1,2}\.npy")
_INPUT_NAME = re.compile(r"input_\d{1,2}_\d{1,3}\.bin")
_PROGRAM_NAME = re.compile(r"program_[a-z][a-z0-9_]{0,31}\.json")
# The sizes a program is recorded at: a key of a workload's SIZES.
_SIZE = r"[a-z][a-z0-9_]{0,31}"
# Platform queries a candidate made while it was imported and traced (tpu_facade: answered as a TPU).
PlatformQueries = Annotated[list[Annotated[str, Field(max_length=80)]], Field(max_length=16)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def cut_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Head and tail of a long text, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


# ---- jobs: parent -> worker ----------------------------------------------------------------------


class InputFile(_Strict):
    file: Annotated[str, Field(pattern=_INPUT_NAME.pattern)]
    shape: list[int]
    dtype: str


class StaticInput(_Strict):
    static: int | float | str | bool | None | list[int] | tuple[int, ...]


class TraceJob(_Strict):
    """The only job candidate code runs in: load candidate.py and trace workload() once per size (under the TPU
    facade), writing each recorded program as program_<size>.json (jaxbench_mcp.internals.jaxpr_codec). The
    analyses, the lowering, the compile and the runs are done from those files by a worker that never imports
    the candidate (CheckJob, ProfileJob)."""

    mode: Literal["trace"] = "trace"
    workload_id: str
    sizes: list[Annotated[str, Field(pattern=_SIZE)]] = Field(min_length=1, max_length=4)
    chip: str = Field(description="The TPU generation the trace is answered as (facade and chip context)")
    cores: int = Field(1, ge=1, le=8, description="The TensorCores the chip context shows (a profile: the chip's)")


class ProgramFile(_Strict):
    """One size's recorded program, or why it could not be traced there."""

    size: Annotated[str, Field(pattern=_SIZE)]
    file: Annotated[str, Field(pattern=_PROGRAM_NAME.pattern)] | None = None
    error: Annotated[str, Field(max_length=MAX_TEXT_CHARS + 100)] | None = None


class CheckJob(_Strict):
    """Check the recorded programs of a candidate (program files in the job directory, from a TraceJob): analyse,
    lower, compile, run. The candidate's code is not here."""

    mode: Literal["check"] = "check"
    workload_id: str
    targets: list[str]
    programs: list[ProgramFile] = Field(max_length=4)
    platform_queries: PlatformQueries = []
    size: Annotated[str, Field(pattern=_SIZE)] = Field(
        description="The size the run stage uses (a key of the workload's SIZES); analyses use the full size"
    )
    inputs: list[list[InputFile | StaticInput]] = Field(
        description="Per hidden seed, the inputs the parent wrote; never the seed"
    )
    interpret: bool
    shuffle_seeds: list[int] = Field(
        description=(
            "Orders in which interpret mode visits 'parallel' grid axes: one per run (seeds, then full_reduction)"
        )
    )
    full_reduction: list[InputFile | StaticInput] | None = Field(
        None,
        description="Inputs of one more run, at the workload's full_reduction size (small shapes, every reduction at "
        "its full length); its output has the index len(inputs)",
    )
    estimate: bool = Field(
        False,
        description="Also report what a static estimate reads (the full-size trace on the workload's integer inputs, "
        "each target's schedules from ./dumps): a profile's own check, so that the profile estimates the very "
        "program the check compiled and judged",
    )


class ProfileJob(_Strict):
    """Compile a candidate's recorded full-size program (from a TraceJob) for each target with libtpu's schedule
    dumps (under ./dumps)."""

    mode: Literal["profile"] = "profile"
    workload_id: str
    targets: list[str]
    programs: list[ProgramFile] = Field(max_length=1)


class MeasureJob(_Strict):
    """TPU host: time a candidate's recorded full-size program (from a TraceJob; the candidate's code is not here) on
    fresh full-size inputs, after lowering it for the target so that the parent can check it is the program the check
    judged. Without a program: the XLA baseline, the workload's own reference."""

    mode: Literal["measure"] = "measure"
    workload_id: str
    targets: list[str] = Field(max_length=1, description="The attached generation the program is lowered for")
    programs: list[ProgramFile] = Field(default_factory=list, max_length=1)
    first_seed: int
    iterations: int = Field(ge=1, le=1000)


class ReferenceJob(_Strict):
    """Trusted work: the bundle calibration per target, and XLA's cost analysis of the baseline."""

    mode: Literal["reference"] = "reference"
    workload_id: str
    targets: list[str]


class ArrayArg(_Strict):
    """An array argument: abstract (shape and dtype), or small and concrete (`values`, row-major)."""

    shape: list[int]
    dtype: Annotated[str, Field(pattern=r"^[a-z0-9_]{2,16}$")]
    values: Annotated[list[float | int | bool], Field(max_length=1 << 16)] | None = None


class EstimateJob(_Strict):
    """Trusted calibration kernel per target, then a static estimate of one function of candidate.py (compiled
    for each target with libtpu's schedule dumps under ./dumps)."""

    mode: Literal["estimate"] = "estimate"
    function: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")]
    args: list[ArrayArg | StaticInput]
    static_argnums: list[int] = Field(default_factory=list)
    targets: list[str]


def arg_value(arg: ArrayArg | StaticInput):
    """The worker's value for an argument: a Python value, a ShapeDtypeStruct or a small numpy array."""
    if isinstance(arg, StaticInput):
        return arg.static

    dtype = jax.numpy.dtype(arg.dtype)
    if arg.values is None:
        return jax.ShapeDtypeStruct(tuple(arg.shape), dtype)
    return np.asarray(arg.values).astype(dtype).reshape(arg.shape)


Job = Annotated[TraceJob | CheckJob | ProfileJob | MeasureJob | ReferenceJob | EstimateJob, Field(discriminator="mode")]


class JobEnvelope(_Strict):
    job: Job


class InputsReady(_Strict):
    """Parent -> worker, on stdin after a check's job: the input files of the runs up to `index` are complete. The
    parent writes them while the worker traces and compiles, which need none of them."""

    inputs_ready: int = Field(ge=0, description="The last run whose input files are complete")


class StopRuns(_Strict):
    """Parent -> worker, instead of the next InputsReady: the verdict can no longer be 'correct' (an output was
    wrong, and the comparison stops at the first wrong seed; or the recorded program rules it out); the worker runs
    no more and finishes."""

    stop_runs: Literal[True] = True


ParentMessage = InputsReady | StopRuns
_PARENT_MESSAGE: TypeAdapter[InputsReady | StopRuns] = TypeAdapter(ParentMessage)


def parse_parent_message(line: str | bytes) -> InputsReady | StopRuns:
    """One line the parent wrote to a check worker's stdin after its job."""
    return _PARENT_MESSAGE.validate_json(line)


# ---- events: worker -> parent --------------------------------------------------------------------


class Ready(_Strict):
    event: Literal["ready"] = "ready"


class Finished(_Strict):
    event: Literal["finished"] = "finished"


class BlockInfo(_Strict):
    block_shape: list[int | None]
    array_shape: list[int]
    dtype: str
    in_hbm: bool
    buffers: int = Field(
        2,
        description="VMEM buffers the pipeline gives it: 2 when its index changes over the grid, else 1 "
        "(pl.Buffered(n): n)",
    )


class ScratchInfo(_Strict):
    shape: list[int]
    dtype: str
    memory_space: str = Field("", description="vmem, smem, semaphore_mem, ... (as jax names it)")


class KernelInfo(_Strict):
    name: str
    grid: list[int | str]
    blocks: list[BlockInfo]
    num_scalar_prefetch: int
    num_scratch: int
    scratch_bytes: int
    dimension_semantics: list[str]
    vmem_limit_bytes: int | None = Field(
        None, description="The kernel's CompilerParams(vmem_limit_bytes); None: the chip's default scoped limit"
    )
    scratch: list[ScratchInfo] = Field(default_factory=list, description="Each scratch buffer's shape and space")
    body_values_bytes: int = Field(
        0, description="VMEM the body's large intermediate values take at their peak on a 256-wide MXU (v6e)"
    )
    body_values_bytes_mxu128: int | None = Field(
        None, description="The same on a 128-wide MXU (v4, v5e, v5p); None: as on a 256-wide one"
    )
    body_values_bytes_7x: int | None = Field(
        None, description="The same as 7x stages its matmuls (less than v6e below 2048 rows); None: as on v6e"
    )


class Aval(_Strict):
    shape: list[int]
    dtype: str


class CoverageFinding(_Strict):
    kind: Literal["unwritten_output", "unread_input", "parallel_revisit", "low_precision_accumulation"]
    operand: str = Field(description="The workload input or output, as named by the workload")
    message: str


class Coverage(_Strict):
    """What the kernels' index maps leave untouched at full size (jaxbench_mcp.analysis.coverage)."""

    findings: list[CoverageFinding]
    not_judged: list[str] = Field(description="Operands whose coverage cannot be decided statically, and why")


class Work(_Strict):
    """FLOPs and HBM bytes inside the Pallas kernels and (XLA's cost analysis) outside them, at full size."""

    kernel_flops: float
    kernel_bytes: float
    outside_flops: float | None
    outside_bytes: float | None
    exact: bool


_MAX_OUTLINE = 20_000


class Traced(_Strict):
    kernels: list[KernelInfo]
    host_callbacks: list[str]
    outputs: list[Aval]
    # The full-size analyses; None when one could not be made (then it is not judged).
    coverage: Coverage | None = None
    work: Work | None = None
    outline: Annotated[list[str], Field(max_length=_MAX_OUTLINE)] | None = Field(
        None, description="The full-size program's outline (coverage.program_structure)"
    )
    run_outline: Annotated[list[str], Field(max_length=_MAX_OUTLINE)] | None = Field(
        None, description="The outline of the same candidate traced at the size the run stage uses"
    )
    reduction_outline: Annotated[list[str], Field(max_length=_MAX_OUTLINE)] | None = Field(
        None, description="The outline of the same candidate traced at the full_reduction size, when that runs too"
    )
    platform_queries: PlatformQueries = Field(
        [], description="Platform queries the candidate made while it was imported and traced (answered as a TPU)"
    )


class Lowered(_Strict):
    module_file: Annotated[str, Field(pattern=r"lowered_[a-z0-9]+\.mlir")] | None = Field(
        None, description="The lowered StableHLO module the worker wrote; the parent reads and inspects it itself"
    )


class Compiled(_Strict):
    code_size_bytes: int | None = None
    temp_bytes: int | None = None
    scoped_vmem_bytes: int | None = Field(
        None, ge=0, description="The scoped VMEM the compiler allocated for the largest Mosaic kernel"
    )


_Share = Annotated[float, Field(ge=0)]  # a share of a kernel's total (rounding may pass 1)
_Ratio = Annotated[float, Field(ge=0)]  # executed work per scheduled work


class KernelTraffic(_Strict):
    steps: int
    steps_exact: bool
    hbm_bytes: int
    hbm_written_bytes: int  # of hbm_bytes, those written to HBM (output blocks, copies into HBM)
    exact: bool
    run_ratio: float
    run_ratio_exact: bool
    # kernel_replay.summarise: executed / scheduled work outside and inside in-kernel loops, and over the code
    # with loops counted as straight-line; in-kernel loops met; HBM bytes of the kernel's own DMAs.
    body_ratio: float = 1.0
    loop_ratio: float = 1.0
    flat_ratio: float = 1.0
    in_kernel_loops: int = 0
    # Per branch kind (libtpu.BRANCH_KINDS: branches that only start copies, that multiply, that do other vector
    # work), executed / scheduled work of its branches, outside and inside in-kernel loops; None where there are
    # none. And the same for the code outside matmul and vector branches (kernel_replay.summarise).
    branch_ratios: dict[_BranchKind, Annotated[list[_Ratio | None], Field(min_length=2, max_length=2)]] = Field(
        default_factory=dict
    )
    unbranched_ratios: Annotated[list[_Ratio | None], Field(min_length=2, max_length=2)] = [None, None]
    dma_bytes: int = 0
    parallel_steps: int = 1  # grid steps along "parallel" dimensions (a megacore chip splits them across its cores)
    mxu_pushes: float = 0.0  # 8 x 128 x 128-MAC matmul pushes the whole run executes
    kernel: str | None = None  # the name jax gives its Mosaic module (pairs it with its schedule in the dump)
    call_shapes: Annotated[str, Field(max_length=2000)] | None = None  # operand->result shapes: tells same names apart
    # A TensorCore mesh kernel: the cores that run its body at once (the ratios above are their average) and the
    # busiest one's share of the work (1 / cores when they split it evenly).
    cores: int = 1
    core_share: float = 1.0
    # How often the kernel runs: the trip counts of the loops around it (exact unless a trip count is unknown).
    runs: int = 1
    runs_exact: bool = True
    # The work its operands imply (kernel_analysis.operand_floor): a bound when the replay cannot follow the kernel.
    floor_bytes: int = 0
    floor_written_bytes: int = 0
    floor_flops: float = 0.0
    # Grid steps grouped by their ratio of work to HBM bytes: (share of the work, of the bytes, of the moving steps)
    # per group (kernel_analysis.step_mix); empty when the steps are alike.
    step_mix: Annotated[list[tuple[_Share, _Share, _Share]], Field(max_length=400)] = Field(default_factory=list)
    moving_steps: Annotated[int, Field(ge=0)] | None = None  # grid steps that move HBM bytes (None: all of them)


class Schedule(_Strict):
    name: str
    bundles: int
    slot_use: dict[str, float]
    depth_bundles: list[int] = Field(default_factory=list, description="Bundles per loop depth in the final schedule")
    kernel: str | None = Field(None, description="The compiled Mosaic module's name (the kernel's own)")
    call_shapes: Annotated[str, Field(max_length=2000)] | None = Field(
        None, description="The custom call's operand->result shapes (libtpu.call_shapes)"
    )
    loop_waits: list[int] = Field(
        default_factory=list,
        description="Per loop depth from 1: the bundle slots one trip of its bodies stalls for matmul and transpose "
        "results (cost_model.result_wait)",
    )
    straight_waits: list[int] = Field(
        default_factory=list,
        description="Per loop depth from 0: the bundle slots the straight-line code at exactly that depth stalls for "
        "matmul and transpose results, once per trip of its loop (cost_model.result_wait, straight)",
    )
    branch_bundles: dict[_BranchKind, list[Annotated[int, Field(ge=0)]]] = Field(
        default_factory=dict,
        description="Per branch kind (libtpu.BRANCH_KINDS), per loop depth from 0: the bundles of its predicated "
        "regions, which the steps that skip them jump over",
    )


class OutsideOp(_Strict):
    name: Annotated[str, Field(max_length=200)]
    opcode: Annotated[str, Field(max_length=60)]
    flops: float
    bytes: float
    written_bytes: float  # of `bytes`, those it writes
    count: int = 1
    vector_ops: float = 0.0  # elements its non-matmul arithmetic processes, per run (internals.hlo)
    padding_flops: float = 0.0  # MXU work its convolutions' narrow features waste, per run (internals.hlo)


class OutsideCost(_Strict):
    xla_flops: float
    xla_bytes: float
    xla_optimal_seconds: float | None
    # Per instruction of the compiled program around the kernels (internals.hlo.outside_ops), at most 200.
    ops: Annotated[list[OutsideOp], Field(max_length=200)] = Field(default_factory=list)
    complete: bool = True


class ProfileTrace(_Strict):
    traffic: list[KernelTraffic]


class ProfileCompile(_Strict):
    schedules: list[Schedule]
    outside: OutsideCost | None
    module_file: Annotated[str, Field(pattern=r"lowered_[a-z0-9]+\.mlir")]


class Output(_Strict):
    path: Annotated[str, Field(pattern=_OUTPUT_NAME.pattern)]
    shape: list[int]
    dtype: str
    leaves: int
    probe_path: Annotated[str, Field(pattern=_PROBE_NAME.pattern)] | None = Field(
        None, description="Interpret mode: what a kernel that reads memory it never wrote returned in the same run"
    )


class Measured(_Strict):
    samples_us: list[float]


_PAYLOADS = ("traced", "lowered", "compiled", "profile_trace", "profile_compile", "output", "measured")
# Which payload a 'done' event of each stage may carry (None: no payload).
_PAYLOAD_OF_STAGE = {
    Stage.TRACE: ("traced", "profile_trace"),
    Stage.LOWER: ("lowered",),
    Stage.COMPILE: ("compiled", "profile_compile"),
    Stage.RUN: ("output",),
    Stage.MEASURE: ("measured",),
}


class StageEvent(_Strict):
    event: Literal["stage"] = "stage"
    stage: Stage
    state: Literal["start", "done", "failed"]
    target: str | None = None
    seed_index: Annotated[int, Field(ge=0, le=16)] | None = None  # 16 seeds at most, then the full_reduction run
    seconds: Annotated[float, Field(ge=0)] = 0.0
    # The classes a worker names itself: the load stage's, and the trace stage's refusal of a primitive it cannot
    # replay; every other failure is classified by the parent from its text.
    error_class: Literal["syntax_error", "import_error", "missing_workload", "unsupported_op"] | None = None
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS + 100)] | None = None
    traced: Traced | None = None
    lowered: Lowered | None = None
    compiled: Compiled | None = None
    profile_trace: ProfileTrace | None = None
    profile_compile: ProfileCompile | None = None
    output: Output | None = None
    measured: Measured | None = None

    @model_validator(mode="after")
    def _payload_fits_stage(self) -> StageEvent:
        carried = [p for p in _PAYLOADS if getattr(self, p) is not None]
        if self.stage in (Stage.COMPARE, Stage.POLICY):
            raise ValueError(f"stage {self.stage} is the parent's, never the worker's")
        if carried and (self.state != "done" or not set(carried) <= set(_PAYLOAD_OF_STAGE.get(self.stage, ()))):
            raise ValueError(f"payload {carried} does not belong to a {self.stage} {self.state} event")
        if (self.text is not None or self.error_class is not None) and self.state != "failed":
            raise ValueError("only a failed stage carries an error text")
        if self.error_class is not None and self.stage != (
            Stage.TRACE if self.error_class == "unsupported_op" else Stage.LOAD
        ):
            raise ValueError(f"a {self.stage} event cannot name the error class {self.error_class}")
        return self

    @property
    def key(self) -> tuple:
        """Events with the same key are the same report: only the first counts."""
        return (self.stage, self.target, self.seed_index, "start" if self.state == "start" else "end")


class Programs(_Strict):
    """A trace job's one result: the program files it wrote (data to decode, never trusted), per size."""

    event: Literal["programs"] = "programs"
    programs: list[ProgramFile] = Field(max_length=4)
    platform_queries: PlatformQueries = []


class Reference(_Strict):
    event: Literal["reference"] = "reference"
    target: str
    calibration_bundles: int | None
    xla_flops: float
    xla_bytes: float
    xla_optimal_seconds: float | None
    xla_padding_flops: float = 0.0  # MXU work the baseline's convolutions' narrow features waste (cost_model)
    # Why XLA's baseline did not compile for the target (its counts are then 0): 2p's and 16p's need more HBM than a
    # v5e has, and a candidate is still estimated beside no baseline.
    xla_error: Annotated[str, Field(max_length=1000)] | None = None
    # False when a loop of the baseline runs an unknown number of times: its body is then counted once.
    xla_loops_counted: bool = True


Event = Annotated[Ready | Finished | StageEvent | Reference | Programs, Field(discriminator="event")]


class _EventLine(_Strict):
    event: Event


class ProtocolViolation(Exception):
    pass


def parse_event(line: bytes) -> Ready | Finished | StageEvent | Reference | Programs:
    """One line from the event pipe as a validated event; ProtocolViolation otherwise."""
    if len(line) > MAX_EVENT_BYTES:
        raise ProtocolViolation(f"an event line of {len(line):,} bytes (the limit is {MAX_EVENT_BYTES:,})")
    try:
        return _EventLine.model_validate({"event": json.loads(line)}).event
    except (ValueError, ValidationError, RecursionError) as exc:  # RecursionError: JSON nested thousands deep
        first = str(exc).splitlines()[:3]
        raise ProtocolViolation(f"a malformed event: {' '.join(first)[:300]}") from None


# The stages each kind of job runs.
_JOB_STAGES = {
    "trace": {Stage.LOAD, Stage.TRACE},
    "check": {Stage.LOAD, Stage.TRACE, Stage.LOWER, Stage.COMPILE, Stage.RUN},
    "profile": {Stage.LOAD, Stage.TRACE, Stage.COMPILE},
    "measure": {Stage.LOAD, Stage.TRACE, Stage.LOWER, Stage.MEASURE},
    "reference": {Stage.COMPILE},
    "estimate": {Stage.LOAD, Stage.TRACE, Stage.COMPILE},
}
# Stages that happen once per target (the others happen once per job, or once per seed for run).
_PER_TARGET = {Stage.LOWER, Stage.COMPILE}


class EventLog:
    """The events of one job as the parent accepts them: validated, about this job's own stages, targets and
    seeds only, first of each kind, bounded."""

    def __init__(self, job=None) -> None:
        self.job = job
        self.events: list[StageEvent | Reference | Programs | Finished] = []
        self._keys: set[tuple] = set()
        self._started: set[tuple] = set()
        self.finished = False
        self.programs: Programs | None = None  # a trace job's result

    def _check_belongs(self, event: StageEvent | Reference | Programs) -> None:
        job = self.job
        if job is None:
            return
        targets = list(getattr(job, "targets", []))
        if isinstance(event, Reference):
            if job.mode not in ("reference", "estimate") or event.target not in targets:  # estimate: its calibration
                raise ProtocolViolation(f"a reference event for {event.target!r}, which this job did not ask for")
            return
        if isinstance(event, Programs):
            if job.mode != "trace":
                raise ProtocolViolation(f"a 'programs' event in a {job.mode} job")
            if self.programs is not None:
                raise ProtocolViolation("a repeated 'programs' event")
            if (Stage.TRACE, None, None) not in self._started or (Stage.TRACE, None, None, "end") in self._keys:
                raise ProtocolViolation("a 'programs' event outside the trace stage")
            if [p.size for p in event.programs] != list(job.sizes):
                raise ProtocolViolation(f"programs for the sizes {[p.size for p in event.programs]}, not {job.sizes}")
            return
        if job.mode == "trace" and event.stage is Stage.TRACE and event.state == "done":
            # What was traced is established where the recorded program is decoded, never told by this process.
            raise ProtocolViolation("a 'trace done' event from the candidate's process")
        if event.stage not in _JOB_STAGES[job.mode]:
            raise ProtocolViolation(f"a '{event.stage}' event in a {job.mode} job")
        if event.stage in _PER_TARGET:
            allowed = targets or ([None] if event.stage is Stage.LOWER else [])
            if event.target not in allowed:
                raise ProtocolViolation(
                    f"a '{event.stage}' event for target {event.target!r}, which this job did not ask for"
                )
        elif event.target is not None:
            raise ProtocolViolation(f"a '{event.stage}' event names a target")
        seeds = len(job.inputs) + (job.full_reduction is not None) if isinstance(job, CheckJob) else 0
        if (event.stage is Stage.RUN) != (event.seed_index is not None) or (
            event.seed_index is not None and event.seed_index >= seeds
        ):
            raise ProtocolViolation(
                f"a '{event.stage}' event for seed {event.seed_index}, which this job does not have"
            )

    def accept(self, event) -> None:
        """Take one parsed event; raises ProtocolViolation for one that breaks the rules."""
        if self.finished:
            raise ProtocolViolation("an event after 'finished'")
        if len(self.events) >= MAX_EVENTS:
            raise ProtocolViolation(f"more than {MAX_EVENTS} events")
        if isinstance(event, Ready):
            raise ProtocolViolation("a second 'ready' during the job")
        if isinstance(event, (StageEvent, Reference, Programs)):
            self._check_belongs(event)
        if isinstance(event, Programs):
            self.programs = event
        if isinstance(event, StageEvent):
            if event.key in self._keys:
                raise ProtocolViolation(f"a repeated '{event.stage} {event.state}' event")
            if event.state != "start" and (event.stage, event.target, event.seed_index) not in self._started:
                raise ProtocolViolation(f"'{event.stage} {event.state}' without its start")
            self._keys.add(event.key)
            if event.state == "start":
                self._started.add((event.stage, event.target, event.seed_index))
        if isinstance(event, Finished):
            self.finished = True
        self.events.append(event)

    def stage_events(self) -> list[StageEvent]:
        return [e for e in self.events if isinstance(e, StageEvent)]

    def ended(self) -> list[StageEvent]:
        return [e for e in self.stage_events() if e.state != "start"]
