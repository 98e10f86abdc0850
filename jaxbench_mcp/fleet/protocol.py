"""The typed messages of the fleet: a job as the server's executor hands it to the proxy and the proxy to a host
actor, and the actor's reply. Each crosses a process boundary (the server's pipe to its proxy, Ray's calls to an
actor) as JSON-ready data: `model_dump(mode="json")` on one side, `model_validate` (JOB.validate_python for a
job) on the other, so that what arrives is the request that was sent, typed, never a dict keyed by argument
names. Every host runs the server's own jaxbench-mcp version (the proxy refuses any other), so both ends speak
the same models.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from jaxbench_mcp.models import Profile, Verdict
from jaxbench_mcp.requests import CheckRequest, ProfileRequest


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FleetCheckJob(_Message):
    """Check a candidate on a host: the request, as JaxBench validated it."""

    kind: Literal["check"] = "check"
    request: CheckRequest


class FleetProfileJob(_Message):
    """Profile a checked candidate on a host: the request and the verdict of its check."""

    kind: Literal["profile"] = "profile"
    request: ProfileRequest
    verdict: Verdict


FleetJob = Annotated[FleetCheckJob | FleetProfileJob, Field(discriminator="kind")]
# Reads a job from its JSON-ready form, whichever kind it is.
JOB: TypeAdapter[FleetCheckJob | FleetProfileJob] = TypeAdapter(FleetJob)


class ActorReply(_Message):
    """A host actor's answer to one try of a job: cancelled, or the verdict (with the attempt's log) of a check,
    or the profile of a profile; and every progress line the try made (the proxy relays those it has not yet)."""

    progress: list[str] = Field(default_factory=list)
    cancelled: bool = False
    verdict: Verdict | None = None
    log: str = ""
    profile: Profile | None = None
