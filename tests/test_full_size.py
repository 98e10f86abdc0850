"""Rules that hold at full size, decided without a TPU run: a measured time under the memory bound is rejected,
and the verdict's full-size judgments (coverage, same program, Pallas doing the work) in their order.
The corpus in tests/kernels exercises each rule through real workers (tests/test_checking.py)."""

from types import SimpleNamespace

import pytest

from jaxbench_mcp.catalog import workloads
from jaxbench_mcp.catalog.targets import Tier
from jaxbench_mcp.checking import judge
from jaxbench_mcp.models import DeviceTiming
from jaxbench_mcp.perf import profiling
from jaxbench_mcp.sandbox import protocol
from jaxbench_mcp.sandbox.jobs import Limits


def _profiler_measuring(median_us: float) -> profiling.Profiler:
    profiler = profiling.Profiler(SimpleNamespace(tier=None))
    profiler.measure_source = lambda workload_id, source, generation, checked=None, iterations=20: DeviceTiming(
        median_us=median_us, min_us=median_us, spread_pct=1.0, iterations=20
    )
    return profiler


def test_a_measured_time_below_the_memory_bound_is_rejected_and_a_fold_below_the_flop_roofline_is_not():
    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.perf import cost_model

    # 21k folds its GEMM away (it needs only row sums of x): fewer FLOPs than the nominal count, the same bytes.
    w = workloads.get_workload("21k_Gemm_Divide_Sum_Scaling")
    roofline, bound = cost_model.workload_roofline_us(w, "v6e"), cost_model.workload_memory_bound_us(w, "v6e")
    moved = cost_model.workload_must_move_bytes(w)
    assert moved == w.io_bytes("full") and bound < roofline / 4
    assert bound == pytest.approx(moved / targets.chip_facts("v6e").hbm_bytes_per_second * 1e6)
    entry = _profiler_measuring(bound * 0.9).measured_target(w, "source", "v6e", roofline, lambda _m: None)
    assert entry.error.startswith("rejected (implausible_time)") and entry.candidate_us is None
    assert (
        f"below {bound:,.1f} us, the time the workload's inputs and outputs ({moved / 2**20:,.1f} MiB)" in entry.error
    )
    assert entry.speedup_vs_xla is None and "errors#implausible-time" in entry.docs
    fold = _profiler_measuring(bound * 1.5).measured_target(w, "source", "v6e", roofline, lambda _m: None)
    assert fold.error is None and fold.candidate_us == pytest.approx(bound * 1.5) and fold.candidate_us < roofline


def _case(workload_id: str = "8p_GEMM", targets=("v6e",)) -> judge.Case:
    return judge.Case(
        workloads.get_workload(workload_id), "small", list(targets), Tier.CPU_LIBTPU, "process-only", Limits()
    )


def _traced(outline, run_outline, findings=()):
    return protocol.Traced(
        kernels=[],
        host_callbacks=[],
        outputs=[],
        outline=outline,
        run_outline=run_outline,
        coverage=protocol.Coverage(findings=list(findings), not_judged=[]),
    )


def test_a_different_program_at_the_run_size_decides_before_coverage():
    unread = protocol.CoverageFinding(kind="unread_input", operand="A", message="A[:, 128:] is never read at full size")
    evidence = judge.Evidence()
    failures = judge.full_size(_case(), _traced(["dot_general"], ["pallas_call:k"], [unread]), evidence)
    assert [f.error_class for f in failures] == ["size_dependent_program"]
    assert "small size" in failures[0].text and "full size" in failures[0].text
    assert evidence.full_size_findings == [unread.message]


def test_an_unwritten_output_decides_over_an_unread_input():
    findings = [
        protocol.CoverageFinding(kind="unread_input", operand="A", message="A tail unread"),
        protocol.CoverageFinding(kind="unwritten_output", operand="output", message="output tail unwritten"),
    ]
    failures = judge.full_size(_case(), _traced(["x"], ["x"], findings), judge.Evidence())
    assert failures == [("unwritten_output", "output tail unwritten", None)]


def test_an_unread_part_of_a_sparse_input_is_a_warning():
    w = workloads.get_workload("6p_Paged_Attention")
    assert w.sparse_inputs == ("k_pages", "v_pages")
    finding = protocol.CoverageFinding(kind="unread_input", operand="k_pages", message="k_pages[9000:] is never read")
    evidence = judge.Evidence()
    assert judge.full_size(_case(w.id), _traced(["x"], ["x"], [finding]), evidence) == []
    assert evidence.warnings and "sparse" in evidence.warnings[0]


def test_the_pallas_share_is_said_in_the_verdict_and_a_sliver_fails():
    w = workloads.get_workload("8p_GEMM")
    evidence = judge.Evidence()
    sliver = protocol.Work(
        kernel_flops=0.0,
        kernel_bytes=1024.0,
        outside_flops=w.flops("full"),
        outside_bytes=w.io_bytes("full"),
        exact=True,
    )
    failure = judge.work_share(w, sliver, evidence)
    assert failure.error_class == "pallas_not_doing_the_work"
    assert evidence.pallas_work.startswith("the Pallas kernels do 0.00%")
    whole = protocol.Work(
        kernel_flops=w.flops("full"), kernel_bytes=w.io_bytes("full"), outside_flops=0.0, outside_bytes=0.0, exact=True
    )
    evidence = judge.Evidence()
    assert judge.work_share(w, whole, evidence) is None and "100.00%" in evidence.pallas_work


def test_a_parallel_reduction_axis_fails_on_megacore_targets_and_is_a_warning_elsewhere():
    finding = protocol.CoverageFinding(
        kind="parallel_revisit", operand="k output 0", message='kernel k marks grid axis 2 "parallel" (16 steps ...)'
    )
    single = judge.Evidence()
    assert judge.full_size(_case(), _traced(["x"], ["x"], [finding]), single) == []
    assert single.warnings and "wrong on megacore chips" in single.warnings[0]
    assert single.full_size_findings == [finding.message]
    for targets in (["v5p"], ["v6e", "v4"]):
        [failure] = judge.full_size(_case(targets=targets), _traced(["x"], ["x"], [finding]), judge.Evidence())
        assert failure.error_class == "parallel_reduction_axis" and targets[-1] in failure.text
    # An unwritten output is the more direct fault and decides first.
    unwritten = protocol.CoverageFinding(kind="unwritten_output", operand="output", message="output tail unwritten")
    failures = judge.full_size(_case(targets=["v5p"]), _traced(["x"], ["x"], [finding, unwritten]), judge.Evidence())
    assert [f.error_class for f in failures] == ["unwritten_output"]
