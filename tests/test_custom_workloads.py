"""Workloads users bring: a directory of our modules or of imported formats, validation, named configurations.

The end-to-end tests (a custom workload through the MCP SDK client: list, get_workload, check correct and
incorrect, profile) start workers and are marked slow; the rest are fast.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import anyio
import numpy as np
import pytest
from mcp import Client

from jaxbench_mcp import api
from jaxbench_mcp.catalog import formats as workload_formats, validation as workload_validation, workloads
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.frontends.server import build_server
from jaxbench_mcp.models import Verdict
from jaxbench_mcp.requests import CheckRequest
from jaxbench_mcp.store import Store
from jaxbench_mcp.taxonomy import Status

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_DIR = ROOT / "examples" / "custom_workloads"
EXAMPLE_KERNEL = ROOT / "examples" / "swiglu_softcap_kernel.py"
IMPORTED = ROOT / "tests" / "data" / "imported"


@pytest.fixture
def use_dirs():
    """Point the registry at custom directories for one test; the 50 alone again afterwards."""

    def use(*dirs):
        workloads.use_directories(list(dirs))

    yield use
    workloads.use_directories(None)


def _write(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


_GOOD = """
    import jax
    import jax.numpy as jnp

    ID = "scaled_tanh"
    OPERATOR = "elementwise_tanh"
    DESCRIPTION = "out = tanh(x) * scale, bfloat16."
    SIZES = {"full": {"R": 4096, "C": 1024}, "small": {"R": 64, "C": 256}, "tall": {"R": 256, "C": 128}}
    INPUT_NAMES = ("x", "scale")


    def create_inputs(*, seed, R, C):
        k1, k2 = jax.random.split(jax.random.key(seed))
        return jax.random.normal(k1, (R, C), jnp.bfloat16), jax.random.normal(k2, (C,), jnp.bfloat16)


    def reference(x, scale):
        return jnp.tanh(x) * scale
"""


# ---- the registry ------------------------------------------------------------------------------------


def test_a_custom_directory_adds_tier_custom_workloads_and_keeps_the_50(use_dirs):
    use_dirs(EXAMPLE_DIR)
    w = workloads.get_workload("swiglu_softcap")
    assert (w.tier, w.configs, w.model) == ("custom", ("held_out",), "custom workload (swiglu_softcap.py)")
    assert [x.id for x in workloads.select(tier="custom")] == ["swiglu_softcap"]
    assert len([x for x in workloads.all_workloads() if x.tier != "custom"]) == 50
    assert workloads.broken_workloads() == []
    # No flops(): XLA's cost analysis of the reference, at least the two matmuls' 2*T*D*F each.
    T, D, F = (w.sizes["full"][k] for k in ("T", "D", "F"))
    assert w.flops_source.startswith("XLA") and 4 * T * D * F <= w.flops("full") < 5 * T * D * F
    assert [tuple(a.tensor.shape) for a in w.input_specs("held_out")] == [(128, 1024), (1024, 10240), (1024, 10240)]
    spec = api.get_workload("swiglu_softcap", "small")
    assert spec.tier == "custom" and "held_out" in spec.other_sizes and "def reference" in spec.reference_source


def test_the_flops_of_a_reference_that_loops_count_every_trip(use_dirs, tmp_path):
    # XLA's cost analysis counts a loop's body once: a reference scanning 12 layers would report 1/12 of its FLOPs.
    _write(
        tmp_path,
        "layered.py",
        """
        import jax
        import jax.numpy as jnp

        ID = "layered_matmul"
        OPERATOR = "repeated_matmul"
        DESCRIPTION = "x @ w, twelve times over, float32."
        SIZES = {"full": {"N": 512}, "small": {"N": 128}}
        INPUT_NAMES = ("x", "w")


        def create_inputs(*, seed, N):
            k1, k2 = jax.random.split(jax.random.key(seed))
            return jax.random.normal(k1, (N, N)), jax.random.normal(k2, (N, N)) / N


        def reference(x, w):
            return jax.lax.fori_loop(0, 12, lambda i, y: y @ w, x)
        """,
    )
    use_dirs(tmp_path)
    w = workloads.get_workload("layered_matmul")
    assert w.flops_source.startswith("XLA") and w.flops("full") == 12 * 2 * 512**3


def test_the_environment_variable_is_what_the_worker_inherits(use_dirs, tmp_path):
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.sandbox import isolation as sandbox, jobs

    use_dirs(EXAMPLE_DIR)
    env = jobs._scrubbed_env(str(tmp_path), targets.Tier.CPU)
    assert env[workloads.CUSTOM_ENV] == str(EXAMPLE_DIR)
    cmd = sandbox.bwrap_command(["true"], tmp_path)
    bound = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--ro-bind"]
    assert str(EXAMPLE_DIR) in bound


def test_broken_entries_are_listed_field_by_field_and_stop_nothing(use_dirs, tmp_path):
    _write(tmp_path, "good.py", _GOOD)
    _write(tmp_path, "raises.py", "raise RuntimeError('no GPU here')\n")
    _write(tmp_path, "z_dup.py", _GOOD)  # the same id as good.py, found after it
    _write(tmp_path, "clash.py", _GOOD.replace('"scaled_tanh"', '"8p_GEMM"'))
    _write(tmp_path, "jaxbench_like.py", _GOOD.replace('"scaled_tanh"', '"99p_Mine"'))
    _write(
        tmp_path,
        "bad_size.py",
        _GOOD.replace('"scaled_tanh"', '"bad_size"').replace(
            "return jax.random.normal(k1, (R, C), jnp.bfloat16), ",
            "return jax.random.normal(k1, (R, C), jnp.bfloat16).reshape(R // 128, 128, C), ",
        ),
    )
    _write(
        tmp_path,
        "int_output.py",
        _GOOD.replace('"scaled_tanh"', '"int_output"').replace(
            "return jnp.tanh(x) * scale", "return (x > 0).astype(jnp.int32)"
        ),
    )
    _write(
        tmp_path,
        "no_reference.py",
        _GOOD.replace('"scaled_tanh"', '"no_reference"').replace("def reference", "def ref"),
    )
    use_dirs(tmp_path)
    assert workloads.get_workload("scaled_tanh").tier == "custom"
    assert len(workloads.all_workloads()) == 51  # the 50 and good.py
    broken = {b.path.name: (b.field, b.problem) for b in workloads.broken_workloads()}
    assert broken.keys() == {
        "raises.py",
        "z_dup.py",
        "clash.py",
        "jaxbench_like.py",
        "bad_size.py",
        "int_output.py",
        "no_reference.py",
    }
    assert broken["raises.py"][0] == "module" and "RuntimeError: no GPU here" in broken["raises.py"][1]
    assert broken["z_dup.py"][0] == "ID" and "good.py" in broken["z_dup.py"][1]
    # The 50's ids start with a digit and custom ones with a letter: the id form itself keeps them apart.
    assert broken["clash.py"][0] == "ID" and "kept for the 50" in broken["clash.py"][1]
    assert broken["jaxbench_like.py"][0] == "ID" and "JAXBench id" in broken["jaxbench_like.py"][1]
    # R = 64 holds no row of 128 at small size: that size, not the module, is named.
    assert broken["bad_size.py"][0] == "SIZES['small']" and "does not trace" in broken["bad_size.py"][1]
    assert broken["int_output.py"][0] == "reference" and "int32" in broken["int_output.py"][1]
    assert broken["no_reference.py"] == ("reference", "missing function")
    with pytest.raises(workloads.UnknownWorkload):
        workloads.get_workload("int_output")


def test_a_missing_directory_is_reported_not_fatal(use_dirs, tmp_path):
    use_dirs(tmp_path / "nowhere")
    assert len(workloads.all_workloads()) == 50
    assert [b.field for b in workloads.broken_workloads()] == ["directory"]


# ---- validation ---------------------------------------------------------------------------------------


def _steps(report) -> dict[str, list]:
    found: dict[str, list] = {}
    for s in report.steps:
        found.setdefault(s.name, []).append(s)
    return found


def test_validate_passes_the_shipped_example():
    [report] = workload_validation.validate(EXAMPLE_DIR / "swiglu_softcap.py")
    assert report.ok, report.text()
    names = [s.name for s in report.steps]
    assert names[:3] == ["contract", "id", "sizes trace"]
    assert {"divisibility", "seeds", "truth", "degenerate", "budget"} <= set(names)
    assert all(s.ok for s in report.steps if s.name in ("divisibility", "truth", "degenerate", "budget"))


def test_validate_names_the_dimension_that_breaks_divisibility_and_a_degenerate_output(tmp_path):
    _write(tmp_path, "odd_small.py", _GOOD.replace('"small": {"R": 64, "C": 256}', '"small": {"R": 64, "C": 96}'))
    _write(
        tmp_path,
        "constant.py",
        _GOOD.replace('"scaled_tanh"', '"constant"').replace(
            "return jnp.tanh(x) * scale", "return jnp.round(jnp.tanh(x) * 1e-3) * scale"
        ),
    )
    reports = {r.path.name: r for r in workload_validation.validate(tmp_path)}
    odd = _steps(reports["odd_small.py"])["divisibility"]
    assert not reports["odd_small.py"].ok
    failed = [s for s in odd if s.ok is False]
    assert len(failed) == 1 and "size 'small'" in failed[0].detail and "x[1]: 1024 -> 96" in failed[0].detail
    assert "a block of 32 divides the small 96" not in failed[0].detail  # 32 divides both
    assert "a block of 64 divides the full 1024 but not the small 96" in failed[0].detail
    degenerate = _steps(reports["constant.py"])["degenerate"][0]
    assert degenerate.ok is False and "zeros" in degenerate.detail


def test_validate_reports_a_module_that_fails_to_import(tmp_path):
    _write(tmp_path, "raises.py", "import not_a_module_anywhere\n")
    [report] = workload_validation.validate(tmp_path / "raises.py")
    assert not report.ok and report.steps[0].name == "contract" and "ModuleNotFoundError" in report.steps[0].detail


def test_the_divisibility_gap_names_the_block():
    assert "a block of 512 divides the full 7168 but not the small 768" in workload_validation.divisibility_gap(
        7168, 768
    )
    assert "a block of 1024 divides the small 6144 but not the full 1536" in workload_validation.divisibility_gap(
        1536, 6144
    )
    assert "a block of 2 divides the full 4096 but not the small 3" in workload_validation.divisibility_gap(4096, 3)


# ---- imported formats -------------------------------------------------------------------------------


def test_derive_small_keeps_divisibility():
    for n in (1, 3, 128, 4096, 8192, 28672, 128256, 14336, 96, 1000, 2**13 * 3):
        small = workload_formats.derive_small(n)
        assert small <= n and workloads.keeps_divisibility(n, small), (n, small)
    assert workload_formats.derive_small(128256) == 768 and workload_formats.derive_small(28672) == 6144


def test_a_maxkernel_task_loads_as_it_is(use_dirs):
    use_dirs(IMPORTED)
    assert workloads.broken_workloads() == []
    w = workloads.get_workload("rmsnorm_two_shapes")
    assert (w.tier, w.source_format) == ("custom", "maxkernel")
    # The largest configuration is full; the other keeps its own name; small derives from full's HIDDEN.
    assert w.sizes == {
        "full": {"config": 0, "HIDDEN": 4096},
        "small": {"config": 0, "HIDDEN": 256},
        "decode": {"config": 1, "HIDDEN": 4096},
    }
    assert "HIDDEN 4096 -> 256" in w.size_rule
    assert w.input_names == ("x", "weight", "eps") and w.static_argnums == (2,)
    assert w.format_tolerances["atol"] == 0.02 and w.format_tolerances["rtol"] == 0.02
    assert any("atol=0.02" in n for n in w.notes)
    # Seed 42 is the task's own get_inputs(); other seeds draw other inputs from the same generator.
    own = workload_formats._exec_copy(w.path, "test", {}, None)
    x42 = w.create_inputs("full", seed=42)
    np.testing.assert_array_equal(np.asarray(x42[0]), np.asarray(own.get_inputs()[0][0][0]))
    x43, x44 = w.create_inputs("small", seed=43), w.create_inputs("small", seed=44)
    assert x43[0].shape == (2048, 256) and x43[2] == 1e-6
    assert not np.array_equal(np.asarray(x43[0]), np.asarray(x44[0]))
    out = np.asarray(w.jitted_reference()(*x43)).astype(np.float32)
    xf = np.asarray(x43[0]).astype(np.float32)
    expected = xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + 1e-6) * np.asarray(x43[1]).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=2e-2, atol=2e-2)
    assert [tuple(o.shape) for o in w.output_specs("decode")] == [(64, 4096)]


def test_a_jaxbench_baseline_loads_as_it_is(use_dirs):
    use_dirs(IMPORTED)
    w = workloads.get_workload("gemm_wide")
    assert (w.source_format, w.model, w.operator) == ("jaxbench-baseline", "Test-Model", "dense_matmul")
    assert w.sizes["small"] == {"config": 0, "M": 256, "K": 256, "N": 6144}
    # get_flops() is read from the copy of baseline.py at each size.
    assert w.flops("full") == 2 * 4096 * 2048 * 28672 and w.flops("small") == 2 * 256 * 256 * 6144
    a, b = w.create_inputs("small", seed=43)
    assert (a.shape, b.shape) == ((256, 256), (256, 6144))
    np.testing.assert_allclose(
        np.asarray(w.jitted_reference()(a, b)).astype(np.float32),
        np.asarray(a).astype(np.float32) @ np.asarray(b).astype(np.float32),
        rtol=2e-2,
        atol=2e-2,
    )
    assert w.format_tolerances["atol"] == 1e-2


def test_the_overrides_file_sets_the_small_size_and_a_bad_one_is_named(use_dirs, tmp_path):
    task = tmp_path / "gemm"
    task.mkdir()
    (task / "baseline.py").write_text((IMPORTED / "baseline_gemm" / "baseline.py").read_text())
    (task / workload_formats.OVERRIDES_FILE).write_text('{"id": "gemm_set", "small": {"M": 128}}')
    other = tmp_path / "gemm_bad"
    other.mkdir()
    (other / "baseline.py").write_text((IMPORTED / "baseline_gemm" / "baseline.py").read_text())
    (other / workload_formats.OVERRIDES_FILE).write_text('{"id": "gemm_bad", "small": {"Q": 1}}')
    use_dirs(tmp_path)
    w = workloads.get_workload("gemm_set")
    assert w.sizes["small"] == {"config": 0, "M": 128, "K": 256, "N": 6144}
    assert "set in jaxbench_mcp.json: M=128" in w.size_rule
    [broken] = workloads.broken_workloads()
    assert broken.field == "jaxbench_mcp.json: small" and "['Q']" in broken.problem


def test_validate_reports_the_imported_formats_tolerances_beside_ours():
    reports = {r.workload_id: r for r in workload_validation.validate(IMPORTED)}
    assert set(reports) == {"gemm_wide", "rmsnorm_two_shapes"}
    for report in reports.values():
        assert report.ok, report.text()
        [tol] = _steps(report)["tolerances"]
        assert "theirs" in tol.detail and "ours: max |error| <=" in tol.detail


# ---- several configurations -------------------------------------------------------------------------


class _FakeExecutor:
    """Answers checks without a worker: correct everywhere except at the configurations in `fails`."""

    def __init__(self, tier, fails=()):
        self.tier, self.fails, self.sizes = tier, set(fails), []
        self.default_target = None

    def default_targets(self):
        return []

    def check(self, request: CheckRequest, on_progress=None, cancel=None):
        size = request.size
        self.sizes.append(size)
        bad = size in self.fails
        verdict = Verdict(
            status=Status.INCORRECT if bad else Status.CORRECT,
            message="wrong" if bad else "",
            workload_id=request.workload_id,
            size=size,
            targets=[],
            tier=str(self.tier),
        )
        return verdict, ""


def test_config_all_runs_each_configuration_this_tier_can_and_combines(tmp_path):
    from jaxbench_mcp.catalog import targets

    cpu = _FakeExecutor(targets.Tier.CPU_LIBTPU, fails={"held_out"})
    bench = api.JaxBench(store=Store(tmp_path / "a.sqlite3"), executor=cpu)
    verdict = bench.check_kernel("8p_GEMM", "x", config="all")
    assert cpu.sizes == ["small", "held_out"]  # full is too large for an interpret run on the CPU
    assert verdict.status == "incorrect" and verdict.size == "held_out"
    assert [(c.config, c.status) for c in verdict.configs] == [("small", "correct"), ("held_out", "incorrect")]
    assert verdict.message.startswith("configurations: small correct, held_out incorrect")
    assert len({c.attempt_id for c in verdict.configs}) == 2  # one recorded check per configuration

    tpu = _FakeExecutor(targets.Tier.TPU)
    bench = api.JaxBench(store=Store(tmp_path / "b.sqlite3"), executor=tpu)
    assert bench.check_kernel("8p_GEMM", "x", config="all").status == "correct"
    assert tpu.sizes == ["full", "small", "held_out"]
    with pytest.raises(workloads.UnknownSize, match="unknown configuration 'wide'"):
        bench.check_kernel("8p_GEMM", "x", config="wide")


# ---- end to end through the MCP SDK client ------------------------------------------------------------


@pytest.mark.slow
def test_a_custom_workload_end_to_end_through_the_mcp_client(use_dirs, tmp_path, monkeypatch):
    from jaxbench_mcp.frontends import server as server_module

    # Results in the call itself, not 'running' plus an attempt id, however loaded the test host is.
    monkeypatch.setattr(server_module, "CALL_BUDGET_SECONDS", 600)
    use_dirs(EXAMPLE_DIR)
    bench = api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=Checker(spares=0, slots=1))
    good = EXAMPLE_KERNEL.read_text()
    wrong = good.replace("gate * jax.nn.sigmoid(gate) * up", "gate * up")
    assert wrong != good

    async def go():
        async with Client(build_server(bench)) as client:
            listed = await client.call_tool("list_workloads", {"tier": "custom"})
            spec = await client.call_tool("get_workload", {"workload_id": "swiglu_softcap", "size": "full"})
            right = await client.call_tool(
                "check_kernel", {"workload_id": "swiglu_softcap", "source": good, "seeds": 1}
            )
            bad = await client.call_tool("check_kernel", {"workload_id": "swiglu_softcap", "source": wrong, "seeds": 1})
            prof = await client.call_tool("profile_kernel", {"workload_id": "swiglu_softcap", "source": good})
            pack = await client.call_tool("read_docs", {"workload_id": "swiglu_softcap"})
            return listed, spec, right, bad, prof, pack

    try:
        listed, spec, right, bad, prof, pack = anyio.run(go)
    finally:
        bench.close()
    assert [w["id"] for w in listed.structured_content["workloads"]] == ["swiglu_softcap"]
    assert spec.structured_content["tier"] == "custom"
    assert spec.structured_content["size"]["outputs"][0]["shape"] == [8192, 14336]
    assert right.structured_content["verdict"]["status"] == "correct", right.structured_content["verdict"]["message"]
    verdict = bad.structured_content["verdict"]
    assert verdict["status"] == "incorrect" and verdict["error_class"] == "wrong_values"
    profile = prof.structured_content["profile"]
    assert profile["verdict"]["status"] == "correct"
    assert profile["workload_id"] == "swiglu_softcap"
    assert not pack.is_error


@pytest.mark.slow
def test_check_config_all_runs_the_held_out_shape_in_a_worker(use_dirs, tmp_path):
    use_dirs(EXAMPLE_DIR)
    bench = api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), checker=Checker(spares=0, slots=1))
    try:
        verdict = bench.check_kernel("swiglu_softcap", EXAMPLE_KERNEL.read_text(), seeds=1, config="all")
    finally:
        bench.close()
    assert [(c.config, c.status) for c in verdict.configs] == [("small", "correct"), ("held_out", "correct")]
