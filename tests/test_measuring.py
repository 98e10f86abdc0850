"""Measured device time (TPU host): trace parsing, statistics, what the timed runs run (the recorded program that the
check judged, never the candidate's file), and an honest refusal everywhere else."""

from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jaxbench_mcp.catalog import workloads
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.internals import jaxpr_codec
from jaxbench_mcp.perf import measuring, profiling
from jaxbench_mcp.requests import CheckRequest
from jaxbench_mcp.sandbox import protocol, worker
from jaxbench_mcp.taxonomy import Stage

KERNELS = Path(__file__).parent / "kernels"
# Pallas for every call but the timed runs', which get a fast wrong answer: it finds them on its stack.
GAMES_THE_TIMED_RUNS = Path(__file__).parent / "hostile" / "game_timed_runs.py"


@dataclass
class Event:
    name: str
    start_ns: float
    duration_ns: float


@dataclass
class Line:
    name: str
    events: list[Event] = field(default_factory=list)


@dataclass
class Plane:
    name: str
    lines: list[Line] = field(default_factory=list)


def test_only_the_timed_module_on_tpu_device_module_lines_counts():
    planes = [
        Plane("/host:CPU", [Line("XLA Modules", [Event("jit_jaxbench_timed", 0, 9e9)])]),
        Plane(
            "/device:TPU:0",
            [
                Line("XLA Ops", [Event("jit_jaxbench_timed", 0, 8e9), Event("fusion.1", 5, 1e3)]),
                Line(
                    "XLA Modules",
                    [
                        Event("jit_jaxbench_timed(771)", 300, 3_000),
                        Event("jit__create_inputs(12)", 100, 50_000),
                        Event("jit_jaxbench_timed", 200, 2_000),
                        Event("jit_jaxbench_timed_twin(5)", 250, 7_000),
                    ],
                ),
            ],
        ),
    ]
    # In start order, in microseconds; the other module, the ops line and the host plane are ignored.
    assert measuring.module_durations_us(planes, "jit_jaxbench_timed") == [2.0, 3.0]


def test_timing_statistics():
    timing = measuring.Samples((10.0, 12.0, 11.0, 30.0))
    assert timing.median_us == 11.5 and timing.min_us == 10.0
    assert timing.spread_pct == pytest.approx(100 * 20 / 11.5)


@pytest.mark.slow
def test_a_real_cpu_trace_is_read_but_holds_no_tpu_device_time():
    f = jax.jit(lambda x: jnp.tanh(x @ x))
    x = jnp.ones((64, 64))
    jax.block_until_ready(f(x))
    durations, planes = measuring.traced_durations_us(lambda: jax.block_until_ready(f(x)), "jit_<lambda>")
    assert durations == [] and "/host:CPU" in planes


def test_time_on_device_refuses_a_non_tpu_backend():
    with pytest.raises(measuring.MeasurementError, match="needs a TPU backend; this process runs on cpu"):
        measuring.time_on_device(lambda x: x, (), lambda i: (jnp.ones(4),), iterations=2)


@pytest.mark.slow
def test_a_measure_job_on_this_host_says_why_it_has_no_device_time():
    # The whole path (worker process, measure mode, event) on a cheap full-size workload.
    checker = Checker(spares=0, slots=1)
    profiler = profiling.Profiler(checker)
    try:
        result = profiler.measure_source("12p", None, None, iterations=2)
    finally:
        checker.close()
    assert result == "not measured: device time needs a TPU backend; this process runs on cpu"


class _Collected(worker.Reporter):
    """A Reporter that keeps its events instead of writing them to the parent's pipe."""

    def __init__(self) -> None:
        self.events: list = []

    def send(self, event) -> None:
        self.events.append(event)


def test_the_timed_runs_replay_the_recorded_program_and_never_call_the_candidate(tmp_path, monkeypatch):
    import importlib.util

    w = workloads.get_workload("12p_RMSNorm")
    spec = importlib.util.spec_from_file_location("gamer", GAMES_THE_TIMED_RUNS)
    gamer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gamer)
    # What the trace job records (no timed run on the stack): the Pallas kernel.
    recorded = jax.make_jaxpr(gamer.workload)(*workloads.abstract_inputs(w, "full"))
    (tmp_path / "program_full.json").write_bytes(jaxpr_codec.encode(recorded))
    timed = {}

    def time_on_device(fn, static_argnums, inputs_for, iterations):
        # Called where the real timer is: the gamer would see measure_job and time_on_device on the stack here.
        timed["program"] = jax.make_jaxpr(fn, static_argnums=tuple(static_argnums))(
            *workloads.abstract_inputs(w, "full")
        )
        timed["inputs_for"] = inputs_for
        return measuring.Samples((5.0,) * iterations)

    monkeypatch.setattr(measuring, "time_on_device", time_on_device)
    job = protocol.MeasureJob(
        workload_id=w.id,
        targets=["v6e"],
        programs=[protocol.ProgramFile(size="full", file="program_full.json")],
        first_seed=1_000,
        iterations=3,
    )
    report = _Collected()
    worker.measure_job(job, report, tmp_path)

    assert "pallas_call" in str(timed["program"]) and str(timed["program"]) == str(recorded)

    # Had the file been called there (the old measure job called it from a function of this name), it would have
    # known, and the timed program would have been its fast wrong branch.
    def measure_job():
        return gamer._being_timed()

    assert measure_job() and not gamer._being_timed()
    # The parent gets the module it compares with the checked one, and the events a measure job may send.
    log = protocol.EventLog(job)
    for stage, state in ((Stage.LOAD, "start"), (Stage.LOAD, "done"), (Stage.TRACE, "start")):  # the trace job's
        log.accept(protocol.StageEvent(stage=stage, state=state))
    for event in report.events:
        log.accept(event)
    ended = [(e.stage, e.state) for e in log.ended()]
    assert ended == [(Stage.LOAD, "done"), (Stage.TRACE, "done"), (Stage.LOWER, "done"), (Stage.MEASURE, "done")]
    lowered = next(e.lowered for e in report.events if getattr(e, "lowered", None) is not None)
    assert "tpu_custom_call" in (tmp_path / lowered.module_file).read_text()


@pytest.mark.slow
def test_a_candidate_is_timed_only_as_the_program_its_check_judged():
    # The whole path: a check, then the timed runs' own trace and lowering, compared with the check's digest. This
    # host has no TPU, so a program that matches goes on to the timer, which says so.
    source = GAMES_THE_TIMED_RUNS.read_text()
    checker = Checker(spares=0, slots=1)
    profiler = profiling.Profiler(checker)
    try:
        verdict, outcome = checker.check(CheckRequest.of("12p_RMSNorm", source, targets=["v6e"]))
        outcome.cleanup()
        assert verdict.status == "correct"
        matched = profiler.measure_source("12p_RMSNorm", source, "v6e", verdict.program_sha256["v6e"], iterations=2)
        other = profiler.measure_source("12p_RMSNorm", source, "v6e", "0" * 64, iterations=2)
    finally:
        checker.close()
    assert matched == "not measured: device time needs a TPU backend; this process runs on cpu"
    assert other.startswith("not measured: the program traced for the timed runs is not the one the check judged")
