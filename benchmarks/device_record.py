"""A device record: named cases timed on the attached TPU into a JSON file, read back on a CPU host beside the
estimate for the record's generation. Shared by the benchmarks that measure small kernels of their own."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

# (name, function, arguments): abstract ones (jax.ShapeDtypeStruct) get random normal values, concrete ones (small
# integer inputs such as lengths and page tables) are used as they are, timed and estimated alike.
Case = tuple[str, Callable[..., Any], list[Any]]


def time_cases(cases: Iterable[Case], out: Path, iterations: int) -> None:
    """Time each case on random normal values of its abstract arguments and its concrete ones as given
    (perf/measuring's device time); write the record {device_kind, jax, times_us: {name: median}}."""
    import jax

    from jaxbench_mcp.perf import measuring

    record: dict[str, Any] = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "times_us": {}}
    for name, fn, abstract in cases:

        def inputs_for(i: int, abstract: list[Any] = abstract) -> tuple[Any, ...]:
            keys = jax.random.split(jax.random.PRNGKey(i), len(abstract))
            return tuple(
                jax.random.normal(k, a.shape, a.dtype) if isinstance(a, jax.ShapeDtypeStruct) else a
                for k, a in zip(keys, abstract, strict=True)
            )

        record["times_us"][name] = measuring.time_on_device(fn, (), inputs_for, iterations).median_us
        print(f"{name:<44} {record['times_us'][name]:9.1f} us", flush=True)
    out.write_text(json.dumps(record, indent=1))


def read(path: Path) -> tuple[dict[str, Any], str]:
    """The record and the generation it was measured on; prints which chip and jax measured it."""
    from jaxbench_mcp.catalog import targets

    record = json.loads(path.read_text())
    generation = targets.generation_of_device_kind(record["device_kind"])
    print(f"{path.name}: {record['device_kind']} ({generation}), measured under jax {record['jax']}")
    return record, generation


def estimated(cases: Iterable[Case], record: dict[str, Any], generation: str) -> Iterator[tuple[str, float, Any]]:
    """(name, measured us, the estimate for `generation`) of each case the record measured, in the cases' order; each
    case is one kernel (found.kernels[0])."""
    import jaxbench_mcp

    for name, fn, abstract in cases:
        measured = record["times_us"].get(name)
        if measured is not None:
            yield name, measured, jaxbench_mcp.estimate(fn, *abstract, target=generation)


def unsplit_us(kernel: Any, generation: str) -> float:
    """A kernel's estimate as priced before HBM reads and writes were told apart: every byte at the chip's peak, and
    every grid step's fixed cost (cost_model.STEP_OVERHEAD_S) added, whatever it writes."""
    from jaxbench_mcp.perf import cost_model

    # The raw calibration has no write efficiency of its own: every byte alike, at the peak.
    memory_us = cost_model.memory_seconds(kernel.hbm_bytes, kernel.hbm_written_bytes, generation) * 1e6
    overhead_us = kernel.grid_steps * cost_model.STEP_OVERHEAD_S * 1e6
    return max(kernel.compute_us, memory_us + overhead_us) + kernel.exposed_us


def main(doc: str, cases: Callable[[], Iterable[Case]], estimate: Callable[[Path], None], record: Path) -> None:
    """--measure times `cases` on the attached TPU into $OUT (or --out); otherwise `estimate` reads --record."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="time the cases on the attached TPU")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / record.name)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--record", type=Path, default=record)
    args = parser.parse_args()
    if args.measure:
        os.environ.setdefault("JAX_PLATFORMS", "tpu,cpu")
        time_cases(cases(), args.out, args.iterations)
    else:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        estimate(args.record)
