"""Every workload against the JAXBench facts: shapes, dtypes, FLOPs, seeds, and a real small run."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import FACTS
from jaxbench_mcp import workloads
from jaxbench_mcp.comparison import constant_output_passes

IDS = sorted(FACTS, key=lambda i: int(i.split("p_")[0].split("k_")[0]))


def test_registry_holds_exactly_the_50_jaxbench_ids():
    assert [w.id for w in workloads.all_workloads()] == IDS


@pytest.mark.parametrize("workload_id", IDS)
def test_full_size_contract_matches_jaxbench(workload_id):
    w = workloads.get_workload(workload_id)
    facts = FACTS[workload_id]["full"]
    specs = w.input_specs("full")
    tensors = [(a.tensor.shape, a.tensor.dtype) for a in specs if a.tensor is not None]
    assert tensors == [(tuple(i["shape"]), i["dtype"]) for i in facts["inputs"]]
    assert [str(a.static_value) for a in specs if a.tensor is None] == [s["value"] for s in facts["static_inputs"]]
    outputs = [(o.shape, o.dtype) for o in w.output_specs("full")]
    assert outputs == [(tuple(o["shape"]), o["dtype"]) for o in facts["outputs"]]
    assert w.flops("full") == facts["flops"]


@pytest.mark.parametrize("workload_id", IDS)
def test_small_size_runs_with_declared_shapes_and_a_meaningful_output(workload_id):
    w = workloads.get_workload(workload_id)
    facts = FACTS[workload_id]["small"]
    inputs = w.create_inputs("small", seed=42)
    arrays = [x for i, x in enumerate(inputs) if i not in w.static_argnums]
    assert [(tuple(x.shape), str(x.dtype)) for x in arrays] == [(tuple(i["shape"]), i["dtype"]) for i in facts["inputs"]]
    out = np.asarray(w.jitted_reference()(*inputs))
    expected = facts["outputs"][0]
    assert (out.shape, str(out.dtype)) == (tuple(expected["shape"]), expected["dtype"])
    assert [(o.shape, o.dtype) for o in w.output_specs("small")] == [(out.shape, str(out.dtype))]
    assert np.isfinite(out.astype(np.float32)).all()
    # A workload whose output a constant would match must say so; one that says so must be right.
    assert constant_output_passes(out) == w.degenerate_output, (
        "declare DEGENERATE_OUTPUT (and explain in NOTES)" if not w.degenerate_output else "DEGENERATE_OUTPUT is wrong"
    )


@pytest.mark.parametrize("workload_id", IDS)
def test_seeds_are_reproducible_and_distinct(workload_id):
    w = workloads.get_workload(workload_id)
    first, again, other = (w.create_inputs("small", seed=s) for s in (7, 7, 8))
    floats = [i for i, x in enumerate(first) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats, "every workload has at least one floating-point input"
    for i, (a, b) in enumerate(zip(first, again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(not np.array_equal(np.asarray(first[i]), np.asarray(other[i])) for i in floats)
