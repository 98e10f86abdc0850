"""JAXBench's workloads as a verifiers taskset: one task per workload, the jaxbench-mcp tools in each rollout,
and a reward that keeps three outcomes apart (jaxbench_mcp.campaigns.outcomes).

The final kernel is the last ```python block of the agent's final answer that defines workload(, else the
source of its last check_kernel call. It is judged again, after the rollout, by a server of the environment's
own (profile_kernel: a check, then the speedup over XLA), so the reward never rests on what the agent claims:

    correct            the kernel is correct: reward 1 (`correct`), or 1 only when faster than XLA (`fast_1`),
                       or log(speedup over XLA) clipped to +-log 100 (`log_speedup`)
    candidate failure  any other verdict (incorrect, invalid, lowering/compile/runtime error, the candidate's
                       timeout or crash, no pallas), or no kernel at all: reward 0
    infrastructure     a server_error verdict, or no verdict at all (the server did not start, died, timed out,
      failure          lost its host): no reward. Scoring raises a ToolsetError, so the trace ends with that
                       error and its rewards stay None (unscored), which trainers drop and `retries` rules
                       (`type = "ToolsetError"`) can rerun; it is never a 0 for the candidate.

The metrics carry the outcome (`correct_outcome`, `candidate_failure`, `infra_failure`), every reward variant
when there is one, the speedup and the number of checks; `trace.info["jaxbench"]` the judged status and detail.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Literal

import verifiers.v1 as vf

from jaxbench import server
from jaxbench.toolset import JaxbenchToolset, JaxbenchToolsetConfig
from jaxbench_mcp.campaigns import outcomes

CHECK_TOOL = "check_kernel"
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
RewardName = Literal["correct", "fast_1", "log_speedup"]


def task_prompt(workload_id: str, context: str, max_checks: int) -> str:
    """What the agent is asked, in the task's condition (no doc step under `none`)."""
    steps = [
        f"Call get_workload('{workload_id}', size='full') and get_workload('{workload_id}', size='small') for the "
        "contract.",
        *(
            [f"Call read_docs(workload_id='{workload_id}') for the Pallas docs that matter here."]
            if context == "docs"
            else []
        ),
        "Write a Python file that defines workload(*inputs) with a Pallas TPU kernel (pallas_call).",
        f"Call check_kernel with its source and fix what the verdict says (at most {max_checks} checks).",
        "Once it is correct you may call profile_kernel to compare with the XLA baseline.",
        "Finish with the complete Python source of your final kernel in a ```python block.",
    ]
    head = f"Write a fast, correct Pallas TPU kernel for JAXBench workload {workload_id}.\n"
    return head + "".join(f"{n}. {s}\n" for n, s in enumerate(steps, 1))


def checks_of(trace: vf.Trace) -> list[str]:
    """The sources of the agent's check_kernel calls in order (a harness may prefix tool names: jaxbench_...)."""
    sources = []
    for message in trace.assistant_messages:
        for call in message.tool_calls or []:
            if call.name == CHECK_TOOL or call.name.endswith("_" + CHECK_TOOL):
                try:
                    source = json.loads(call.arguments or "{}").get("source")
                except ValueError:
                    continue
                if isinstance(source, str):
                    sources.append(source)
    return sources


def final_kernel(answer: str, checks: list[str]) -> str | None:
    """The answer's last ```python block that defines workload(, else the last kernel checked, else None."""
    blocks = [b for b in _FENCE.findall(answer or "") if "def workload(" in b]
    if blocks:
        return blocks[-1]
    return checks[-1] if checks else None


class JaxbenchData(vf.TaskData):
    workload_id: str


class JaxbenchTaskConfig(vf.TaskConfig):
    server: JaxbenchToolsetConfig = JaxbenchToolsetConfig()
    """How the server is started (command, context condition, environment), for the tools and the judge."""
    max_checks: int = 8
    """check_kernel calls an agent may make; the rollout stops at the next model call after the last one."""
    target: str | None = None
    """The TPU generation to judge and compare speed on (default: the host's)."""
    reward: RewardName = "correct"
    """Which reward variant is the rollout's reward (all of them are metrics)."""
    judge_timeout: float = 900.0
    """Seconds the after-rollout judgement may take before it counts as the machinery's failure."""


class JaxbenchTask(vf.Task[JaxbenchData, vf.State, JaxbenchTaskConfig]):
    @classmethod
    def toolsets(cls, config: JaxbenchTaskConfig) -> list[vf.Toolset]:
        return [JaxbenchToolset(config.server)]

    @vf.stop
    async def checks_spent(self, trace: vf.Trace) -> bool:
        return len(checks_of(trace)) >= self.config.max_checks

    async def judged(self, trace: vf.Trace) -> dict[str, Any]:
        """The final kernel's judgement, once per trace (the metrics and the reward share it)."""
        pending: dict[str, asyncio.Task] = self.__dict__.setdefault("_judging", {})
        if trace.id not in pending:
            pending[trace.id] = asyncio.ensure_future(self._judge(trace))
        return await pending[trace.id]

    async def _judge(self, trace: vf.Trace) -> dict[str, Any]:
        checks = checks_of(trace)
        source = final_kernel(trace.last_reply, checks)
        cfg = self.config.server
        result = await server.judge(
            self.data.workload_id,
            source,
            command=cfg.command or server.default_command(),
            context=cfg.context,
            target=self.config.target,
            env=cfg.env,
            timeout=self.config.judge_timeout,
        )
        result["checks"] = len(checks)
        trace.info["jaxbench"] = {k: result[k] for k in ("outcome", "status", "speedup", "detail", "checks")}
        return result

    @vf.metric
    async def outcome(self, trace: vf.Trace) -> dict[str, float]:
        result = await self.judged(trace)
        values = {
            "correct_outcome": float(result["outcome"] == outcomes.CORRECT),
            "candidate_failure": float(result["outcome"] == outcomes.CANDIDATE_FAILURE),
            "infra_failure": float(result["outcome"] == outcomes.INFRA_FAILURE),
            "checks": float(result["checks"]),
        }
        if result["outcome"] != outcomes.INFRA_FAILURE:
            values |= {k: float(result[k]) for k in ("correct", "fast_1", "log_speedup")}
            if isinstance(result["speedup"], (int, float)):
                values["speedup_vs_xla"] = float(result["speedup"])
        return values

    @vf.reward
    async def kernel(self, trace: vf.Trace) -> float:
        result = await self.judged(trace)
        if result["outcome"] == outcomes.INFRA_FAILURE:
            # Not the candidate's doing: no reward at all (the trace errs with the toolset's boundary).
            raise vf.ToolsetError(f"jaxbench infrastructure failure, not scored: {result['detail']}")
        return float(result[self.config.reward])


class JaxbenchTasksetConfig(vf.TasksetConfig):
    workloads: list[str] | str = "12p_RMSNorm"
    """JAXBench ids (a list or comma-separated), or 'all' for the 50 workloads."""
    task: JaxbenchTaskConfig = JaxbenchTaskConfig()


class JaxbenchTaskset(vf.Taskset[JaxbenchTask, JaxbenchTasksetConfig]):
    def load(self) -> list[JaxbenchTask]:
        ids = workload_list(self.config.workloads)
        task = self.config.task
        return [
            JaxbenchTask(
                JaxbenchData(id=w, name=w, workload_id=w, prompt=task_prompt(w, task.server.context, task.max_checks)),
                task,
            )
            for w in ids
        ]


def workload_list(workloads: list[str] | str) -> list[str]:
    known = server.workload_ids()
    names = workloads.split(",") if isinstance(workloads, str) else list(workloads)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:
        return known
    by_lower = {w.lower(): w for w in known}
    unknown = [n for n in names if n.lower() not in by_lower]
    if unknown:
        raise ValueError(f"unknown JAXBench workloads {unknown}: the ids are {', '.join(known)}")
    return [by_lower[n.lower()] for n in names]
