"""The child process that runs one job of a candidate kernel, in one of two roles.

Started by jaxbench_mcp.sandbox.jobs inside the sandbox (jaxbench_mcp.sandbox.isolation), with a scrubbed
environment, its job directory as working directory. It warms up (imports jax, initialises the TPU compiler)
before it is handed a job, so that a job does not pay for that, then reads one job from stdin, reports each stage
as an event (jaxbench_mcp.sandbox.protocol) on the event pipe, and exits.

- A trace job is the only one that imports candidate code: it loads candidate.py and traces workload() once per
  size, writing each recorded program as data (jaxbench_mcp.internals.jaxpr_codec). Whatever it reports is
  produced next to hostile code.
- A check, profile or measure job never sees the candidate: it rebuilds those programs from their files, and
  analyses, lowers, compiles, runs and times them (a check's input files follow while it does, each run's announced
  on stdin by protocol.InputsReady, until protocol.StopRuns says the verdict can no longer be 'correct'; the
  outputs are written as .npy files). So what is judged, and timed, is what runs, whatever the candidate's code
  does when it is not being traced. Its input is still hostile data: the decoder refuses what is not a plain jax
  program, and the parent validates this process's events and reads its files as it reads any.

No worker computes a reference output: the truth lives only in the parent.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxbench_mcp.analysis import coverage, kernels as kernel_analysis, program_size
from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.catalog.workloads import abstract_inputs
from jaxbench_mcp.internals import jaxpr as jx, jaxpr_codec, libtpu
from jaxbench_mcp.sandbox import protocol, tpu_facade
from jaxbench_mcp.taxonomy import Stage


class Reporter:
    """Sends events to the parent. Only this process's trusted code holds it; the candidate shares the
    process, so the parent validates everything anyway."""

    def __init__(self, fd: int):
        self._out = os.fdopen(fd, "w", buffering=1)

    def send(self, event) -> None:
        self._out.write(event.model_dump_json() + "\n")
        self._out.flush()

    def stage(self, stage: Stage, state: str, **fields) -> None:
        if "text" in fields and fields["text"] is not None:
            fields["text"] = protocol.cut_text(fields["text"])
        self.send(protocol.StageEvent(stage=stage, state=state, **fields))


def warm_up(generation: str | None, tracer: bool = False, cold: bool = False) -> None:
    """Pay the one-off costs up front: jax import, libtpu init, and the first trace, lowering, compile and
    interpret run of a kernel that uses what most kernels use (a grid, scratch, pl.when, a dot, and the row
    reductions and elementwise ops of norms, softmax and activations: jax lowers each op the first time it
    meets it, ~40 ms of a candidate's first run otherwise). A tracer (a worker for a trace job, which only loads,
    traces and records the candidate) stops once the kernel is recorded: the compile and the interpret run cost
    it ~1.2 CPU-seconds of a 2.3-second start that it would never use. A cold worker (started for a job that is
    already waiting) stops after the imports: the job pays the one-off costs itself, once."""
    workloads.all_workloads()
    if cold:
        return

    def body(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
        def _():
            acc = acc_ref[...]
            e = jnp.exp(acc - jnp.max(acc, axis=-1, keepdims=True))
            y = e / jnp.sum(e, axis=-1, keepdims=True)
            y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + 1e-6)
            y = jnp.where(y > 0, jnp.tanh(y), jnp.log(jnp.abs(y) + 1.0)) * jax.nn.sigmoid(y)
            o_ref[...] = jnp.maximum(y, jnp.minimum(y, 0.5)).astype(o_ref.dtype)

    def f(a, b):
        return pl.pallas_call(
            body,
            grid=(2, 2),
            out_shape=jax.ShapeDtypeStruct((256, 128), a.dtype),
            in_specs=[pl.BlockSpec((128, 128), lambda i, k: (i, k)), pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
            out_specs=pl.BlockSpec((128, 128), lambda i, k: (i, 0)),
            scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        )(a, b)

    args = (jnp.ones((256, 256), jnp.bfloat16), jnp.ones((256, 128), jnp.bfloat16))
    abstract = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    chip = generation or targets.DEFAULT_CPU_TARGET
    with targets.chip_context(chip):
        closed = jax.make_jaxpr(f)(*args)
    # A worker records the candidate's program or rebuilds one: both ways, the first time costs the most.
    recorded = jaxpr_codec.encode(closed)
    if tracer:
        return
    closed = jaxpr_codec.decode(recorded)
    jaxpr_codec.type_check(closed)
    # The trace stage's analyses cost ~70 ms the first time in a process (their own jit and XLA:CPU compiles).
    kernel_analysis.describe_kernels(closed.jaxpr)
    _static_analyses(closed, ["a", "b"], abstract)
    if generation is not None:
        targets.deviceless_compile(f, abstract, generation)
    if os.environ.get("JAX_PLATFORMS") == "cpu":  # on a TPU host, touching the device now would hold it
        # The run stage's own route: the recorded program interpreted beside the probe.
        params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True, random_seed=0)
        interpreted_with_probe(closed, params, list(args), _uninitialised_probe())(list(args), None)


# ---- stages -----------------------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def load_candidate(source_path: Path, require_workload: bool = True):
    """Import the candidate as a module. Returns (module, None) or (None, (error_class, text))."""
    source = source_path.read_text()
    try:
        compile(source, str(source_path), "exec")
    except SyntaxError as exc:
        return None, ("syntax_error", _error_text(exc))
    spec = importlib.util.spec_from_file_location("candidate", source_path)
    assert spec is not None and spec.loader is not None  # a file path always gets a spec with a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its import failure
        return None, ("import_error", _error_text(exc))
    if require_workload and not callable(getattr(module, "workload", None)):
        names = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
        return None, (
            "missing_workload",
            f"the file defines no function `workload`; it defines: {', '.join(names) or 'nothing callable'}",
        )
    return module, None


def _load(report: Reporter, workdir: Path, require_workload: bool = True):
    """The load stage: the candidate's module, or None after reporting why not."""
    report.stage(Stage.LOAD, "start")
    t0 = time.perf_counter()
    module, failure = load_candidate(workdir / "candidate.py", require_workload)
    if failure:
        report.stage(Stage.LOAD, "failed", seconds=time.perf_counter() - t0, error_class=failure[0], text=failure[1])
        return None
    report.stage(Stage.LOAD, "done", seconds=time.perf_counter() - t0)
    return module


def read_inputs(described: list, workdir: Path) -> tuple:
    """The inputs the parent wrote for one hidden seed (the seed itself never reaches this process)."""
    return tuple(
        d.static
        if isinstance(d, protocol.StaticInput)
        else jnp.asarray(np.frombuffer((workdir / d.file).read_bytes(), dtype=jnp.dtype(d.dtype)).reshape(d.shape))
        for d in described
    )


_INPUTS_MISSING = (
    "the worker's stdin closed before the parent said this run's inputs were written; a candidate that reads "
    "sys.stdin takes the parent's messages: do not read stdin"
)


def trace_job(job: protocol.TraceJob, report: Reporter, workdir: Path) -> None:
    """The only job that imports the candidate: load it and trace workload() once per size under the TPU facade,
    writing each recorded program as data (jaxpr_codec). The full size comes first: without it nothing is judged;
    a failure at another size travels as that size's error, for the run that needed it to report."""
    w = workloads.get_workload(job.workload_id)
    static = tuple(w.static_argnums)
    facade = tpu_facade.TpuFacade(job.chip, targets.device_kind(job.chip), job.cores)
    with facade:
        module = _load(report, workdir)
        if module is None:
            return
        report.stage(Stage.TRACE, "start")
        t0 = time.perf_counter()
        written: list[protocol.ProgramFile] = []
        for size in job.sizes:
            try:
                with targets.chip_context(job.chip, job.cores):
                    closed = jax.make_jaxpr(module.workload, static_argnums=static)(*abstract_inputs(w, size))
                data = jaxpr_codec.encode(closed)
            except Exception as exc:  # noqa: BLE001
                if not written:
                    report.stage(Stage.TRACE, "failed", seconds=time.perf_counter() - t0, text=_error_text(exc))
                    return
                written.append(protocol.ProgramFile(size=size, error=protocol.cut_text(_error_text(exc))))
                continue
            name = f"program_{size}.json"
            (workdir / name).write_bytes(data)
            written.append(protocol.ProgramFile(size=size, file=name))
    report.send(protocol.Programs(programs=written, platform_queries=facade.queries[:16]))


def decode_programs(
    job: protocol.CheckJob | protocol.ProfileJob | protocol.MeasureJob, report: Reporter, workdir: Path
) -> dict[str, tuple] | None:
    """The recorded programs of a trace job, rebuilt from its files: (program, why it is missing) per size. The
    trace stage started in the trace job; a program that cannot be rebuilt, or one too large to judge, fails it here
    (and None is returned), one that calls back into the host is reported as such (with no kernels: nothing else is
    judged)."""
    programs: dict[str, tuple] = {}
    for entry in job.programs:
        if entry.file is None:
            programs[entry.size] = (None, entry.error or "the candidate could not be traced at this size")
            continue
        try:
            program = jaxpr_codec.decode((workdir / entry.file).read_bytes())
            # Before jax's type check, which would walk a bomb's every path, and before any analysis or lowering:
            # XLA would inline it into something no stage could finish.
            too_large = program_size.program_too_large(program)
            if too_large:
                report.stage(Stage.TRACE, "failed", text=too_large)
                return None
            jaxpr_codec.type_check(program)
            programs[entry.size] = (program, None)
        except jaxpr_codec.RefusedPrimitive as exc:
            callbacks = [name for name in exc.names if name in kernel_analysis.HOST_CALLBACKS]
            if not callbacks:  # a prebuilt kernel, a foreign call, a primitive of the candidate's own
                report.stage(Stage.TRACE, "failed", error_class="unsupported_op", text=f"{exc}; write it in Pallas")
                return None
            queries = job.platform_queries if isinstance(job, protocol.CheckJob) else []
            traced = protocol.Traced(kernels=[], host_callbacks=callbacks, outputs=[], platform_queries=queries)
            report.stage(Stage.TRACE, "done", traced=traced)
            return None
        except jaxpr_codec.CodecError as exc:
            report.stage(Stage.TRACE, "failed", text=f"{protocol.PROGRAM_REFUSED} ({entry.size} size): {exc}")
            return None
    if programs.get("full", (None,))[0] is None:  # a trace job sends programs only once the full size traced
        report.stage(Stage.TRACE, "failed", text=f"{protocol.PROGRAM_REFUSED}: no full-size program was recorded")
        return None
    return programs


def _lower_and_write(program, full_args: list, generation: str | None, report: Reporter, workdir: Path):
    """Lowers a replayed program for a generation (None: the attached chip) and writes the module, which the parent
    digests and checks; raises what the lowering raised, for the caller to report as it sees fit."""
    report.stage(Stage.LOWER, "start", target=generation)
    t0 = time.perf_counter()
    lowered = targets.lower_for_tpu(program, full_args, (), generation)
    module_file = f"lowered_{generation or 'tpu'}.mlir"
    (workdir / module_file).write_text(lowered.as_text())
    lowered_module = protocol.Lowered(module_file=module_file)
    report.stage(Stage.LOWER, "done", target=generation, seconds=time.perf_counter() - t0, lowered=lowered_module)
    return lowered, module_file


def _estimate_trace(program, w, generation: str) -> protocol.ProfileTrace | None:
    """A static estimate's reading of the full-size program, on the workload's own integer inputs (estimator.
    workload_args). None when it fails: the profile then traces on its own, and says why it has no estimate."""
    from jaxbench_mcp.perf import estimator

    try:
        dynamic = [a for i, a in enumerate(estimator.workload_args(w, "full")) if i not in w.static_argnums]
        return estimator.trace_kernels(program, dynamic, (), generation)
    except Exception:  # noqa: BLE001 -- the check goes on; only the profile's shortcut is lost
        return None


def _estimate_compile(executable, generation: str, workdir: Path, module_file: str) -> protocol.ProfileCompile | None:
    """A static estimate's reading of a compile (schedules, XLA's work around the kernels); None as _estimate_trace."""
    from jaxbench_mcp.perf import estimator

    try:
        return estimator.read_compile(executable, generation, workdir / "dumps", module_file)
    except Exception:  # noqa: BLE001
        return None


def check_job(job: protocol.CheckJob, report: Reporter, workdir: Path) -> None:
    """The check of a candidate's recorded programs (a TraceJob wrote them; the candidate's code never runs in this
    process): every analysis, the lowering, the compile and the runs are derived from them, so what is judged is
    what runs."""
    from jaxbench_mcp.perf import cost_model

    w = workloads.get_workload(job.workload_id)
    static = tuple(w.static_argnums)
    # One set of strict parameters for every run: each run draws its own grid orders (job.shuffle_seeds) while it
    # runs, so the runs at one size share one compile.
    strict = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True)
    interpreted: dict[str, Callable] = {}
    probe = _uninitialised_probe()
    t0 = time.perf_counter()
    programs = decode_programs(job, report, workdir)
    if programs is None:
        return
    closed = programs["full"][0]
    run_closed = programs[job.size][0]
    reduction_closed = programs[workloads.FULL_REDUCTION][0] if job.full_reduction is not None else None
    traced = _describe(closed, run_closed, reduction_closed, w, job.platform_queries)
    full_program = targets.replay(closed)
    estimating = job.estimate and bool(job.targets)
    profile_trace = _estimate_trace(full_program, w, job.targets[0]) if estimating else None
    report.stage(Stage.TRACE, "done", seconds=time.perf_counter() - t0, traced=traced, profile_trace=profile_trace)
    if traced.host_callbacks:
        return

    full_args = [a for i, a in enumerate(abstract_inputs(w, "full")) if i not in static]
    # Every target is lowered and compiled, so that one generation's failure does not hide another's.
    compiled_everywhere = True
    generations: list[str | None] = list(job.targets) or [None]
    for generation in generations:
        stage = Stage.LOWER
        t0 = time.perf_counter()
        try:
            lowered, module_file = _lower_and_write(full_program, full_args, generation, report, workdir)
            if generation is None:
                continue
            stage = Stage.COMPILE
            report.stage(Stage.COMPILE, "start", target=generation)
            t0 = time.perf_counter()
            hopeless = cost_model.vmem_overflow(traced.kernels, generation, HOPELESS_VMEM, HOPELESS_PIPELINE_VMEM)
            if hopeless:  # refused in seconds: such a compile takes minutes to fail
                raise VmemOverflow(f"{protocol.EARLY_VMEM_REFUSAL}: {hopeless}")
            if estimating:  # this compile's schedules are read alone
                libtpu.collect_dump(workdir / "dumps", f"before-{generation}")
            executable = lowered.compile()
            memory = executable.memory_analysis()
            scoped = libtpu.scoped_vmem(executable.as_text())
            report.stage(
                Stage.COMPILE,
                "done",
                target=generation,
                seconds=time.perf_counter() - t0,
                compiled=protocol.Compiled(
                    code_size_bytes=getattr(memory, "generated_code_size_in_bytes", None),
                    temp_bytes=getattr(memory, "temp_size_in_bytes", None),
                    scoped_vmem_bytes=max((k.used for k in scoped), default=None),
                ),
                profile_compile=_estimate_compile(executable, generation, workdir, module_file) if estimating else None,
            )
        except Exception as exc:  # noqa: BLE001
            report.stage(stage, "failed", target=generation, seconds=time.perf_counter() - t0, text=_error_text(exc))
            compiled_everywhere = False
    if not compiled_everywhere:
        return

    runs = [(described, job.size) for described in job.inputs]
    if job.full_reduction is not None:
        runs.append((job.full_reduction, workloads.FULL_REDUCTION))
    ready = -1
    for index, (described, size) in enumerate(runs):
        while ready < index:  # the parent writes a run's input files while the stages above go on
            line = sys.stdin.readline()
            if not line:
                report.stage(Stage.RUN, "start", seed_index=index)
                report.stage(Stage.RUN, "failed", seed_index=index, seconds=0.0, text=_INPUTS_MISSING)
                return
            message = protocol.parse_parent_message(line)
            if isinstance(message, protocol.StopRuns):
                return
            ready = message.inputs_ready
        report.stage(Stage.RUN, "start", seed_index=index)
        t0 = time.perf_counter()
        program, trace_error = programs.get(size, (None, f"no program was recorded at the {size} size"))
        if program is None:
            report.stage(Stage.RUN, "failed", seed_index=index, seconds=0.0, text=trace_error)
            return
        inputs = [a for i, a in enumerate(read_inputs(described, workdir)) if i not in static]
        try:
            if job.interpret:
                # The probe runs in the same program under the same strict parameters, and must read NaN.
                if size not in interpreted:
                    interpreted[size] = interpreted_with_probe(program, strict, inputs, probe)
                out, probe_out = interpreted[size](inputs, job.shuffle_seeds[index])
                np.save(workdir / f"probe_{index}.npy", np.asarray(probe_out, dtype=np.float32))
            else:
                out = jax.block_until_ready(jax.jit(targets.replay(program))(*inputs))
            leaves = jax.tree_util.tree_leaves(out)
            path = workdir / f"output_{index}.npy"
            first = np.asarray(leaves[0]) if leaves else np.zeros(())
            # float32 carries every candidate dtype we compare (bf16 exactly); the dtype travels beside it.
            np.save(path, first.astype(np.float32) if jax.numpy.issubdtype(first.dtype, jax.numpy.floating) else first)
        except Exception as exc:  # noqa: BLE001
            report.stage(Stage.RUN, "failed", seed_index=index, seconds=time.perf_counter() - t0, text=_error_text(exc))
            return
        report.stage(
            Stage.RUN,
            "done",
            seed_index=index,
            seconds=time.perf_counter() - t0,
            output=protocol.Output(
                path=path.name,
                shape=list(first.shape),
                dtype=str(first.dtype),
                leaves=len(leaves),
                probe_path=f"probe_{index}.npy" if job.interpret else None,
            ),
        )


# A kernel estimated (cost_model.vmem_bytes) at more than HOPELESS_VMEM times the chip's VMEM, or whose pipeline
# buffers and scratch alone (cost_model.pipeline_vmem_bytes) take more than HOPELESS_PIPELINE_VMEM times it or
# times the scoped limit it compiles under, is refused without compiling: such a compile fails, after minutes
# (7p's 4x-block variant: 21 s). The margins are the largest excess measured on the corpus
# (benchmarks/vmem_fidelity.py on v6e, v5e, v5p and 7x) with room to spare: the whole estimate is at most 1.35x the
# compiler's figure (15p on 7x; 1.08x on v6e, 1.06x on v5e), the blocks and scratch at most 1.02x (23k's matvec).
HOPELESS_VMEM = 1.45
HOPELESS_PIPELINE_VMEM = 1.05


class VmemOverflow(Exception):
    pass


def interpreted_with_probe(program, params, inputs: list, probe) -> Callable[[list, int | None], tuple]:
    """A recorded program bound again under interpret `params` (jax picks the interpret mode when pallas_call is
    traced, and the candidate is never traced again), beside the uninitialised-memory probe under the same
    parameters, compiled once for `inputs`' shapes: run(inputs, order_seed) -> (outputs, the probe's output), once
    per run, each drawing its 'parallel' grid orders from its own seed. What a check's run stage does, and what
    benchmarks/check_latency.py and interpret_runs.py time."""
    run_program = jx.interpreting(program, params)
    return targets.interpreted_on_cpu(lambda *args: (run_program(*args), probe(params)), inputs, (), None, params)


def _uninitialised_probe():
    """A kernel that returns a VMEM scratch it never wrote: under the check's interpret parameters every element
    is NaN. Built before the candidate is imported."""

    def body(o_ref, scratch_ref):
        o_ref[...] = scratch_ref[...]

    def probe(params):
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct(PROBE_SHAPE, jnp.float32),
            scratch_shapes=[pltpu.VMEM(PROBE_SHAPE, jnp.float32)],
            interpret=params,
        )()

    return probe


PROBE_SHAPE = (8, 128)


def _describe(closed, run_closed, reduction_closed, w, platform_queries: list[str]) -> protocol.Traced:
    """What the parent judges about the recorded programs without running them: the kernels, host callbacks and
    outputs of the full-size program, _static_analyses of it, and the outlines of the run-size and full_reduction
    programs (left out when one failed to trace: the run stage says why)."""
    kernels, callbacks = kernel_analysis.describe_kernels(closed.jaxpr)
    names = [n for i, n in enumerate(w.input_names) if i not in w.static_argnums]
    args = [a for i, a in enumerate(abstract_inputs(w, "full")) if i not in w.static_argnums]
    found = _static_analyses(closed, names, args)
    if "outline" in found and run_closed is not None:
        try:
            found["run_outline"] = found["outline"] if run_closed is closed else coverage.program_structure(run_closed)
            if reduction_closed is not None:
                found["reduction_outline"] = coverage.program_structure(reduction_closed)
        except Exception:  # noqa: BLE001 - not judged
            pass
    try:
        # A 16-bit running sum the run also accumulates over several steps is judged by the run's tolerance; one
        # only the full size accumulates was never seen rounding.
        exercised = {(a["kernel"], a["ref"]) for a in coverage.low_precision_accumulators(run_closed or closed)}
        if "coverage" in found:
            found["coverage"].findings += [
                protocol.CoverageFinding(
                    kind="low_precision_accumulation",
                    operand=f"{a['kernel']} {a['ref']}",
                    message=coverage.describe_accumulator(a),
                )
                for a in coverage.low_precision_accumulators(closed)
                if (a["kernel"], a["ref"]) not in exercised
            ]
    except Exception:  # noqa: BLE001 - not judged
        pass
    return protocol.Traced(
        kernels=kernels,
        host_callbacks=callbacks,
        outputs=[{"shape": list(a.shape), "dtype": str(a.dtype)} for a in closed.out_avals],
        platform_queries=list(platform_queries),
        **found,
    )


def _static_analyses(closed, input_names: list[str], args: list) -> dict:
    """From a full-size trace (jaxbench_mcp.analysis.coverage): which elements the kernels' index maps leave
    unwritten or unread and which outputs a "parallel" axis revisits, the share of the work inside the kernels, and the
    program's outline. `args` are the non-static arguments. An analysis that fails is left out (not judged)."""
    found: dict = {}
    try:
        result = coverage.full_size_coverage(closed, input_names=input_names)
        found["coverage"] = protocol.Coverage(
            findings=[
                protocol.CoverageFinding(kind=f["kind"], operand=f["operand"], message=coverage.describe_finding(f))
                for f in result["findings"]
            ]
            + [
                protocol.CoverageFinding(
                    kind="parallel_revisit",
                    operand=f"{r['kernel']} output {r['output_index']}",
                    message=coverage.describe_revisit(r),
                )
                for r in result["parallel_revisits"]
            ],
            not_judged=[f"{u['operand']}: {u['reason']}" for u in result["unknown"]],
        )
    except Exception:  # noqa: BLE001 - not judged
        pass
    try:
        inside = coverage.kernel_work(closed)
        counted = coverage.program_work(closed)  # every loop body times its trips
        outside = coverage.outside_work(closed, args)  # XLA's cost analysis, where the kernels can be cut out
        found["work"] = protocol.Work(
            kernel_flops=counted["kernel_flops"],
            kernel_bytes=inside["bytes"],
            exact=inside["exact"] and counted["outside_known"],
            # XLA's cost analysis counts a loop body once: the larger count stands.
            outside_flops=max(outside["flops"], counted["outside_flops"]) if outside else counted["outside_flops"],
            outside_bytes=outside["bytes"] if outside else counted["outside_bytes"],
        )
        if not counted["outside_known"]:  # a while loop of unknown trips does work outside the kernels
            found["work"].outside_flops = found["work"].outside_bytes = None
    except Exception:  # noqa: BLE001 - not judged
        pass
    try:
        found["outline"] = coverage.program_structure(closed)
    except Exception:  # noqa: BLE001 - not judged
        pass
    return found


def profile_job(job: protocol.ProfileJob, report: Reporter, workdir: Path) -> None:
    """Estimate a candidate's recorded full-size program (a TraceJob wrote it) for each target, keeping libtpu's
    schedule dumps (estimator.analyse). The workload's integer inputs (lengths, page tables, group sizes) are
    known values, drawn here, so work they make skippable is seen."""
    from jaxbench_mcp.perf import estimator

    w = workloads.get_workload(job.workload_id)
    static = tuple(w.static_argnums)
    programs = decode_programs(job, report, workdir)
    if programs is None:
        return
    dynamic = [a for i, a in enumerate(estimator.workload_args(w, "full")) if i not in static]
    _analyse(targets.replay(programs["full"][0]), dynamic, (), job.targets, report, workdir, trace_started=True)


def estimate_job(job: protocol.EstimateJob, report: Reporter, workdir: Path) -> None:
    """`jaxbench-mcp estimate`: the calibration kernel first (before any candidate code runs), then one function of
    the candidate file on the arguments the job describes."""
    from jaxbench_mcp.perf import estimator

    for generation in job.targets:
        report.send(
            protocol.Reference(
                target=generation,
                xla_flops=0.0,
                xla_bytes=0.0,
                xla_optimal_seconds=None,
                calibration_bundles=estimator.calibration_bundles(generation, workdir / "dumps"),
            )
        )
    module = _load(report, workdir, require_workload=False)
    if module is None:
        return
    fn = getattr(module, job.function, None)
    if not callable(fn):
        names = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
        report.stage(Stage.TRACE, "start")
        report.stage(
            Stage.TRACE,
            "failed",
            text=f"the file defines no function `{job.function}`; it defines: {', '.join(names) or 'nothing callable'}",
        )
        return
    args = [protocol.arg_value(a) for a in job.args]
    _analyse(fn, args, job.static_argnums, job.targets, report, workdir)


def _analyse(
    fn, args, static_argnums, generations, report: Reporter, workdir: Path, trace_started: bool = False
) -> None:
    from jaxbench_mcp.perf import estimator

    if not trace_started:
        report.stage(Stage.TRACE, "start")

    def on_trace(trace, error):
        if trace is None:
            report.stage(Stage.TRACE, "failed", text=error)
        else:
            report.stage(Stage.TRACE, "done", profile_trace=trace)

    def write_module(generation, text):
        module_file = f"lowered_{generation}.mlir"
        (workdir / module_file).write_text(text)  # the parent checks it is the checked program
        return module_file

    def on_compile_start(generation):
        report.stage(Stage.COMPILE, "start", target=generation)

    def on_compile(generation, compiled, error, seconds):
        if compiled is None:
            report.stage(Stage.COMPILE, "failed", target=generation, text=error)
        else:
            report.stage(Stage.COMPILE, "done", target=generation, seconds=seconds, profile_compile=compiled)

    estimator.analyse(
        fn, args, static_argnums, generations, workdir / "dumps", on_trace, on_compile, write_module, on_compile_start
    )


def measure_job(job: protocol.MeasureJob, report: Reporter, workdir: Path) -> None:
    """TPU host: device time of a candidate's recorded full-size program (a TraceJob wrote it; the candidate's code
    never runs here, so it cannot tell the timed runs from the check) on fresh full-size inputs. The program is
    lowered for the attached generation first and the module written for the parent, which times nothing it has not
    matched to the checked program. With no program: the XLA baseline (the workload's own reference)."""
    from jaxbench_mcp.perf import measuring

    w = workloads.get_workload(job.workload_id)
    static = tuple(w.static_argnums)

    def inputs_for(i: int) -> tuple:
        inputs = w.create_inputs("full", job.first_seed + i)
        return tuple(a for k, a in enumerate(inputs) if k not in static) if job.programs else inputs

    fn, static_argnums = w.module.reference, static
    if job.programs:
        t0 = time.perf_counter()
        programs = decode_programs(job, report, workdir)
        if programs is None:
            return
        report.stage(Stage.TRACE, "done", seconds=time.perf_counter() - t0)
        fn, static_argnums = targets.replay(programs["full"][0]), ()
        generation = job.targets[0] if job.targets else None
        full_args = [a for i, a in enumerate(abstract_inputs(w, "full")) if i not in static]
        t0 = time.perf_counter()
        try:
            _lower_and_write(fn, full_args, generation, report, workdir)
        except Exception as exc:  # noqa: BLE001
            report.stage(
                Stage.LOWER, "failed", target=generation, seconds=time.perf_counter() - t0, text=_error_text(exc)
            )
            return
    report.stage(Stage.MEASURE, "start")
    t0 = time.perf_counter()
    try:
        timing = measuring.time_on_device(fn, static_argnums, inputs_for, job.iterations)
    except measuring.MeasurementError as exc:
        report.stage(Stage.MEASURE, "failed", seconds=time.perf_counter() - t0, text=str(exc))
        return
    except Exception as exc:  # noqa: BLE001
        report.stage(Stage.MEASURE, "failed", seconds=time.perf_counter() - t0, text=_error_text(exc))
        return
    report.stage(
        Stage.MEASURE,
        "done",
        seconds=time.perf_counter() - t0,
        measured=protocol.Measured(samples_us=list(timing.samples_us)),
    )


def reference_job(job: protocol.ReferenceJob, report: Reporter, workdir: Path) -> None:
    """Trusted work: the bundle calibration per target, and XLA's cost analysis of the baseline."""
    from jaxbench_mcp.perf import cost_model, estimator

    w = workloads.get_workload(job.workload_id)
    dump_root = workdir / "dumps"
    for generation in job.targets:
        report.stage(Stage.COMPILE, "start", target=generation)
        bundles = estimator.calibration_bundles(generation, dump_root)
        try:
            compiled = targets.deviceless_compile(
                w.module.reference, abstract_inputs(w, "full"), generation, w.static_argnums
            )
        except Exception as exc:  # noqa: BLE001 - the baseline does not fit this chip; the calibration still holds
            reason = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:900]
            report.stage(Stage.COMPILE, "failed", target=generation, text=_error_text(exc))
            report.send(
                protocol.Reference(
                    target=generation,
                    calibration_bundles=bundles,
                    xla_flops=0.0,
                    xla_bytes=0.0,
                    xla_optimal_seconds=None,
                    xla_error=reason,
                )
            )
            continue
        counts = cost_model.xla_counts(compiled, generation)
        report.stage(Stage.COMPILE, "done", target=generation)
        report.send(protocol.Reference(target=generation, calibration_bundles=bundles, **counts))


# Each takes the job of its mode (protocol.CheckJob, ProfileJob, ...).
_MODES: dict[str, Callable[[Any, Reporter, Path], None]] = {
    "trace": trace_job,
    "check": check_job,
    "profile": profile_job,
    "measure": measure_job,
    "reference": reference_job,
    "estimate": estimate_job,
}


def main() -> None:
    event_fd, generation = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None)
    report = Reporter(event_fd)
    flags = sys.argv[3:]
    warm_up(generation, tracer="trace" in flags, cold="cold" in flags)
    report.send(protocol.Ready())
    line = sys.stdin.readline()
    if not line:
        return
    job = protocol.JobEnvelope.model_validate_json(line).job
    _MODES[job.mode](job, report, Path.cwd())
    report.send(protocol.Finished())


if __name__ == "__main__":
    main()
