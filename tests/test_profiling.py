"""profile_kernel: labelled static estimates next to the XLA baseline and the expert kernel."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from jaxbench_mcp import api, profiling
from jaxbench_mcp.checking import Checker
from jaxbench_mcp.store import Store

KERNELS = Path(__file__).parent / "kernels"
BOTTLENECKS = {"MXU-bound", "memory-bound", "grid-step-overhead-bound", "vector-unit-bound"}


def test_block_traffic_counts_a_fetch_per_index_change():
    # A (i, k) block over a (2, 3, 4) grid visited k-fastest: the index changes at every step but the j loop
    # revisits the same k sequence, so all 24 steps fetch.
    i, j, k = np.indices((2, 3, 4)).reshape(3, -1)
    assert profiling.block_traffic(np.stack([i, k], 1), 10) == 24 * 10
    # An (i, j) output block changes only when j or i does: 6 distinct consecutive blocks.
    assert profiling.block_traffic(np.stack([i, j], 1), 10) == 6 * 10


def test_estimate_terms_and_bottleneck():
    cost = profiling.kernel_cost(bundles=1000, steps=10, hbm_bytes=0, generation="v6e", spb=1e-9)
    assert cost.compute_s == 1e-5 and cost.estimate_s == 1e-5 + 10 * profiling.STEP_OVERHEAD_S
    assert profiling.bottleneck(cost, {"MXU": 0.7, "VALU": 0.2}) == "MXU-bound"
    assert profiling.bottleneck(cost, {"MXU": 0.1, "VALU": 0.9}) == "vector-unit-bound"
    tiny = profiling.kernel_cost(bundles=10, steps=10**6, hbm_bytes=1e6, generation="v6e", spb=1e-9)
    assert profiling.bottleneck(tiny, {}) == "grid-step-overhead-bound"


def test_a_failing_kernel_is_not_profiled(tmp_path):
    bench = api.JaxBench(store=Store(tmp_path / "a.sqlite3"), checker=Checker(spares=0, slots=1))
    try:
        result = bench.profile_kernel("8p_GEMM", (KERNELS / "bad_syntax.py").read_text(), "v6e")
    finally:
        bench.close()
    assert result.verdict.status == "invalid_kernel" and result.targets == []
    assert result.summary().startswith("NOT PROFILED")


def test_cli_profile_of_our_gemm_reports_estimate_baseline_expert_and_bottleneck(tmp_path):
    out = subprocess.run([sys.executable, "-m", "jaxbench_mcp.cli", "profile", "--workload", "8p_GEMM", "--kernel",
                          str(KERNELS / "good_gemm_tiled.py"), "--target", "v6e", "--json"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    profile = json.loads(out.stdout)
    assert profile["kind"] == "static estimate" and "ESTIMATE" in profile["label"]
    (v6e,) = profile["targets"]
    assert v6e["target"] == "v6e" and v6e["error"] is None
    assert v6e["candidate_us"] > 0 and v6e["xla_baseline_us"] > 0 and v6e["expert_us"] > 0
    assert v6e["bottleneck"] in BOTTLENECKS
    # No estimate may beat the roofline without being flagged.
    assert v6e["candidate_us"] >= v6e["roofline_us"] or v6e["flags"]
    (kernel,) = v6e["kernels"]
    assert kernel["bundles_per_step"] > 0 and kernel["grid_steps"] == (8192 // 512) * (28672 // 1024) * (8192 // 1024)
