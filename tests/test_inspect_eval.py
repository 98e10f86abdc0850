"""The Inspect AI task end to end, offline: Inspect's mockllm model plays a scripted agent against the real
server over stdio (started by Inspect's own MCP client), and our scorer judges what it submits.

Three samples: 12p_RMSNorm gets a correct kernel (checked, then submitted), 8p_GEMM a wrong one (an all-zeros
output), 13p_Cross_Entropy no kernel at all. The task is found by its registered name, as `inspect eval
jaxbench_mcp/jaxbench` finds it.
"""

from __future__ import annotations

from pathlib import Path

# The evals extra is part of the test set-up: a missing package is a failure, never a skip.
import inspect_ai
import pytest
from inspect_ai.model import ChatMessageTool, ChatMessageUser, ModelOutput, ModelUsage, get_model

from jaxbench_mcp.campaigns import campaign, inspect_eval

KERNELS = Path(__file__).parent / "kernels"
GOOD = (KERNELS / "good_rmsnorm.py").read_text()
WRONG = (KERNELS / "bad_all_zeros.py").read_text()


def scripted(messages, tools, tool_choice, config) -> ModelOutput:
    """The next move of a scripted agent, with a token usage of its own (else mockllm counts tokens with a
    tokenizer it downloads: this test runs offline)."""
    output = _move(messages, tools)
    output.usage = ModelUsage(input_tokens=100, output_tokens=10, total_tokens=110)
    return output


def _move(messages, tools) -> ModelOutput:
    """Decided from the conversation so far (samples run concurrently)."""
    prompt = next(m.text for m in messages if isinstance(m, ChatMessageUser))
    answered = sum(isinstance(m, ChatMessageTool) for m in messages)
    names = {t.name for t in tools}
    assert {"check_kernel", "submit"} <= names, names
    # Under `none` the agent is offered no docs tool (the task's prompt then names none either).
    assert ("read_docs" in names) == ("read_docs" in prompt), names
    if "12p_RMSNorm" in prompt:
        if answered == 0:
            return ModelOutput.for_tool_call(
                "mockllm/model", "check_kernel", {"workload_id": "12p_RMSNorm", "source": GOOD}
            )
        return ModelOutput.for_tool_call("mockllm/model", "submit", {"answer": f"Done.\n```python\n{GOOD}```\n"})
    if "8p_GEMM" in prompt:
        if answered == 0:
            return ModelOutput.for_tool_call(
                "mockllm/model", "check_kernel", {"workload_id": "8p_GEMM", "source": WRONG}
            )
        return ModelOutput.for_tool_call("mockllm/model", "submit", {"answer": WRONG})
    return ModelOutput.for_tool_call("mockllm/model", "submit", {"answer": "I could not write this kernel."})


@pytest.mark.slow
def test_inspect_task_scores_a_correct_a_wrong_and_no_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXBENCH_MCP_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    logs = inspect_ai.eval(
        "jaxbench_mcp/jaxbench",
        model=get_model("mockllm/model", custom_outputs=scripted),
        task_args={
            "workloads": "12p_RMSNorm,8p_GEMM,13p_Cross_Entropy",
            "context": "none",
            "max_checks": 4,
            "target": "v6e",
            "run_dir": str(run_dir),
        },
        log_dir=str(tmp_path / "logs"),
        display="none",
        max_samples=1,
    )
    (log,) = logs
    assert log.status == "success", log.error
    scores = {s.id: s.scores["kernel_scorer"] for s in log.samples}
    good, wrong, nothing = scores["12p_RMSNorm"], scores["8p_GEMM"], scores["13p_Cross_Entropy"]
    assert good.value["correct"] == 1.0 and good.value["speedup_vs_xla"] > 0
    assert 0 < good.value["roofline_share"] <= 1 and good.value["infra_failure"] == 0
    assert good.metadata["check_statuses"] == ["correct"] and good.metadata["first_correct_check"] == 1
    assert good.metadata["context"] == "none" and good.metadata["provenance"]["context"] == "none"
    assert wrong.value == {"correct": 0.0, "speedup_vs_xla": 0.0, "roofline_share": 0.0, "infra_failure": 0.0}
    assert wrong.answer == "incorrect", wrong.explanation
    assert wrong.metadata["check_statuses"] == ["incorrect"]
    assert nothing.answer == "no_kernel" and nothing.value["correct"] == 0.0 and nothing.metadata["checks"] == 0
    # The agent saw no docs: its tools lacked read_docs (the scripted model asserts the tools it was given).
    tools_seen = (
        {t.name for t in log.samples[0].events[0].tools} if hasattr(log.samples[0].events[0], "tools") else None
    )
    assert tools_seen is None or "read_docs" not in tools_seen
    # Inspect names a dict score's metrics by key ("correct/mean"), the others by the scorer.
    metrics = {f"{s.name}/{name}": m.value for s in log.results.scores for name, m in s.metrics.items()}
    assert metrics["correct/mean"] == pytest.approx(1 / 3), metrics
    assert metrics["infra_failure/mean"] == 0.0
    assert metrics["speedup_vs_xla/mean"] == pytest.approx(good.value["speedup_vs_xla"] / 3)
    assert metrics["kernel_scorer/per_sample_correctness"] == pytest.approx(1 / 2)  # one correct check of two
    assert metrics["kernel_scorer/checks_to_first_correct"] == 1.0
    # The checks were written as trajectories, which a campaign scores in their order.
    found, _ = campaign.discover(run_dir)
    assert [(f.workload_id, f.index, f.context) for f in found] == [("12p_RMSNorm", 1, "none"), ("8p_GEMM", 1, "none")]
    assert found[0].path.read_text() == GOOD


def test_the_final_kernel_is_the_submission_else_the_last_check():
    checks = [{"source": "def workload(x):\n    return x\n", "turn": 1, "status": "incorrect"}]
    assert inspect_eval.final_kernel("```python\ndef workload(a):\n    return a\n```", checks).startswith(
        "def workload(a)"
    )
    assert inspect_eval.final_kernel("no code here", checks) == checks[0]["source"]
    assert inspect_eval.final_kernel("", []) is None


def test_the_prompt_follows_the_condition():
    assert "read_docs" in inspect_eval.task_prompt("8p_GEMM", "docs", 8)
    assert "read_docs" not in inspect_eval.task_prompt("8p_GEMM", "none", 8)
    assert "at most 8 checks" in inspect_eval.task_prompt("8p_GEMM", "none", 8)
