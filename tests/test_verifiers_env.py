"""The verifiers environment (environments/jaxbench), offline, in its own venv (.venv-verifiers, made by
`scripts/dev.sh test`: no verifiers release can share this venv's mcp). Its rollouts go through verifiers' whole
machinery (interception, a per-rollout toolset forwarding to a real jaxbench-mcp server over stdio, the harness,
scoring) with a scripted model on loopback (jaxbench.scripted), and the reward keeps the three outcomes apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "kernels"
ENV_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
# The server as this test's venv has it (the environment would find the checkout's .venv by itself).
SERVER = Path(sys.executable).parent / "jaxbench-mcp"


@pytest.fixture(autouse=True)
def _no_port_files_left():
    """verifiers 0.4.0 reports each tool server's port through /tmp/vf-port-<uuid> (a fixed directory, not TMPDIR) and
    never removes the file: the rollouts here would leave four behind per run."""
    before = set(Path("/tmp").glob("vf-port-*"))
    yield
    for leftover in set(Path("/tmp").glob("vf-port-*")) - before:
        leftover.unlink(missing_ok=True)


def env_python() -> Path:
    # Part of the test set-up: a missing venv is a failure, never a skip.
    assert ENV_PYTHON.exists(), f"{ENV_PYTHON} is missing: `scripts/dev.sh test` makes it"
    return ENV_PYTHON


def _environment(tmp_path: Path) -> dict[str, str]:
    return {
        "JAXBENCH_MCP_HOME": str(tmp_path / "home"),
        "JAX_PLATFORMS": "cpu",
        "JAXBENCH_MCP_SPARES": "0",  # forwarded to the servers the rollouts start (conftest says why)
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }


def scripted(tmp_path: Path, *args: str, timeout: float = 1200) -> list[dict]:
    """Run rollouts with the scripted model and return their summaries."""
    proc = subprocess.run(
        [str(env_python()), "-m", "jaxbench.scripted", *args],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=_environment(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["workload_id"]: r for r in json.loads(proc.stdout)}


def in_env(tmp_path: Path, code: str) -> dict:
    proc = subprocess.run(
        [str(env_python()), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=_environment(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_environment_venv_has_verifiers_0_4_0_loads_the_workloads_and_reads_the_outcomes_without_jax(tmp_path):
    facts = in_env(
        tmp_path,
        "import json, sys, importlib.metadata as m, jaxbench\n"
        "from jaxbench.taskset import final_kernel\n"
        "good = 'def workload(x):\\n    return x\\n'\n"
        "final = [final_kernel('done:\\n```python\\n' + good + '```', ['old']), final_kernel('no code', ['a', 'b']),\n"
        "    final_kernel('```python\\nx = 1\\n```', []), final_kernel('', [])]\n"
        "env = jaxbench.load_environment(workloads='all', context='none', max_checks=3)\n"
        "tasks = list(env.taskset)\n"
        "docs = jaxbench.load_environment(workloads='12p_rmsnorm,8p_GEMM')\n"
        "try:\n    jaxbench.load_environment(context='nodocs'); bad_context = None\n"
        "except ValueError as e:\n    bad_context = str(e)\n"
        "try:\n    list(jaxbench.load_environment(workloads='8p_GEM').taskset); bad_id = None\n"
        "except ValueError as e:\n    bad_id = str(e)\n"
        "print(json.dumps({'verifiers': m.version('verifiers'), 'mcp': m.version('mcp'),\n"
        "    'jax': 'jax' in sys.modules, 'ids': [t.data.workload_id for t in tasks],\n"
        "    'none_prompt': tasks[0].data.prompt, 'docs_ids': [t.data.id for t in docs.taskset],\n"
        "    'docs_prompt': next(iter(docs.taskset)).data.prompt,\n"
        "    'bad_context': bad_context, 'bad_id': bad_id, 'final': final}))",
    )
    assert (facts["verifiers"], facts["mcp"]) == ("0.4.0", "2.0.0")
    assert facts["jax"] is False  # jaxbench_mcp.campaigns.outcomes came from the checkout without importing jax
    facts_file = json.loads((ROOT / "tests" / "data" / "jaxbench_facts.json").read_text())
    assert sorted(facts["ids"]) == sorted(w["id"] for w in facts_file["workloads"]) and len(facts["ids"]) == 50
    assert facts["ids"][0] == "1p_Flash_Attention" and facts["ids"][-1] == "50k_Matmul_GELU_Softmax"
    assert facts["docs_ids"] == ["12p_RMSNorm", "8p_GEMM"]
    # The docs ablation: no doc step under `none`; at most max_checks checks asked for.
    assert "read_docs" not in facts["none_prompt"] and "at most 3 checks" in facts["none_prompt"]
    assert "read_docs(workload_id='12p_RMSNorm')" in facts["docs_prompt"]
    # The final kernel: the answer's last python block defining workload(, else the last one checked, else none.
    assert facts["final"] == ["def workload(x):\n    return x\n", "b", None, None]
    assert "nodocs" in facts["bad_context"] and "8p_GEM" in facts["bad_id"] and "8p_GEMM" in facts["bad_id"]


@pytest.mark.slow
def test_a_correct_a_wrong_and_no_kernel_get_their_rewards_against_the_real_server(tmp_path):
    runs = scripted(
        tmp_path,
        "--kernel", f"12p_RMSNorm={KERNELS / 'good_rmsnorm.py'}",
        "--kernel", f"8p_GEMM={KERNELS / 'bad_all_zeros.py'}",
        "--kernel", "13p_Cross_Entropy=",
        "--context", "none", "--server-command", str(SERVER),
    )  # fmt: skip
    good, wrong, none = runs["12p_RMSNorm"], runs["8p_GEMM"], runs["13p_Cross_Entropy"]
    # Correct: checked, then profiled; judged again after the rollout, with a speedup from the profile.
    assert good["ok"] and good["tools_called"] == ["check_kernel", "profile_kernel"], good
    assert good["judged"]["outcome"] == "correct" and good["rewards"] == {"kernel": 1.0}, good
    metrics = good["metrics"]
    assert metrics["correct_outcome"] == 1.0 and metrics["infra_failure"] == 0.0 and metrics["checks"] == 1.0
    assert metrics["log_speedup"] != 0.0 and metrics["fast_1"] == float(metrics["speedup_vs_xla"] > 1.0)
    # Wrong values: the candidate's failure, scored 0 (not None: that is the machinery's).
    assert wrong["ok"] and wrong["tools_called"] == ["check_kernel"], wrong
    assert wrong["judged"]["status"] == "incorrect" and wrong["rewards"] == {"kernel": 0.0}, wrong
    assert wrong["metrics"]["candidate_failure"] == 1.0 and wrong["metrics"]["correct"] == 0.0
    # No kernel at all: the candidate's failure too, without a server call.
    assert none["ok"] and none["tools_called"] == [] and none["rewards"] == {"kernel": 0.0}, none
    assert none["judged"]["outcome"] == "candidate_failure" and none["judged"]["status"] is None


@pytest.mark.slow
def test_a_server_that_dies_is_an_infrastructure_failure_never_scored(tmp_path):
    # The real server behind a relay that kills it at the first check or profile (tests/dying_server.py).
    dying = f"{sys.executable} {ROOT / 'tests' / 'dying_server.py'} {SERVER}"
    runs = scripted(
        tmp_path, "--kernel", f"12p_RMSNorm={KERNELS / 'good_rmsnorm.py'}", "--server-command", dying,
        "--reward", "log_speedup",
    )  # fmt: skip
    lost = runs["12p_RMSNorm"]
    # The agent's check got no answer (a tool error that says so), and neither did the judgement after it.
    assert lost["tools_called"] == ["check_kernel"], lost
    assert lost["judged"]["outcome"] == "infra_failure" and "Connection closed" in lost["judged"]["detail"], lost
    # No reward (None, unscored) and an errored trace: dropped or retried, never a 0 for the kernel.
    assert lost["rewards"] == {"kernel": None} and not lost["ok"] and lost["error"] == "ToolsetError", lost
    assert "not scored" in lost["error_message"]
    assert lost["metrics"]["infra_failure"] == 1.0 and "correct" not in lost["metrics"], lost
