"""Campaigns: evaluate a run directory, resume it, cache it, report and compare it."""

import json
import math
import shutil
from pathlib import Path

import pytest

from jaxbench_mcp import api
from jaxbench_mcp.campaigns import campaign, report as campaign_report
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.store import Store

KERNELS = Path(__file__).parent / "kernels"


def _result(workload, status="correct", speedup=None, vs_expert=None, compiled=True, name=None):
    correct = status == "correct"
    return campaign.AttemptResult(
        attempt=name or f"{workload}.py",
        workload_id=workload,
        status=status,
        compiled=compiled,
        correctness=campaign.Correctness(correct=correct),
        timings=campaign.Timings(method="static estimate"),
        speedup_vs_baseline=speedup,
        speedup_vs_pallas=vs_expert,
        target="v6e",
        tier="cpu_libtpu",
        estimate_kind="static estimate",
        sha256="0",
    )


def test_metrics_follow_their_conventions_exactly():
    results = [
        _result("8p_GEMM", speedup=2.5, vs_expert=1.1, name="8p_GEMM/a.py"),
        _result("8p_GEMM", "incorrect", name="8p_GEMM/b.py"),  # a worse attempt at a solved workload
        _result("12p_RMSNorm", speedup=0.5),
        _result("1p_Flash_Attention", "compile_error", compiled=False),
        _result("13p_Cross_Entropy", speedup=1.1, vs_expert=0.8),
    ]
    s = campaign.summarize(Path("run"), results, "cpu_libtpu", "v6e")
    assert (s.attempts, s.workloads_attempted, s.workloads_total) == (5, 4, 50)
    assert s.best["8p_GEMM"] == "8p_GEMM/a.py"
    assert s.compile_rate == 4 / 5
    assert s.correct_rate_attempted == 3 / 4 and s.correct_rate_all == 3 / 50
    assert s.fast_p_vs_xla_attempted == {"0.0": 3 / 4, "1.0": 2 / 4, "1.2": 1 / 4, "2.0": 1 / 4}
    assert s.fast_p_vs_xla_all == {"0.0": 3 / 50, "1.0": 2 / 50, "1.2": 1 / 50, "2.0": 1 / 50}
    # 1p, 8p and 13p have expert kernels; 12p does not.
    assert s.expert_workloads_attempted == 3
    assert s.fast_p_vs_expert == {"0.0": 2 / 3, "1.0": 1 / 3, "1.2": 0.0, "2.0": 0.0}
    assert s.geomean_speedup_vs_xla_solved == pytest.approx((2.5 * 0.5 * 1.1) ** (1 / 3))
    # MaxKernel: the failure and the slowdown count as 1x, over all four attempted workloads.
    assert s.clipped_geomean_speedup_vs_xla == pytest.approx((2.5 * 1.0 * 1.0 * 1.1) ** (1 / 4))
    assert s.status_counts == {"compile_error": 1, "correct": 3, "incorrect": 1}
    assert s.by_category["tier:production"] == {"attempted": 4, "correct": 3, "correct_rate": 0.75}
    assert s.by_category["family:attention"]["correct"] == 0
    assert s.speed_kind == "static estimate"


def test_speeds_of_different_kinds_are_never_summarised_together():
    measured = _result("12p_RMSNorm", speedup=1.0).model_copy(update={"estimate_kind": "measured"})
    with pytest.raises(campaign.CampaignError, match="different kinds"):
        campaign.summarize(Path("run"), [_result("8p_GEMM", speedup=1.0), measured], "tpu", "v6e")


def test_run_directories_that_hold_no_attempt_say_what_to_do(tmp_path):
    with pytest.raises(campaign.CampaignError, match="holds no attempt"):
        campaign.discover(tmp_path)
    (tmp_path / "99z_Nothing.py").write_text("x = 1\n")
    with pytest.raises(campaign.CampaignError, match="not a workload id"):
        campaign.discover(tmp_path)
    with pytest.raises(campaign.CampaignError, match="not a directory"):
        campaign.discover(tmp_path / "missing")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    bench = api.JaxBench(
        store=Store(tmp_path_factory.mktemp("store") / "attempts.sqlite3"), checker=Checker(spares=0, slots=1)
    )
    yield bench
    bench.close()


@pytest.mark.slow
def test_evaluate_resumes_after_an_interrupt_caches_and_reports(bench, tmp_path):
    run = tmp_path / "run"
    (run / "8p_GEMM").mkdir(parents=True)
    shutil.copy(KERNELS / "good_rmsnorm.py", run / "12p_RMSNorm.py")
    shutil.copy(KERNELS / "bad_all_zeros.py", run / "8p_GEMM" / "a_zeros.py")
    shutil.copy(KERNELS / "bad_syntax.py", run / "8p_GEMM" / "b_syntax.py")
    (run / "99z_Nothing.py").write_text("x = 1\n")

    def stop_before_the_third(done, total, name):
        if done == 2 and name != "done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        campaign.evaluate(run, bench, progress=stop_before_the_third)
    partial = json.loads((run / campaign.RESULTS_FILE).read_text())
    assert [a["attempt"] for a in partial["attempts"]] == ["12p_RMSNorm.py", "8p_GEMM/a_zeros.py"]
    assert json.loads((run / campaign.SUMMARY_FILE).read_text())["interrupted"] is True

    summary = campaign.evaluate(run, bench)
    results, _ = campaign.load(run)
    assert [(r.attempt, r.status, r.cached) for r in results] == [
        ("12p_RMSNorm.py", "correct", True),
        ("8p_GEMM/a_zeros.py", "incorrect", True),
        ("8p_GEMM/b_syntax.py", "invalid_kernel", False),
    ]
    assert json.loads((run / campaign.RESULTS_FILE).read_text())["problems"][0].startswith("99z_Nothing.py: skipped")
    assert (summary.attempts, summary.workloads_attempted, summary.interrupted) == (3, 2, False)
    assert (
        summary.compile_rate == 2 / 3 and summary.correct_rate_attempted == 1 / 2 and summary.correct_rate_all == 1 / 50
    )
    rms = results[0]
    assert rms.timings.method == "static estimate" and rms.speedup_vs_baseline == pytest.approx(
        rms.timings.baseline_us / rms.timings.kernel_us
    )
    assert summary.geomean_speedup_vs_xla_solved == pytest.approx(rms.speedup_vs_baseline)
    assert summary.clipped_geomean_speedup_vs_xla == pytest.approx(math.sqrt(max(1.0, rms.speedup_vs_baseline)))
    assert results[1].correctness.max_diff > results[1].correctness.tolerance

    again = campaign.evaluate(run, bench)  # nothing changed: all from the cache
    assert all(r.cached for r in campaign.load(run)[0]) and again.model_dump(exclude={"run_dir"}) == summary.model_dump(
        exclude={"run_dir"}
    )
    campaign.evaluate(run, bench, force=True)
    assert not any(r.cached for r in campaign.load(run)[0])

    report = campaign_report.write_report(run)
    page = report.read_text()
    assert page.count("data:image/png;base64,") == 3 and "http://" not in page and "https://" not in page
    assert (run / campaign.CHART_FILE).read_bytes().startswith(b"\x89PNG")

    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(KERNELS / "good_rmsnorm.py", other / "12p_RMSNorm.py")
    campaign.evaluate(other, bench)
    text = campaign_report.compare(run, other, tmp_path / "cmp.png")
    assert (
        "12p_RMSNorm" in text
        and "1.00" in text.splitlines()[[row.split()[0] for row in text.splitlines()].index("12p_RMSNorm")]
    )
    assert (tmp_path / "cmp.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_the_example_agent_loop_fixes_its_kernel_over_mcp_and_its_run_is_a_campaign(bench, tmp_path):
    import importlib.util
    import os
    import sys

    import anyio
    from mcp import StdioServerParameters

    spec = importlib.util.spec_from_file_location(
        "agent_loop", Path(__file__).parents[1] / "examples" / "agent_loop.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jaxbench_mcp", "serve"],
        env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path / "home")},
    )
    profile = anyio.run(example.agent_loop, "12p_RMSNorm", example.demo_proposer, tmp_path / "run", 3, server)
    assert profile is not None and profile["verdict"]["status"] == "correct"
    assert sorted(p.name for p in (tmp_path / "run" / "12p_RMSNorm").iterdir()) == ["turn1.py", "turn2.py"]
    summary = campaign.evaluate(tmp_path / "run", bench)
    assert summary.status_counts == {"correct": 1, "no_pallas": 1} and summary.correct_rate_attempted == 1.0
