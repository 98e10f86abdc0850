"""Does the static estimate mean something? Rank variants whose order TPU practice predicts.

1. 8p_GEMM at full size with our tiled GEMM kernel (tests/kernels/good_gemm_tiled.py) at several block
   sizes: tiny blocks should be slowest (grid-step overhead, re-fetches), blocks that overflow VMEM
   should be impossible, large aligned blocks should come near the roofline.
2. 1p_Flash_Attention: JAX's flash attention against a naive Pallas attention that materialises a full
   row block of the score matrix per step (benchmarks/kernels/naive_attention.py). Flash attention skips
   the blocks above the causal diagonal with pl.when; the estimate charges only the branches each grid
   step takes (the "run" column: code a step runs / code in the schedule, averaged over the grid).
All numbers are labelled estimates from deviceless compiles for one generation; they are printed as
ratios to the roofline bound, measured side by side in this run.
Usage: python benchmarks/estimate_ranking.py [--target v6e]
"""

import argparse
import os
import re
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from jaxbench_mcp.catalog import workloads  # noqa: E402
from jaxbench_mcp.checking.checker import Checker  # noqa: E402
from jaxbench_mcp.perf import cost_model, profiling  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GEMM_BLOCKS = [
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (512, 1024, 1024),
    (1024, 2048, 1024),
    (2048, 4096, 2048),
    (4096, 4096, 4096),
]


def gemm_source(bm: int, bn: int, bk: int) -> str:
    source = (ROOT / "tests/kernels/good_gemm_tiled.py").read_text()
    for name, value in (("BM", bm), ("BN", bn), ("BK", bk)):
        source = re.sub(rf"^{name} = \d+$", f"{name} = {value}", source, flags=re.M)
    return source


def estimate(profiler, workload_id, source, target, spb):
    result = profiler.estimate_source(workload_id, source, [target], spb)[target]
    if isinstance(result, str):
        return None, result
    return result.total_us, max(result.kernels, key=lambda k: k.estimate_us).bottleneck


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="v6e")
    args = parser.parse_args()
    checker = Checker(spares=0, slots=1)
    profiler = profiling.Profiler(checker)
    g = args.target

    refs = profiler.reference_estimates("8p_GEMM", [g])
    spb = {g: cost_model.seconds_per_bundle(g, refs[g]["calibration_bundles"])}
    roof = cost_model.workload_roofline_us(workloads.get_workload("8p_GEMM"), g)
    xla = cost_model.xla_baseline_s(refs[g], g) * 1e6
    print(f"8p_GEMM on {g}: roofline {roof:,.0f} us; XLA's own estimate {xla:,.0f} us ({xla / roof:.2f}x roofline)")
    print(f"{'blocks (bm, bn, bk)':<22} {'estimate':>12} {'x roofline':>11}  bottleneck")
    for blocks in GEMM_BLOCKS:
        us, note = estimate(profiler, "8p_GEMM", gemm_source(*blocks), g, spb)
        if us is None:
            print(f"{str(blocks):<22} {'no estimate':>12} {'':>11}  {note[:110]}")
        else:
            print(f"{str(blocks):<22} {us:>10,.0f}us {us / roof:>10.2f}x  {note}")

    spb_1p = {
        g: cost_model.seconds_per_bundle(
            g, profiler.reference_estimates("1p_Flash_Attention", [g])[g]["calibration_bundles"]
        )
    }
    roof = cost_model.workload_roofline_us(workloads.get_workload("1p_Flash_Attention"), g)
    print(f"\n1p_Flash_Attention on {g}: roofline {roof:,.0f} us")
    for name, path in (
        ("JAX flash attention", ROOT / "tests/kernels/good_flash_attention_jax.py"),
        ("naive full-row attention", ROOT / "benchmarks/kernels/naive_attention.py"),
    ):
        result = profiler.estimate_source("1p_Flash_Attention", path.read_text(), [g], spb_1p)[g]
        if isinstance(result, str):
            print(f"{name:<26} no estimate: {result[:110]}")
            continue
        main = max(result.kernels, key=lambda k: k.estimate_us)
        print(
            f"{name:<26} {result.total_us:>10,.0f}us {result.total_us / roof:>6.2f}x roofline  "
            f"run {main.run_ratio:.2f}  {main.bottleneck}"
        )


if __name__ == "__main__":
    main()
