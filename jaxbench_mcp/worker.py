"""The child process that runs one candidate kernel: load, trace, lower, compile, run.

Started by jaxbench_mcp.jobs with a scrubbed environment in a fresh temporary directory. It warms up
(imports jax, initialises the TPU compiler) before it is handed a job, so that a check does not pay
for that. It then reads one job (JSON) from stdin, reports each stage as a JSON line on the event
pipe, writes the candidate's outputs as .npy files into its directory, and exits. It never computes a
reference output: the truth lives only in the parent, so the candidate cannot see it.

Everything this process reports about the candidate is, in the end, produced next to hostile code;
the parent treats outputs as data and compares them itself.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any


class Reporter:
    def __init__(self, fd: int):
        self._out = os.fdopen(fd, "w", buffering=1)

    def send(self, **event: Any) -> None:
        self._out.write(json.dumps(event, default=str) + "\n")
        self._out.flush()


def _limit_files(max_file_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def warm_up(generation: str | None) -> None:
    """Pay the one-off costs up front: jax import, libtpu init, and the first trace, lowering, compile and
    interpret run of a kernel that uses what most kernels use (a grid, scratch, pl.when, a dot)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp import targets, workloads

    workloads.all_workloads()

    def body(a_ref, b_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def f(a, b):
        return pl.pallas_call(
            body, grid=(2, 2), out_shape=jax.ShapeDtypeStruct((256, 128), a.dtype),
            in_specs=[pl.BlockSpec((128, 128), lambda i, k: (i, k)), pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
            out_specs=pl.BlockSpec((128, 128), lambda i, k: (i, 0)), scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        )(a, b)

    args = (jnp.ones((256, 256), jnp.bfloat16), jnp.ones((256, 128), jnp.bfloat16))
    chip = generation or targets.DEFAULT_CPU_TARGET
    with targets.chip_context(chip):
        jax.make_jaxpr(f)(*args)
    if generation is not None:
        targets.deviceless_compile(f, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args], generation)
    if os.environ.get("JAX_PLATFORMS") == "cpu":  # on a TPU host, touching the device now would hold it
        params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True, random_seed=0)
        targets.interpret_on_cpu(f, args, (), chip, params)


# ---- stages -----------------------------------------------------------------------------------


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def load_candidate(source_path: Path):
    """Import the candidate as a module. Returns (module, None) or (None, (error_class, text))."""
    import importlib.util

    source = source_path.read_text()
    try:
        compile(source, str(source_path), "exec")
    except SyntaxError as exc:
        return None, ("syntax_error", _error_text(exc))
    spec = importlib.util.spec_from_file_location("candidate", source_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its import failure
        return None, ("import_error", _error_text(exc))
    if not callable(getattr(module, "workload", None)):
        names = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
        return None, ("missing_workload", f"the file defines no function `workload`; it defines: {', '.join(names) or 'nothing callable'}")
    return module, None


def read_inputs(described: list[dict], workdir: Path) -> tuple:
    """The inputs the parent wrote for one hidden seed (the seed itself never reaches this process)."""
    import jax.numpy as jnp
    import numpy as np

    return tuple(
        d["static"] if "static" in d else
        jnp.asarray(np.frombuffer((workdir / d["file"]).read_bytes(), dtype=jnp.dtype(d["dtype"])).reshape(d["shape"]))
        for d in described
    )


def _full_args(workload, size: str):
    from jaxbench_mcp.workloads import abstract_inputs

    return abstract_inputs(workload, size)


def run_job(job: dict, report: Reporter, workdir: Path) -> None:
    import jax
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp import kernel_analysis, targets, workloads

    w = workloads.get_workload(job["workload_id"])
    static = tuple(w.static_argnums)

    report.send(event="stage", stage="load", state="start")
    t0 = time.perf_counter()
    module, failure = load_candidate(workdir / "candidate.py")
    report.send(event="stage", stage="load", state="done" if failure is None else "failed",
                seconds=time.perf_counter() - t0, error_class=failure and failure[0], text=failure and failure[1])
    if failure:
        return
    fn = module.workload

    report.send(event="stage", stage="trace", state="start")
    t0 = time.perf_counter()
    chip = job["targets"][0] if job["targets"] else targets.DEFAULT_CPU_TARGET
    try:
        with targets.chip_context(chip):
            closed = jax.make_jaxpr(fn, static_argnums=static)(*_full_args(w, "full"))
        kernels, callbacks = kernel_analysis.describe_kernels(closed.jaxpr)
        out_avals = [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in closed.out_avals]
    except Exception as exc:  # noqa: BLE001
        report.send(event="stage", stage="trace", state="failed", seconds=time.perf_counter() - t0, text=_error_text(exc))
        return
    report.send(event="stage", stage="trace", state="done", seconds=time.perf_counter() - t0,
                kernels=kernels, host_callbacks=callbacks, outputs=out_avals)
    if callbacks:
        return

    for generation in job["targets"] or [None]:
        stage_name = "lower"
        report.send(event="stage", stage="lower", state="start", target=generation)
        t0 = time.perf_counter()
        try:
            lowered = targets.lower_for_tpu(fn, _full_args(w, "full"), static, generation)
            text = lowered.as_text()
            report.send(event="stage", stage="lower", state="done", target=generation, seconds=time.perf_counter() - t0,
                        mosaic_kernels=text.count("tpu_custom_call"))
            if generation is None:
                continue
            stage_name = "compile"
            report.send(event="stage", stage="compile", state="start", target=generation)
            t0 = time.perf_counter()
            compiled = lowered.compile()
            memory = compiled.memory_analysis()
            report.send(event="stage", stage="compile", state="done", target=generation, seconds=time.perf_counter() - t0,
                        code_size_bytes=getattr(memory, "generated_code_size_in_bytes", None),
                        temp_bytes=getattr(memory, "temp_size_in_bytes", None))
        except Exception as exc:  # noqa: BLE001
            report.send(event="stage", stage=stage_name, state="failed", target=generation,
                        seconds=time.perf_counter() - t0, text=_error_text(exc))
            return

    jitted = jax.jit(fn, static_argnums=static)
    for index, described in enumerate(job["inputs"]):
        report.send(event="stage", stage="run", state="start", seed_index=index)
        t0 = time.perf_counter()
        inputs = read_inputs(described, workdir)
        try:
            if job["interpret"]:
                params = pltpu.InterpretParams(uninitialized_memory="nan", detect_races=True, random_seed=job["shuffle_seeds"][index])
                out = targets.interpret_on_cpu(fn, inputs, static, chip, params)
            else:
                out = jax.block_until_ready(jitted(*inputs))
            leaves = jax.tree_util.tree_leaves(out)
            path = workdir / f"output_{index}.npy"
            first = np.asarray(leaves[0]) if leaves else np.zeros(())
            # float32 carries every candidate dtype we compare (bf16 exactly); the dtype travels beside it.
            np.save(path, first.astype(np.float32) if jax.numpy.issubdtype(first.dtype, jax.numpy.floating) else first)
        except Exception as exc:  # noqa: BLE001
            report.send(event="stage", stage="run", state="failed", seed_index=index, seconds=time.perf_counter() - t0,
                        text=_error_text(exc))
            return
        report.send(event="stage", stage="run", state="done", seed_index=index, seconds=time.perf_counter() - t0,
                    output={"path": path.name, "shape": list(first.shape), "dtype": str(first.dtype), "leaves": len(leaves)})


def profile_job(job: dict, report: Reporter, workdir: Path) -> None:
    """Load, trace and compile the candidate for each target, keeping libtpu's schedule dumps."""
    import jax

    from jaxbench_mcp import kernel_analysis, profiling, targets, workloads

    w = workloads.get_workload(job["workload_id"])
    static = tuple(w.static_argnums)
    module, failure = load_candidate(workdir / "candidate.py")
    if failure:
        report.send(event="stage", stage="load", state="failed", error_class=failure[0], text=failure[1])
        return
    report.send(event="stage", stage="trace", state="start")
    with targets.chip_context(job["targets"][0]):
        closed = jax.make_jaxpr(module.workload, static_argnums=static)(*_full_args(w, "full"))
    report.send(event="stage", stage="trace", state="done", traffic=kernel_analysis.kernel_traffic(closed.jaxpr))
    try:
        outside = kernel_analysis.outside_kernels(closed)
    except Exception:  # noqa: BLE001 -- the kernels' estimate stands; the work around them is reported as not estimated
        outside = None
    dump_root = Path(job["dump_dir"])
    for generation in job["targets"]:
        report.send(event="stage", stage="compile", state="start", target=generation)
        t0 = time.perf_counter()
        try:
            targets.deviceless_compile(module.workload, _full_args(w, "full"), generation, static)
        except Exception as exc:  # noqa: BLE001
            report.send(event="stage", stage="compile", state="failed", target=generation, text=_error_text(exc))
            continue
        schedules = profiling.parse_dump(profiling.collect_dump(dump_root, generation))
        report.send(event="stage", stage="compile", state="done", target=generation, seconds=time.perf_counter() - t0,
                    schedules=[{"name": k.name, "bundles": k.bundles, "slot_use": k.slot_use} for k in schedules],
                    outside=_outside_cost(outside, w, generation))


def _outside_cost(outside, w, generation: str) -> dict | None:
    """XLA's cost analysis of the work around the Pallas kernels (kernel_analysis.outside_kernels)."""
    import jax

    from jaxbench_mcp import targets

    if outside is None:
        return None
    fn, kernel_outputs = outside
    args = [a for i, a in enumerate(_full_args(w, "full")) if i not in w.static_argnums] + kernel_outputs
    if not jax.eval_shape(fn, *args):
        return {"xla_flops": 0.0, "xla_bytes": 0.0, "xla_optimal_seconds": 0.0}
    try:
        cost = targets.deviceless_compile(fn, args, generation, kernel_facts=False).cost_analysis() or {}
    except Exception:  # noqa: BLE001 -- the kernels' estimate stands; the outside work is reported as not estimated
        return None
    return {"xla_flops": float(cost.get("flops", 0.0)), "xla_bytes": float(cost.get("bytes accessed", 0.0)),
            "xla_optimal_seconds": cost.get("optimal_seconds")}


def measure_job(job: dict, report: Reporter, workdir: Path) -> None:
    """TPU host: device time of a kernel file (or, with no source, the XLA baseline) on fresh full-size inputs."""
    from jaxbench_mcp import measuring, workloads

    w = workloads.get_workload(job["workload_id"])
    fn = w.module.reference
    if (workdir / "candidate.py").exists():
        module, failure = load_candidate(workdir / "candidate.py")
        if failure:
            report.send(event="stage", stage="load", state="failed", error_class=failure[0], text=failure[1])
            return
        fn = module.workload
    report.send(event="stage", stage="measure", state="start")
    t0 = time.perf_counter()
    try:
        timing = measuring.time_on_device(fn, w.static_argnums, lambda i: w.create_inputs("full", job["first_seed"] + i),
                                          job["iterations"])
    except measuring.MeasurementError as exc:
        report.send(event="stage", stage="measure", state="failed", seconds=time.perf_counter() - t0, text=str(exc))
        return
    except Exception as exc:  # noqa: BLE001
        report.send(event="stage", stage="measure", state="failed", seconds=time.perf_counter() - t0, text=_error_text(exc))
        return
    report.send(event="stage", stage="measure", state="done", seconds=time.perf_counter() - t0,
                samples_us=list(timing.samples_us))


def reference_job(job: dict, report: Reporter) -> None:
    """Trusted work: the bundle calibration per target, and XLA's cost analysis of the baseline."""
    from jaxbench_mcp import profiling, targets, workloads

    w = workloads.get_workload(job["workload_id"])
    dump_root = Path(job["dump_dir"])
    for generation in job["targets"]:
        report.send(event="stage", stage="compile", state="start", target=generation)
        fn, args = profiling.calibration_kernel()
        targets.deviceless_compile(fn, args, generation)
        calibration = profiling.parse_dump(profiling.collect_dump(dump_root, f"calibration-{generation}"))
        compiled = targets.deviceless_compile(w.module.reference, _full_args(w, "full"), generation, w.static_argnums)
        cost = compiled.cost_analysis() or {}
        report.send(event="reference", target=generation, calibration_bundles=calibration[0].bundles if calibration else None,
                    xla_flops=float(cost.get("flops", 0.0)), xla_bytes=float(cost.get("bytes accessed", 0.0)),
                    xla_optimal_seconds=cost.get("optimal_seconds"))


def main() -> None:
    event_fd, generation = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None)
    report = Reporter(event_fd)
    _limit_files(int(os.environ.get("JAXBENCH_WORKER_MAX_FILE_BYTES", str(512 * 2**20))))
    warm_up(generation)
    report.send(event="ready", pid=os.getpid())
    line = sys.stdin.readline()
    if not line:
        return
    job = json.loads(line)
    workdir = Path.cwd()
    mode = job.get("mode", "check")
    if mode == "reference":
        reference_job(job, report)
    else:
        if job.get("source") is not None:  # a measure job without source times the XLA baseline
            (workdir / "candidate.py").write_text(job.pop("source"))
        {"profile": profile_job, "measure": measure_job, "check": run_job}[mode](job, report, workdir)
    report.send(event="finished")


if __name__ == "__main__":
    main()
