"""Ragged paged attention under serving scenarios other than the workload's own: estimate against device time.

7p's full size is one fixed scenario, and what its kernels may skip depends on the query and KV lengths. This
script times jax's ragged paged attention kernel (the 7p expert) and our 7p solution under a few more scenarios
on an attached TPU with the product's own timer (--measure, which writes a JSON record such as
benchmarks/data/ragged_scenarios_v5e.json), and, on a CPU host with libtpu, estimates the same calls for that
record's generation and prints estimate / measured per scenario and kernel, beside the same ratio with every grid
step replayed at once (analysis/replay's in-order replay of the scalar state a kernel carries from step to step
turned off). The lengths are concrete in the estimate, as in a profile: the kernels' loops and DMAs follow them.

Measured (benchmarks/data/ragged_scenarios_v5e.json: one v5e, jax 0.10.2; estimates with jax 0.12.0.1 and
libtpu 0.0.50.1), over the eleven scenarios: the expert's estimate / measured is 1.01-1.04 (0.38-8.23 with every
grid step replayed at once), our solution's 0.96-1.20 (rerun 2026-12-07; 0.88-1.13 when first written: the
estimator's later changes moved the short decodes up, 8 sequences 1.20, 16 1.14), and in every scenario the
estimate orders the two kernels as the chip does (32 short sequences, measured 15% apart, were the wrong way round
until a BlockSpec's copies were counted in the steps they run beside: kernel_analysis.copies_in_flight).
The decodes tell the costs apart: the expert takes about 211 us whatever the batch (8 to 64 sequences of 257-341 to
4096 keys) plus 15 us per sequence and 1,024 keys; the 211 us are its 63 grid steps that only read query blocks and
write output blocks (128 MiB), while all the sequences sit in the first query block's step. Priced as max(compute,
memory) over the whole grid, that step's compute hid them: 0.64-1.04 (0.75 on 8 short sequences, 0.87 on 64), until
steps were grouped by their mix of work and bytes (kernel_analysis.step_mix). Our solution's grid of 1,544 steps
mostly skips (blocks past a sequence's end, items of inactive rows): 0.73-1.28 while every step paid a DMA wait
(1.28 and 1.43 on 8 short sequences, before and with the grouping), 0.84-1.13 since a step that moves nothing costs
the grid loop alone (cost_model.IDLE_STEP_S), 0.88-1.13 with each copy in the step it runs beside.

Usage: python benchmarks/ragged_scenarios.py --measure [--iterations 10] [--out FILE]   (TPU host)
       python benchmarks/ragged_scenarios.py [--record FILE]                            (CPU host with libtpu)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import device_record  # noqa: E402  (benchmarks/, beside this script)

WORKLOAD = "7p_Ragged_Paged_Attention"
CONTROL = (2, 3, 4, 5)  # kv_lens, page_indices, cu_q_lens, num_seqs: small, concrete in the estimate
FIRST_SEED = 6_000
# Query and KV lengths per active sequence (at most 64 sequences, 4096 tokens, 4096 KV positions each).
SCENARIOS = {
    "workload": None,  # the workload's own full size
    "long_decode": ((1,) * 64, (4096,) * 64),
    "short_decode": ((1,) * 64, tuple(257 + 12 * i for i in range(64))),
    "prefill": ((512,) * 8, (512, 1024, 1536, 2048, 2560, 3072, 3584, 4096)),
    # Decodes that tell a cost per sequence from a cost per KV token: fewer sequences of the short lengths, and 64
    # sequences all of one length.
    "decode_8_short": ((1,) * 8, tuple(257 + 12 * i for i in range(8))),
    "decode_16_short": ((1,) * 16, tuple(257 + 12 * i for i in range(16))),
    "decode_32_short": ((1,) * 32, tuple(257 + 12 * i for i in range(32))),
    "decode_64x256": ((1,) * 64, (256,) * 64),
    "decode_64x1024": ((1,) * 64, (1024,) * 64),
    "decode_64x2048": ((1,) * 64, (2048,) * 64),
    "decode_8x4096": ((1,) * 8, (4096,) * 8),
}


def _params(w, scenario: str) -> dict:
    params = dict(w.size_params("full"))
    lengths = SCENARIOS[scenario]
    if lengths is not None:
        q_lens, kv_lens = lengths
        params.update(ACTIVE_Q_LENS=q_lens, ACTIVE_KV_LENS=kv_lens, NUM_ACTIVE_SEQS=len(q_lens))
    return params


def _kernels(w) -> dict:
    from jaxbench_mcp.catalog import expert_refs

    path = ROOT / "solutions" / f"{WORKLOAD}.py"
    spec = importlib.util.spec_from_file_location("ragged_solution", path)
    assert spec is not None and spec.loader is not None
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    return {"solution": solution.workload, "expert": expert_refs.expert_module(w.id).workload}


def measure(out: Path, iterations: int) -> None:
    import jax

    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.perf import measuring

    if jax.default_backend() != "tpu":
        sys.exit(f"--measure needs an attached TPU; this process runs on {jax.default_backend()}")
    w = workloads.get_workload(WORKLOAD)
    record = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "scenarios": {}}
    for scenario in SCENARIOS:
        params = _params(w, scenario)
        times = {}
        for name, fn in _kernels(w).items():
            samples = measuring.time_on_device(
                fn, (), lambda i, p=params: w.module.create_inputs(seed=FIRST_SEED + i, **p), iterations
            )
            times[name] = samples.median_us
        record["scenarios"][scenario] = times
        print(scenario, {k: round(v, 1) for k, v in times.items()}, flush=True)
        out.write_text(json.dumps(record, indent=1))


def estimate(record_path: Path) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np

    from jaxbench_mcp.analysis import replay as kernel_replay
    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.perf import estimator

    record, generation = device_record.read(record_path)
    w = workloads.get_workload(WORKLOAD)
    print(
        f"{'scenario':<14} {'kernel':<9} {'measured us':>12} {'estimate us':>12} {'est/meas':>9}   "
        "est/meas with every grid step replayed at once"
    )
    for scenario, measured in record["scenarios"].items():
        params = _params(w, scenario)
        abstract = workloads.abstract_inputs(w, "full")
        with jax.default_device(jax.devices("cpu")[0]):
            values = jax.jit(lambda key, p=params: [w.module.create_inputs(seed=key, **p)[i] for i in CONTROL])(
                np.uint32(FIRST_SEED)
            )
        args = list(abstract)
        for i, value in zip(CONTROL, values, strict=True):
            args[i] = np.asarray(value)
        for name, fn in _kernels(w).items():
            found = estimator.estimate(fn, *args, target=generation)
            # The same estimate without following the kernel's step-to-step state in grid order (before it was).
            in_order, kernel_replay.IN_ORDER_STEPS = kernel_replay.IN_ORDER_STEPS, 0
            try:
                at_once = estimator.estimate(fn, *args, target=generation)
            finally:
                kernel_replay.IN_ORDER_STEPS = in_order
            print(
                f"{scenario:<14} {name:<9} {measured[name]:>12,.1f} {found.total_us:>12,.1f} "
                f"{found.total_us / measured[name]:>9.2f}   {at_once.total_us / measured[name]:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="time the scenarios on the attached TPU")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "ragged_scenarios.json"))
    parser.add_argument("--record", default=str(ROOT / "benchmarks" / "data" / "ragged_scenarios_v5e.json"))
    args = parser.parse_args()
    if args.measure:
        measure(Path(args.out), args.iterations)
    else:
        estimate(Path(args.record))


if __name__ == "__main__":
    main()
