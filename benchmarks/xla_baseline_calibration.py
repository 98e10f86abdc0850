"""The denominators, side by side with public TPU measurements, in one run.

1. The XLA baseline estimate (cost_model.xla_baseline_s: XLA's cost analysis, never below the roofline of its own
   FLOPs at cost_model.XLA_MXU_EFFICIENCY of the MXUs' peak) against every public measurement of an XLA baseline
   we have: JAXBench's README, 8p_GEMM on a v6e (XLA 5.32 ms; its Pallas tutorial matmul 5.41 ms). Printed: the
   plain roofline, XLA's raw cost-analysis figure, our estimate, the measurement, and estimate / measured.
   XLA_MXU_EFFICIENCY is fit on this one point (so 8p's row is a fit, not a validation); the tutorial matmul's
   5.41 ms is shown beside our own tiled GEMM's estimate (blocks 512 x 1024 x 1024), a different kernel: context,
   not a fit. These are JAXBench's timings of XLA and its tutorial, not tokamax's: nothing of tokamax's held-out
   v6e data is read.
2. The share of the roofline that tuned TPU kernels reach: per op and generation, the median of roofline / measured
   over tokamax's problem specs, each at its fastest measured config (7x, v5p, v5e; v6e held out).
   cost_model.AIM_ROOFLINE_SHARE, what a profile tells an agent to aim for when XLA's baseline figure is
   implausible, is the median over those groups.

Usage: python benchmarks/xla_baseline_calibration.py [--no-compile] (skips the compiles of part 1)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# (workload, generation) -> (what was measured, milliseconds), from JAXBench's README.
PUBLIC_XLA = {("8p_GEMM", "v6e"): ("XLA baseline", 5.32)}
PUBLIC_PALLAS = {("8p_GEMM", "v6e"): ("JAXBench's Pallas tutorial matmul", 5.41)}


def xla_rows() -> None:
    import jaxbench_mcp.perf.estimator as estimator
    from jaxbench_mcp.catalog import targets, workloads
    from jaxbench_mcp.perf import cost_model

    print(f"{'workload':<10} {'gen':<4} {'roofline':>9} {'XLA raw':>9} {'estimate':>9} {'measured':>9} {'est/meas':>8}")
    pallas = {}
    for wid, g in PUBLIC_PALLAS:
        # First: estimate() must set libtpu's dump folder before anything else in this process compiles for a TPU.
        w = workloads.get_workload(wid)
        module = _load(ROOT / "tests" / "kernels" / "good_gemm_tiled.py")
        args = estimator.workload_args(w, "full")
        pallas[(wid, g)] = estimator.estimate(module.workload, *args, target=g, static_argnums=tuple(w.static_argnums))
    for (wid, g), (what, ms) in PUBLIC_XLA.items():
        w = workloads.get_workload(wid)
        args = estimator.workload_args(w, "full")
        compiled = targets.deviceless_compile(w.module.reference, args, g, w.static_argnums)
        cost = compiled.cost_analysis() or {}
        ref = {
            "xla_flops": float(cost.get("flops", 0.0)),
            "xla_bytes": float(cost.get("bytes accessed", 0.0)),
            "xla_optimal_seconds": cost.get("optimal_seconds"),
        }
        raw = max(ref["xla_optimal_seconds"] or 0.0, targets.roofline_seconds(ref["xla_flops"], ref["xla_bytes"], g)[0])
        ours = cost_model.xla_baseline_s(ref, g)
        roof = cost_model.workload_roofline_us(w, g)
        print(
            f"{wid:<10} {g:<4} {roof / 1e3:>7.2f}ms {raw * 1e3:>7.2f}ms {ours * 1e3:>7.2f}ms {ms:>7.2f}ms "
            f"{ours * 1e3 / ms:>7.2f}x  ({what}; raw/meas {raw * 1e3 / ms:.2f}x; fit point of XLA_MXU_EFFICIENCY)"
        )
        if (wid, g) in PUBLIC_PALLAS:
            what, ms = PUBLIC_PALLAS[(wid, g)]
            e = pallas[(wid, g)]
            print(
                f"{'':<10} {g:<4} our tiled GEMM (512x1024x1024) estimate {e.total_us / 1e3:.2f} ms beside {what} "
                f"{ms:.2f} ms: {e.total_us / 1e3 / ms:.2f}x (different kernels: context, not a fit)"
            )


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_shares() -> None:
    import estimate_fidelity as fidelity

    from jaxbench_mcp.perf import cost_model

    print(f"\n{'op':<18} {'gen':<4} {'specs':>7} {'median roofline/measured (fastest config)':>42}")
    medians = []
    for op in fidelity.OPS:
        for g in fidelity.CHIPS:
            fastest: dict[str, object] = {}  # per problem spec, its fastest measured config (the tuned kernel)
            for c in fidelity.load_configs(op, g):
                if c.spec_key not in fastest or c.measured_us < fastest[c.spec_key].measured_us:
                    fastest[c.spec_key] = c
            shares = []
            for c in fastest.values():
                try:
                    shares.append(fidelity.roofline_us(c) / c.measured_us)
                except Exception:  # noqa: BLE001 -- a spec we cannot rebuild is left out
                    continue
            if shares:
                medians.append(statistics.median(shares))
                print(f"{op:<18} {g:<4} {len(shares):>7} {100 * medians[-1]:>41.0f}%")
    print(
        f"median over the {len(medians)} groups: {100 * statistics.median(medians):.0f}% of the roofline "
        f"(cost_model.AIM_ROOFLINE_SHARE = {100 * cost_model.AIM_ROOFLINE_SHARE:.0f}%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-compile", action="store_true", help="only part 2 (no deviceless compiles)")
    args = parser.parse_args()
    if not args.no_compile:
        xla_rows()
    kernel_shares()


if __name__ == "__main__":
    main()
