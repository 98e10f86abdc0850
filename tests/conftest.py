import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest

# Tests run on the CPU even on a host with libtpu: the server process itself never takes the TPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No spare workers in the servers and checkers the tests start without saying how many (the test servers run a few
# checks each, and CI's two cores are what runs out: warming four spares costs about 8 CPU-seconds per server). The
# tests of spares set them explicitly; test_lifecycle's server runs with the default.
os.environ.setdefault("JAXBENCH_MCP_SPARES", "0")

DATA_DIR = Path(__file__).parent / "data"
FACTS = {w["id"]: w for w in json.loads((DATA_DIR / "jaxbench_facts.json").read_text())["workloads"]}

# Modules whose every test starts worker processes or servers, compiles for TPU, or runs interpret mode. The
# fast lane (`scripts/dev.sh test-fast`, i.e. `-m "not slow"`) leaves them out; mixed modules mark their slow
# tests one by one with @pytest.mark.slow.
SLOW_MODULES = {
    "test_checking",
    "test_hostile",
    "test_expert_refs",
    "test_lifecycle",
    "test_inspector",
    "test_cli",
    "test_degenerate_audit",
    "test_seeds",
    "test_internals_interpret",
    "test_wheel",
    "test_fleet",
    "test_solutions",
    "test_agent_configs",
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def check_two_at_a_time(checker, requests: dict) -> dict:
    """Each named request's verdict, checked two at a time on one started checker, as one server would (one check
    keeps about one and a half of CI's two cores busy): for the modules that check a whole corpus once."""

    def run(item):
        name, request = item
        verdict, outcome = checker.check(request)
        if outcome is not None:  # None: no worker could start, and the verdict says so
            outcome.cleanup()
        return name, verdict

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, requests.items()))


async def verdict_of(client, result) -> dict:
    """The verdict of a check_kernel call. A check that outlasts the call's time budget comes back as 'running'
    with an attempt id (the tool's contract; a loaded host gets there): its verdict is then collected through
    list_attempts, as an agent would."""
    outcome = result.structured_content
    assert outcome is not None, result.content[0].text
    deadline = time.monotonic() + 300
    while outcome["state"] == "running" and time.monotonic() < deadline:
        await anyio.sleep(1)
        listed = await client.call_tool("list_attempts", {"attempt_id": outcome["attempt_id"]})
        if listed.structured_content["detail"]["state"] != "running":
            return listed.structured_content["detail"]["verdict"]
    assert outcome["state"] == "done", f"attempt {outcome['attempt_id']} still running after 300 s"
    return outcome["verdict"]


@pytest.fixture
def libtpu_tier():
    """For tests that assume a CPU host with libtpu (deviceless TPU compiles): skipped, saying so, elsewhere."""
    from jaxbench_mcp.catalog import targets

    if targets.detect_tier() is not targets.Tier.CPU_LIBTPU:
        pytest.skip(f"needs a CPU host with libtpu; this host's tier is {targets.detect_tier()}")
