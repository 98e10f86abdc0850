"""The one vocabulary of checks: verdict statuses, check stages, and the error classes with their status,
fix hint and doc sections. Everything else (the worker protocol, verdicts, the error catalog, the docs
tests) reads these definitions; nothing restates them.
"""

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    INVALID_KERNEL = "invalid_kernel"
    LOWERING_ERROR = "lowering_error"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NO_PALLAS = "no_pallas"
    # The server's own machinery failed (not the candidate's doing): the check may be retried as is.
    SERVER_ERROR = "server_error"


class Stage(StrEnum):
    """Stages of a job, in ladder order. Load and the trace's recording run in the candidate's process; the rest
    of the trace, lower, compile and run in a worker that never imports it; compare and policy in the server."""

    LOAD = "load"
    TRACE = "trace"
    LOWER = "lower"
    COMPILE = "compile"
    RUN = "run"
    MEASURE = "measure"  # TPU host: timed runs of one program at full size
    COMPARE = "compare"  # trusted: outputs against the truth
    POLICY = "policy"  # trusted: what the benchmark asks of a kernel (Pallas doing the work)


class ErrorClass(StrEnum):
    # load: the candidate file itself
    SYNTAX_ERROR = "syntax_error"
    IMPORT_ERROR = "import_error"
    MISSING_WORKLOAD = "missing_workload"
    HOST_CALLBACK = "host_callback"
    SIZE_DEPENDENT_PROGRAM = "size_dependent_program"
    PROGRAM_TOO_LARGE = "program_too_large"
    # trace and lower for TPU
    TRACE_ERROR = "trace_error"
    TRACED_CONTROL_FLOW = "traced_control_flow"
    BLOCK_SHAPE_TILING = "block_shape_tiling"
    UNSUPPORTED_OP = "unsupported_op"
    LOWERING_OTHER = "lowering_other"
    # compile for a TPU generation
    VMEM_OVERFLOW = "vmem_overflow"
    COMPILE_OTHER = "compile_other"
    # run
    OUT_OF_BOUNDS = "out_of_bounds"
    RACE_DETECTED = "race_detected"
    RUNTIME_EXCEPTION = "runtime_exception"
    # process-level failures
    STAGE_TIMEOUT = "stage_timeout"
    KILLED_BY_SIGNAL = "killed_by_signal"
    EXITED = "exited"
    MEMORY_LIMIT = "memory_limit"
    PROTOCOL_VIOLATION = "protocol_violation"
    # compare (and full-size coverage, decided without running)
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    NAN_OUTPUT = "nan_output"
    WRONG_VALUES = "wrong_values"
    UNWRITTEN_OUTPUT = "unwritten_output"
    LOW_PRECISION_ACCUMULATION = "low_precision_accumulation"
    UNREAD_INPUT = "unread_input"
    PARALLEL_REDUCTION_AXIS = "parallel_reduction_axis"
    IMPLAUSIBLE_TIME = "implausible_time"
    # policy
    NO_PALLAS_CALL = "no_pallas_call"
    PALLAS_NOT_DOING_THE_WORK = "pallas_not_doing_the_work"
    # the server's machinery
    WORKER_START_FAILED = "worker_start_failed"
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True)
class ClassInfo:
    status: Status
    hint: str  # one line: what to change
    docs: tuple[str, ...]  # doc sections ("topic#anchor" in context_docs/) that explain the fix


S, E = Status, ErrorClass
ERROR_CLASSES: dict[ErrorClass, ClassInfo] = {
    E.SYNTAX_ERROR: ClassInfo(
        S.INVALID_KERNEL, "The file does not parse: fix the reported line.", ("errors#syntax-error",)
    ),
    E.IMPORT_ERROR: ClassInfo(
        S.INVALID_KERNEL,
        "Importing the candidate failed: check imports and current jax names; no work at import time.",
        ("errors#import-error", "api-changes#renamed"),
    ),
    E.MISSING_WORKLOAD: ClassInfo(
        S.INVALID_KERNEL, "Define a top-level function workload(*inputs).", ("errors#missing-workload",)
    ),
    E.HOST_CALLBACK: ClassInfo(
        S.INVALID_KERNEL,
        "Remove host callbacks (pure_callback, io_callback, jax.debug.*) from the workload.",
        ("errors#host-callback", "debugging#interpret-mode"),
    ),
    E.SIZE_DEPENDENT_PROGRAM: ClassInfo(
        S.INVALID_KERNEL,
        "Compute the same program at every size: derive block sizes from the shapes, never switch algorithms on them.",
        ("errors#size-dependent-program",),
    ),
    E.PROGRAM_TOO_LARGE: ClassInfo(
        S.INVALID_KERNEL,
        "Loop with lax.fori_loop / lax.scan instead of nesting calls that call each other several times.",
        ("errors#program-too-large",),
    ),
    E.TRACE_ERROR: ClassInfo(
        S.LOWERING_ERROR,
        "Tracing failed: shapes, dtypes or pytrees of refs, specs and values do not fit.",
        ("errors#trace-error", "programming-model#grid-and-blockspec"),
    ),
    E.TRACED_CONTROL_FLOW: ClassInfo(
        S.LOWERING_ERROR,
        "Python control flow on a traced value: use pl.when, lax.cond, lax.fori_loop or jnp.where.",
        ("errors#traced-control-flow", "programming-model#pallas-call"),
    ),
    E.BLOCK_SHAPE_TILING: ClassInfo(
        S.LOWERING_ERROR,
        "Block dims must be multiples of (8, 128) or equal the array dims.",
        ("errors#block-shape-tiling", "blockspec-tiling#rule-8-128"),
    ),
    E.UNSUPPORTED_OP: ClassInfo(
        S.LOWERING_ERROR,
        "An operation does not lower inside a TPU kernel: rewrite it with supported ops.",
        ("errors#unsupported-op", "supported-ops#not-supported"),
    ),
    E.LOWERING_OTHER: ClassInfo(
        S.LOWERING_ERROR,
        "Lowering for TPU failed: read the innermost message, it names the primitive and line.",
        ("errors#lowering-other", "supported-ops#what-lowers"),
    ),
    E.VMEM_OVERFLOW: ClassInfo(
        S.COMPILE_ERROR,
        "The kernel needs more VMEM than allowed: shrink blocks or raise vmem_limit_bytes.",
        ("errors#vmem-overflow", "performance#vmem-limit"),
    ),
    E.COMPILE_OTHER: ClassInfo(
        S.COMPILE_ERROR,
        "XLA/Mosaic rejected the kernel at compile time: the detail line names the operation.",
        ("errors#compile-other", "supported-ops#what-lowers"),
    ),
    E.OUT_OF_BOUNDS: ClassInfo(
        S.RUNTIME_ERROR,
        "A read or write outside an array: fix index maps (block indices) or clamp dynamic starts.",
        ("errors#out-of-bounds", "blockspec-tiling#edge-blocks"),
    ),
    E.RACE_DETECTED: ClassInfo(
        S.RUNTIME_ERROR,
        "Unordered accesses to one buffer: wait before reading DMA targets; check parallel labels.",
        ("errors#race-detected", "debugging#race-detector"),
    ),
    E.RUNTIME_EXCEPTION: ClassInfo(
        S.RUNTIME_ERROR,
        "The kernel raised while running: read the innermost error.",
        ("errors#runtime-exception", "debugging#interpret-mode"),
    ),
    E.STAGE_TIMEOUT: ClassInfo(
        S.TIMEOUT,
        "A stage ran out of time: endless loop, too many interpret-mode grid steps, or huge unrolled loops.",
        ("errors#stage-timeout", "performance#block-size-vmem"),
    ),
    E.KILLED_BY_SIGNAL: ClassInfo(
        S.CRASHED,
        "The process crashed inside jax/XLA/libtpu: check manual DMA shapes and semaphore pairing.",
        ("errors#killed-by-signal", "manual-dma#async-copy"),
    ),
    E.EXITED: ClassInfo(
        S.CRASHED,
        "A process ended early; the message says which. The candidate's: remove sys.exit/os._exit and top-level "
        "scripts, fix the exception named. The judging one: simplify what jax or libtpu stopped on.",
        ("errors#exited",),
    ),
    E.MEMORY_LIMIT: ClassInfo(
        S.CRASHED,
        "Host memory limit exceeded: do not materialise huge arrays; keep intermediates tiled in kernels.",
        ("errors#memory-limit",),
    ),
    E.PROTOCOL_VIOLATION: ClassInfo(
        S.CRASHED,
        "The candidate's process wrote to the checker's channels or files: do not touch "
        "file descriptors, stdout protocol or output files.",
        ("errors#protocol-violation",),
    ),
    E.SHAPE_MISMATCH: ClassInfo(
        S.INCORRECT,
        "Output shape differs from the reference: reshape/transpose/slice back to the reference's shape.",
        ("errors#shape-mismatch",),
    ),
    E.DTYPE_MISMATCH: ClassInfo(
        S.INCORRECT,
        "Output dtype differs from the reference: cast the result to the reference dtype.",
        ("errors#dtype-mismatch",),
    ),
    E.NAN_OUTPUT: ClassInfo(
        S.INCORRECT,
        "NaN/Inf in the output: initialise accumulators under pl.when, mask edge blocks, subtract the max before exp.",
        ("errors#nan-output", "accumulation#init-under-when", "blockspec-tiling#edge-blocks"),
    ),
    E.WRONG_VALUES: ClassInfo(
        S.INCORRECT,
        "Values beyond tolerance: check index maps, reduction-axis semantics, masks, f32 accumulation.",
        ("errors#wrong-values", "debugging#wrong-values", "accumulation#f32-accumulators"),
    ),
    E.LOW_PRECISION_ACCUMULATION: ClassInfo(
        S.INCORRECT,
        "Accumulate across grid steps in a float32 VMEM scratch and cast to the output dtype once, at the last step.",
        ("errors#low-precision-accumulation", "accumulation#f32-accumulators"),
    ),
    E.UNWRITTEN_OUTPUT: ClassInfo(
        S.INCORRECT,
        "At full size some output blocks are never written: cover the whole output with "
        "a pl.cdiv grid (masking the edge block) or a block size that divides the dimension.",
        ("errors#unwritten-output", "blockspec-tiling#edge-blocks"),
    ),
    E.UNREAD_INPUT: ClassInfo(
        S.INCORRECT,
        "At full size part of an input is never read: the grid stops short of the "
        "dimension; use a pl.cdiv grid with masking or a block size that divides it.",
        ("errors#unread-input", "blockspec-tiling#edge-blocks"),
    ),
    E.PARALLEL_REDUCTION_AXIS: ClassInfo(
        S.INCORRECT,
        'A grid axis marked "parallel" revisits an output block (a reduction): mark it "arbitrary". Megacore '
        "chips (v4, v5p) split it across two TensorCores that overwrite each other's partial results.",
        ("errors#parallel-reduction-axis", "dimension-semantics#parallel-arbitrary", "dimension-semantics#megacore"),
    ),
    E.IMPLAUSIBLE_TIME: ClassInfo(
        S.INCORRECT,
        "The measured time is below what moving the workload's inputs and outputs once takes: the kernel skips work.",
        ("errors#implausible-time", "performance#roofline"),
    ),
    E.NO_PALLAS_CALL: ClassInfo(
        S.NO_PALLAS,
        "No pallas_call in the workload: implement the hot part as a Pallas kernel.",
        ("errors#no-pallas-call", "programming-model#pallas-call"),
    ),
    E.PALLAS_NOT_DOING_THE_WORK: ClassInfo(
        S.NO_PALLAS,
        "The Pallas kernels do a sliver of the work; move the hot part (the matmuls, the reductions) into the kernel.",
        ("errors#pallas-not-doing-the-work", "programming-model#pallas-call"),
    ),
    E.WORKER_START_FAILED: ClassInfo(
        S.SERVER_ERROR,
        "The checker's worker did not start (the server's fault, not the "
        "kernel's): call check_kernel again; server_info shows the host's state.",
        ("errors#server-error",),
    ),
    E.INTERNAL_ERROR: ClassInfo(
        S.SERVER_ERROR,
        "The checker failed internally (the server's fault, not the kernel's): call "
        "again; if it repeats, the attempt's log says why.",
        ("errors#server-error",),
    ),
}
del S, E


def status_of(error_class: ErrorClass | str) -> Status:
    return ERROR_CLASSES[ErrorClass(error_class)].status
