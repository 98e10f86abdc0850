"""The expert reference kernels in tokamax_refs/: each one passes the full check ladder.

Every module found by jaxbench_mcp.catalog.expert_refs is checked exactly as a candidate would be: traced,
lowered and deviceless-compiled at FULL size for v5e and v6e, then run in TPU interpret mode at
SMALL size on a hidden seed (and at the full reduction length where the workload has one) and compared with
the float32/float64 truth. One seed: every CI run draws a new one, and test_checking covers the default three.
"""

import dataclasses
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from conftest import check_two_at_a_time
from jaxbench_mcp.catalog import expert_refs, workloads
from jaxbench_mcp.catalog.assets import asset_dir
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.requests import CheckRequest

REFS_DIR = asset_dir("tokamax_refs")
CHECK_TARGETS = ["v5e", "v6e"]
SEEDS = 1
# The workloads for which JAXBench ships a hand-optimized Pallas version (optimized.py).
JAXBENCH_EXPERTS = {
    "1p_Flash_Attention",
    "2p_GQA_Attention",
    "3p_MLA_Attention",
    "4p_Sparse_Attention",
    "6p_Paged_Attention",
    "7p_Ragged_Paged_Attention",
    "8p_GEMM",
    "11p_Megablox_GMM",
}


_WORKLOAD_ID = re.compile(r'^WORKLOAD_ID\s*=\s*"([^"]+)"', re.M)


def _ids_declared_in_files() -> set[str]:
    """The workload ids tokamax_refs/ declares, read from the files themselves (not via expert_refs)."""
    ids = set()
    for path in sorted(REFS_DIR.glob("*.py")):
        if path.name.startswith("_"):
            continue
        match = _WORKLOAD_ID.search(path.read_text())
        assert match, f"{path.name} declares no WORKLOAD_ID"
        ids.add(match.group(1))
    return ids


def _expert_ids() -> list[str]:
    return [w.id for w in workloads.all_workloads() if expert_refs.expert_module(w.id) is not None]


def _module(workload_id: str):
    module = expert_refs.expert_module(workload_id)
    if getattr(module, "REQUIRES", None) == "tokamax":
        pytest.importorskip("tokamax")
    return module


def test_every_jaxbench_expert_kernel_has_a_module():
    assert JAXBENCH_EXPERTS <= set(_expert_ids())


def test_has_expert_reference_is_true_exactly_for_the_workloads_with_a_module():
    declared = _ids_declared_in_files()
    assert declared == set(_expert_ids())
    for w in workloads.all_workloads():
        assert workloads.get_workload(w.id).has_expert_reference is (w.id in declared), w.id
    assert {w.id for w in workloads.select(has_expert=True)} == declared


@pytest.mark.parametrize("workload_id", _expert_ids())
def test_module_follows_the_expert_contract(workload_id):
    module = _module(workload_id)
    w = workloads.get_workload(workload_id)
    assert isinstance(module.SOURCE, str) and module.SOURCE.strip()
    # Blocks per size of the workload: full and small at least (a full_reduction size may have its own).
    assert {"full", "small"} <= set(module.BLOCKS) <= set(w.sizes)
    for blocks in module.BLOCKS.values():
        assert dataclasses.is_dataclass(blocks) and type(blocks).__dataclass_params__.frozen
    params = inspect.signature(module.workload).parameters.values()
    assert [p.kind for p in params] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * len(w.input_names)
    assert getattr(module, "REQUIRES", None) in (None, "tokamax")


@pytest.fixture(scope="module")
def verdicts():
    """Check every expert module once, two at a time on one checker."""
    checker = Checker(spares=2, slots=2)
    checker.start()
    try:
        requests = {}
        for workload_id in _expert_ids():
            module = expert_refs.expert_module(workload_id)
            # A module that needs tokamax where it is not installed: its test skips, saying so (_module).
            if getattr(module, "REQUIRES", None) != "tokamax" or importlib.util.find_spec("tokamax") is not None:
                source = Path(module.__file__).read_text()
                requests[workload_id] = CheckRequest.of(workload_id, source, targets=CHECK_TARGETS, seeds=SEEDS)
        return check_two_at_a_time(checker, requests)
    finally:
        checker.close()


@pytest.mark.parametrize("workload_id", _expert_ids())
def test_expert_reference_passes_the_check_ladder(verdicts, workload_id):
    _module(workload_id)  # skips, saying so, where the module needs tokamax and it is not installed
    verdict = verdicts[workload_id]
    compiled = [c.target for c in verdict.compiles if c.ok]
    assert verdict.status == "correct", verdict.summary()
    assert compiled == CHECK_TARGETS, verdict.summary()
    # The hidden seed at the run size, then one at the full reduction length where the workload has it.
    longer = workloads.FULL_REDUCTION in workloads.get_workload(verdict.workload_id).sizes
    assert [s.size for s in verdict.seeds] == [None] * SEEDS + [workloads.FULL_REDUCTION] * longer, verdict.summary()
    assert all(s.passed for s in verdict.seeds), verdict.summary()
    assert verdict.pallas_calls >= 1
