"""Measured device time (TPU host): trace parsing, statistics, and an honest refusal everywhere else."""

from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.perf import measuring, profiling

KERNELS = Path(__file__).parent / "kernels"


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
        result = profiler.measure_source("12p", None, iterations=2)
    finally:
        checker.close()
    assert result == "not measured: device time needs a TPU backend; this process runs on cpu"
