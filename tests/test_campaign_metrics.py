"""Campaign metrics the papers report: per-sample correctness, pass@k, checks and turns to the first correct
kernel; trajectories in a run directory; provenance; the docs ablation as two runs compared."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from jaxbench_mcp import api
from jaxbench_mcp.campaigns import campaign, provenance, report as campaign_report
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.store import Store

KERNELS = Path(__file__).parent / "kernels"


def _result(workload, correct, sample, index=1, turn=None, context="docs", speedup=None):
    return campaign.AttemptResult(
        attempt=f"{sample}/attempt_{index:03d}.py",
        workload_id=workload,
        status="correct" if correct else "incorrect",
        compiled=True,
        correctness=campaign.Correctness(correct=correct),
        timings=campaign.Timings(method="static estimate"),
        speedup_vs_baseline=speedup if correct else None,
        target="v6e",
        tier="cpu_libtpu",
        estimate_kind="static estimate",
        sha256="0",
        sample=sample,
        index=index,
        turn=turn,
        context=context,
    )


@pytest.mark.parametrize("n,c", [(1, 0), (1, 1), (4, 1), (5, 2), (6, 6), (7, 3)])
def test_pass_at_k_is_the_unbiased_estimator(n, c):
    """Against its definition: the chance that k samples drawn without replacement include a correct one."""
    outcomes = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        draws = list(itertools.combinations(outcomes, k))
        exact = sum(any(d) for d in draws) / len(draws)
        assert campaign.pass_at_k(n, c, k) == pytest.approx(exact)
    assert campaign.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        campaign.pass_at_k(2, 1, 3)


def test_sample_metrics_keep_attempts_apart_from_samples():
    results = [
        # 8p: two trajectories; the first solves it at its 3rd check (turn 7), the second never does.
        _result("8p_GEMM", False, "8p_GEMM/s1", 1, turn=2),
        _result("8p_GEMM", False, "8p_GEMM/s1", 2, turn=4),
        _result("8p_GEMM", True, "8p_GEMM/s1", 3, turn=7, speedup=1.5),
        _result("8p_GEMM", False, "8p_GEMM/s2", 1, turn=3),
        # 12p: one trajectory, correct at once.
        _result("12p_RMSNorm", True, "12p_RMSNorm/s1", 1, turn=1, speedup=1.1),
    ]
    s = campaign.summarize(Path("run"), results, "cpu_libtpu", "v6e")
    assert s.samples == 3 and s.attempts == 5
    assert s.per_sample_correctness == pytest.approx(2 / 5)  # JAXBench's: correct attempts / attempts
    assert s.solved_sample_rate == pytest.approx(2 / 3)
    assert s.correct_rate_attempted == 1.0  # best of run: both workloads solved
    # pass@1: 8p has n=2, c=1 -> 0.5; 12p has n=1, c=1 -> 1.0; mean 0.75. pass@2 only over 8p: 1.0.
    assert s.pass_at_k == {"1": pytest.approx(0.75), "2": pytest.approx(1.0)}
    assert s.pass_at_k_workloads == {"1": 2, "2": 1}
    assert s.checks_to_first_correct == {"mean": 2.0, "median": 2.0, "samples": 2.0}
    assert s.turns_to_first_correct == {"mean": 4.0, "median": 4.0, "samples": 2.0}
    assert s.context == "docs"
    assert "per-sample correctness 40.0% of 5 attempts" in s.summary()


def test_one_run_holds_one_condition():
    mixed = [_result("8p_GEMM", True, "a", context="docs"), _result("8p_GEMM", True, "b", context="none")]
    with pytest.raises(campaign.CampaignError, match="different context conditions"):
        campaign.summarize(Path("run"), mixed, "cpu_libtpu", "v6e")


def _trajectory_run(root: Path) -> Path:
    run = root / "run"
    sample = run / "8p_GEMM" / "s1"
    sample.mkdir(parents=True)
    for name in ("attempt_001.py", "attempt_002.py"):
        (sample / name).write_text("def workload(a, b):\n    return a @ b\n")
    # The trajectory's order is the agent's, not the files' names.
    (sample / campaign.TRAJECTORY_FILE).write_text(
        json.dumps(
            {
                "model": "mockllm/model",
                "attempts": [{"file": "attempt_002.py", "turn": 2}, {"file": "attempt_001.py", "turn": 5}],
            }
        )
    )
    other = run / "12p_RMSNorm" / "s1"
    other.mkdir(parents=True)
    (other / "attempt_001.py").write_text("x = 1\n")
    (run / "12p_RMSNorm.py").write_text("x = 2\n")
    (run / campaign.RUN_FILE).write_text(json.dumps({"context": "none"}))
    return run


def test_discover_reads_trajectories_in_their_order(tmp_path):
    run = _trajectory_run(tmp_path)
    found, problems = campaign.discover(run)
    assert problems == []
    rows = [(f.workload_id, str(f.path.relative_to(run)), f.sample, f.index, f.turn, f.model, f.context) for f in found]
    assert rows == [
        ("12p_RMSNorm", "12p_RMSNorm/s1/attempt_001.py", "12p_RMSNorm/s1", 1, None, None, "none"),
        ("12p_RMSNorm", "12p_RMSNorm.py", "12p_RMSNorm", 1, None, None, "none"),
        ("8p_GEMM", "8p_GEMM/s1/attempt_002.py", "8p_GEMM/s1", 1, 2, "mockllm/model", "none"),
        ("8p_GEMM", "8p_GEMM/s1/attempt_001.py", "8p_GEMM/s1", 2, 5, "mockllm/model", "none"),
    ]


def test_bad_trajectories_say_what_is_wrong(tmp_path):
    run = _trajectory_run(tmp_path)
    trajectory = run / "8p_GEMM" / "s1" / campaign.TRAJECTORY_FILE
    trajectory.write_text(json.dumps({"attempts": [{"file": "../../12p_RMSNorm.py"}]}))
    with pytest.raises(campaign.CampaignError, match="is not a file of 8p_GEMM/s1"):
        campaign.discover(run)
    trajectory.write_text(json.dumps({"context": "some"}))
    with pytest.raises(campaign.CampaignError, match="context must be 'docs' or 'none'"):
        campaign.discover(run)
    trajectory.write_text("{")
    with pytest.raises(campaign.CampaignError, match="not readable JSON"):
        campaign.discover(run)


def test_evaluate_refuses_a_condition_the_run_contradicts(tmp_path):
    run = _trajectory_run(tmp_path)
    with pytest.raises(campaign.CampaignError, match="contradicts"):
        campaign.evaluate(run, bench=object(), context="docs")


def test_provenance_names_the_mirrored_commit_and_hashes_workloads():
    prov = provenance.provenance("none")
    assert prov["jaxbench_commit"] == provenance.JAXBENCH_COMMIT and len(provenance.JAXBENCH_COMMIT) == 40
    assert prov["context"] == "none" and "2 x" in prov["tolerance_rule"]
    gemm, norm = provenance.workload_hash("8p_GEMM"), provenance.workload_hash("12p_RMSNorm")
    assert len(gemm) == 16 and gemm != norm and provenance.workload_hash("8p") == gemm


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    bench = api.JaxBench(
        store=Store(tmp_path_factory.mktemp("store") / "attempts.sqlite3"), checker=Checker(spares=0, slots=1)
    )
    yield bench
    bench.close()


@pytest.mark.slow
def test_a_two_condition_campaign_shows_the_ablation(bench, tmp_path):
    """Two real runs, as an agent with and without docs would leave them: the `docs` sample fixes its kernel at
    its second check, the `none` sample never does. summary.json carries the metrics and the provenance;
    compare prints the docs' effect."""
    docs_run, none_run = tmp_path / "docs", tmp_path / "none"
    for run, files in ((docs_run, ("bad_syntax.py", "good_rmsnorm.py")), (none_run, ("bad_syntax.py",))):
        sample = run / "12p_RMSNorm" / "s1"
        sample.mkdir(parents=True)
        steps = []
        for index, name in enumerate(files, 1):
            shutil.copy(KERNELS / name, sample / f"attempt_{index:03d}.py")
            steps.append({"file": f"attempt_{index:03d}.py", "turn": 2 * index})
        (sample / campaign.TRAJECTORY_FILE).write_text(json.dumps({"model": "scripted", "attempts": steps}))
    with_docs = campaign.evaluate(docs_run, bench, context="docs")
    without = campaign.evaluate(none_run, bench, context="none")
    assert (with_docs.per_sample_correctness, without.per_sample_correctness) == (0.5, 0.0)
    assert with_docs.pass_at_k == {"1": 1.0} and without.pass_at_k == {"1": 0.0}
    assert with_docs.checks_to_first_correct == {"mean": 2.0, "median": 2.0, "samples": 1.0}
    assert with_docs.turns_to_first_correct["mean"] == 4.0 and without.checks_to_first_correct is None
    stored = json.loads((docs_run / campaign.SUMMARY_FILE).read_text())
    assert stored["context"] == "docs" and stored["model"] == "scripted"
    assert stored["provenance"]["jaxbench_commit"] == provenance.JAXBENCH_COMMIT
    assert stored["workload_sha256"] == {"12p_RMSNorm": provenance.workload_hash("12p_RMSNorm")}
    results = json.loads((docs_run / campaign.RESULTS_FILE).read_text())["attempts"]
    assert [(r["attempt"], r["index"], r["status"], r["context"]) for r in results] == [
        ("12p_RMSNorm/s1/attempt_001.py", 1, "invalid_kernel", "docs"),
        ("12p_RMSNorm/s1/attempt_002.py", 2, "correct", "docs"),
    ]
    assert all(r["provenance"]["tolerance_rule"] == provenance.TOLERANCE_RULE for r in results)
    text = campaign_report.compare(none_run, docs_run)
    assert "conditions: A none (scripted), B docs (scripted)" in text
    assert "per-sample correctness: A 0.0%, B 50.0% (B - A +50.0 pp)" in text
    assert (
        "docs effect (docs - none): per-sample correctness +50.0 pp, solved samples +100.0 pp, pass@1 +100.0 pp" in text
    )
