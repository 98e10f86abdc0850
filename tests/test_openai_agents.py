"""The OpenAI Agents SDK example (examples/openai_agents.py), offline: the SDK's own Runner drives a scripted
`Model` against the real server over stdio (`MCPServerStdio`), and the run is read from the tools' structured
content. Also the three outcomes that rewards are built from (jaxbench_mcp.campaigns.outcomes)."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from pathlib import Path

# The evals extra is part of the test set-up: a missing package is a failure, never a skip.
import agents
import pytest

from jaxbench_mcp.campaigns import outcomes
from jaxbench_mcp.taxonomy import Status

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"


def _example():
    spec = importlib.util.spec_from_file_location("openai_agents_example", ROOT / "examples" / "openai_agents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_agents_sdk_runs_a_scripted_model_against_the_server_and_reads_structured_content(tmp_path):
    example = _example()
    env = {
        "JAXBENCH_MCP_HOME": str(tmp_path / "home"),
        "JAX_PLATFORMS": "cpu",
        "JAXBENCH_MCP_SPARES": "0",
        "PATH": "/usr/bin:/bin",
    }
    # The server as the example starts it, from this interpreter's environment (the test's .venv).
    command = Path(sys.executable).parent / "jaxbench-mcp"

    async def both():
        good = await example.run(
            "12p_RMSNorm", example.ScriptedModel("12p_RMSNorm", (KERNELS / "good_rmsnorm.py").read_text()),
            "none", command, env,
        )  # fmt: skip
        wrong = await example.run(
            "8p_GEMM", example.ScriptedModel("8p_GEMM", (KERNELS / "bad_all_zeros.py").read_text()),
            "none", command, env,
        )  # fmt: skip
        return good, wrong

    good, wrong = asyncio.run(both())
    # Correct: checked, then profiled (two verdicts), a speedup read from the profile's structured targets.
    assert good["statuses"] == ["correct", "correct"] and good["outcome"] == "correct", good
    assert good["correct"] == 1.0 and good["log_speedup"] != 0.0
    assert good["fast_1"] == float(good["log_speedup"] > 0)
    assert "```python" in good["answer"]
    # Wrong values: the candidate's failure, scored 0 (never None: that is kept for the machinery's failures).
    assert wrong["statuses"] == ["incorrect"] and wrong["outcome"] == "candidate_failure", wrong
    assert (wrong["correct"], wrong["fast_1"], wrong["log_speedup"]) == (0.0, 0.0, 0.0)


def test_a_tool_call_that_never_produced_a_verdict_is_the_machinerys_failure():
    from agents.items import ToolCallOutputItem

    example = _example()
    lost = ToolCallOutputItem(
        agent=agents.Agent(name="kernel_writer"),
        raw_item={"type": "function_call_output", "call_id": "c", "output": "x"},
        output="Error invoking MCP tool check_kernel: Connection closed",
    )
    summary = example.summarize([lost])
    assert summary["outcome"] == "infra_failure" and summary["correct"] is None, summary


def test_every_status_has_one_outcome_and_only_the_servers_own_failure_is_infrastructure():
    for status in Status:
        expected = {"correct": "correct", "server_error": "infra_failure"}.get(status.value, "candidate_failure")
        assert outcomes.outcome(status.value) == expected, status
    assert outcomes.outcome(None) == "candidate_failure"  # no kernel at all
    assert outcomes.outcome(None, machinery_failed=True) == "infra_failure"  # timed out, lost host, dead server
    with pytest.raises(ValueError):
        outcomes.outcome("corect")


def test_the_reward_variants():
    assert outcomes.rewards("correct", 2.0) == {"correct": 1.0, "fast_1": 1.0, "log_speedup": math.log(2.0)}
    assert outcomes.rewards("correct", 0.5)["fast_1"] == 0.0 and outcomes.rewards("correct", 0.5)["log_speedup"] < 0
    assert outcomes.rewards("correct", None) == {"correct": 1.0, "fast_1": 0.0, "log_speedup": 0.0}
    assert outcomes.rewards("correct", 1e9)["log_speedup"] == outcomes.LOG_SPEEDUP_CLIP
    assert outcomes.rewards("candidate_failure", 3.0) == {"correct": 0.0, "fast_1": 0.0, "log_speedup": 0.0}
    assert set(outcomes.rewards("infra_failure", 3.0).values()) == {None}
