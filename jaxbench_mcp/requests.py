"""What a check or a profile is asked to do, validated once and carried unchanged.

JaxBench builds a request from its caller's arguments (`CheckRequest.of`, `ProfileRequest.of`): every mistake an
agent can make in them raises its AgentError here, before an attempt is recorded, with the message the agent
reads. The frozen request then travels as it is to the executor (fleet/executors), over Ray to a host of the
fleet (model_dump on one side, model_validate on the other: fleet/protocol), and to the checker or profiler, none
of which validates the caller's arguments again. The fields' own bounds (a seed count within MAX_SEEDS) hold for
a request however it is made; the catalog's checks (the workload exists, the size and targets are known) are
`of`'s.

Validation of what a host can do (a plain CPU host compiles for no TPU generation) stays with the host.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from jaxbench_mcp.catalog import targets as target_catalog, workloads
from jaxbench_mcp.errors import BadRequest
from jaxbench_mcp.store import text_problem

# The checker draws this many hidden seeds unless asked for another count; a check runs on 1 to MAX_SEEDS of them.
DEFAULT_SEEDS = 3
MAX_SEEDS = 16


def check_source(source: str) -> None:
    """A candidate's source must be text the attempts store can keep (valid Unicode): else BadRequest, before
    any attempt is recorded."""
    if not isinstance(source, str):
        raise BadRequest(f"the source must be text, not {type(source).__name__}")
    problem = text_problem(source)
    if problem:
        raise BadRequest(problem)


def _resolve_targets(spec: str | Sequence[str] | None, default_targets: Sequence[str]) -> list[str]:
    """The TPU generations a job compiles for: the caller's, canonical and without repeats, else the default."""
    return target_catalog.parse_targets(spec) if spec else list(default_targets)


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    workload_id: str = Field(description="the workload's canonical id")
    source: str


class CheckRequest(_Request):
    """One check of one candidate, as validated by the library."""

    targets: list[str] = Field(
        default_factory=list,
        description="TPU generations to compile for, resolved (JaxBench puts its executor's default here when the "
        "caller names none); empty: the checking host's default",
    )
    size: str | None = Field(None, description="the run size; None: the host's (full on a TPU, small elsewhere)")
    seeds: int = Field(DEFAULT_SEEDS, ge=1, le=MAX_SEEDS)
    require_pallas: bool = True
    estimate: bool = Field(
        False,
        description="also keep what a static estimate of the compiled program needs (a profile's own check): the "
        "profile that follows then estimates the program this check judged, without compiling it again",
    )

    @classmethod
    def of(
        cls,
        workload_id: str,
        source: str,
        targets: str | Sequence[str] | None = None,
        size: str | None = None,
        seeds: int = DEFAULT_SEEDS,
        require_pallas: bool = True,
        default_targets: Sequence[str] = (),
    ) -> CheckRequest:
        """The request for a caller's arguments; an agent's mistake raises its AgentError (unknown workload,
        source that is not text, unknown target or size, seeds out of range), in that order."""
        w = workloads.get_workload(workload_id)
        check_source(source)
        chosen = _resolve_targets(targets, default_targets)
        if size is not None:
            w.size_params(size)
        if not 1 <= seeds <= MAX_SEEDS:
            raise BadRequest(f"seeds must be between 1 and {MAX_SEEDS}")
        return cls(
            workload_id=w.id, source=source, targets=chosen, size=size, seeds=seeds, require_pallas=require_pallas
        )


class ProfileRequest(_Request):
    """One profile of one candidate (which is checked first), as validated by the library."""

    targets: list[str] = Field(
        default_factory=list,
        description="TPU generations to profile for, resolved; empty: every generation (roofline bounds on a host "
        "without libtpu)",
    )

    @classmethod
    def of(
        cls,
        workload_id: str,
        source: str,
        targets: str | Sequence[str] | None = None,
        default_targets: Sequence[str] = (),
    ) -> ProfileRequest:
        """The request for a caller's arguments; an agent's mistake raises its AgentError (unknown workload,
        source that is not text, unknown target), in that order."""
        w = workloads.get_workload(workload_id)
        check_source(source)
        return cls(workload_id=w.id, source=source, targets=_resolve_targets(targets, default_targets))

    def check_request(self, seeds: int = DEFAULT_SEEDS) -> CheckRequest:
        """The check a profile makes first: the same candidate and targets at the host's run size."""
        return CheckRequest(
            workload_id=self.workload_id, source=self.source, targets=list(self.targets), seeds=seeds, estimate=True
        )
