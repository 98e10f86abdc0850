"""One base for every mistake an agent can fix (jaxbench_mcp.errors.AgentError): what the frontends catch."""

import pytest

from jaxbench_mcp import api, errors
from jaxbench_mcp.campaigns import campaign
from jaxbench_mcp.catalog import conditions, docs, targets, workloads
from jaxbench_mcp.perf import tuning


@pytest.mark.parametrize(
    "cls, builtin",
    [
        (workloads.UnknownWorkload, KeyError),
        (workloads.UnknownSize, ValueError),
        (targets.UnknownTarget, ValueError),
        (api.UnknownAttempt, LookupError),
        (api.BadRequest, ValueError),
        (conditions.UnknownContext, ValueError),
        (docs.DocsError, ValueError),
        (docs.UnknownTopic, ValueError),
        (docs.PageOutOfRange, ValueError),
        (campaign.CampaignError, ValueError),
        (tuning.TuneError, ValueError),
    ],
)
def test_every_agent_mistake_is_an_agent_error_and_keeps_its_builtin_class(cls, builtin):
    assert issubclass(cls, errors.AgentError) and issubclass(cls, builtin)


@pytest.mark.parametrize("cls", [workloads.WorkloadDefinitionError, docs.DocsFormatError])
def test_faults_of_the_server_or_of_its_files_are_not(cls):
    assert not issubclass(cls, errors.AgentError)


def test_the_frontends_catch_the_base():
    with pytest.raises(errors.AgentError, match="unknown workload"):
        workloads.get_workload("no_such_workload")
    with pytest.raises(errors.AgentError, match="unknown tier"):
        api.list_workloads(tier="no_such_tier")
