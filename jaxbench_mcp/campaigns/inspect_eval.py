"""An Inspect AI task over this server: `inspect eval jaxbench_mcp/jaxbench --model PROVIDER/MODEL
-T workloads=8p_GEMM,12p_RMSNorm -T context=docs -T max_checks=8`.

One sample per workload. A `react` agent gets this server's tools over stdio (`jaxbench-mcp serve --context
...`, started by Inspect's MCP client) and a `submit` tool for its final kernel. The scorer checks that kernel
with this package's own check and, when it is correct, profiles it (both through the library, in the sandboxed
worker, exactly as `jaxbench-mcp evaluate` does):

    correct          1 when the final kernel is correct
    speedup_vs_xla   its speedup over the XLA baseline (0 when not correct or not comparable)
    roofline_share   roofline time / its time, 0 to 1 (0 when not correct)
    infra_failure    1 when the server's machinery failed (server_error): not the candidate's fault

The final kernel is the submitted answer (a ```python block in it, else the whole answer); when the agent
submits nothing that defines `workload(`, the source of its last check_kernel call. The metrics are those of
campaigns (jaxbench_mcp.campaigns.campaign): the mean of each value, JAXBench's per-sample correctness over every
check_kernel call the agents made, and checks to the first correct verdict. With `-T run_dir=DIR` each sample's
checks are written as a trajectory (DIR/<workload>/<epoch>/attempt_NNN.py + trajectory.json), which
`jaxbench-mcp evaluate DIR` scores as a campaign.

Registered through the `inspect_ai` entry point of this package (pyproject.toml); needs the `evals` extra.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
from inspect_ai import Task, task
from inspect_ai.agent import AgentState, AgentSubmit, react
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
from inspect_ai.scorer import Metric, SampleScore, Score, Target, mean, metric, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import mcp_server_stdio

from jaxbench_mcp.campaigns import campaign, provenance
from jaxbench_mcp.catalog import conditions, workloads

CHECK_TOOL, SUBMIT_TOOL = "check_kernel", "submit"
# Environment a server started by Inspect keeps from this process (Inspect's stdio client passes only a
# minimal environment otherwise): where the attempts store lives, which jax platform the server takes, and how
# many spare workers it keeps warm.
_FORWARDED_ENV = ("JAXBENCH_MCP_HOME", "JAX_PLATFORMS", "JAXBENCH_MCP_SPARES")


def _ids(workloads_: str | list[str]) -> list[str]:
    names = workloads_.split(",") if isinstance(workloads_, str) else list(workloads_)
    return [workloads.get_workload(n.strip()).id for n in names if n.strip()]


def task_prompt(workload_id: str, context: str, max_checks: int) -> str:
    """What the agent is asked, in the task's condition (no doc pointer under `none`)."""
    w = workloads.get_workload(workload_id)
    steps = [
        f"Call get_workload('{w.id}', size='full') and get_workload('{w.id}', size='small') for the contract.",
        *([f"Call read_docs(workload_id='{w.id}') for the Pallas docs that matter here."] if context == "docs" else []),
        "Write a Python file that defines workload(*inputs) with a Pallas TPU kernel (pallas_call).",
        f"Call check_kernel with its source and fix what the verdict says (at most {max_checks} checks).",
        "Once it is correct you may call profile_kernel to compare with the XLA baseline.",
        "Finish by calling submit with the complete Python source of your final kernel.",
    ]
    return f"Write a fast, correct Pallas TPU kernel for JAXBench workload {w.id} ({w.operator}).\n" + "".join(
        f"{n}. {s}\n" for n, s in enumerate(steps, 1)
    )


def server_env() -> dict[str, str]:
    return {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}


def _check_budget(max_checks: int):
    async def on_continue(state: AgentState) -> bool:
        # The agent stops once it has made its checks; the scorer then judges what it has.
        return len(checks_of(state.messages)) < max_checks

    return on_continue


@task
def jaxbench(
    workloads: str | list[str] = "8p_GEMM",
    context: str = "docs",
    max_checks: int = 8,
    target: str | None = None,
    run_dir: str | None = None,
) -> Task:
    """JAXBench Pallas kernels with this server's tools; `context` docs|none is the docs ablation's arm."""
    condition = conditions.check_context(context)
    ids = _ids(workloads)
    dataset = MemoryDataset(
        [
            Sample(
                id=w,
                input=task_prompt(w, condition, max_checks),
                metadata={"workload_id": w, "context": condition},
            )
            for w in ids
        ],
        name="jaxbench",
    )
    server = mcp_server_stdio(
        name="jaxbench",
        command=sys.executable,
        args=["-m", "jaxbench_mcp", "serve", "--context", condition],
        env=server_env(),
    )
    agent = react(
        name="kernel_writer",
        tools=[server],
        # The completion is the submitted answer alone, and the submit call stays in the messages, so that the
        # scorer reads exactly what the agent submitted.
        submit=AgentSubmit(
            description="Submit the complete Python source of your final kernel (a file defining workload(*inputs))",
            answer_only=True,
            keep_in_messages=True,
        ),
        on_continue=_check_budget(max_checks),
    )
    return Task(
        dataset=dataset,
        solver=agent,
        scorer=kernel_scorer(condition, target, run_dir),
        metadata={"context": condition, "provenance": provenance.provenance(condition)},
    )


# ---- reading the trajectory -------------------------------------------------------------------------


def checks_of(messages: list) -> list[dict[str, Any]]:
    """The agent's check_kernel calls in order: source, the turn (assistant message number) that made it, and the
    verdict's status as the tool returned it (None while unanswered)."""
    answers = {
        m.tool_call_id: m
        for m in messages
        if isinstance(m, ChatMessageTool) and m.function == CHECK_TOOL and m.tool_call_id
    }
    found, turn = [], 0
    for m in messages:
        if not isinstance(m, ChatMessageAssistant):
            continue
        turn += 1
        for call in m.tool_calls or []:
            if call.function != CHECK_TOOL or not isinstance(call.arguments.get("source"), str):
                continue
            answer = answers.get(call.id)
            found.append({"source": call.arguments["source"], "turn": turn, "status": _status_of(answer)})
    return found


def _status_of(answer: ChatMessageTool | None) -> str | None:
    if answer is None or answer.error is not None:
        return None
    # A verdict's text starts with its status in capitals, e.g. "INCORRECT [wrong_values]: 8p_GEMM ...".
    head = re.match(r"\s*([A-Z_]+)\b", answer.text or "")
    return head.group(1).lower() if head else None


def submitted_answer(messages: list, fallback: str = "") -> str:
    """The answer of the agent's last submit call (the model's completion around it may add text of its own)."""
    for m in reversed(messages):
        if isinstance(m, ChatMessageAssistant):
            for call in reversed(m.tool_calls or []):
                if call.function == SUBMIT_TOOL and isinstance(call.arguments.get("answer"), str):
                    return call.arguments["answer"]
    return fallback


_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def final_kernel(answer: str, checks: list[dict[str, Any]]) -> str | None:
    """The submitted kernel, else the last one checked, else None."""
    blocks = _FENCE.findall(answer or "")
    submitted = blocks[-1] if blocks else answer
    if submitted and "def workload(" in submitted:
        return submitted
    return checks[-1]["source"] if checks else None


def write_trajectory(
    run_dir: Path, workload_id: str, sample: str, checks: list[dict[str, Any]], model: str, context: str
) -> None:
    """RUN/<workload>/<sample>/attempt_NNN.py and trajectory.json (jaxbench_mcp.campaigns.campaign's layout)."""
    folder = run_dir / workload_id / sample
    folder.mkdir(parents=True, exist_ok=True)
    steps = []
    for n, check in enumerate(checks, 1):
        name = f"attempt_{n:03d}.py"
        (folder / name).write_text(check["source"])
        steps.append({"file": name, "turn": check["turn"]})
    (folder / campaign.TRAJECTORY_FILE).write_text(
        json.dumps({"model": model, "context": context, "attempts": steps}, indent=2)
    )


# ---- scoring --------------------------------------------------------------------------------------

_BENCH: Any = None
_BENCH_LOCK = threading.Lock()


def _bench():
    """One library bench for the scorer (its checks run in the sandboxed worker, as every check does)."""
    global _BENCH
    with _BENCH_LOCK:
        if _BENCH is None:
            from jaxbench_mcp import api

            _BENCH = api.JaxBench.one_shot()
        return _BENCH


def judge(
    workload_id: str, source: str | None, target: str | None, context: conditions.Context = "docs"
) -> dict[str, Any]:
    """The score's values and metadata for one final kernel (blocking: a check takes seconds)."""
    if source is None:
        return {
            "status": "no_kernel",
            "correct": 0.0,
            "speedup_vs_xla": 0.0,
            "roofline_share": 0.0,
            "infra_failure": 0.0,
            "explanation": "the agent neither submitted nor checked a kernel",
        }
    profile = _bench().profile_kernel(workload_id, source, [target] if target else None)
    verdict = profile.verdict
    correct = verdict.status == "correct"
    entry = next((t for t in profile.targets if target is None or t.target == target), None)
    speedup = entry.speedup_vs_xla if correct and entry and entry.speedup_vs_xla else 0.0
    share = min(1.0, entry.roofline_pct / 100) if correct and entry and entry.roofline_pct else 0.0
    return {
        "status": str(verdict.status),
        "correct": float(correct),
        "speedup_vs_xla": float(speedup),
        "roofline_share": float(share),
        "infra_failure": float(verdict.status == "server_error"),
        "explanation": conditions.for_context(profile, context).summary()[:4000],
        "estimate_kind": profile.kind,
        "attempt_id": profile.attempt_id,
    }


@metric
def per_sample_correctness() -> Metric:
    """JAXBench's: correct check_kernel verdicts / all check_kernel calls, over every sample's trajectory."""

    def compute(scores: list[SampleScore]) -> float:
        statuses = [s for x in scores for s in (x.score.metadata or {}).get("check_statuses", [])]
        return sum(s == "correct" for s in statuses) / len(statuses) if statuses else 0.0

    return compute


@metric
def checks_to_first_correct() -> Metric:
    """Mean 1-based index of the first correct check over samples that reached one (0 when none did)."""

    def compute(scores: list[SampleScore]) -> float:
        firsts = [
            metadata["first_correct_check"]
            for x in scores
            if (metadata := x.score.metadata or {}).get("first_correct_check")
        ]
        return sum(firsts) / len(firsts) if firsts else 0.0

    return compute


@scorer(
    metrics=[
        {"correct": [mean()], "speedup_vs_xla": [mean()], "roofline_share": [mean()], "infra_failure": [mean()]},
        per_sample_correctness(),
        checks_to_first_correct(),
    ]
)
def kernel_scorer(context: conditions.Context = "docs", target: str | None = None, run_dir: str | None = None):
    async def score(state: TaskState, _target: Target) -> Score:
        workload_id = state.metadata["workload_id"]
        checks = checks_of(state.messages)
        answer = submitted_answer(state.messages, state.output.completion if state.output else "")
        source = final_kernel(answer, checks)
        result = await anyio.to_thread.run_sync(judge, workload_id, source, target, context)
        statuses = [c["status"] for c in checks if c["status"] is not None]
        first = next((n for n, s in enumerate(statuses, 1) if s == "correct"), None)
        if run_dir and checks:
            write_trajectory(Path(run_dir), workload_id, f"epoch_{state.epoch}", checks, str(state.model), context)
        return Score(
            value={k: result[k] for k in ("correct", "speedup_vs_xla", "roofline_share", "infra_failure")},
            answer=result["status"],
            explanation=result["explanation"],
            metadata={
                "status": result["status"],
                "context": context,
                "checks": len(checks),
                "check_statuses": statuses,
                "first_correct_check": first,
                "first_correct_turn": next((c["turn"] for c in checks if c["status"] == "correct"), None),
                "estimate_kind": result.get("estimate_kind"),
                "attempt_id": result.get("attempt_id"),
                "workload_sha256": provenance.workload_hash(workload_id),
                "provenance": provenance.provenance(context),
            },
        )

    return score
