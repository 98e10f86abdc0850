"""Requests (jaxbench_mcp.requests) and the fleet's typed messages (jaxbench_mcp.fleet.protocol): a request is
validated once, with the messages an agent reads, is frozen, and crosses a process boundary unchanged."""

import pydantic
import pytest

from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.errors import AgentError, BadRequest
from jaxbench_mcp.fleet.protocol import JOB, ActorReply, FleetCheckJob, FleetProfileJob
from jaxbench_mcp.models import Profile, Verdict
from jaxbench_mcp.requests import DEFAULT_SEEDS, MAX_SEEDS, CheckRequest, ProfileRequest


def test_a_check_request_is_resolved_canonical_and_defaulted():
    request = CheckRequest.of("8p", "x = 1", "V6E, tpu-v5e,v6e", "full", 2, require_pallas=False)
    assert request == CheckRequest(
        workload_id="8p_GEMM", source="x = 1", targets=["v6e", "v5e"], size="full", seeds=2, require_pallas=False
    )
    plain = CheckRequest.of("8p_GEMM", "x = 1", default_targets=["v5p"])
    assert plain.targets == ["v5p"] and plain.size is None and plain.seeds == DEFAULT_SEEDS and plain.require_pallas
    assert CheckRequest.of("8p_GEMM", "x = 1", ["7x"], default_targets=["v5p"]).targets == ["7x"]
    assert CheckRequest.of("8p_GEMM", "x = 1").targets == []  # no default given: the checking host's


def test_an_agents_mistakes_raise_their_agent_errors_with_the_messages_it_reads():
    with pytest.raises(workloads.UnknownWorkload, match="unknown workload '8p_GEM'"):
        CheckRequest.of("8p_GEM", "x = 1")
    with pytest.raises(BadRequest, match="the source must be text, not bytes"):
        CheckRequest.of("8p_GEMM", b"x = 1")
    with pytest.raises(BadRequest, match="lone surrogate U\\+D800 at line 1, column 6"):
        CheckRequest.of("8p_GEMM", "x = '\ud800'")
    with pytest.raises(targets.UnknownTarget, match="unknown TPU generation 'v9'; choose from v4, v5e"):
        CheckRequest.of("8p_GEMM", "x = 1", ["v9"])
    with pytest.raises(workloads.UnknownSize, match="unknown size 'huge' for 8p_GEMM; choose one of full, small"):
        CheckRequest.of("8p_GEMM", "x = 1", size="huge")
    for seeds in (0, MAX_SEEDS + 1):
        with pytest.raises(BadRequest, match=f"seeds must be between 1 and {MAX_SEEDS}"):
            CheckRequest.of("8p_GEMM", "x = 1", seeds=seeds)
    # The first mistake wins, in the order the library always checked them: the workload, then the source.
    with pytest.raises(workloads.UnknownWorkload):
        CheckRequest.of("nope", "x = '\ud800'", ["v9"], seeds=99)
    with pytest.raises(workloads.UnknownWorkload):
        ProfileRequest.of("nope", "x = 1")
    with pytest.raises(targets.UnknownTarget):
        ProfileRequest.of("8p_GEMM", "x = 1", "v9")
    # Every one of them is the caller's to fix, and still the built-in class it always was.
    assert issubclass(workloads.UnknownWorkload, (AgentError, KeyError))
    assert issubclass(BadRequest, ValueError) and issubclass(targets.UnknownTarget, ValueError)


def test_a_request_is_frozen_and_bounded_however_it_is_made():
    request = CheckRequest.of("8p_GEMM", "x = 1", ["v6e"])
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        request.seeds = 5
    for seeds in (0, MAX_SEEDS + 1):
        with pytest.raises(pydantic.ValidationError):
            CheckRequest(workload_id="8p_GEMM", source="x", seeds=seeds)
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        CheckRequest.model_validate({"workload_id": "8p_GEMM", "source": "x", "targets_": ["v6e"]})
    assert "targets_" not in CheckRequest.model_fields and "targets_" not in ProfileRequest.model_fields


def test_a_profile_request_and_the_check_it_makes_first():
    profile = ProfileRequest.of("12p", "x = 1", "v6e,v5e", default_targets=["v5p"])
    assert profile == ProfileRequest(workload_id="12p_RMSNorm", source="x = 1", targets=["v6e", "v5e"])
    assert ProfileRequest.of("12p", "x = 1", default_targets=["v5p"]).targets == ["v5p"]
    check = profile.check_request()
    assert check == CheckRequest(workload_id="12p_RMSNorm", source="x = 1", targets=["v6e", "v5e"], estimate=True)
    assert check.size is None and check.seeds == DEFAULT_SEEDS and check.require_pallas
    # A check of its own keeps nothing for a profile.
    assert not CheckRequest.of("12p", "x = 1", "v6e").estimate


def _verdict(**fields) -> Verdict:
    base = {
        "status": "correct",
        "message": "",
        "workload_id": "8p_GEMM",
        "size": "small",
        "targets": ["v6e"],
        "tier": "cpu_libtpu",
    }
    return Verdict(**{**base, **fields})


def test_fleet_jobs_cross_a_process_boundary_as_json_and_come_back_the_same_typed_job():
    import json

    check = FleetCheckJob(request=CheckRequest.of("8p_GEMM", "x = 1", ["v6e"], "full", 5, False))
    wire = json.loads(json.dumps(check.model_dump(mode="json")))  # what a pipe or Ray carries: plain data
    assert wire["kind"] == "check" and wire["request"]["targets"] == ["v6e"]
    back = JOB.validate_python(wire)
    assert isinstance(back, FleetCheckJob) and back == check and back.request == check.request

    verdict = _verdict(max_abs_error=float("nan"), warnings=["w"])
    profile = FleetProfileJob(request=ProfileRequest.of("8p_GEMM", "x = 1", ["v6e"]), verdict=verdict)
    back = JOB.validate_python(json.loads(json.dumps(profile.model_dump(mode="json"))))
    assert isinstance(back, FleetProfileJob) and back.request == profile.request
    assert back.verdict.warnings == ["w"] and back.verdict.status == "correct"

    # A job is one of the two kinds, with exactly their fields: nothing keyed by a method's name gets through.
    with pytest.raises(pydantic.ValidationError):
        JOB.validate_python({**wire, "kind": "close"})
    with pytest.raises(pydantic.ValidationError):
        JOB.validate_python({**wire, "payload": {}})
    with pytest.raises(pydantic.ValidationError):  # the request's own bounds hold on arrival too
        JOB.validate_python({**wire, "request": {**wire["request"], "seeds": MAX_SEEDS + 1}})


def test_an_actor_reply_carries_a_verdict_or_a_profile_or_a_cancel():
    reply = ActorReply(verdict=_verdict(), log="== events ==", progress=["load: done"])
    back = ActorReply.model_validate(reply.model_dump(mode="json"))
    assert back == reply and back.verdict.workload_id == "8p_GEMM" and not back.cancelled
    profile = Profile(workload_id="8p_GEMM", tier="cpu_libtpu", kind="static estimate", label="x", verdict=_verdict())
    assert ActorReply.model_validate(ActorReply(profile=profile).model_dump(mode="json")).profile == profile
    assert ActorReply.model_validate({"cancelled": True}).cancelled
