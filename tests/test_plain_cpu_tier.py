"""The plain-CPU tier (no libtpu): lowering for TPU only, interpret-mode runs, roofline bounds only. It is forced
here with Checker(tier=Tier.CPU), which runs the same worker without a compile target, so it runs on any host."""

from pathlib import Path

import pytest

from jaxbench_mcp import api
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.store import Store

KERNELS = Path(__file__).parent / "kernels"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    bench = api.JaxBench(
        store=Store(tmp_path_factory.mktemp("cpu") / "attempts.sqlite3"),
        checker=Checker(tier=targets.Tier.CPU, spares=0, slots=1),
    )
    yield bench
    bench.close()


def test_a_check_lowers_for_tpu_and_runs_but_compiles_nothing(bench):
    verdict = bench.check_kernel("12p_RMSNorm", (KERNELS / "good_rmsnorm.py").read_text())
    assert verdict.status == "correct", verdict.summary()
    assert verdict.targets == [] and verdict.compiles == [] and verdict.tier == "cpu"
    lowered = [s for s in verdict.stages if s.stage == "lower"]
    assert lowered and lowered[0].produced_by.startswith("cpu: ") and "tpu" in verdict.program_sha256
    assert all(s.produced_by.startswith("cpu: TPU interpret mode") for s in verdict.stages if s.stage == "run")


def test_asking_for_a_generation_says_this_host_cannot_compile_for_it(bench):
    with pytest.raises(targets.UnknownTarget, match="no libtpu"):
        bench.check_kernel("12p_RMSNorm", (KERNELS / "good_rmsnorm.py").read_text(), ["v6e"])


def test_a_profile_is_the_roofline_bound_only(bench):
    profile = bench.profile_kernel("12p_RMSNorm", (KERNELS / "good_rmsnorm.py").read_text())
    assert profile.kind == "roofline only" and profile.verdict.status == "correct"
    assert {t.target for t in profile.targets} == set(targets.GENERATIONS)
    assert all(t.candidate_us is None and t.roofline_us > 0 for t in profile.targets)
    assert bench.server_info().compile_targets == []
