"""Measured device time on a TPU host, read from a jax profiler trace.

The host's wall clock includes dispatch and Python; the TPU's own trace does not. A jitted program's
executions appear on each TPU device plane ("/device:TPU:<n>") as events on the "XLA Modules" line,
named after the HLO module ("jit_<function name>", possibly followed by "(<program id>)"). We run the
kernel under a uniquely named wrapper and keep only that module's events, so input generation and
anything else in the trace do not count.
"""

from __future__ import annotations

import re
import statistics
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jax

DEVICE_PLANE_PREFIX = "/device:TPU:"
MODULE_LINE = "XLA Modules"
TIMED_FUNCTION = "jaxbench_timed"
WARMUP_RUNS = 2
DEFAULT_ITERATIONS = 20


class MeasurementError(RuntimeError):
    pass


@dataclass(frozen=True)
class Samples:
    """Device times of the timed runs, in microseconds."""

    samples_us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    @property
    def min_us(self) -> float:
        return min(self.samples_us)

    @property
    def spread_pct(self) -> float:
        """(max - min) / median: how much the runs disagree."""
        return 100.0 * (max(self.samples_us) - self.min_us) / self.median_us


def module_durations_us(planes: Iterable, module_name: str) -> list[float]:
    """Durations of `module_name`'s executions on the TPU device planes of a ProfileData, in trace order.

    `planes` are jax.profiler.ProfilePlane-like: .name, .lines; a line has .name and .events; an event
    has .name, .start_ns and .duration_ns.
    """
    pattern = re.compile(re.escape(module_name) + r"(\(.*\))?$")
    found = []
    for plane in planes:
        if not plane.name.startswith(DEVICE_PLANE_PREFIX):
            continue
        for line in plane.lines:
            if line.name != MODULE_LINE:
                continue
            found += [(e.start_ns, e.duration_ns / 1e3) for e in line.events if pattern.match(e.name)]
    return [duration for _, duration in sorted(found)]


def traced_durations_us(run: Callable[[], None], module_name: str) -> tuple[list[float], list[str]]:
    """Run `run()` under the jax profiler; the device durations of `module_name`, and the trace's plane names."""
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python frames would swamp the trace and slow the timed loop
    with tempfile.TemporaryDirectory(prefix="jaxbench-trace-") as trace_dir:
        jax.profiler.start_trace(trace_dir, profiler_options=options)
        try:
            run()
        finally:
            jax.profiler.stop_trace()
        traces = list(Path(trace_dir).glob("**/*.xplane.pb"))
        if len(traces) != 1:
            raise MeasurementError(f"expected one profiler trace, found {len(traces)}")
        planes = list(jax.profiler.ProfileData.from_file(str(traces[0])).planes)
        return module_durations_us(planes, module_name), [p.name for p in planes]


def time_on_device(
    fn: Callable,
    static_argnums: Sequence[int],
    inputs_for: Callable[[int], tuple],
    iterations: int = DEFAULT_ITERATIONS,
) -> Samples:
    """Device time of `fn` over `iterations` runs, each on fresh inputs (`inputs_for(i)`), after warm-up.

    Fresh inputs keep a kernel from being timed on data that an earlier run left in a cache. The warm-up
    runs use inputs_for(iterations), inputs_for(iterations + 1), ...
    """
    if jax.default_backend() != "tpu":
        raise MeasurementError(f"device time needs a TPU backend; this process runs on {jax.default_backend()}")

    def jaxbench_timed(*args):
        return fn(*args)

    timed = jax.jit(jaxbench_timed, static_argnums=tuple(static_argnums))
    for i in range(WARMUP_RUNS):
        jax.block_until_ready(timed(*inputs_for(iterations + i)))

    def run() -> None:
        for i in range(iterations):
            args = jax.block_until_ready(inputs_for(i))
            jax.block_until_ready(timed(*args))
            del args

    samples, planes = traced_durations_us(run, f"jit_{TIMED_FUNCTION}")
    if len(samples) != iterations:
        raise MeasurementError(
            f"the trace holds {len(samples)} device executions of the kernel, expected {iterations} "
            f"(planes: {', '.join(sorted(set(planes)))})"
        )
    return Samples(tuple(samples))
