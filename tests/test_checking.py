"""The check ladder against the corpus in tests/kernels/: every kernel gets the status its header expects."""

import os
import re
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import check_two_at_a_time
from jaxbench_mcp.catalog import workloads
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.checking.comparison import compare
from jaxbench_mcp.checking.truth import Truth, truth_for, truth_of
from jaxbench_mcp.requests import CheckRequest
from jaxbench_mcp.sandbox.jobs import Limits
from jaxbench_mcp.taxonomy import ERROR_CLASSES, ErrorClass, Stage, Status

KERNELS = Path(__file__).parent / "kernels"
_HEADER = re.compile(r"^# expect: workload=(\S+) status=(\S+)(?: error_class=(\S+))?", re.M)
# Short stage limits keep the hanging kernels cheap; real kernels finish far inside them.
TEST_LIMITS = Limits(stage_seconds={**Limits().stage_seconds, Stage.LOAD: 20, Stage.TRACE: 30}, memory_bytes=4 * 2**30)


def corpus():
    cases = []
    for path in sorted(KERNELS.glob("*.py")):
        m = _HEADER.search(path.read_text(errors="replace")[:500])
        assert m, f"{path.name} has no '# expect:' header"
        cases.append((path.name, m.group(1), m.group(2), m.group(3)))
    return cases


@pytest.fixture(scope="module")
def verdicts():
    """Check the whole corpus once, two at a time, on one checker (as one server would)."""
    os.environ["JAXBENCH_TEST_SECRET"] = "do-not-leak"  # good_secret_probe fails if a worker can see this
    checker = Checker(limits=TEST_LIMITS, spares=2, slots=2)
    checker.start()
    try:
        # The two hangs leave both slots idle while they wait out their stage deadlines: not side by side.
        names = sorted((c[0] for c in corpus()), key=lambda name: name != "bad_hang_import.py")
        workload_of = {name: workload for name, workload, *_ in corpus()}
        requests = {name: CheckRequest.of(workload_of[name], (KERNELS / name).read_text()) for name in names}
        results = check_two_at_a_time(checker, requests)
        # After hangs, crashes and memory bombs the same checker still answers correctly.
        again, outcome = checker.check(CheckRequest.of("12p_RMSNorm", (KERNELS / "good_rmsnorm.py").read_text()))
        outcome.cleanup()
        results["after-failures"] = again
        return results
    finally:
        checker.close()
        del os.environ["JAXBENCH_TEST_SECRET"]


def test_corpus_covers_every_status_and_the_required_error_classes():
    statuses = {c[2] for c in corpus()}
    # server_error is the server's own failure: no candidate can cause it (tests inject it instead).
    assert statuses == {s.value for s in Status} - {Status.SERVER_ERROR}
    classes = {c[3] for c in corpus() if c[3]}
    required = {
        "nan_output",
        "block_shape_tiling",
        "vmem_overflow",
        "wrong_values",
        "no_pallas_call",
        "stage_timeout",
        "killed_by_signal",
        "exited",
        "memory_limit",
        "missing_workload",
        "syntax_error",
        "import_error",
        "host_callback",
        "shape_mismatch",
        "dtype_mismatch",
    }
    assert required <= classes
    assert sum(1 for c in corpus() if c[2] == "correct") >= 7


@pytest.mark.parametrize("name,workload_id,status,error_class", corpus())
def test_corpus_kernel_gets_its_expected_verdict(verdicts, name, workload_id, status, error_class):
    verdict = verdicts[name]
    assert (verdict.status, verdict.error_class) == (status, error_class), verdict.summary()
    if status != "correct":
        assert verdict.message and verdict.hint and verdict.docs, verdict.summary()
        assert len(verdict.message.splitlines()) <= 8
    else:
        # The three hidden seeds at the run size, then one at the full reduction length where the workload has it.
        longer = workloads.FULL_REDUCTION in workloads.get_workload(verdict.workload_id).sizes
        assert [s.size for s in verdict.seeds] == [None] * 3 + [workloads.FULL_REDUCTION] * longer
        assert all(s.passed for s in verdict.seeds)
        assert verdict.pallas_calls >= 1 and verdict.compiles and all(c.ok for c in verdict.compiles)
        # the compiler's own VMEM figure beside the estimate; the blocks and scratch alone are a floor for it
        assert all(c.vmem_compiled_bytes for c in verdict.compiles), verdict.compiles
        assert " MiB as compiled" in verdict.summary()


def test_the_verdict_shows_the_compilers_vmem_beside_the_estimate(verdicts):
    """A tiled GEMM's VMEM is its double-buffered blocks and its accumulator: the estimate and the compiler agree
    within 2%, and the compile line shows both."""
    verdict = verdicts["good_gemm_tiled.py"]
    for compiled in verdict.compiles:
        assert compiled.vmem_compiled_bytes and compiled.vmem_estimate_bytes, compiled
        assert abs(compiled.vmem_compiled_bytes / compiled.vmem_estimate_bytes - 1) <= 0.02, compiled
    assert "as compiled, estimated ~" in verdict.summary()


def test_the_runs_stop_once_the_verdict_cannot_be_correct(verdicts):
    """The verdict names the first wrong seed, so the seeds after it are never run: a wrong kernel (one missing its
    accumulator's init, one replaying seed 42's answer) costs one run. So does one whose recorded program already
    rules 'correct' out (an input never read or an output never written at full size, a program that changes with
    the size, no Pallas kernel), while a correct kernel runs every seed."""
    for name in ("bad_missing_acc_init.py", "bad_replay_seed42.py"):
        verdict = verdicts[name]
        runs = [s for s in verdict.stages if s.stage == "run"]
        assert verdict.status == "incorrect" and len(runs) == 1 and runs[0].ok, verdict.stages
        assert [s.passed for s in verdict.seeds] in ([], [False]), verdict.seeds
        assert verdict.message.startswith("seed 0"), verdict.message
    for name in ("bad_all_zeros.py", "bad_unwritten_tail.py", "bad_size_branch.py", "bad_plain_xla.py"):
        verdict = verdicts[name]
        assert len([s for s in verdict.stages if s.stage == "run"]) == 1, (name, verdict.stages)
    right = verdicts["good_gemm_tiled.py"]
    assert len([s for s in right.stages if s.stage == "run"]) == len(right.seeds) == 4, right.stages


def test_a_k_axis_labelled_parallel_fails_when_a_megacore_chip_is_targeted():
    """The small run has one K step (K = 512), so its seeds pass; the full-size index maps show the label is wrong
    (the full_reduction run, K = 8192 in 16 shuffled steps, may see it in its values too)."""
    source = (Path(__file__).parent.parent / "solutions" / "8p_GEMM.py").read_text()
    source = source.replace('("parallel", "parallel", "arbitrary")', '("parallel", "parallel", "parallel")')
    checker = Checker(limits=TEST_LIMITS, spares=0, slots=1)
    try:
        verdict, outcome = checker.check(CheckRequest.of("8p_GEMM", source, targets=["v5p"]))
        outcome.cleanup()
    finally:
        checker.close()
    assert (verdict.status, verdict.error_class) == ("incorrect", "parallel_reduction_axis"), verdict.summary()
    assert 'grid axis 2 "parallel" (16 steps at full size)' in verdict.message and "v5p" in verdict.message
    assert all(s.passed for s in verdict.seeds if s.size is None)  # right at the run size: its one K step


def test_a_gemm_with_4096_wide_blocks_is_refused_as_vmem_overflow_in_seconds():
    """bad_vmem_full_only.py double-buffers (8192, 4096) panels of B at full size: 140 MiB of blocks, over every
    chip's VMEM. The worker refuses it from its block shapes instead of compiling it (that compile ran 240 s before
    failing), and the verdict's VMEM figure is that estimate."""
    checker = Checker(limits=TEST_LIMITS, spares=0, slots=1)
    try:
        verdict, outcome = checker.check(CheckRequest.of("8p_GEMM", (KERNELS / "bad_vmem_full_only.py").read_text()))
        outcome.cleanup()
    finally:
        checker.close()
    assert (verdict.status, verdict.error_class) == ("compile_error", "vmem_overflow"), verdict.summary()
    compiles = [s for s in verdict.stages if s.stage is Stage.COMPILE]
    assert compiles and all(s.seconds < 10 for s in compiles), compiles
    assert "refused before compiling" in verdict.message and "vmem capacity of" in verdict.message
    assert all(140 * 2**20 <= (c.vmem_estimate_bytes or 0) <= 150 * 2**20 for c in verdict.compiles), verdict.compiles
    assert not any(c.vmem_compiled_bytes for c in verdict.compiles)  # nothing compiled, so only the estimate


def test_inputs_are_written_while_the_worker_compiles_and_a_failure_to_write_them_is_the_servers(monkeypatch):
    """The job goes first and the input files follow, run by run; the worker waits for each run's word. A parent that
    cannot write them raises (a server_error upstream), never a verdict on the candidate."""
    from jaxbench_mcp.checking import checker as checker_module

    source = (KERNELS / "good_rmsnorm.py").read_text()
    written: list[str] = []
    real = checker_module.write_inputs

    def write(inputs, directory, prefix):
        written.append(prefix)
        if prefix == "input_1" and len(written) < 10:
            raise OSError("no space left on device (test)")
        return real(inputs, directory, prefix)

    monkeypatch.setattr(checker_module, "write_inputs", write)
    checker = Checker(limits=TEST_LIMITS, spares=0, slots=1)
    try:
        with pytest.raises(OSError, match="no space left"):
            checker.check(CheckRequest.of("12p_RMSNorm", source))
        assert written == ["input_0", "input_1"]
        written.extend(["pad"] * 10)  # from now on every write succeeds
        verdict, outcome = checker.check(CheckRequest.of("12p_RMSNorm", source))
        outcome.cleanup()
    finally:
        checker.close()
    assert verdict.status == "correct", verdict.summary()
    assert written[-3:] == ["input_0", "input_1", "input_2"]


def test_checker_answers_correctly_after_hangs_and_crashes(verdicts):
    assert verdicts["after-failures"].status == "correct", verdicts["after-failures"].summary()


def test_every_error_class_maps_to_a_status():
    assert set(ERROR_CLASSES) == set(ErrorClass)


def _truth(values, baseline, dtype="bfloat16"):
    truth = np.asarray(values, dtype=np.float64)
    base = np.asarray(baseline, dtype=np.float32)
    err = float(np.abs(base - truth).max())
    return Truth(
        truth=truth, baseline=base, dtype=dtype, tolerance=max(2 * err, 2**-7 * np.abs(truth).max()), baseline_error=err
    )


def test_compare_accepts_a_kernel_closer_to_the_truth_than_the_baseline_and_rejects_real_bugs():
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(64, 128))
    baseline = truth + rng.normal(scale=0.01, size=truth.shape)  # the native-dtype reference's own error
    t = _truth(truth, baseline)
    better = truth + rng.normal(scale=0.002, size=truth.shape)
    assert compare(better.astype(np.float32), "bfloat16", t, 0)[1] is None
    wrong_row = better.copy()
    wrong_row[7] *= 1.5
    report, cls, message = compare(wrong_row.astype(np.float32), "bfloat16", t, 0)
    assert cls is ErrorClass.WRONG_VALUES and report.worst_index[0] == 7 and "at [7," in message
    nan = better.copy()
    nan[3, 4] = np.nan
    assert compare(nan.astype(np.float32), "bfloat16", t, 0)[1] is ErrorClass.NAN_OUTPUT
    assert compare(better[:, :64].astype(np.float32), "bfloat16", t, 0)[1] is ErrorClass.SHAPE_MISMATCH
    assert compare(better.astype(np.float32), "float32", t, 0)[1] is ErrorClass.DTYPE_MISMATCH


def test_a_baseline_that_lands_on_the_truth_still_allows_a_correct_kernel_its_own_rounding():
    # A float32 sum of small integers is exact, so the baseline's error is 0, as a scalar loss's can be by luck.
    def reference(x):
        return jnp.sum(x)

    w = SimpleNamespace(jitted_reference=lambda: jax.jit(reference), module=SimpleNamespace(reference=reference))
    w.static_argnums = ()
    t = truth_of(w, (np.arange(1, 33, dtype=np.float32),))
    assert t.baseline_error == 0.0 and float(t.truth) == 528.0

    def ulps_off(n):
        x = np.float32(528.0)
        for _ in range(n):
            x = np.nextafter(x, np.float32(np.inf))
        return np.asarray(x)

    # The floor is (1 + 2) x eps x 528 = 1.9e-4, and one ulp at 528 is 6.1e-5: three ulps pass, four do not.
    assert compare(ulps_off(3), "float32", t, 0)[1] is None
    report, cls, message = compare(ulps_off(4), "float32", t, 0)
    assert cls is ErrorClass.WRONG_VALUES and "the floor of a correct kernel's own rounding" in message


def test_truth_is_computed_above_the_output_precision_and_the_tolerance_is_calibrated():
    t = truth_for("8p_GEMM", "small", 1234)
    assert t.dtype == "bfloat16" and t.truth.dtype == np.float64
    assert 0 < t.baseline_error <= t.tolerance <= 3 * t.baseline_error + 1e-6
    assert t.tolerance < 0.05 * np.abs(t.truth).max()


def test_runs_stopped_with_nothing_failed_is_never_correct(tmp_path):
    """The parent stops the runs only once 'correct' is ruled out. Were that ever wrong (the output it saw right,
    the program too), the verdict is the server's own error, never 'correct' on fewer seeds than the check asked
    for; without a stop, a missing run is the worker's protocol violation."""
    from jaxbench_mcp.catalog.targets import Tier
    from jaxbench_mcp.checking import judge
    from jaxbench_mcp.sandbox import isolation, protocol
    from jaxbench_mcp.sandbox.jobs import RunOutcome

    w = workloads.get_workload("12p_RMSNorm")
    t = truth_for(w.id, "small", 1234)
    np.save(tmp_path / "output_0.npy", t.truth.astype(np.float32))
    traced = protocol.Traced(kernels=[], host_callbacks=[], outputs=[])
    events = [
        protocol.StageEvent(stage=Stage.TRACE, state="start"),
        protocol.StageEvent(stage=Stage.TRACE, state="done", traced=traced),
        protocol.StageEvent(stage=Stage.RUN, state="start", seed_index=0),
        protocol.StageEvent(
            stage=Stage.RUN,
            state="done",
            seed_index=0,
            output=protocol.Output(path="output_0.npy", shape=list(t.truth.shape), dtype=t.dtype, leaves=1),
        ),
        protocol.Finished(),
    ]
    outcome = RunOutcome(events=events, job_dir=tmp_path, isolation=isolation.detect(), after_trace=True)
    case = judge.Case(w, "small", [], Tier.TPU, outcome.isolation, Limits(), False)
    truths = [(lambda: t, "small")] * 3
    stopped = judge.collect(case, truths, outcome, lambda _m: None, runs_stopped=True)
    assert [f.error_class for f in stopped.failures] == [ErrorClass.INTERNAL_ERROR], stopped.failures
    assert [s.passed for s in stopped.seeds] == [True]
    assert judge.verdict(case, stopped, 1.0).status == Status.SERVER_ERROR
    missing = judge.collect(case, truths, outcome, lambda _m: None)
    assert [f.error_class for f in missing.failures] == [ErrorClass.PROTOCOL_VIOLATION], missing.failures
