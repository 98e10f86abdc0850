"""XLA ops over arrays whose minor dimension is narrower than 128 lanes: device time against the estimate.

XLA:TPU stores an array in HBM in tiles (its layout's T(8,128)): the minor dimension is padded to 128, so an
array 62 lanes wide takes and moves the bytes of one 128 wide. internals/hlo prices the XLA work around the
kernels at those stored bytes. This script times, on an attached TPU (--measure, which writes a JSON record such as
benchmarks/data/tiled_bytes_v5e.json), a scale (x * 2) and a transpose of the leading axes of bf16
(16, 64, 30, 62, n) arrays for n = 62, 64, 128 and 256; on a CPU host with libtpu it compiles the same programs
for the record's generation and prints, per case, the measured time beside the estimate with the stored bytes
(hlo.outside_ops, cost_model.outside_seconds) and beside the same estimate with the logical bytes.

Measured (benchmarks/data/tiled_bytes_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1 and libtpu
0.0.50.1, v5e's raw model): n = 62, 64 and 128 take the same time (2.09-2.17 ms), n = 256 1.7x it. Estimate /
measured with the stored bytes is 0.55-0.56 for n up to 128 and 0.66 for 256, against 0.27-0.28 for n = 62 and 64
with the logical bytes: the stored bytes order and scale the cases as the chip does. The level itself is low: XLA's
passes over these 5-D arrays reach 55-66% of v5e's HBM bandwidth, where the raw model assumes all of it (no
tokamax measurement fits v5e's HBM efficiency; the corpus's candidates that leave such passes to XLA are at
0.75-0.88x in benchmarks/measured_fidelity.py).

Usage: python benchmarks/tiled_bytes.py --measure [--out FILE]   (TPU host)
       python benchmarks/tiled_bytes.py [--record FILE]          (CPU host with libtpu)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

MINORS = (62, 64, 128, 256)
SHAPE = (16, 64, 30, 62)  # then the minor dimension


def _cases():
    return {
        "scale": lambda a: a * 2,
        "transpose": lambda a: a.transpose(0, 2, 1, 3, 4),
    }


def measure(out: Path, iterations: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    record = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "times_us": {}}
    for minor in MINORS:
        x = jax.random.normal(jax.random.PRNGKey(0), (*SHAPE, minor), jnp.bfloat16)
        for name, fn in _cases().items():
            compiled = jax.jit(fn)
            jax.block_until_ready(compiled(x))
            times = []
            for _ in range(iterations):
                t0 = time.perf_counter()
                jax.block_until_ready(compiled(x))
                times.append(time.perf_counter() - t0)
            record["times_us"][f"{name}/{minor}"] = float(np.median(times)) * 1e6
    out.write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


def estimate(record_path: Path) -> None:
    import jax
    import jax.numpy as jnp

    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.internals import hlo
    from jaxbench_mcp.perf import cost_model

    record, generation = device_record.read(record_path)
    mxu = targets.chip_facts(generation).mxu_size
    calibration = cost_model.calibration_for(generation)  # as a profile prices XLA's work
    print(f"{'case':<16} {'measured us':>11} {'stored bytes: est/meas':>23} {'logical bytes: est/meas':>24}")
    for minor in MINORS:
        x = jax.ShapeDtypeStruct((*SHAPE, minor), jnp.bfloat16)
        for name, fn in _cases().items():
            text = targets.deviceless_compile(fn, [x], generation, ()).as_text()
            ops, _ = hlo.outside_ops(text, mxu)
            stored = sum(cost_model.outside_seconds(ops, generation, calibration)) * 1e6
            # The same work with the bytes of the logical shape: one read and one write of the array.
            bandwidth = targets.chip_facts(generation).hbm_bytes_per_second * calibration.hbm_efficiency
            logical = 2 * x.size * 2 / bandwidth * 1e6 + calibration.xla_op_overhead_s * 1e6
            measured = record["times_us"][f"{name}/{minor}"]
            case = f"{name}/{minor}"
            print(f"{case:<16} {measured:>11,.0f} {stored / measured:>23.2f} {logical / measured:>24.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="time the cases on the attached TPU")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "tiled_bytes_v5e.json")
    parser.add_argument("--record", type=Path, default=ROOT / "benchmarks" / "data" / "tiled_bytes_v5e.json")
    args = parser.parse_args()
    if args.measure:
        measure(args.out, args.iterations)
    else:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        estimate(args.record)


if __name__ == "__main__":
    main()
