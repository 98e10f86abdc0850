"""JAXBench Pallas TPU kernels as a verifiers (Prime Intellect) environment over the jaxbench-mcp server.

    import jaxbench
    env = jaxbench.load_environment(workloads="8p_GEMM,12p_RMSNorm", context="docs", max_checks=8)

or from verifiers' CLI (this package exports the taskset and its default harness):

    vf-eval jaxbench --model MODEL --env.agent.runtime.type subprocess \
        --env.taskset.workloads 8p_GEMM,12p_RMSNorm --env.taskset.task.server.context none

One task per workload; each rollout gets the server's tools (check_kernel, profile_kernel, get_workload,
read_docs under `docs`, ...) forwarded from a server started over stdio, and the reward keeps a correct kernel,
the candidate's failure and the machinery's failure apart (see jaxbench.taskset).
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

from jaxbench import server
from jaxbench.harness import JaxbenchHarness, JaxbenchHarnessConfig
from jaxbench.taskset import JaxbenchTaskConfig, JaxbenchTaskset, JaxbenchTasksetConfig, RewardName
from jaxbench.toolset import JaxbenchToolsetConfig

__all__ = ["JaxbenchHarness", "JaxbenchTaskset", "load_environment"]


def load_environment(
    workloads: list[str] | str = "12p_RMSNorm",
    context: str = "docs",
    max_checks: int = 8,
    target: str | None = None,
    reward: RewardName = "correct",
    server_command: list[str] | None = None,
    server_env: dict[str, str] | None = None,
    max_turns: int = 24,
    **agent: Any,
) -> vf.Env:
    """A verifiers environment of JAXBench workloads (ids, comma-separated ids, or 'all').

    `context` is the docs ablation's arm (docs | none), `max_checks` the check_kernel budget, `target` the TPU
    generation to judge on, `reward` the rollout's reward variant (correct | fast_1 | log_speedup).
    `server_command` replaces the checkout's .venv/bin/jaxbench-mcp (the words before `serve`), `server_env`
    adds variables for the server. The agent runs in-process (the harness here) on the host: its kernels run
    in the server's sandbox, never in the rollout. Further keywords go to the agent's AgentConfig (model,
    client, sampling, timeout, retries ...)."""
    tools = JaxbenchToolsetConfig(command=server_command or [], context=context, env=server_env or {})
    server.serve_args(context)  # an unknown condition fails here, not in the first rollout
    taskset = JaxbenchTasksetConfig(
        id="jaxbench",
        workloads=workloads,
        task=JaxbenchTaskConfig(server=tools, max_checks=max_checks, target=target, reward=reward),
    )
    config = vf.SingleAgentEnvConfig(
        taskset=taskset,
        agent=vf.AgentConfig(
            harness=JaxbenchHarnessConfig(max_turns=max_turns), runtime=vf.SubprocessConfig(), **agent
        ),
    )
    return vf.load_environment(config)
