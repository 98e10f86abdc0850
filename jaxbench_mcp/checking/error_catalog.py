"""Real error messages -> error class, a one-line fix hint, and the doc sections that explain the fix.

The catalog is an ordered list of entries (first match wins), each a regex over the message, the
check stages where that message can appear, an ErrorClass from jaxbench_mcp.taxonomy, a hint and
doc refs ("topic#anchor" in context_docs/). The patterns were written against messages provoked
with the installed jax + libtpu (tests/test_error_catalog.py provokes each one for real).

    classify(stage, message) -> Diagnosis       stage in load | trace | lower | compile | run
    classify_exception(stage, exc) -> Diagnosis  same, from an exception (its chain included)
    diagnosis_for(error_class) -> Diagnosis      when the checker decides the class itself
    refine_for_kernels(diagnosis, kernels)       a wrong/NaN output from a kernel whose reduction axis is "parallel"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, Field

from jaxbench_mcp.taxonomy import ERROR_CLASSES, ErrorClass, Stage, Status, status_of

# The stages whose errors are messages from jax/XLA/libtpu raised in the candidate's process.
STAGES = (Stage.LOAD, Stage.TRACE, Stage.LOWER, Stage.COMPILE, Stage.RUN)

# Where tracing- and lowering-time errors can surface: a checker that lowers (or compiles, which
# lowers first) sees the trace-time errors of the kernel body too.
_TRACE_ON = frozenset({"trace", "lower", "compile"})
_LOWER_ON = frozenset({"lower", "compile"})
# On a TPU host the first call compiles, so compile-time messages can also come from the run stage.
_COMPILE_ON = frozenset({"compile", "run"})

FALLBACK: dict[Stage, ErrorClass] = {
    Stage.LOAD: ErrorClass.IMPORT_ERROR,
    Stage.TRACE: ErrorClass.TRACE_ERROR,
    Stage.LOWER: ErrorClass.LOWERING_OTHER,
    Stage.COMPILE: ErrorClass.COMPILE_OTHER,
    Stage.RUN: ErrorClass.RUNTIME_EXCEPTION,
}


class Diagnosis(BaseModel):
    error_class: ErrorClass
    status: Status = Field(description="the verdict status this error class implies")
    hint: str = Field(description="one line: what to change")
    doc_refs: list[str] = Field(description="doc sections to read: read_docs(topic=ref)")
    rule: str | None = Field(default=None, description="the catalog entry that matched; None for a class default")

    def summary(self) -> str:
        return f"{self.error_class.value}: {self.hint} Read: {', '.join(self.doc_refs)}"


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    stages: frozenset[str]
    pattern: re.Pattern
    error_class: ErrorClass
    hint: str
    doc_refs: tuple[str, ...]

    def diagnosis(self) -> Diagnosis:
        return Diagnosis(
            error_class=self.error_class,
            status=status_of(self.error_class),
            hint=self.hint,
            doc_refs=list(self.doc_refs),
            rule=self.id,
        )


def _entry(id: str, stages, pattern: str, error_class: ErrorClass, hint: str, *refs: str) -> CatalogEntry:
    stages = frozenset([stages] if isinstance(stages, str) else stages)
    assert stages <= set(STAGES), stages
    return CatalogEntry(id, stages, re.compile(pattern, re.S), error_class, hint, refs)


E = ErrorClass
_PALLAS_MODULE_ATTR = r"module 'jax\.experimental\.pallas(?:\.tpu)?' has no attribute"

CATALOG: tuple[CatalogEntry, ...] = (
    # ---- load ----------------------------------------------------------------------------------
    _entry(
        "syntax",
        "load",
        r"\b(?:SyntaxError|IndentationError|TabError)\b|invalid syntax",
        E.SYNTAX_ERROR,
        "The file does not parse: fix the reported line (plain Python only, no markdown fences).",
        "errors#syntax-error",
    ),
    _entry(
        "missing-workload",
        "load",
        r"has no attribute '?workload'?|\bworkload\b[^\n]{0,60}\b(?:not (?:defined|found|callable)|missing)"
        r"|(?:no|missing|does not define)[^\n]{0,40}\bworkload\b",
        E.MISSING_WORKLOAD,
        "Define a top-level function workload(*inputs) taking the arrays create_inputs returns.",
        "errors#missing-workload",
    ),
    _entry(
        "renamed-api-load",
        "load",
        _PALLAS_MODULE_ATTR,
        E.IMPORT_ERROR,
        "A Pallas name that no longer exists (renamed or removed): use the current name.",
        "api-changes#renamed",
        "errors#import-error",
    ),
    _entry(
        "import",
        "load",
        r"ModuleNotFoundError|ImportError|No module named|cannot import name",
        E.IMPORT_ERROR,
        "Import only jax, numpy and the standard library, with current jax names.",
        "errors#import-error",
        "api-changes#renamed",
    ),
    # ---- trace (the kernel body and the wrapper are traced) -------------------------------------
    _entry(
        "program-too-large",
        "trace",
        r"^program too large: ",
        E.PROGRAM_TOO_LARGE,
        "Nested calls multiply once XLA inlines them: loop with lax.fori_loop or lax.scan instead.",
        "errors#program-too-large",
    ),
    _entry(
        "traced-control-flow",
        _TRACE_ON,
        r"TracerBoolConversionError|TracerIntegerConversionError|ConcretizationTypeError|TracerArrayConversionError"
        r"|Attempted boolean conversion of traced array|__index__\(\) method was called on traced array",
        E.TRACED_CONTROL_FLOW,
        "Python if/for/int() on a traced value: use pl.when / jax.lax.cond, jax.lax.fori_loop, or jnp.where.",
        "errors#traced-control-flow",
        "programming-model#pallas-call",
    ),
    _entry(
        "renamed-api",
        _TRACE_ON,
        _PALLAS_MODULE_ATTR,
        E.TRACE_ERROR,
        "A Pallas name that no longer exists (renamed or removed): use the current name.",
        "api-changes#renamed",
        "errors#trace-error",
    ),
    _entry(
        "store-shape",
        _TRACE_ON,
        r"Invalid shape for `?swap`?",
        E.TRACE_ERROR,
        "The stored value's shape differs from the ref: keepdims=True, broadcast, or fix the block shape.",
        "errors#trace-error",
        "programming-model#refs",
    ),
    _entry(
        "store-dtype",
        _TRACE_ON,
        r"Invalid dtype for `?swap`?",
        E.TRACE_ERROR,
        "Cast before storing: o_ref[...] = value.astype(o_ref.dtype).",
        "errors#trace-error",
        "programming-model#refs",
    ),
    _entry(
        "index-map-arity",
        _TRACE_ON,
        r"Index map function .{0,200}must return \d+ values|missing \d+ required positional argument"
        r"|takes \d+ positional arguments? but \d+ (?:were|was) given",
        E.TRACE_ERROR,
        "Arity mismatch: index maps take the grid indices (+ prefetch refs) and return one index per block dim; "
        "the kernel takes one ref per input, output and scratch.",
        "errors#trace-error",
        "programming-model#grid-and-blockspec",
    ),
    _entry(
        "spec-pytree",
        _TRACE_ON,
        r"Pytree for `?(?:in|out)_specs`? and",
        E.TRACE_ERROR,
        "in_specs/out_specs must mirror the inputs and out_shape pytrees one to one.",
        "errors#trace-error",
        "programming-model#multiple-outputs",
    ),
    _entry(
        "captured-constants",
        _TRACE_ON,
        r"captures constants",
        E.TRACE_ERROR,
        "The kernel closes over an array constant: pass it as an input instead.",
        "errors#trace-error",
        "supported-ops#not-supported",
    ),
    _entry(
        "static-out-of-bounds",
        _TRACE_ON,
        r"Out of bound slice",
        E.OUT_OF_BOUNDS,
        "A static slice runs past the ref's end: fix the pl.ds start/size or the block shape.",
        "errors#out-of-bounds",
        "programming-model#refs",
    ),
    # ---- lower for TPU ---------------------------------------------------------------------------
    _entry(
        "block-8-128",
        _LOWER_ON,
        r"divisible by 8 and 128|rank 1 block shapes|supports in memory space ANY only blocks"
        r"|All block dimensions must be Elements|only blocks of rank >= 1",
        E.BLOCK_SHAPE_TILING,
        "Block's last two dims must be multiples of (8, 128) (16/32 rows for bf16/int8) or the full array dims.",
        "errors#block-shape-tiling",
        "blockspec-tiling#rule-8-128",
    ),
    _entry(
        "buffer-count",
        _LOWER_ON,
        r"Only single \(1\) and double \(2\) buffering are supported",
        E.LOWERING_OTHER,
        "pl.Buffered(n) at the top level allows n = 1 or 2; deeper buffering needs emit_pipeline.",
        "errors#lowering-other",
        "pipelining#buffered",
    ),
    _entry(
        "no-tpu-device-kind",
        _TRACE_ON | _LOWER_ON,
        r"Unsupported TPU device kind",
        E.LOWERING_OTHER,
        "Something asked for the TPU chip while tracing on a CPU host (emit_pipeline, 1-D blocks, get_tpu_info): "
        "use grid BlockSpecs / 2-D blocks, or trace under an abstract TPU mesh.",
        "errors#lowering-other",
        "debugging#no-tpu-host",
    ),
    _entry(
        "unsupported-op",
        _LOWER_ON,
        r"Unimplemented primitive in Pallas TPU lowering|Only take_along_axis-like gathers"
        r"|Not implemented: Only vector<i16> and vector<i32>|Unsupported cast|64-bit types are not supported"
        r"|'tpu\.iota' op result|Unsupported (?:dot|conv) precision|NotImplementedError|Not implemented:",
        E.UNSUPPORTED_OP,
        "This operation does not lower inside a TPU kernel: rewrite it (int32 iota, cast int8 to int32, "
        "ref slicing with pl.ds, sort/cumsum outside).",
        "errors#unsupported-op",
        "supported-ops#not-supported",
    ),
    _entry(
        "verification",
        _LOWER_ON,
        r"internal verification error",
        E.LOWERING_OTHER,
        "Mosaic rejected the IR of one op (named in the details): change that op's dtype or shape.",
        "errors#lowering-other",
        "supported-ops#what-lowers",
    ),
    # ---- compile for a TPU generation ------------------------------------------------------------
    _entry(
        "vmem",
        _COMPILE_ON,
        r"memory space vmem|space=vmem|scoped vmem limit|CompileTimeScopedVmemOom|vmem capacity",
        E.VMEM_OVERFLOW,
        "Blocks x 2 buffers + scratch exceed VMEM: shrink blocks or raise CompilerParams(vmem_limit_bytes) "
        "within the chip's VMEM.",
        "errors#vmem-overflow",
        "performance#vmem-limit",
        "memory-spaces#vmem-accounting",
    ),
    _entry(
        "smem",
        _COMPILE_ON,
        r"memory space smem|space=smem",
        E.COMPILE_OTHER,
        "SMEM (1 MiB) overflow: flatten 2-D scalar tables (they pad to 128 columns) and keep them small.",
        "errors#compile-other",
        "memory-spaces#smem",
    ),
    _entry(
        "core-parallel",
        _COMPILE_ON,
        r"Core-parallel dimension",
        E.COMPILE_OTHER,
        'A CORE_PARALLEL axis is longer than the number of cores: use "parallel" instead.',
        "errors#compile-other",
        "dimension-semantics#core-parallel",
    ),
    _entry(
        "mosaic",
        _COMPILE_ON,
        r"Mosaic failed to compile TPU kernel",
        E.COMPILE_OTHER,
        "Mosaic rejected the kernel: the detail line names the operation to change.",
        "errors#compile-other",
        "supported-ops#what-lowers",
    ),
    # ---- run -------------------------------------------------------------------------------------
    _entry(
        "race",
        "run",
        r"RACE DETECTED",
        E.RACE_DETECTED,
        'Unordered accesses to one buffer: wait on DMAs before reading, rotate slots, label reductions "arbitrary".',
        "errors#race-detected",
        "debugging#race-detector",
        "manual-dma#async-copy",
    ),
    _entry(
        "out-of-bounds",
        "run",
        r"Out-of-bounds (?:block index|read|write)|out of bounds|Out of bound slice",
        E.OUT_OF_BOUNDS,
        "An index map or dynamic slice points past the array: index maps return block indices; mask cdiv edges.",
        "errors#out-of-bounds",
        "blockspec-tiling#edge-blocks",
    ),
    _entry(
        "device-oom",
        "run",
        r"RESOURCE_EXHAUSTED.{0,200}(?:[Oo]ut of memory|hbm)|Out of memory while trying to allocate",
        E.RUNTIME_EXCEPTION,
        "Device memory exhausted at run time: avoid materialising large intermediates in HBM.",
        "errors#runtime-exception",
        "performance#when-xla-wins",
    ),
    _entry(
        "semaphore",
        "run",
        r"[Ss]emaphore",
        E.RUNTIME_EXCEPTION,
        "A DMA or semaphore was left unbalanced: wait on every started copy exactly once.",
        "errors#runtime-exception",
        "manual-dma#async-copy",
    ),
)


def diagnosis_for(error_class: ErrorClass | str) -> Diagnosis:
    """The class's own hint and doc sections: when the checker decides the class itself, or no entry matches."""
    cls = ErrorClass(error_class)
    info = ERROR_CLASSES[cls]
    return Diagnosis(error_class=cls, status=info.status, hint=info.hint, doc_refs=list(info.docs))


# A wrong or NaN output has two common causes that look alike from the values: an accumulator that is never
# initialised, and a reduction grid axis marked "parallel" (interpret mode visits parallel axes in a shuffled
# order, so `k == 0` is not the first step: the accumulator is read before its init, which shows as NaN, or
# is zeroed half-way, which shows as wrong values). The kernels' grid semantics tell them apart: by convention
# the reduction axis is the last one, and an accumulator lives in scratch.
PARALLEL_REDUCTION = Diagnosis(
    error_class=ErrorClass.WRONG_VALUES,
    status=status_of(ErrorClass.WRONG_VALUES),
    hint='The last grid axis is "parallel" in a kernel with a scratch accumulator: if it is the reduction axis, '
    'mark it "arbitrary" (parallel steps run in any order).',
    doc_refs=["dimension-semantics#parallel-arbitrary", "accumulation#init-under-when", "debugging#wrong-values"],
    rule="parallel-reduction",
)


def _parallel_last_axis_with_scratch(kernel) -> bool:
    grid, semantics = list(kernel.grid), [str(d).lower() for d in kernel.dimension_semantics]
    if not grid or len(semantics) != len(grid) or kernel.num_scratch <= 0:
        return False
    last = semantics[-1]
    return "parallel" in last and "core" not in last and grid[-1] != 1


def refine_for_kernels(diagnosis: Diagnosis, kernels) -> Diagnosis:
    """`diagnosis` for an output the comparison rejected (nan_output / wrong_values), pointed at the grid semantics
    when a kernel's last grid axis is "parallel" and the kernel has scratch (a reduction that must be "arbitrary");
    `kernels` are the traced kernels' descriptions (grid, dimension_semantics, num_scratch). Other diagnoses pass
    through unchanged."""
    if diagnosis.error_class not in (ErrorClass.NAN_OUTPUT, ErrorClass.WRONG_VALUES):
        return diagnosis
    if not any(_parallel_last_axis_with_scratch(k) for k in kernels or ()):
        return diagnosis
    return PARALLEL_REDUCTION.model_copy(update={"error_class": diagnosis.error_class, "status": diagnosis.status})


def _check_stage(stage: str) -> str:
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
    return stage


def match(stage: str, message: str) -> CatalogEntry | None:
    """The first catalog entry for `stage` whose pattern occurs in `message`."""
    _check_stage(stage)
    for entry in CATALOG:
        if stage in entry.stages and entry.pattern.search(message or ""):
            return entry
    return None


def classify(stage: str, message: str) -> Diagnosis:
    """The diagnosis for an error `message` raised at `stage`; the stage's generic class when no entry matches."""
    entry = match(stage, message)
    if entry is not None:
        return entry.diagnosis()
    return diagnosis_for(FALLBACK[Stage(stage)])


def exception_text(exc: BaseException) -> str:
    """'Type: message' for an exception and its causes (jax often wraps the informative one)."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def classify_exception(stage: str, exc: BaseException) -> Diagnosis:
    return classify(stage, exception_text(exc))
