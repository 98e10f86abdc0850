"""Static estimates of every expert reference, next to XLA's own estimate and the roofline, side by side.

A sanity sweep of the estimate over real kernels: an expert kernel estimated below its memory bound (the time
its workload's inputs and outputs take to move once; flagged) or far above XLA would point at a gap in the model.
Ratios are to the roofline bound of the workload at full size, all measured in this one run for one generation.
Usage: python benchmarks/expert_estimates.py [--target v6e]
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from jaxbench_mcp.catalog import expert_refs, workloads  # noqa: E402
from jaxbench_mcp.checking.checker import Checker  # noqa: E402
from jaxbench_mcp.perf import cost_model, profiling  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="v6e")
    g = parser.parse_args().target
    checker = Checker(spares=0, slots=1)
    profiler = profiling.Profiler(checker)
    print(f"{'workload':<28} {'roofline':>10} {'XLA est.':>9} {'expert est.':>12}  {'run':>5}  bottleneck / flags")
    for w in workloads.all_workloads():
        module = expert_refs.expert_module(w.id)
        if module is None:
            continue
        roof = cost_model.workload_roofline_us(w, g)
        ref = profiler.reference_estimates(w.id, [g])[g]
        if not ref.get("calibration_bundles"):
            print(f"{w.id:<28} {roof:>8,.0f}us  no reference estimate")
            continue
        if ref.get("xla_error"):
            print(f"{w.id:<28} {roof:>8,.0f}us  XLA's baseline does not compile: {ref['xla_error']}"[:200])
            continue
        xla = cost_model.xla_baseline_s(ref, g) * 1e6
        spb = {g: cost_model.seconds_per_bundle(g, ref["calibration_bundles"])}
        estimate = profiler.estimate_source(w.id, Path(module.__file__).read_text(), [g], spb)[g]
        if isinstance(estimate, str) or not estimate.kernels:
            print(f"{w.id:<28} {roof:>8,.0f}us {xla / roof:>8.2f}x  {estimate or 'no kernel schedule'}"[:200])
            continue
        us, kernels = estimate.total_us, estimate.kernels
        main_kernel = max(kernels, key=lambda k: k.estimate_us)
        outside = (
            f"XLA outside kernels {estimate.outside_us / us:.0%}"
            if estimate.outside_us is not None
            else "XLA outside kernels not estimated"
        )
        notes = (
            [main_kernel.bottleneck, outside]
            + (["below memory bound"] if us < cost_model.workload_memory_bound_us(w, g) else [])
            + (["dynamic grid"] if not all(k.grid_steps_exact for k in kernels) else [])
            + (["HBM approx."] if not all(k.hbm_bytes_exact for k in kernels) else [])
            + (["run ratio approx."] if not all(k.run_ratio_exact for k in kernels) else [])
        )
        print(
            f"{w.id:<28} {roof:>8,.0f}us {xla / roof:>8.2f}x {us / roof:>11.2f}x  "
            f"{main_kernel.run_ratio:>5.2f}  {', '.join(notes)}"
        )


if __name__ == "__main__":
    main()
