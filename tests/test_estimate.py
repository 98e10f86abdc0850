"""The estimator's counting (kernel_replay, cost_model.executed_bundles, internals.hlo) and its public API."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from canaries import changed
from jaxbench_mcp.analysis import kernels as kernel_analysis, replay as kernel_replay
from jaxbench_mcp.catalog import targets
from jaxbench_mcp.perf import cost_model

KERNELS = Path(__file__).parent / "kernels"


def _traffic(call, *args):
    """kernel_traffic of the one kernel in `call(*args)`, with the concrete small arguments known."""
    import jax

    abstract = [jax.ShapeDtypeStruct(a.shape, a.dtype) if getattr(a, "size", 0) > 64 else a for a in args]
    closed = jax.make_jaxpr(call)(*args)
    (kernel,) = kernel_analysis.kernel_traffic(closed.jaxpr, kernel_replay.known_kernel_operands(closed, abstract))
    return kernel


def _prefetch_call(body, grid=(4,)):
    """A pallas_call over (512, 128) f32 in (128, 128) blocks with one int32[1] scalar-prefetch operand."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    block = pl.BlockSpec((128, 128), lambda i, n: (i, 0))
    spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=grid, in_specs=[block], out_specs=block)

    def call(n, x):
        return pl.pallas_call(body, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((512, 128), jnp.float32))(n, x)

    return call, jnp.zeros((512, 128), jnp.float32)


def test_mutually_exclusive_branches_are_not_both_charged():
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def either(n_ref, x_ref, o_ref):
        @pl.when(n_ref[0] > 0)
        def _():
            o_ref[...] = jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

        @pl.when(n_ref[0] <= 0)
        def _():
            o_ref[...] = jnp.dot(x_ref[...], x_ref[...].T, preferred_element_type=jnp.float32)

    call, x = _prefetch_call(either)
    import jax

    # The predicate depends on data nobody knows (an abstract argument): one of the two runs, never both.
    kernel = _traffic(call, jax.ShapeDtypeStruct((1,), jnp.int32), x)
    assert kernel["run_ratio"] == 0.5 and not kernel["run_ratio_exact"]
    # Known data: exactly the branch it picks.
    kernel = _traffic(call, np.array([3], np.int32), x)
    assert kernel["run_ratio"] == 0.5 and kernel["run_ratio_exact"]


def test_a_branch_the_compiler_removes_is_not_discounted():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def static_choice(x_ref, o_ref):
        heavy = jnp.int32(3) > 2  # a compile-time constant: the compiler keeps only the branch it picks
        o_ref[...] = jax.lax.cond(
            heavy,
            lambda v: jnp.dot(v, v, preferred_element_type=jnp.float32),
            lambda v: jnp.dot(v, v.T, preferred_element_type=jnp.float32),
            x_ref[...],
        )

    block = pl.BlockSpec((128, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        static_choice,
        grid=(4,),
        in_specs=[block],
        out_specs=block,
        out_shape=jax.ShapeDtypeStruct((512, 128), jnp.float32),
    )
    kernel = _traffic(call, jnp.zeros((512, 128), jnp.float32))
    # The schedule holds one matmul and every step runs it: nothing is skipped.
    assert kernel["run_ratio"] == 1.0 and kernel["run_ratio_exact"]


def test_a_loop_whose_trip_count_comes_from_the_inputs_is_counted():
    import jax
    import jax.numpy as jnp

    def loop(n_ref, x_ref, o_ref):
        def body(i, acc):
            return acc + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

        o_ref[...] = jax.lax.fori_loop(0, n_ref[0], body, jnp.zeros(o_ref.shape, jnp.float32))

    call, x = _prefetch_call(loop)
    kernel = _traffic(call, np.array([5], np.int32), x)
    assert kernel["loop_ratio"] == 5.0 and kernel["run_ratio_exact"] and kernel["in_kernel_loops"] == 1
    # Unknown: counted once, and said to be approximate.
    kernel = _traffic(call, jax.ShapeDtypeStruct((1,), jnp.int32), x)
    assert kernel["loop_ratio"] == 1.0 and not kernel["run_ratio_exact"]


def test_scalar_state_carried_from_step_to_step_is_followed_in_grid_order():
    """jax's ragged paged attention resumes each grid step at the sequence the step before stopped at, kept in a
    scalar-prefetch ref it writes. Here step k reads a counter the step before left (k), runs that many matmuls and
    leaves k + 1: 0 + 1 + 2 + 3 = 6 trips over 4 steps, not the 0 a replay of all steps at once would see."""
    import jax
    import jax.numpy as jnp

    def resume(state_ref, x_ref, o_ref):
        done = state_ref[0]

        def body(i, acc):
            return acc + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

        o_ref[...] = jax.lax.fori_loop(0, done, body, jnp.zeros(o_ref.shape, jnp.float32))
        state_ref[0] = done + 1

    call, x = _prefetch_call(resume)
    kernel = _traffic(call, np.array([0], np.int32), x)
    assert kernel["loop_ratio"] == 6 / 4 and kernel["run_ratio_exact"]
    # Too many steps to replay one by one: the replay of all steps at once, flagged as approximate.
    original = kernel_replay.IN_ORDER_STEPS
    kernel_replay.IN_ORDER_STEPS = 3
    try:
        kernel = _traffic(call, np.array([0], np.int32), x)
    finally:
        kernel_replay.IN_ORDER_STEPS = original
    assert not kernel["run_ratio_exact"]


def test_values_a_kernel_computes_in_a_lax_cond_are_followed():
    """jax's paged attention picks its next block in a lax.cond and prefetches it only if there is one: a cond's
    outputs are known wherever its predicate is, so what they steer is followed. Here steps below n_ref[0] = 1 run
    3 matmul trips and the others 1: 3 + 1 + 1 + 1 = 6 over 4 steps."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def pick(n_ref, x_ref, o_ref):
        trips = jax.lax.cond(pl.program_id(0) < n_ref[0], lambda: 3, lambda: 1)

        def body(i, acc):
            return acc + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

        o_ref[...] = jax.lax.fori_loop(0, trips, body, jnp.zeros(o_ref.shape, jnp.float32))

    call, x = _prefetch_call(pick)
    kernel = _traffic(call, np.array([1], np.int32), x)
    assert kernel["loop_ratio"] == 6 / 4 and kernel["run_ratio_exact"]


def test_a_long_counted_loop_is_extrapolated_past_the_replayed_trips():
    import jax
    import jax.numpy as jnp

    def loop(n_ref, x_ref, o_ref):
        def body(i, acc):
            return acc + jnp.dot(x_ref[...], x_ref[...], preferred_element_type=jnp.float32)

        o_ref[...] = jax.lax.fori_loop(0, n_ref[0], body, jnp.zeros(o_ref.shape, jnp.float32))

    call, x = _prefetch_call(loop)
    trips = 10 * kernel_replay.MAX_TRIPS + 3
    kernel = _traffic(call, np.array([trips], np.int32), x)
    assert kernel["loop_ratio"] == trips and kernel["run_ratio_exact"]


def test_scalar_prefetch_index_maps_are_followed_with_known_values():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def copy(order_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    # Every step reads block order[i]: with order = [0, 0, 1, 1] two fetches are saved.
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(4,),
        in_specs=[pl.BlockSpec((128, 128), lambda i, order: (order[i], 0))],
        out_specs=pl.BlockSpec((128, 128), lambda i, order: (i, 0)),
    )
    call = pl.pallas_call(copy, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((512, 128), jnp.float32))
    block = 128 * 128 * 4
    kernel = _traffic(call, np.array([0, 0, 1, 1], np.int32), jnp.zeros((512, 128), jnp.float32))
    assert kernel["exact"] and kernel["hbm_bytes"] == 2 * block + 4 * block
    assert kernel["hbm_written_bytes"] == 4 * block  # the output's blocks
    unknown = _traffic(call, jax.ShapeDtypeStruct((4,), jnp.int32), jnp.zeros((512, 128), jnp.float32))
    assert not unknown["exact"] and unknown["hbm_bytes"] == 4 * block + 4 * block


def test_copies_into_hbm_are_writes_and_copies_out_of_it_reads():
    """The chip streams reads faster than writes (cost_model.memory_seconds): the traffic tells them apart."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def double(x_hbm, o_hbm, buf, sems):
        for half in range(2):  # two reads of a (128, 128) block, one write of both
            fetch = pltpu.make_async_copy(x_hbm.at[pl.ds(128 * half, 128)], buf.at[pl.ds(128 * half, 128)], sems.at[0])
            fetch.start()
            fetch.wait()
        buf[...] = buf[...] * 2
        store = pltpu.make_async_copy(buf, o_hbm, sems.at[1])
        store.start()
        store.wait()

    call = pl.pallas_call(
        double,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((256, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        out_shape=jax.ShapeDtypeStruct((256, 128), jnp.float32),
    )
    kernel = _traffic(call, jnp.zeros((256, 128), jnp.float32))
    block = 128 * 128 * 4
    assert kernel["exact"] and kernel["hbm_bytes"] == 4 * block and kernel["hbm_written_bytes"] == 2 * block
    assert kernel["floor_bytes"] == 4 * block and kernel["floor_written_bytes"] == 2 * block


def test_interleaved_reads_stream_at_the_writes_pace():
    # benchmarks/hbm_mix.py: a stream that writes as much as it reads runs at the writes' share of the peak.
    paced = cost_model.Calibration(hbm_efficiency=0.9, hbm_write_efficiency=0.8)
    bandwidth = targets.chip_facts("v5e").hbm_bytes_per_second

    def share(read, written):
        return (read + written) / bandwidth / cost_model.memory_seconds(read + written, written, "v5e", paced)

    assert share(1e9, 0) == pytest.approx(0.9)
    assert share(1e9, 1e9) == pytest.approx(0.8) and share(0, 1e9) == pytest.approx(0.8)
    assert 0.8 < share(3e9, 1e9) < 0.9
    # One efficiency for both (every generation not measured apart): every byte alike, as before the split.
    raw = cost_model.memory_seconds(2e9, 1e9, "v5e")
    assert raw == pytest.approx(2e9 / bandwidth)


def test_only_loop_bodies_repeat():
    # 100 bundles around the grid, 50 in the step's body, 10 in its own loop that runs 8 trips per step.
    executed = cost_model.executed_bundles(
        [100, 50, 10],
        160,
        steps=4,
        has_grid_loop=True,
        body_ratio=1.0,
        loop_ratio=8.0,
        flat_ratio=1.0,
        in_kernel_loops=1,
    )
    assert executed == 100 + 4 * (50 + 10 * 8)
    # No grid: depth 0 is the body; a kernel-level loop of 32 trips repeats only its own bundles.
    assert (
        cost_model.executed_bundles(
            [80, 3600],
            3680,
            steps=1,
            has_grid_loop=False,
            body_ratio=1.0,
            loop_ratio=32.0,
            flat_ratio=1.0,
            in_kernel_loops=1,
        )
        == 80 + 3600 * 32
    )
    # The compiler unrolled the loop (no loop in the schedule): the body runs its code once per step.
    assert (
        cost_model.executed_bundles(
            [10, 400],
            410,
            steps=4,
            has_grid_loop=True,
            body_ratio=1.0,
            loop_ratio=8.0,
            flat_ratio=1.0,
            in_kernel_loops=1,
        )
        == 10 + 4 * 400
    )
    # Each trip of a rolled loop also waits for its results (the schedule's loop_waits per depth from 1): with a
    # grid, the body's own loops are depth 2 (depth 1, the grid loop's body, is not a trip of them); without, depth 1.
    counts = {"body_ratio": 1.0, "loop_ratio": 8.0, "flat_ratio": 1.0, "in_kernel_loops": 1}
    waited = cost_model.executed_bundles([100, 50, 10], 160, 4, True, **counts, loop_waits=[999, 30])
    assert waited == 100 + 4 * (50 + (10 + 30) * 8)
    assert cost_model.executed_bundles([80, 3600], 3680, 1, False, **counts, loop_waits=[30]) == 80 + (3600 + 30) * 8
    # Unrolled, no trip of a loop waits on its own: their bundles are all in the schedule, straight-line code.
    assert cost_model.executed_bundles([10, 400], 410, 4, True, **counts, loop_waits=[999]) == 10 + 4 * 400
    # Straight-line code stalls too (straight_waits per depth from 0: the code at exactly that depth), with the code
    # it stalls: around the grid once, the step's body every step, here beside its own rolled loop's trips.
    unrolled = cost_model.executed_bundles([10, 400], 410, 4, True, **counts, straight_waits=[5, 70])
    assert unrolled == 10 + 5 + 4 * (400 + 70)
    waits = {"loop_waits": [0, 30], "straight_waits": [0, 7]}
    rolled = cost_model.executed_bundles([100, 50, 10], 160, 4, True, **counts, **waits)
    assert rolled == 100 + 4 * ((50 + 7) + (10 + 30) * 8)


def test_a_pipeline_hides_all_but_one_step_of_the_smaller_term():
    spb = 1e-9
    one = cost_model.pipelined_cost(1000, 1, 1.6e6, 0, "v6e", spb)
    many = cost_model.pipelined_cost(1000, 100, 1.6e6, 0, "v6e", spb)
    assert one.exposed_s == pytest.approx(min(one.compute_s, one.memory_s))  # one step: nothing overlaps
    assert many.exposed_s == pytest.approx(min(many.compute_s, many.memory_s) / 100)


def test_a_steps_fixed_cost_hides_under_the_write_back_before_it():
    # benchmarks/hbm_mix.py (v5e): streams that write 0.5 MiB a step take as long in 128 steps as in 8; reads do not.
    def overhead(written_bytes, steps=128):
        return cost_model.pipelined_cost(0, steps, 2**27, written_bytes, "v5e", 1e-9).overhead_s

    fixed = 128 * cost_model.STEP_OVERHEAD_S
    assert overhead(0) == pytest.approx(fixed)
    assert overhead(2**26) == 0.0
    # A write-back covers the step after it only beyond a fixed cost of its own: 128 KiB a step (0.16 us at the
    # peak) covers nothing, 192 KiB (0.24 us) covers 0.04 us of the 0.2 us.
    assert overhead(128 * 2**17) == pytest.approx(fixed)
    writing = cost_model.memory_seconds(128 * 3 * 2**16, 128 * 3 * 2**16, "v5e")
    assert overhead(128 * 3 * 2**16) == pytest.approx(fixed - (writing - fixed)) and fixed < writing < 2 * fixed


def test_steps_that_only_move_bytes_wait_on_them_whatever_the_others_compute():
    # jax's ragged paged attention with 8 short sequences (benchmarks/ragged_scenarios.py): they all sit in the first
    # query block, whose step computes, while 63 steps only move query and output blocks. On a v5e it took 331 us,
    # which the sum of the two kinds of step gives and max(compute, memory) over the grid (248 us) does not.
    work = np.array([1.0] + [0.0] * 63)
    moved = np.array([34.0] + [2.0] * 63)
    mix = kernel_analysis.step_mix(work, moved)
    assert sorted(mix) == [pytest.approx((0.0, 126 / 160, 63 / 64)), pytest.approx((1.0, 34 / 160, 1 / 64))]
    # Alike steps (a ratio within a factor 2 ** 0.5) form one group: no mix.
    assert kernel_analysis.step_mix(np.array([1.0, 1.1, 0.95]), np.array([2.0, 2.0, 2.1])) == []
    alike = cost_model.pipelined_cost(1e5, 64, 1.6e8, 0, "v5e", 1e-9)
    mixed = cost_model.pipelined_cost(1e5, 64, 1.6e8, 0, "v5e", 1e-9, step_mix=mix, moving_steps=64)
    assert (mixed.compute_s, mixed.memory_s) == (alike.compute_s, alike.memory_s)
    busy, idle = mix[1] if mix[1][0] else mix[0], mix[0] if mix[1][0] else mix[1]
    # The computing step hides its own bytes and fixed cost; the others add theirs.
    o, m = alike.overhead_s, alike.memory_s
    grouped = max(alike.compute_s, m * busy[1] + o * busy[2]) + m * idle[1] + o * idle[2]
    assert mixed.estimate_s == pytest.approx(grouped + alike.exposed_s)
    assert mixed.estimate_s > alike.estimate_s


def test_a_blocks_copies_are_counted_in_the_steps_they_run_beside():
    # Blocks held for two steps (index i // 2): each is fetched during the step before its first and written back
    # during the step after its last; the first fetch and the last write-back fall outside the grid (counted at its
    # first and last steps).
    fetches = kernel_analysis.block_fetches(np.arange(6) // 2)
    assert fetches.tolist() == [True, False, True, False, True, False]
    assert kernel_analysis.copies_in_flight(fetches, written=False).tolist() == [1, 1, 0, 1, 0, 0]
    assert kernel_analysis.copies_in_flight(fetches, written=True).tolist() == [0, 0, 1, 0, 1, 1]
    # A block fetched once and kept: one copy each way, at the grid's ends.
    kept = kernel_analysis.block_fetches(np.zeros(4, int))
    assert kernel_analysis.copies_in_flight(kept, written=False).tolist() == [1, 0, 0, 0]
    assert kernel_analysis.copies_in_flight(kept, written=True).tolist() == [0, 0, 0, 1]


def test_a_step_that_moves_nothing_costs_the_grid_loop_not_a_dma_wait():
    # benchmarks/grid_steps.py (v5e): one block kept over 8,192 steps that skip their work took 182.5 us, 0.021 us a
    # step beyond the block's own bytes; every step priced at a DMA wait said 1,651 us.
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def first_step_only(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _scale():
            o_ref[...] = x_ref[...] * 2

    def call(x):
        whole = pl.BlockSpec((1024, 1024), lambda i: (0, 0))
        return pl.pallas_call(
            first_step_only,
            grid=(8192,),
            in_specs=[whole],
            out_specs=whole,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        )(x)

    flow = _traffic(call, jax.ShapeDtypeStruct((1024, 1024), jnp.float32))
    assert flow["steps"] == 8192 and flow["moving_steps"] == 2  # the fetch before the grid, the write-back after
    assert flow["hbm_bytes"] == 2 * 4 * 2**20
    cost = cost_model.pipelined_cost(0, 8192, flow["hbm_bytes"], flow["hbm_written_bytes"], "v5e", 1e-9,
                                     step_mix=flow["step_mix"], moving_steps=flow["moving_steps"])  # fmt: skip
    assert cost.overhead_s >= 8190 * cost_model.IDLE_STEP_S
    assert 0.9 < cost.estimate_s / 182.5e-6 < 1.1
    every_step = cost_model.pipelined_cost(0, 8192, flow["hbm_bytes"], flow["hbm_written_bytes"], "v5e", 1e-9)
    assert every_step.estimate_s > 5 * cost.estimate_s
    # The worker's report is data: shares and counts below zero are refused, not priced.
    from pydantic import ValidationError

    from jaxbench_mcp.sandbox import protocol

    fields = {k: v for k, v in flow.items() if k in protocol.KernelTraffic.model_fields}
    assert protocol.KernelTraffic(**fields).moving_steps == 2
    for bad in ({"moving_steps": -1}, {"step_mix": [(1.0, -0.5, 1.0)]}):
        with pytest.raises(ValidationError):
            protocol.KernelTraffic(**{**fields, **bad})


@pytest.mark.parametrize("twice", [False, True])
def test_outside_work_is_read_from_the_compiled_program(twice):
    import jax
    import jax.numpy as jnp

    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.internals import hlo

    sys.path.insert(0, str(KERNELS))
    try:
        import good_rmsnorm
    finally:
        sys.path.pop(0)

    def fn(x, scale):
        y = good_rmsnorm.workload(x, scale)
        return (y, y) if twice else y

    args = [jax.ShapeDtypeStruct((8, 1024, 4096), jnp.bfloat16), jax.ShapeDtypeStruct((4096,), jnp.bfloat16)]
    ops, complete = hlo.outside_ops(targets.deviceless_compile(fn, args, "v6e").as_text())
    assert complete
    big = [o for o in ops if o.bytes >= 2**20]
    if not twice:
        # The wrapper reshapes are bitcasts: no op around the kernel moves a meaningful byte.
        assert big == []
    else:
        # Returning the output twice makes XLA write a second 64 MiB buffer (here it even keeps the kernel's output
        # in VMEM and copies it out twice): what the compiled program moves is charged.
        assert big and all(o.opcode in ("copy", "copy-start") for o in big)
        assert sum(o.bytes for o in big) >= 8 * 1024 * 4096 * 2


def test_an_attribute_over_several_lines_does_not_end_its_computation():
    from jaxbench_mcp.internals import hlo

    # tokamax's kernels carry JSON metadata with a newline in it: the instructions after it are still the entry's
    # (here the copy XLA makes to return the kernel's result twice).
    text = (
        "HloModule m\n\n"
        "ENTRY %main.1 (p: bf16[1024,1024]) -> (bf16[1024,1024], bf16[1024,1024]) {\n"
        "  %p = bf16[1024,1024]{1,0} parameter(0)\n"
        '  %k = bf16[1024,1024]{1,0} custom-call(%p), custom_call_target="tpu_custom_call", '
        'frontend_attributes={kernel_metadata={"xprof_metadata":"{\\"tiling\\": {\\"tile_m\\": 512},\n'
        '}}, metadata={op_name="jit(f)/pallas_call"}\n'
        "  %copy.1 = bf16[1024,1024]{1,0} copy(%k)\n"
        "  ROOT %t = (bf16[1024,1024]{1,0}, bf16[1024,1024]{1,0}) tuple(%k, %copy.1)\n"
        "}\n"
    )
    ops, complete = hlo.outside_ops(text)
    assert complete and [(o.name, o.bytes) for o in ops] == [("copy.1", 2 * 1024 * 1024 * 2)]


def _in_fresh_process(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a new Python (libtpu must load after estimate() sets its dump folder)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def _result_in_fresh_process(code: str):
    """What `code`, run in a new Python, printed after "RESULT " (a Python literal)."""
    out = _in_fresh_process(code)
    assert "RESULT" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    return ast.literal_eval(out.stdout.split("RESULT ", 1)[1].strip())


def test_a_killed_process_dump_folder_is_removed_by_the_next_estimate(tmp_path, monkeypatch):
    from jaxbench_mcp.perf import estimator

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    monkeypatch.setattr(estimator.tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"jaxbench-estimate-{dead_pid}-abc"
    alive = tmp_path / f"jaxbench-estimate-{os.getpid()}-def"
    unrelated = tmp_path / "jaxbench-estimate-notapid"
    for folder in (dead, alive, unrelated):
        (folder / "dump").mkdir(parents=True)
    estimator._remove_dump_roots_of_dead_processes()
    assert not dead.exists()
    assert alive.exists() and unrelated.exists()


@pytest.mark.slow
def test_the_public_estimate_of_a_tiled_gemm_runs_in_a_fresh_process(tmp_path):
    # A fresh process: libtpu must load after estimate() sets the dump folder.
    code = (
        "import jax, jax.numpy as jnp, sys, jaxbench_mcp\n"
        f"sys.path.insert(0, {str(KERNELS)!r})\n"
        "import good_gemm_tiled as g\n"
        "a = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)\n"
        "est = jaxbench_mcp.estimate(g.workload, a, a, target='v5e')\n"
        "k, = est.kernels\n"
        "assert k.grid_steps == 4 * 2 * 2 and est.total_us > 0 and est.bottleneck\n"
        "assert est.outside_us is not None and est.outside_us < 1.0\n"
        "print('OK', est.total_us)\n"
    )
    out = _in_fresh_process(code)
    assert "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


@pytest.mark.slow
def test_cli_estimate_of_a_file_function(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxbench_mcp.frontends.cli",
            "estimate",
            f"{KERNELS / 'good_gemm_tiled.py'}:workload",
            "--args",
            "bf16[2048,2048], bf16[2048,2048]",
            "--target",
            "v6e",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.startswith("v6e: ~") and "kernel 0:_matmul_kernel" in out.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxbench_mcp.frontends.cli",
            "estimate",
            f"{KERNELS / 'good_gemm_tiled.py'}:nope",
            "--args",
            "bf16[256,256], bf16[256,256]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path)},
    )
    assert bad.returncode == 1 and "no function `nope`" in bad.stdout


def test_estimate_args_are_read_from_a_short_spec():
    from jaxbench_mcp.perf import estimator
    from jaxbench_mcp.sandbox import protocol

    args = estimator.parse_args("bf16[8,128], int32[4]=[1, 2, 3, 4], 3, 'causal'")
    assert args[0] == protocol.ArrayArg(shape=[8, 128], dtype="bfloat16")
    assert args[1].values == [1, 2, 3, 4] and args[2] == protocol.StaticInput(static=3)
    assert protocol.arg_value(args[1]).dtype == np.int32
    with pytest.raises(ValueError):
        estimator.parse_args("bf16[8,")


@pytest.mark.slow
def test_tune_kernel_on_the_tiled_gemm_finds_blocks_no_worse_and_reports_vmem_misfits(tmp_path):
    from jaxbench_mcp import api
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.perf import tuning
    from jaxbench_mcp.store import Store

    bench = api.JaxBench(store=Store(tmp_path / "a.sqlite3"), checker=Checker(spares=0, slots=2))
    source = (KERNELS / "good_gemm_tiled.py").read_text()
    try:
        result = tuning.Tuner(bench).tune_kernel(
            "8p_GEMM",
            source,
            {"BM": [512, 1024], "BN": [1024], "BK": [1024, 8192]},
            "v6e",
            check_top=1,
            max_variants=4,
        )
    finally:
        bench.close()
    by_params = {tuple(v.params.values()): v for v in result.variants}
    hand = by_params[(512, 1024, 1024)]
    assert hand.hand_picked and hand.status == "estimated"
    # Blocks of 8192 along K double-buffer 2 x 32 MiB of operands: they cannot fit VMEM, and say so.
    misfit = by_params[(1024, 1024, 8192)]
    assert misfit.status == "vmem misfit" and "VMEM" in misfit.reason
    estimated = [v for v in result.variants if v.estimate_us is not None]
    assert estimated == sorted(estimated, key=lambda v: v.estimate_us) and result.variants[0] is estimated[0]
    assert result.best is not None and result.best_us <= result.hand_picked_us
    assert "correct" in result.variants[0].check
    assert "BM = " in result.best_source and "vmem misfit" in result.summary()


def test_a_megacore_chip_splits_parallel_grids_and_matmuls_never_beat_the_mxu_peak():
    from jaxbench_mcp.catalog import targets

    assert targets.cores_per_device("v5p") == 2 and targets.cores_per_device("v4") == 2
    assert targets.cores_per_device("7x") == targets.cores_per_device("v6e") == targets.cores_per_device("v5e") == 1
    # The device's roofline counts both cores of a megacore chip.
    chip = targets.chip_facts("v5p")
    assert targets.roofline_seconds(chip.peak_bf16_flops, 0, "v5p")[0] == pytest.approx(0.5)
    one = cost_model.pipelined_cost(1e6, 8, 1e9, 0, "v5p", 1e-9)
    two = cost_model.pipelined_cost(1e6, 8, 1e9, 0, "v5p", 1e-9, cores=2)
    assert two.compute_s == pytest.approx(one.compute_s / 2) and two.memory_s == pytest.approx(one.memory_s / 2)
    # Parallel steps are dealt out whole: 3 on 2 cores take 2 steps' time; one step, or a one-core chip, no split.
    assert cost_model.parallel_split(3, "v5p") == pytest.approx(1.5) and cost_model.parallel_split(64, "v5p") == 2
    assert cost_model.parallel_split(1, "v5p") == cost_model.parallel_split(64, "v6e") == 1
    # A schedule that claims less time than the matmuls need at peak is floored at the peak, and so is a calibration
    # that scales the bundles' issue rate down: no constant makes the MXUs faster than their peak.
    peak = 1e6 * cost_model.MXU_PUSH_FLOPS / targets.chip_facts("v6e").peak_bf16_flops
    floor = cost_model.pipelined_cost(1, 1, 0, 0, "v6e", 1e-12, mxu_pushes=1e6)
    assert floor.compute_s == pytest.approx(peak)
    fast = cost_model.Calibration(compute_scale=0.5)
    assert cost_model.pipelined_cost(1.5 * peak / 1e-9, 1, 0, 0, "v6e", 1e-9, fast, mxu_pushes=1e6).compute_s == (
        pytest.approx(peak)
    )
    assert cost_model.pipelined_cost(4 * peak / 1e-9, 1, 0, 0, "v6e", 1e-9, fast, mxu_pushes=1e6).compute_s == (
        pytest.approx(2 * peak)
    )


def test_issue_and_mxu_time_overlap_imperfectly_only_where_the_calibration_says_so():
    # max() where no power is set: the raw model, whose ideal matmul issues in exactly its MXU time (one term, not two).
    assert cost_model.overlapped(3.0, 2.0, None) == 3.0 and cost_model.overlapped(2.0, 2.0, None) == 2.0
    # A generalised mean: longer than either where they come close, never shorter than the longer, ~max when apart.
    assert cost_model.overlapped(2.0, 2.0, 16) == pytest.approx(2.0 * 2 ** (1 / 16))
    assert 1.0 < cost_model.overlapped(1.0, 0.59, 16) < cost_model.overlapped(1.0, 0.87, 16) < 1.01
    assert cost_model.overlapped(0.87, 1.0, 16) == cost_model.overlapped(1.0, 0.87, 16)
    assert cost_model.overlapped(1.0, 0.3, 16) == pytest.approx(1.0, rel=1e-6)
    assert cost_model.overlapped(0.0, 0.0, 16) == 0.0
    # Only 7x's calibration sets it; a kernel's compute there grows with it, and the raw model's does not.
    assert cost_model.calibration_for("7x").compute_overlap_power == 16
    assert all(cost_model.calibration_for(g).compute_overlap_power is None for g in ("v5e", "v5p", "v6e", "v4"))
    from jaxbench_mcp.catalog import targets

    matmul = {"mxu_pushes": 1e6}
    peak = 1e6 * cost_model.MXU_PUSH_FLOPS / targets.chip_facts("v6e").peak_bf16_flops
    raw = cost_model.pipelined_cost(peak / 1e-9, 1, 0, 0, "v6e", 1e-9, **matmul)
    assert raw.compute_s == pytest.approx(peak)
    joined = cost_model.Calibration(compute_overlap_power=16)
    assert cost_model.pipelined_cost(peak / 1e-9, 1, 0, 0, "v6e", 1e-9, joined, **matmul).compute_s == pytest.approx(
        peak * 2 ** (1 / 16)
    )


def test_a_tensorcore_mesh_kernel_is_replayed_per_core_and_the_busiest_core_counts():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp.catalog import targets

    def call(blocks):
        def fn(x):
            @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=pltpu.TensorCoreMesh(axis_name="core"))
            def k(x_hbm, o_hbm):
                def body(x_ref, o_ref):
                    o_ref[...] = x_ref[...] * 2.0

                spec = pl.BlockSpec((128, 128), lambda i: (i, 0))
                pipeline = pltpu.emit_pipeline(
                    body,
                    grid=(blocks,),
                    in_specs=[spec],
                    out_specs=[spec],
                    core_axis_name="core",
                    dimension_semantics=(pltpu.PARALLEL,),
                )
                pipeline(x_hbm, o_hbm)

            return k(x)

        with targets.chip_context("v5p", targets.cores_per_device("v5p")):
            closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((128 * blocks, 128), jnp.float32))
        (kernel,) = kernel_analysis.kernel_traffic(closed.jaxpr)
        return kernel

    # Each of the two cores pipelines its half of the 8 blocks; one block leaves the second core idle.
    even, alone = call(8), call(1)
    assert even["cores"] == alone["cores"] == 2
    assert even["core_share"] == pytest.approx(0.5) and alone["core_share"] == pytest.approx(1.0)
    assert even["run_ratio_exact"] and even["exact"] and even["hbm_bytes"] == 2 * 8 * 128 * 128 * 4
    # The ratios are the cores' average: 4 trips each, against 1 trip on one core and none on the other.
    assert even["loop_ratio"] == pytest.approx(4.0) and alone["loop_ratio"] == pytest.approx(0.5)
    # Priced: the two cores' halves run at once; the single block takes the one busy core as long as one core alone.
    from jaxbench_mcp.perf import estimator
    from jaxbench_mcp.sandbox import protocol

    schedule = protocol.Schedule(name="k", bundles=110, slot_use={}, depth_bundles=[10, 100])

    def compute_us(flow):
        return estimator.kernel_estimate(
            "k", schedule, protocol.KernelTraffic(**flow), "v5p", 1e-9, cost_model.RAW
        ).compute_us

    one_core = {**even, "cores": 1, "core_share": 1.0, "loop_ratio": 8.0}
    assert compute_us(even) == pytest.approx(compute_us(one_core) / 2, rel=0.02)
    assert compute_us(alone) == pytest.approx(compute_us({**one_core, "loop_ratio": 1.0}), rel=0.1)


def _schedule(name, kernel, bundles, call_shapes=None):
    from jaxbench_mcp.sandbox import protocol

    return protocol.Schedule(name=name, bundles=bundles, slot_use={}, kernel=kernel, call_shapes=call_shapes)


def _flow(kernel, steps, call_shapes=None):
    from jaxbench_mcp.sandbox import protocol

    return protocol.KernelTraffic(
        steps=steps,
        steps_exact=True,
        hbm_bytes=0,
        hbm_written_bytes=0,
        exact=True,
        run_ratio=1.0,
        run_ratio_exact=True,
        kernel=kernel,
        call_shapes=call_shapes,
    )


def _trip(*events):
    """A loop body's result ops from (bundle, "push" or "pop", unit[, result vregs])."""
    from jaxbench_mcp.internals.libtpu import ResultOp

    return [
        ResultOp(bundle, pushes=unit, results=rest[0] if rest else 1) if kind == "push" else ResultOp(bundle, pops=unit)
        for bundle, kind, unit, *rest in events
    ]


def test_a_result_popped_before_its_unit_has_it_stalls_the_trip_until_it_is_ready():
    latency = cost_model.RESULT_LATENCY_BUNDLES
    mxu, xlu = latency["mxu"], latency["xlu"]
    # A pop right after its matmul's push waits out the MXU's latency; popped that many bundles later, nothing.
    assert cost_model.result_wait(_trip((0, "push", "mxu0"), (1, "pop", "mxu0"))) == mxu - 1
    assert cost_model.result_wait(_trip((0, "push", "mxu0"), (mxu, "pop", "mxu0"))) == 0
    # Once the unit's first result is out the rest stream behind it: a bf16 push returns two, both popped at once.
    assert cost_model.result_wait(_trip((0, "push", "mxu0", 2), (1, "pop", "mxu0"), (2, "pop", "mxu0"))) == mxu - 1
    # Results come back in push order: the first pop takes the first push's result, even if pushed late.
    assert cost_model.result_wait(_trip((0, "push", "mxu0"), (50, "push", "mxu0"), (60, "pop", "mxu0"))) == mxu - 60
    # A pop before its push in the body takes the previous trip's result: ready by then.
    assert cost_model.result_wait(_trip((10, "pop", "mxu0"), (50, "push", "mxu0"))) == 0
    # A chain: the transpose's vregs (all from its last part) feed a matmul whose result is popped next. The
    # matmul issues late because the pop before it waited, and its own pop waits again: both latencies.
    chain = _trip((0, "push", "xlu0"), (1, "pop", "xlu0"), (2, "push", "mxu1"), (3, "pop", "mxu1"))
    assert cost_model.result_wait(chain) == (xlu - 1) + (mxu - 1)
    # The units are independent: two MXUs' pops in one bundle wait for the later of the two.
    two = _trip((0, "push", "mxu0"), (5, "push", "mxu1"), (6, "pop", "mxu0"), (6, "pop", "mxu1"))
    assert cost_model.result_wait(two) == mxu - 1
    # In straight-line code every result waits for its own push (STRAIGHT_LATENCY_BUNDLES): a second matmul pushed
    # after the first's result was popped (its operand, in a chain) issues late, and its own pop waits again.
    straight = cost_model.STRAIGHT_LATENCY_BUNDLES["mxu"]
    again = _trip((0, "push", "mxu0"), (1, "pop", "mxu0"), (2, "push", "mxu0"), (3, "pop", "mxu0"))
    assert cost_model.result_wait(again, straight=True) == 2 * (straight - 1)
    # In a rolled loop's trip the chain waits at each link too: the second push finds the unit drained, so it
    # begins a burst whose first result waits; pushed while the first's result is still out, it streams behind it.
    assert cost_model.result_wait(again) == 2 * (mxu - 1)
    streamed = _trip((0, "push", "mxu0"), (1, "push", "mxu0"), (2, "pop", "mxu0"), (3, "pop", "mxu0"))
    assert cost_model.result_wait(streamed) == mxu - 2


def test_the_final_schedule_is_read_into_loop_bodies_with_their_result_traffic(tmp_path):
    """A final_bundles file, written in libtpu's format (one line per bundle, a '>' per enclosing loop, LB on a
    loop body's first bundle): the bodies per depth, and their ops that push work into a unit (a bf16 matmul returns
    two f32 vregs, an f32 one one, a transpose's all come from its last part) or pop its results."""
    from jaxbench_mcp.internals import libtpu
    from jaxbench_mcp.perf import estimator

    lines = [
        "  0x0   : { %s1 = smov 0 }",
        "  0x1 LB: > { %v1 = vld [vmem:[%s1] sm:$0xff] }",
        "  0x2 LB: >> { %2 = vxpose.binary.xlu0.c.b16.start [1/2] (short) %v1, %v1, 128 }",
        "  0x3   : >> { %3 = vxpose.binary.xlu0.c.b16.end [2/2] (short) %v1, %v1, 128 /* not a pop: vpop.trf.xlu0 */ }",
        "  0x4   : >> { %v4 = vpop.trf.xlu0  ;;  %v5 = vpop.trf.xlu0 }",
        "  0x5   : >> { %6 = vmatmul.msk.bf16.vlgmr.msra.gmra.mxu0 %vm0, %v4  ;;  %7 = vmatmul.f32.gmra.mxu1 %v5 }",
        "  0x6   : > { %8 = vst [vmem:[%s1] sm:$0xff] %v5  ;;  %16 = vmatmul.f32.gmra.mxu2 %v5 }",
        "  0x7   : >> { %v9 = vpop.f32.mrf.mxu0  ;;  %v10 = vpop.f32.mrf.mxu1  ;;  %11 = vmatpush.bf16.msra.mxu0 %v1 }",
        "  0x8   : >> { %v12 = vpop.f32.mrf.mxu0  ;;  %13 = sbr.rel (!%p1) target = $region9 }",
        "  0x9   : > { %14 = vst [vmem:[%s1] sm:$0xff] %v12  ;;  %v17 = vpop.f32.mrf.mxu2 }",
        "  0xa   :  { %15 = vsyncpa [#allocation3], 1 }",
    ]
    path = tmp_path / "1-kernel-02-final_bundles.txt"
    path.write_text("\n".join(["// kernel: kernel", *lines, "iteration_bounds: (4)"]) + "\n")
    depth_bundles, bodies, branch_bundles = libtpu.read_bundles(path)
    assert depth_bundles == (2, 3, 6) and branch_bundles == {}
    whole, grid_body, inner = bodies
    assert (whole.depth, whole.bundles, grid_body.depth, grid_body.bundles, inner.depth, inner.bundles) == (
        0,
        11,
        1,
        9,
        2,
        6,
    )
    # Each op knows its own depth: the whole schedule holds the inner loop's and the grid body's own matmul (counted
    # from the schedule's first bundle), none around the grid.
    assert [(op.bundle, op.depth) for op in whole.ops] == [
        *[(3, 2), (4, 2), (4, 2), (5, 2), (5, 2)],
        (6, 1),
        *[(7, 2), (7, 2), (8, 2)],
        (9, 1),
    ]
    assert [op.depth for op in inner.ops] == [2] * 8
    # The store at depth 1 between the inner loop's bundles is not one of its bundles; a weight push is no result.
    assert [(op.bundle, op.pushes, op.results, op.pops) for op in inner.ops] == [
        (1, "xlu0", 1, None),
        (2, None, 0, "xlu0"),
        (2, None, 0, "xlu0"),
        (3, "mxu0", 2, None),
        (3, "mxu1", 1, None),
        (4, None, 0, "mxu0"),
        (4, None, 0, "mxu1"),
        (5, None, 0, "mxu0"),
    ]
    # Its trip: the transpose's pops wait for the XLU, the matmuls pushed after them, and their pops for the MXU.
    latency = cost_model.RESULT_LATENCY_BUNDLES
    assert cost_model.result_wait(inner.ops) == (latency["xlu"] - 1) + (latency["mxu"] - 1)
    # What the estimate takes of them: a trip of the inner loop waits as above, and the step's straight-line code (the
    # grid body outside its loop) pops its own matmul 3 bundles after pushing it; nothing waits around the grid.
    trip = cost_model.result_wait(inner.ops)
    assert estimator._loop_waits(bodies)[1] == trip
    assert estimator._straight_waits(bodies)[:2] == [0, cost_model.STRAIGHT_LATENCY_BUNDLES["mxu"] - 3]


def test_predicated_regions_are_read_from_the_final_schedule_by_kind(tmp_path):
    """A predicated region runs from a conditional branch over it to the PF-marked bundle whose comment names it
    (libtpu's format; the branch's delay slots are printed at no depth). One that issues DMAs and no vector work is a
    copy branch; one with matmuls a matmul branch; one with other vector work a vector branch. One that spans a loop
    is none of them, and a region inside another counts as part of it."""
    from jaxbench_mcp.internals import libtpu

    lines = [
        "  0x0   : { %s1 = smov 0 }",
        "  0x1 LB: > { %2 = sbr.rel (%p1) target = $region7 }",
        "  0x2   :  {}",
        "  0x3   : > { %s3 = sld [smem:[#allocation2 + %s1]]  ;;  %4 = sbr.rel (%p2) target = $region8 }",
        "  0x4   : > { %5 = dma.hbm_to_vmem [thread:$0]  %s3, 64, %s1, [#allocation3] }",
        "  0x5 PF: > { %s6 = sadd.s32 1, %s1 } /* Start/End empty region 8 */",
        "  0x6   : > { %7 = dma.hbm_to_vmem [thread:$0]  %s6, 64, %s1, [#allocation3] }",
        "  0x7 PF: > { %s8 = smov 1 } /* Start/End empty region 7 :: Start region 70 */",
        "  0x8   : > { %9 = sbr.rel (%p3) target = $region9 }",
        "  0x9   : > { %10 = dma.hbm_to_vmem [thread:$0]  %s6, 64, %s1, [#allocation3]  ;;  %v11 = vld [vmem:[%s1]] }",
        "  0xa PF: > { %s12 = smov 2 } /* Start/End empty region 9 */",
        "  0xb   : > { %13 = sbr.rel (%p4) target = $region10 }",
        "  0xc LB: >> { %14 = dma.hbm_to_vmem [thread:$0]  %s6, 64, %s1, [#allocation3] }",
        "  0xd PF: > { %s15 = smov 3 } /* Start/End empty region 10 */",
        "  0xe   : > { %16 = sbr.rel (%p6) target = $region11 }",
        "  0xf   : > { %v17 = vld [vmem:[%s1]] }",
        "  0x10  : > { %18 = vmatmul.msk.bf16.gmr.mxu0 %v17 }",
        "  0x11 PF: > { %s19 = smov 4 } /* Start/End empty region 11 */",
        "  0x12  : > { %20 = sbr.rel (!%p5) target = $region3 }",
    ]
    path = tmp_path / "1-kernel-02-final_bundles.txt"
    path.write_text("\n".join(["// kernel: kernel", *lines]) + "\n")
    with changed("the predicated regions of a final_bundles file", "libtpu.read_bundles"):
        _, _, branch_bundles = libtpu.read_bundles(path)
        # Region 7: bundles 0x2-0x6 (region 8 inside it); 9 loads; 10 loops; 11 multiplies.
        assert branch_bundles == {"copy": (0, 5, 0), "matmul": (0, 2, 0), "vector": (0, 1, 0)}


def test_copy_branches_run_as_often_as_the_copies_they_start():
    """jax's paged attention starts its first pages in a pl.when on the first step of a run and the next block's
    in another, each a region of the schedule that only issues DMAs. Those regions are charged as often as their
    copies start, not at the matmul work's rate that the rest of the loop body follows."""
    # A grid body of 50 bundles around a rolled loop of 1,000 bundles, 900 of them copy branches; 2 trips a step.
    counts = {"body_ratio": 1.0, "loop_ratio": 2.0, "flat_ratio": 1.0, "in_kernel_loops": 1}
    plain = cost_model.executed_bundles([10, 50, 1000], 1060, 8, True, **counts)
    assert plain == 10 + 8 * (50 + 1000 * 2)
    # The copies start 1.25 times a step (once every trip, and one step in four once more).
    copies = {"branch_bundles": {"copy": [0, 0, 900]}, "branch_ratios": {"copy": (None, 1.25)}}
    assert cost_model.executed_bundles([10, 50, 1000], 1060, 8, True, **counts, **copies) == 10 + 8 * (
        50 + 100 * 2 + 900 * 1.25
    )
    # Where the trace found no copy branch the regions count as the code around them.
    unknown = {"branch_bundles": {"copy": [0, 0, 900]}, "branch_ratios": {"copy": (None, None)}}
    assert cost_model.executed_bundles([10, 50, 1000], 1060, 8, True, **counts, **unknown) == plain
    # A grid step's copy branch outside loops, run on one step in 8 (a first-step prefetch).
    flat = {"body_ratio": 1.0, "loop_ratio": 1.0, "flat_ratio": 1.0, "in_kernel_loops": 0}
    first = {"branch_bundles": {"copy": [0, 400]}, "branch_ratios": {"copy": (1 / 8, None)}}
    assert cost_model.executed_bundles([10, 500], 510, 8, True, **flat, **first) == 10 + 8 * (100 + 400 / 8)


def test_matmul_and_vector_branches_run_as_often_as_their_work_and_the_code_around_them_every_trip():
    """tokamax's cross entropy on 7x: a loop trip of 18,576 bundles runs one of two matmul branches (init or
    accumulate, 13,691 bundles together), a loss epilogue of 3,102 on the last of its hidden blocks, and 1,783
    around them on every trip. Priced at the matmul work's rate, the trip was 18,576 x 0.5 bundles: the code around
    the branches half of the time (measured 3,240 us, estimated 2,687 with h = 2 blocks; with h = 7, 1.08x over)."""
    counts = {"body_ratio": 1.0, "loop_ratio": 252.0, "flat_ratio": 1.0, "in_kernel_loops": 1}
    plain = cost_model.executed_bundles([74, 18576], 18650, 1, False, **counts)
    assert plain == 74 + 18576 * 252
    kinds = {
        "branch_bundles": {"matmul": [0, 13691], "vector": [0, 3102]},
        "branch_ratios": {"matmul": (None, 252.0), "vector": (None, 252.0), "copy": (None, 201.6)},
        "unbranched_ratios": (None, 504.0),
    }
    priced = cost_model.executed_bundles([74, 18576], 18650, 1, False, **counts, **kinds)
    assert priced == 74 + 13691 * 252 + 3102 * 252 + (18576 - 13691 - 3102) * 504  # no copy regions: none apart
    # A branch the trace has but the schedule shows no region of (compiled inline) leaves the code around the
    # branches at the rate of all the work, as before; the regions found still run at their own rate.
    inline = {**kinds, "branch_bundles": {"vector": [0, 3102]}}
    assert cost_model.executed_bundles([74, 18576], 18650, 1, False, **counts, **inline) == plain
    # A grid step's epilogue on the last of 8 steps, around a matmul every step.
    flat = {"body_ratio": 1.0, "loop_ratio": 1.0, "flat_ratio": 1.0, "in_kernel_loops": 0}
    epilogue = {
        "branch_bundles": {"vector": [0, 300]},
        "branch_ratios": {"vector": (1 / 8, None)},
        "unbranched_ratios": (1.0, None),
    }
    assert cost_model.executed_bundles([10, 1000], 1010, 8, True, **flat, **epilogue) == 10 + 8 * (700 + 300 / 8)


def test_the_replay_tells_matmul_branches_vector_branches_and_the_code_around_them_apart():
    """A K-split product over 4 steps: the first step stores its product, the others add theirs (two matmul branches,
    one of them runs), the last applies an epilogue (a vector branch, 1 step in 4); the scaling before the branches
    runs every step."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, w_ref, o_ref, acc_ref):
        k = pl.program_id(0)
        x = x_ref[...] * 2

        @pl.when(k == 0)
        def _init():
            acc_ref[...] = jnp.dot(x, w_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k != 0)
        def _accumulate():
            acc_ref[...] += jnp.dot(x, w_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(0) - 1)
        def _epilogue():
            o_ref[...] = jnp.tanh(acc_ref[...]) * 3

    def call(x, w):
        return pl.pallas_call(
            kernel,
            grid=(4,),
            in_specs=[pl.BlockSpec((128, 128), lambda k: (0, k)), pl.BlockSpec((128, 128), lambda k: (k, 0))],
            out_specs=pl.BlockSpec((128, 128), lambda k: (0, 0)),
            out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32),
            scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32)],
        )(x, w)

    flow = _traffic(call, jnp.zeros((128, 512), jnp.float32), jnp.zeros((512, 128), jnp.float32))
    assert flow["branch_ratios"]["matmul"] == [0.5, None]  # one of two equal products a step
    assert flow["branch_ratios"]["vector"] == [0.25, None]
    assert flow["branch_ratios"]["copy"] == [None, None]
    assert flow["unbranched_ratios"] == [1.0, None]
    assert flow["body_ratio"] == 0.5  # all of the step's work, weighed in MXU pushes, as before


def test_the_replay_counts_copies_started_in_copy_branches_against_the_schedule():
    """Per part of the body (outside and inside its own loops): copies started in branches that only start copies,
    executed per step over scheduled. Here a first-step prefetch (one step in 4) and a next-block prefetch on every
    trip but a step's last of 2, beside a matmul branch that is no copy branch."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(n_ref, x_hbm, o_ref, buf, sem):
        step = pl.program_id(0)

        @pl.when(step == 0)
        def _first():
            pltpu.make_async_copy(x_hbm.at[pl.ds(0, 128)], buf, sem).start()

        def trip(i, acc):
            @pl.when(i + 1 < n_ref[0])
            def _next():
                pltpu.make_async_copy(x_hbm.at[pl.ds(0, 128)], buf, sem).start()

            pltpu.make_async_copy(x_hbm.at[pl.ds(0, 128)], buf, sem).wait()
            return acc + jnp.dot(buf[...], buf[...], preferred_element_type=jnp.float32)

        o_ref[...] = jax.lax.fori_loop(0, n_ref[0], trip, jnp.zeros(o_ref.shape, jnp.float32))

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(4,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((128, 128), lambda i, n: (i, 0)),
        scratch_shapes=[pltpu.VMEM((128, 128), jnp.float32), pltpu.SemaphoreType.DMA(())],
    )

    def call(n, x):
        return pl.pallas_call(kernel, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((512, 128), jnp.float32))(n, x)

    kernel_flow = _traffic(call, np.array([2], np.int32), jnp.zeros((512, 128), jnp.float32))
    # 1 of 2 trips start the next block's copy.
    assert kernel_flow["branch_ratios"]["copy"] == [1 / 4, 1.0]
    assert kernel_flow["loop_ratio"] == 2.0 and kernel_flow["run_ratio_exact"]


def test_trips_that_wait_for_their_results_are_priced_and_the_advice_says_to_unroll():
    """benchmarks/loop_matmuls.py: on a v5e a rolled loop of 64-deep matmuls takes 2.3x its unrolled twin, a wait
    for the MXU's results in every trip that no bundle count holds."""
    from jaxbench_mcp.perf import estimator
    from jaxbench_mcp.sandbox import protocol

    def estimate(depth_bundles, loop_waits, hbm_bytes=0):
        schedule = protocol.Schedule(
            name="k", bundles=110, slot_use={}, depth_bundles=depth_bundles, kernel="_k", loop_waits=loop_waits
        )
        flow = _flow("_k", 4).model_copy(update={"in_kernel_loops": 1, "loop_ratio": 8.0, "hbm_bytes": hbm_bytes})
        return estimator.assemble(
            protocol.ProfileTrace(traffic=[flow]),
            protocol.ProfileCompile(schedules=[schedule], outside=None, module_file="lowered_v5e.mlir"),
            "v5e",
            1e-9,
        )

    def advice(found):
        return [a for a in found.advice if "kept rolled" in a]

    # Around the grid, the step's body, its own loop of 8 trips that each wait 200 bundle slots beyond their 60.
    waiting, quick = estimate([10, 40, 60], [0, 200]), estimate([10, 40, 60], [0, 0])
    (kernel,) = waiting.kernels
    assert kernel.loop_wait_us == pytest.approx(4 * 8 * 200 * 1e-9 * 1e6)
    assert kernel.compute_us == pytest.approx(quick.kernels[0].compute_us + kernel.loop_wait_us)
    (line,) = advice(waiting)
    assert line.startswith("0:_k: ~6.4 us (") and "unroll=True" in line and "performance#in-kernel-loops" in line
    assert advice(quick) == [] and quick.kernels[0].loop_wait_us == 0
    assert advice(estimate([10, 40, 60], [0, 5])) == []  # 5 slots against 60 bundles a trip: not worth a word
    assert estimate([10, 100], [0, 200]).kernels[0].loop_wait_us == 0  # the compiler unrolled it
    # Where the HBM time hides the waits they add only to the share of compute the pipeline leaves unhidden (here a
    # quarter of the 6.4 us, over 4 steps), and unrolling would not help: no advice.
    hidden = estimate([10, 40, 60], [0, 200], hbm_bytes=100_000_000)
    assert hidden.kernels[0].bottleneck == "memory-bound"
    assert hidden.kernels[0].loop_wait_us == pytest.approx(6.4 / 4)
    assert advice(hidden) == []


@pytest.mark.slow
def test_a_rolled_loop_of_small_matmuls_is_estimated_slower_than_its_unrolled_twin():
    """A canary as well: the final schedule of a real compile holds the matmul pushes and pops the wait is read from
    (benchmarks/loop_matmuls.py measured the twins on a v5e: 612 against 264 us at full size)."""
    code = (
        "import jax, jax.numpy as jnp, jaxbench_mcp\n"
        "from jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n"
        "def twin(unroll):\n"
        "    def body(k_ref, q_ref, o_ref, s_ref):\n"
        "        def head(h, carry):\n"
        "            s_ref[...] += jax.lax.dot_general(k_ref[h], q_ref[h], (((0,), (0,)), ((), ())),\n"
        "                                              preferred_element_type=jnp.float32)\n"
        "            return carry\n"
        "        jax.lax.fori_loop(0, 8, head, 0, unroll=unroll)\n"
        "        o_ref[...] = s_ref[:8, :128]\n"
        "    spec = pl.BlockSpec((8, 64, 256), lambda i: (i, 0, 0))\n"
        "    return lambda k, q: pl.pallas_call(body, grid=(16,), in_specs=[spec, spec],\n"
        "        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),\n"
        "        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),\n"
        "        scratch_shapes=[pltpu.VMEM((256, 256), jnp.float32)])(k, q)\n"
        "x = jax.ShapeDtypeStruct((128, 64, 256), jnp.bfloat16)\n"
        "looped, unrolled = (jaxbench_mcp.estimate(twin(u), x, x, target='v5e') for u in (False, True))\n"
        "found = [(e.kernels[0].compute_us, e.kernels[0].loop_wait_us, e.advice) for e in (looped, unrolled)]\n"
        "from jaxbench_mcp.internals import libtpu\n"
        "from jaxbench_mcp.perf import estimator\n"
        "dumped = libtpu.parse_dump(estimator._process_dump_root() / 'target-v5e')\n"
        "(kernel,) = [s for s in dumped if s.kernel == 'body']\n"
        "print('RESULT', [*found, estimator._straight_waits(kernel.loop_bodies)])\n"
    )
    looped, unrolled, straight = _result_in_fresh_process(code)
    (looped_us, looped_wait, looped_advice), (unrolled_us, unrolled_wait, _) = looped, unrolled
    with changed("the MXU pushes and result pops of a final_bundles file", "libtpu.read_bundles"):
        assert looped_wait > 0 and unrolled_wait == 0
        # The unrolled twin (the last compile): its step's straight-line body waits for results too, less than the
        # rolled loop's trips do.
        assert straight[1] > 0
    assert looped_us > 1.5 * unrolled_us
    assert any("kept rolled" in a for a in looped_advice)


@pytest.mark.slow
def test_an_epilogue_on_the_last_step_costs_its_share_of_one_on_every_step():
    """A real compile's final schedule: a K-split product whose vector epilogue (a pl.when) runs on the last of 8
    steps, on every step or on none (a scalar-prefetch flag, concrete, says which: one program, three estimates).
    The epilogue's region is charged on the steps that run it, not at the rate of the matmul beside it, which runs on
    every step: the last-step epilogue adds an eighth of what the every-step one adds."""
    code = (
        "import jax, jax.numpy as jnp, numpy as np, jaxbench_mcp\n"
        "from jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n"
        "def body(flag_ref, x_ref, w_ref, o_ref, acc_ref):\n"
        "    k = pl.program_id(0)\n"
        "    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)\n"
        "    last = jnp.logical_and(k == pl.num_programs(0) - 1, flag_ref[0] == 0)\n"
        "    @pl.when(jnp.logical_or(last, flag_ref[0] == 1))\n"
        "    def _epilogue():\n"
        "        a = acc_ref[...]\n"
        "        for _ in range(4):\n"
        "            a = jnp.tanh(a) * 1.5 + jnp.exp(-a)\n"
        "        o_ref[...] = a\n"
        "spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(8,),\n"
        "    in_specs=[pl.BlockSpec((512, 256), lambda k, f: (0, k)), pl.BlockSpec((256, 512), lambda k, f: (k, 0))],\n"
        "    out_specs=pl.BlockSpec((512, 512), lambda k, f: (0, 0)),\n"
        "    scratch_shapes=[pltpu.VMEM((512, 512), jnp.float32)])\n"
        "call = pl.pallas_call(body, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((512, 512), jnp.float32))\n"
        "x, w = jax.ShapeDtypeStruct((512, 2048), jnp.bfloat16), jax.ShapeDtypeStruct((2048, 512), jnp.bfloat16)\n"
        "found = [jaxbench_mcp.estimate(call, np.array([f], np.int32), x, w, target='v5e') for f in (0, 1, 2)]\n"
        "from jaxbench_mcp.internals import libtpu\n"
        "from jaxbench_mcp.perf import estimator\n"
        "dumped = libtpu.parse_dump(estimator._process_dump_root() / 'target-v5e')\n"
        "print('RESULT', [[e.kernels[0].compute_us for e in found], dumped[0].branch_bundles])\n"
    )
    (last_us, every_us, never_us), branch_bundles = _result_in_fresh_process(code)
    with changed("the predicated regions of a final_bundles file", "libtpu.read_bundles"):
        assert sum(branch_bundles["vector"]) > 0
    assert every_us > 1.3 * never_us  # a heavy epilogue: it shows
    assert last_us - never_us == pytest.approx((every_us - never_us) / 8, rel=0.02)


@pytest.mark.slow
def test_a_prefetch_on_the_first_step_alone_costs_less_than_one_on_every_step():
    """A canary as well: a real compile's final schedule gives a pl.when that only starts copies a region of its own
    (libtpu.read_bundles finds it at the grid body's depth), which the estimate charges on the steps that start them:
    128 page copies on the first of 64 steps, or on every step (a scalar-prefetch flag, concrete, says which: one
    program, two estimates). A region of 16 such copies the compiler predicates instead (every step issues its
    bundles, as charged)."""
    code = (
        "import jax, jax.numpy as jnp, numpy as np, jaxbench_mcp\n"
        "from jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n"
        "def body(every_ref, x_hbm, o_ref, buf, sem):\n"
        "    step = pl.program_id(0)\n"
        "    @pl.when(jnp.logical_or(step == 0, every_ref[0] == 1))\n"
        "    def _prefetch():\n"
        "        for page in range(128):\n"
        "            pltpu.make_async_copy(x_hbm.at[step * 128 + page], buf.at[page], sem).start()\n"
        "    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)\n"
        "spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(64,),\n"
        "    in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec((8, 128), lambda i, e: (i, 0)),\n"
        "    scratch_shapes=[pltpu.VMEM((128, 8, 128), jnp.bfloat16), pltpu.SemaphoreType.DMA(())])\n"
        "call = pl.pallas_call(body, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((512, 128), jnp.float32))\n"
        "x = jax.ShapeDtypeStruct((8192, 8, 128), jnp.bfloat16)\n"
        "once, every = (jaxbench_mcp.estimate(call, np.array([e], np.int32), x, target='v5e') for e in (0, 1))\n"
        "from jaxbench_mcp.internals import libtpu\n"
        "from jaxbench_mcp.perf import estimator\n"
        "dumped = libtpu.parse_dump(estimator._process_dump_root() / 'target-v5e')\n"
        "found = [e.kernels[0].compute_us for e in (once, every)] + [every.bottleneck, every.advice]\n"
        "print('RESULT', [*found, list(dumped[0].branch_bundles.get('copy', ()))])\n"
    )
    once_us, every_us, bottleneck, advice, copy_bundles = _result_in_fresh_process(code)
    with changed("the predicated regions of a final_bundles file", "libtpu.read_bundles"):
        assert len(copy_bundles) >= 2 and copy_bundles[1] > 0 and sum(copy_bundles) == copy_bundles[1]
    assert once_us < 0.5 * every_us
    # Starting 128 copies of 2 KiB a step takes longer than moving them, and the profile says so.
    assert bottleneck == "copy-issue-bound" and any("move more per copy" in a for a in advice)


def test_kernel_schedules_pair_with_traced_kernels_by_name_not_by_position():
    from jaxbench_mcp.perf.estimator import pair_kernels

    # libtpu dumps in compile order: here the second traced kernel first, and the same body called twice.
    schedules = [_schedule("f.4", "_norm", 10), _schedule("f.2", "_gemm", 20), _schedule("f.3", "_gemm", 20)]
    traffic = [_flow("_gemm", 2), _flow("_gemm", 2), _flow("_norm", 3)]
    pairs = pair_kernels(schedules, traffic)
    assert [(s.bundles, f.steps) for s, f in pairs] == [(20, 2), (20, 2), (10, 3)]
    # Two kernels of one name that do different work pair by the shapes of their calls, and where those do not tell
    # them apart, none is guessed.
    shaped = [
        _schedule("f.4", "_norm", 10),
        _schedule("f.2", "_gemm", 20, "8->8"),
        _schedule("f.3", "_gemm", 30, "4->4"),
    ]
    flows = [_flow("_gemm", 1, "4->4"), _flow("_gemm", 2, "8->8"), _flow("_norm", 3)]
    assert [(s.bundles, f.steps) for s, f in pair_kernels(shaped, flows)] == [(30, 1), (20, 2), (10, 3)]
    shared = pair_kernels(schedules, [_flow("_gemm", 1), _flow("_gemm", 2), _flow("_norm", 3)])
    assert isinstance(shared, str) and "2 kernels share the name _gemm" in shared and "name=" in shared
    alike = pair_kernels(shaped, [_flow("_gemm", 1, "4->4"), _flow("_gemm", 2, "4->4"), _flow("_norm", 3)])
    assert isinstance(alike, str) and "share the name _gemm" in alike
    # A kernel the dump does not name, or names differently, is reported rather than paired by position.
    unnamed = pair_kernels(
        [_schedule("f.2", None, 20), _schedule("f.3", "_norm", 10)], [_flow("_gemm", 1), _flow("_norm", 3)]
    )
    assert isinstance(unnamed, str) and "(unnamed) x1" in unnamed and "_gemm x1" in unnamed
    other = pair_kernels([_schedule("f.2", "_gemm", 20), _schedule("f.3", "_gemm", 10)], traffic[1:])
    assert isinstance(other, str) and "_gemm x2" in other and "_norm x1" in other
    assert isinstance(pair_kernels(schedules[:2], traffic), str)  # as many schedules as traced kernels, or none
    # A lone kernel has nothing to be confused with.
    assert pair_kernels([_schedule("f.2", None, 20)], [_flow("_gemm", 1)])[0][0].bundles == 20


def test_the_dump_and_the_trace_name_a_kernel_alike():
    import functools
    import re

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.internals import libtpu

    def _scale_kernel(x_ref, o_ref, factor):
        o_ref[...] = x_ref[...] * factor

    spec = pl.BlockSpec((128, 128), lambda i: (i, 0))

    def fn(x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        call = functools.partial(pl.pallas_call, grid=(4,), in_specs=[spec], out_specs=spec, out_shape=out)
        y = call(functools.partial(_scale_kernel, factor=2.0))(x)
        y = call(functools.partial(_scale_kernel, factor=3.0), name="renamed")(y)  # a name= names the module
        return call(lambda x_ref, o_ref: _scale_kernel(x_ref, o_ref, 3.0))(y)  # "<lambda>" is not a symbol name

    x = jax.ShapeDtypeStruct((512, 128), jnp.float32)
    traced = [k["kernel"] for k in kernel_analysis.kernel_traffic(jax.make_jaxpr(fn)(x).jaxpr)]
    assert traced == ["_scale_kernel", "renamed", "_lambda_"]
    # The Mosaic modules of the lowered program, each in the form a schedule file of libtpu's dump shows its
    # custom call (the slow test below reads a real dump).
    bodies = re.findall(r"\\22body\\22: \\22([A-Za-z0-9+/=]+)\\22", targets.lower_for_tpu(fn, [x]).as_text())
    dumped = [
        libtpu._kernel_name(
            f'%k = f32[512,128] custom-call(%x), custom_call_target="tpu_custom_call", '
            f'backend_config={{"custom_call_config":{{"body":"{body}","needs_layout_passes":true}}}}'
        )
        for body in bodies
    ]
    assert dumped == traced
    assert libtpu._kernel_name('custom_call_target="tpu_custom_call", {"custom_call_config":{"body":"AAAA"}}') is None
    # Kernels that share a name are told apart by their calls' shapes, read alike from the trace and the dump.
    line = (
        "\t5670.00 scheduled bundles (100.00%): %workload.7 = bf16[8192,576]{1,0:T(8,128)(2,1)S(1)} "
        'custom-call(%bitcast.11, %copy.47.b_ref), custom_call_target="tpu_custom_call", '
        "operand_layout_constraints={bf16[8192,7168]{1,0}, s32[]{:T(128)}}, frontend_attributes={kernel_metadata={}}"
    )
    assert libtpu.call_shapes(line) == "8192x7168,->8192x576"
    assert libtpu.call_shapes('%k = f32[8] custom-call(%x), custom_call_target="tpu_custom_call"') is None
    traced_shapes = [k["call_shapes"] for k in kernel_analysis.kernel_traffic(jax.make_jaxpr(fn)(x).jaxpr)]
    assert traced_shapes == ["512x128->512x128"] * 3


@pytest.mark.slow
def test_kernels_compiled_out_of_trace_order_are_estimated_with_their_own_schedules():
    # A big matmul kernel, then a small elementwise one on its result: libtpu finishes (and dumps) the small one
    # first. A fresh process: libtpu must load after estimate() sets the dump folder.
    code = (
        "import jax, jax.numpy as jnp, jaxbench_mcp\n"
        "from jax.experimental import pallas as pl\n"
        "from jaxbench_mcp.perf import estimator\n"
        "def _matmul_kernel(a_ref, b_ref, o_ref):\n"
        "    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)\n"
        "def _scale_kernel(x_ref, o_ref):\n"
        "    o_ref[...] = x_ref[...] * 2.0\n"
        "def fn(a, b):\n"
        "    c = pl.pallas_call(_matmul_kernel, out_shape=jax.ShapeDtypeStruct((1024, 1024), jnp.float32))(a, b)\n"
        "    spec = pl.BlockSpec((128, 1024), lambda i: (i, 0))\n"
        "    return pl.pallas_call(_scale_kernel, grid=(8,), in_specs=[spec], out_specs=spec,\n"
        "                          out_shape=jax.ShapeDtypeStruct((1024, 1024), jnp.float32))(c)\n"
        "a = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)\n"
        "est = jaxbench_mcp.estimate(fn, a, a, target='v6e')\n"
        "compiled = estimator.compile_kernels(jax.jit(lambda a, b: fn(a, b) + 0), [a, a], (), 'v6e',\n"
        "                                     estimator._process_dump_root())\n"
        "dumped = [(s.kernel, s.bundles) for s in compiled.schedules]\n"
        "print('RESULT', (dumped, [(k.name, k.grid_steps, k.bundles_per_step) for k in est.kernels]))\n"
    )
    dumped, estimated = _result_in_fresh_process(code)
    bundles = dict(dumped)
    assert [k for k, _ in dumped] == ["_scale_kernel", "_matmul_kernel"], "compiled in trace order: not a test"
    assert bundles["_matmul_kernel"] > 10 * bundles["_scale_kernel"]
    assert estimated == [
        ("0:_matmul_kernel", 1, bundles["_matmul_kernel"]),
        ("1:_scale_kernel", 8, bundles["_scale_kernel"]),
    ]


@pytest.mark.slow
def test_one_kernel_function_on_two_shapes_is_paired_by_the_shapes_of_its_calls():
    # The same body on a big and a small matmul (3p's solution does this thrice): the schedules share the body's name,
    # and the custom calls' shapes say which is whose, whatever order libtpu compiles them in.
    code = (
        "import jax, jax.numpy as jnp, jaxbench_mcp\n"
        "from jax.experimental import pallas as pl\n"
        "from jaxbench_mcp.perf import estimator\n"
        "def _matmul_kernel(a_ref, b_ref, o_ref):\n"
        "    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)\n"
        "def mm(a, b):\n"
        "    return pl.pallas_call(_matmul_kernel, out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]),\n"
        "                          jnp.float32))(a, b)\n"
        "def fn(a, b, c, d):\n"
        "    return mm(a, b), mm(c, d)\n"
        "big = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)\n"
        "small = jax.ShapeDtypeStruct((128, 128), jnp.bfloat16)\n"
        "est = jaxbench_mcp.estimate(fn, big, big, small, small, target='v6e')\n"
        "root = estimator._process_dump_root()\n"
        "compiled = estimator.compile_kernels(fn, [big, big, small, small], (), 'v6e', root)\n"
        "dumped = [(s.kernel, s.call_shapes, s.bundles) for s in compiled.schedules]\n"
        "print('RESULT', (dumped, [(k.name, k.bundles_per_step) for k in est.kernels]))\n"
    )
    dumped, estimated = _result_in_fresh_process(code)
    bundles = {shapes: n for _, shapes, n in dumped}
    assert {name for name, _, _ in dumped} == {"_matmul_kernel"}
    big, small = bundles["1024x1024,1024x1024->1024x1024"], bundles["128x128,128x128->128x128"]
    assert big > 10 * small
    assert estimated == [("0:_matmul_kernel", big), ("1:_matmul_kernel", small)]


def test_workload_integer_inputs_are_known_so_skipped_blocks_cost_nothing():
    """7p's kernel skips the KV blocks past each item's last visible key: with the workload's lengths and page
    table concrete (estimator.workload_args) the replay decides every pl.when and counts the DMAs it issues;
    with them abstract it can only charge the heaviest branch on every step."""
    import importlib.util

    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.perf import estimator

    w = workloads.get_workload("7p_Ragged_Paged_Attention")
    path = Path(__file__).parent.parent / "solutions/7p_Ragged_Paged_Attention.py"
    spec = importlib.util.spec_from_file_location("solution_7p", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = estimator.workload_args(w, "full")
    assert isinstance(args[2], np.ndarray) and not isinstance(args[0], np.ndarray)  # kv_lens known, queries not
    (known,) = estimator.trace_kernels(module.workload, args, w.static_argnums, "v6e").traffic
    (blind,) = estimator.trace_kernels(
        module.workload, workloads.abstract_inputs(w, "full"), w.static_argnums, "v6e"
    ).traffic
    assert known.run_ratio_exact and known.exact
    assert not blind.run_ratio_exact
    # Fewer matmuls than every block of every item (the skipped ones), and the pages it really fetches.
    assert known.mxu_pushes < 0.7 * blind.mxu_pushes
    assert known.dma_bytes > blind.dma_bytes


def test_a_kernel_inside_a_loop_counts_once_per_trip():
    """A GEMM split into 16 pallas_calls in a fori_loop is 16 runs of the kernel, not one (below physics)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxbench_mcp.perf import estimator
    from jaxbench_mcp.sandbox import protocol

    def body(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    def piece(a, b):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32))(a, b)

    def split(a, b, trips):
        def step(i, acc):
            return acc + piece(jax.lax.dynamic_slice_in_dim(a, i * 256, 256, 1), b[:256])

        return jax.lax.fori_loop(0, trips, step, jnp.zeros((256, 256), jnp.float32))

    x = jax.ShapeDtypeStruct((256, 4096), jnp.bfloat16)
    y = jax.ShapeDtypeStruct((4096, 256), jnp.bfloat16)
    (static,) = kernel_analysis.kernel_traffic(jax.make_jaxpr(lambda a, b: split(a, b, 16))(x, y).jaxpr)
    assert static["runs"] == 16 and static["runs_exact"]

    def unknown(a, b, n):  # the trip count is an argument nobody knows
        return split(a, b, n[0])

    (dynamic,) = kernel_analysis.kernel_traffic(
        jax.make_jaxpr(unknown)(x, y, jax.ShapeDtypeStruct((1,), jnp.int32)).jaxpr
    )
    assert dynamic["runs"] == 1 and not dynamic["runs_exact"]
    schedule = protocol.Schedule(name="k", bundles=100, slot_use={}, depth_bundles=[100])
    once = estimator.kernel_estimate("k", schedule, protocol.KernelTraffic(**dynamic), "v6e", 1e-9, cost_model.RAW)
    many = estimator.kernel_estimate("k", schedule, protocol.KernelTraffic(**static), "v6e", 1e-9, cost_model.RAW)
    assert many.estimate_us == pytest.approx(16 * once.estimate_us) and many.runs == 16
    assert many.hbm_bytes == 16 * once.hbm_bytes and not once.grid_steps_exact


def test_arithmetic_outside_the_kernels_costs_vector_time_not_just_bytes():
    """Half a GEMM done by XLA as a broadcast-multiply-reduce: 2 x 512^3 element operations on the vector units,
    not the 3 MiB its operands and result move."""
    import jax
    import jax.numpy as jnp

    from jaxbench_mcp.catalog import targets
    from jaxbench_mcp.internals import hlo

    def fn(a, b):
        return (a[:, :, None] * b[None, :, :]).sum(1)

    args = [jax.ShapeDtypeStruct((512, 512), jnp.float32)] * 2
    ops, _ = hlo.outside_ops(targets.deviceless_compile(fn, args, "v6e").as_text())
    seconds = sum(cost_model.outside_seconds(ops, "v6e"))
    bytes_only = sum(o.bytes for o in ops) / targets.chip_facts("v6e").hbm_bytes_per_second
    assert seconds >= 2 * 512**3 / cost_model.vector_ops_per_second("v6e")
    assert seconds > 10 * bytes_only


@pytest.mark.slow
def test_the_public_estimate_of_a_ragged_dot_is_bounded_when_its_group_sizes_are_unknown():
    """tokamax's ragged dot loops in one grid step over a trip count its group sizes set. Passed as concrete
    values they are followed; passed abstract (as an agent's own wrapper would) the loop cannot be counted, and
    the estimate is bounded and flagged, never below the roofline of the matmul its operands imply."""
    code = (
        "import jax, jax.numpy as jnp, numpy as np, jaxbench_mcp\n"
        "from tokamax import config as tc\n"
        "from tokamax._src.ops.ragged_dot.pallas_mosaic_tpu import PallasMosaicTpuRaggedDot\n"
        "from jaxbench_mcp import targets\n"
        "op = PallasMosaicTpuRaggedDot()\n"
        "def f(lhs, rhs, gs):\n"
        "    with tc.cross_compile(True):\n"
        "        return op(lhs, rhs, group_sizes=gs)\n"
        "M, K, N, G = 4096, 2048, 2048, 4\n"
        "lhs = jax.ShapeDtypeStruct((M, K), jnp.bfloat16)\n"
        "rhs = jax.ShapeDtypeStruct((G, K, N), jnp.bfloat16)\n"
        "roof = targets.roofline_seconds(2.0 * M * K * N, 2 * (M * K + G * K * N + M * N), 'v6e')[0] * 1e6\n"
        "known = jaxbench_mcp.estimate(f, lhs, rhs, np.full((G,), M // G, np.int32), target='v6e')\n"
        "blind = jaxbench_mcp.estimate(f, lhs, rhs, jax.ShapeDtypeStruct((G,), jnp.int32), target='v6e')\n"
        "assert not any(k.floored for k in known.kernels) and not any('BOUNDED' in x for x in known.flags)\n"
        "assert all(k.floored for k in blind.kernels) and any('BOUNDED' in x for x in blind.flags), blind.flags\n"
        "assert known.total_us >= roof and blind.total_us >= roof, (known.total_us, blind.total_us, roof)\n"
        "print('OK', roof, known.total_us, blind.total_us)\n"
    )
    out = _in_fresh_process(code)
    assert "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    print(out.stdout.strip().splitlines()[-1])


def _described(call, *shapes):
    """describe_kernels of the one kernel in `call` traced on ShapeDtypeStructs of `shapes` ((shape, dtype) pairs)."""
    import jax

    closed = jax.make_jaxpr(call)(*[jax.ShapeDtypeStruct(s, d) for s, d in shapes])
    (kernel,), _ = kernel_analysis.describe_kernels(closed.jaxpr)
    return kernel


def test_a_block_whose_index_stays_is_single_buffered():
    """The compiler gives a block one buffer when its index is the same at every grid step (benchmarks/
    vmem_fidelity.py measured a (0, 0) block, one indexed by an axis of one step and pl.Buffered(1)), two otherwise."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def call(x, y, z):
        return pl.pallas_call(
            lambda x_ref, y_ref, z_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + y_ref[...] + z_ref[...]),
            grid=(4, 1),
            in_specs=[
                pl.BlockSpec((128, 128), lambda i, j: (0, 0)),
                pl.BlockSpec((128, 128), lambda i, j: (j, 0)),
                pl.BlockSpec((128, 128), lambda i, j: (i, 0), pipeline_mode=pl.Buffered(1)),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((512, 128), jnp.float32),
        )(x, y, z)

    kernel = _described(call, ((128, 128), "float32"), ((128, 128), "float32"), ((512, 128), "float32"))
    assert [b["buffers"] for b in kernel["blocks"]] == [1, 1, 1, 2]


def test_a_branch_passed_a_constant_is_described():
    """lax.cond given a Python scalar passes it as a literal, which cannot be hashed: tokamax's ragged_dot does, and
    the worker's analysis once died on it (the check then blamed the candidate for exiting)."""
    import jax
    from jax.experimental import pallas as pl

    def body(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = jax.lax.cond(pl.program_id(0) == 0, lambda x, s: x * s, lambda x, s: x + s, x, 2.0)

    def call(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(body, grid=(2,), in_specs=[spec], out_specs=spec, out_shape=x)(x)

    kernel = _described(call, ((16, 128), "float32"))
    assert kernel["body_values_bytes"] == 0
    assert [b["block_shape"] for b in kernel["blocks"]] == [[8, 128], [8, 128]]


def test_body_values_stream_unless_a_reduction_or_the_mxu_holds_them():
    """RMSNorm's f32 copy of its block is read after the row mean: kept (4 MiB for (128, 8192) less what the
    registers hold; 12.25 MiB compiled in all for 12p); an elementwise (y + b) * y streams; a GEMM's acc += dot with
    K = 512 stages nothing on v6e and its LHS on v5e (8p: 12.00 and 12.84 MiB compiled)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from jaxbench_mcp.sandbox import protocol

    def rows(body):
        def call(x):
            spec = pl.BlockSpec((128, 8192), lambda i: (i, 0))
            return pl.pallas_call(body, grid=(4,), in_specs=[spec], out_specs=spec, out_shape=x)(x)

        return _described(call, ((512, 8192), "bfloat16"))

    def rmsnorm(x_ref, o_ref):
        x = x_ref[...].astype(jnp.float32)
        o_ref[...] = (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)).astype(o_ref.dtype)

    def square_plus(x_ref, o_ref):
        y = x_ref[...].astype(jnp.float32)
        o_ref[...] = ((y + 1.0) * y).astype(o_ref.dtype)

    held = kernel_analysis.REGISTER_HELD_BYTES
    assert rows(rmsnorm)["body_values_bytes"] == 128 * 8192 * 4 - held
    assert rows(square_plus)["body_values_bytes"] == 0

    def gemm(a, b):
        def body(a_ref, b_ref, o_ref, acc_ref):
            @pl.when(pl.program_id(2) == 0)
            def _():
                acc_ref[...] = jnp.zeros_like(acc_ref)

            acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

            @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
            def _():
                o_ref[...] = acc_ref[...].astype(o_ref.dtype)

        return pl.pallas_call(
            body,
            grid=(4, 4, 8),
            in_specs=[
                pl.BlockSpec((1024, 512), lambda i, j, k: (i, k)),
                pl.BlockSpec((512, 1024), lambda i, j, k: (k, j)),
            ],
            out_specs=pl.BlockSpec((1024, 1024), lambda i, j, k: (i, j)),
            out_shape=jax.ShapeDtypeStruct((4096, 4096), a.dtype),
            scratch_shapes=[pltpu.VMEM((1024, 1024), jnp.float32)],
        )(a, b)

    kernel = protocol.KernelInfo(**_described(gemm, ((4096, 4096), "bfloat16"), ((4096, 4096), "bfloat16")))
    assert cost_model.vmem_bytes(kernel, "v6e") == 12 * 2**20
    assert cost_model.vmem_bytes(kernel, "v5e") == 13 * 2**20 - held  # + the 1 MiB LHS block, relaid for the MXU


def test_7x_stages_a_matmul_of_up_to_1024_rows_less_than_v6e():
    """benchmarks/vmem_sweeps.py's dots group: 7x stages nothing for a 1024 x 1024 @ 1024 x 512 product (v6e: 2.30
    MiB, an f32 partial tile and the bf16 LHS) and only the LHS when N = 1024 (1.82 MiB; v6e 2.82)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxbench_mcp.sandbox import protocol

    def beyond_blocks(n: int, rows: int, generation: str) -> int:
        def call(x, w):
            def body(x_ref, w_ref, o_ref):
                o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

            return pl.pallas_call(
                body,
                grid=(4,),
                in_specs=[pl.BlockSpec((rows, 1024), lambda i: (i, 0)), pl.BlockSpec((1024, n), lambda i: (0, 0))],
                out_specs=pl.BlockSpec((rows, n), lambda i: (i, 0)),
                out_shape=jax.ShapeDtypeStruct((4 * rows, n), jnp.float32),
            )(x, w)

        kernel = protocol.KernelInfo(**_described(call, ((4 * rows, 1024), "bfloat16"), ((1024, n), "bfloat16")))
        return cost_model.vmem_bytes(kernel, generation) - cost_model.pipeline_vmem_bytes(kernel)

    held = kernel_analysis.REGISTER_HELD_BYTES
    lhs, tile = 1024 * 1024 * 2, 1024 * 256 * 4
    assert beyond_blocks(512, 1024, "7x") == 0
    assert beyond_blocks(1024, 1024, "7x") == lhs - held
    assert beyond_blocks(512, 1024, "v6e") == beyond_blocks(1024, 1024, "v6e") == lhs + tile - held
    # From 2048 rows the model stages as on v6e (7x compiled 3.84 MiB at N = 512 and 7.06 at N = 1024, modelled 5.81).
    assert beyond_blocks(512, 2048, "7x") == beyond_blocks(512, 2048, "v6e") == 2 * (lhs + tile) - held


def test_a_block_two_matmuls_read_is_staged_as_if_one_read_all_their_columns():
    """3p's projections of one latent block to keys and values: (1024, 512) bf16 @ (512, 128) twice. On a 128-wide
    MXU each product is one column tile, and yet the compiler stages the block (v5e and v5p: 0.82 MiB beyond the
    blocks, the 1 MiB LHS less what the registers hold): two readers of one tile each read it as often as one reader
    of two tiles. On v6e (256 wide, K = 512, read from its ref) nothing is staged either way."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxbench_mcp.sandbox import protocol

    def call(x, wk, wv):
        def body(x_ref, wk_ref, wv_ref, k_ref, v_ref):
            x = x_ref[...]
            k_ref[...] = jnp.dot(x, wk_ref[...], preferred_element_type=jnp.float32).astype(k_ref.dtype)
            v_ref[...] = jnp.dot(x, wv_ref[...], preferred_element_type=jnp.float32).astype(v_ref.dtype)

        weights = pl.BlockSpec((512, 128), lambda i: (0, 0))
        out = pl.BlockSpec((1024, 128), lambda i: (i, 0))
        return pl.pallas_call(
            body,
            grid=(4,),
            in_specs=[pl.BlockSpec((1024, 512), lambda i: (i, 0)), weights, weights],
            out_specs=[out, out],
            out_shape=[jax.ShapeDtypeStruct((4096, 128), jnp.bfloat16)] * 2,
        )(x, wk, wv)

    weight = ((512, 128), "bfloat16")
    kernel = protocol.KernelInfo(**_described(call, ((4096, 512), "bfloat16"), weight, weight))
    beyond = {g: cost_model.vmem_bytes(kernel, g) - cost_model.pipeline_vmem_bytes(kernel) for g in ("v5e", "v6e")}
    assert beyond == {"v5e": 1024 * 512 * 2 - kernel_analysis.REGISTER_HELD_BYTES, "v6e": 0}


def test_a_value_read_by_jnp_floor_divide_and_remainder_streams():
    """jnp's // and % are jitted elementwise functions: an iota read by both streams like one read by two adds (6p's
    key index r, read as r % heads and r // heads: 5.14 MiB compiled on v6e, 5.97 modelled when each call held it)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def masked(x_ref, o_ref):
        r = jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
        o_ref[...] = jnp.where((r % 8 == 0) & (r // 8 < 100), x_ref[...], 0.0)

    def call(x):
        spec = pl.BlockSpec((64, 4096), lambda i: (i, 0))
        return pl.pallas_call(masked, grid=(4,), in_specs=[spec], out_specs=spec, out_shape=x)(x)

    assert _described(call, ((256, 4096), "float32"))["body_values_bytes"] == 0


def test_a_wide_epilogue_of_a_row_max_is_kept_beside_its_operand():
    """d = z - max(z) over a (64, 8192) f32 block, read by d * d + d: the scheduler keeps d whole as well as z (42k's
    gelu(z - max(z)): 4.00 MiB beyond the blocks compiled on v6e, 1.81 modelled before this rule). At 2048 lanes it
    works a tile of rows at a time (0.17 MiB compiled) and only z, held for the max, is kept."""
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def epilogue(x_ref, o_ref):
        z = x_ref[...].astype(jnp.float32)
        d = z - z.max(axis=-1, keepdims=True)
        o_ref[...] = (d * d + d).astype(o_ref.dtype)

    def body_values(cols):
        def call(x):
            spec = pl.BlockSpec((64, cols), lambda i: (i, 0))
            return pl.pallas_call(epilogue, grid=(4,), in_specs=[spec], out_specs=spec, out_shape=x)(x)

        return _described(call, ((256, cols), "bfloat16"))["body_values_bytes"]

    held = kernel_analysis.REGISTER_HELD_BYTES
    assert body_values(8192) == 2 * 64 * 8192 * 4 - held
    assert body_values(2048) == 64 * 2048 * 4 - held


def test_a_branch_gets_room_of_its_own_beside_the_code_before_it():
    """32k's step: h = sigmoid(x @ w1), acc += h @ w2, then on the last step a logsumexp that holds acc + b (4 MiB of
    f32, and its (1024, 1) row max padded to 128 lanes). The compiler gives that branch room beside what the two
    matmuls before it took (v6e: 8.65 MiB beyond the blocks), not over it; with the accumulation in a pl.when of its
    own the two branches share their room (4.65 MiB): benchmarks/vmem_sweeps.py's branches group."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def body_values(accumulate_in_a_branch: bool) -> int:
        def body(x_ref, w1_ref, w2_ref, b_ref, o_ref, acc_ref):
            t, last = pl.program_id(1), pl.num_programs(1) - 1

            def accumulate():
                h = jax.nn.sigmoid(jnp.dot(x_ref[...], w1_ref[...], preferred_element_type=jnp.float32))
                acc_ref[...] += jnp.dot(h.astype(jnp.bfloat16), w2_ref[...], preferred_element_type=jnp.float32)

            if accumulate_in_a_branch:
                pl.when(t < last)(accumulate)
            else:
                accumulate()

            @pl.when(t == last)
            def _logsumexp():
                z = acc_ref[...] + b_ref[...]
                m = z.max(axis=1, keepdims=True)
                o_ref[...] = m + jnp.log(jnp.exp(z - m).sum(axis=1, keepdims=True))

        def call(x, w1, w2, b):
            return pl.pallas_call(
                body,
                grid=(2, 4),
                in_specs=[
                    pl.BlockSpec((1024, 2048), lambda i, t: (i, 0)),
                    pl.BlockSpec((2048, 512), lambda i, t: (0, t)),
                    pl.BlockSpec((512, 1024), lambda i, t: (t, 0)),
                    pl.BlockSpec((1, 1024), lambda i, t: (0, 0)),
                ],
                out_specs=pl.BlockSpec((1024, 1), lambda i, t: (i, 0)),
                out_shape=jax.ShapeDtypeStruct((2048, 1), jnp.float32),
                scratch_shapes=[pltpu.VMEM((1024, 1024), jnp.float32)],
            )(x, w1, w2, b)

        shapes = [
            ((2048, 2048), "bfloat16"),
            ((2048, 2048), "bfloat16"),
            ((2048, 1024), "bfloat16"),
            ((1, 1024), "float32"),
        ]
        return _described(call, *shapes)["body_values_bytes"]

    epilogue = 1024 * 1024 * 4 + 1024 * 128 * 4  # acc + b and its row max
    # (less the first branch's predicate, a scalar live around it when the accumulation is a branch)
    assert body_values(False) - body_values(True) == pytest.approx(epilogue, abs=4096)


def test_a_sum_over_rows_of_a_computed_block_stages_a_strip_of_it():
    """sum(x.astype(f32), axis=0) over a (512, 2048) bf16 block: the compiler converts and keeps a (512, 512) f32
    strip at a time (21k's column sums: 4.81 MiB compiled on v6e, 4.02 modelled before this rule), whatever the
    block's width. An f32 block summed straight from its ref, or a mean over a leading axis, stages nothing."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def column_sums(body, rows, cols, dtype, shape=None):
        block = shape or (rows, cols)

        def call(w):
            out = (1, *block[1:])
            return pl.pallas_call(
                body,
                grid=(4,),
                in_specs=[pl.BlockSpec(block, lambda i: (i,) + (0,) * (len(block) - 1))],
                out_specs=pl.BlockSpec(out, lambda i: (0,) * len(block)),
                out_shape=jax.ShapeDtypeStruct(out, jnp.float32),
            )(w)

        return _described(call, ((4 * block[0], *block[1:]), dtype))["body_values_bytes"]

    def converted(w_ref, o_ref):
        o_ref[...] = jnp.sum(w_ref[...].astype(jnp.float32), axis=0, keepdims=True)

    def straight(w_ref, o_ref):
        o_ref[...] = jnp.sum(w_ref[...], axis=0, keepdims=True)

    def squares_over_leading_axis(w_ref, o_ref):
        x = w_ref[...].astype(jnp.float32)
        o_ref[...] = jnp.mean(x * x, axis=0, keepdims=True)

    strip = 512 * kernel_analysis.COLUMN_STRIP_LANES * 4 - kernel_analysis.REGISTER_HELD_BYTES
    assert column_sums(converted, 512, 2048, "bfloat16") == strip
    assert column_sums(converted, 512, 4096, "bfloat16") == strip
    assert column_sums(straight, 512, 2048, "float32") == 0
    assert column_sums(squares_over_leading_axis, 0, 0, "bfloat16", shape=(64, 16, 256)) == 0


def test_scores_read_by_a_reduction_and_a_matmul_are_kept_unless_recomputed_from_kept_ones():
    """Retention's decayed scores a = (q @ k.T) * decay feed |a|.sum() and a @ v: kept whole (15p: 9.82 MiB
    compiled on v6e, 6.31 modelled without this rule). Flash attention's p = exp(s - max), read the same way, is
    recomputed from s, which the row max keeps anyway: one (1024, 1024) f32 tile, not two (1p: 7.81 MiB compiled)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def attention(body):
        def call(q, k, v):
            spec = pl.BlockSpec((1024, 128), lambda i: (i, 0))
            whole = pl.BlockSpec((1024, 128), lambda i: (0, 0))
            return pl.pallas_call(
                body,
                grid=(4,),
                in_specs=[spec, whole, whole],
                out_specs=spec,
                out_shape=jax.ShapeDtypeStruct(q.shape, jnp.float32),
            )(q, k, v)

        shapes = [((4096, 128), "bfloat16"), ((1024, 128), "bfloat16"), ((1024, 128), "bfloat16")]
        return _described(call, *shapes)["body_values_bytes"]

    def scores(q_ref, k_ref):
        return jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)

    def decayed(q_ref, k_ref, v_ref, o_ref):
        a = scores(q_ref, k_ref) * jnp.exp(-jax.lax.broadcasted_iota(jnp.float32, (1, 1024), 1))
        o_ref[...] = jnp.dot(a.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32) / jnp.abs(a).sum(
            axis=-1, keepdims=True
        )

    def softmax(q_ref, k_ref, v_ref, o_ref):
        s = scores(q_ref, k_ref)
        p = jnp.exp(s - s.max(axis=-1, keepdims=True))
        o_ref[...] = jnp.dot(p.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32) / p.sum(
            axis=-1, keepdims=True
        )

    def decayed_streamed(q_ref, k_ref, v_ref, o_ref):  # one reader: nothing to keep
        a = scores(q_ref, k_ref) * jnp.exp(-jax.lax.broadcasted_iota(jnp.float32, (1, 1024), 1))
        o_ref[...] = jnp.dot(a.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32)

    tile = 1024 * 1024 * 4
    kept, recomputed, streamed = attention(decayed), attention(softmax), attention(decayed_streamed)
    assert kept - streamed == tile, (kept, streamed)
    assert tile <= recomputed + kernel_analysis.REGISTER_HELD_BYTES < 2 * tile, recomputed


def test_probabilities_recomputable_only_from_a_ref_are_kept_for_two_whole_readers():
    """exp(z - max) of scores read straight from their ref, then read by a row sum and p @ v (or by two row sums), is
    kept whole: the ref alone does not let the scheduler recompute it (benchmarks/vmem_sweeps.py's scores group,
    (512, 2048) f32 on v6e: 3.02 and 3.82 MiB beyond the blocks); read by p @ v alone it streams (0.37 MiB)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def scores(reader):
        def body(z_ref, v_ref, o_ref):
            z = z_ref[...]
            o_ref[...] = reader(jnp.exp(z - z.max(axis=-1, keepdims=True)), v_ref)

        def call(z, v):
            return pl.pallas_call(
                body,
                grid=(8,),
                in_specs=[pl.BlockSpec((512, 2048), lambda i: (i, 0)), pl.BlockSpec((2048, 128), lambda i: (0, 0))],
                out_specs=pl.BlockSpec((512, 128), lambda i: (i, 0)),
                out_shape=jax.ShapeDtypeStruct((4096, 128), jnp.float32),
            )(z, v)

        return _described(call, ((4096, 2048), "float32"), ((2048, 128), "bfloat16"))["body_values_bytes"]

    def row_sum(p):
        return jnp.broadcast_to(p.sum(axis=-1, keepdims=True), (512, 128))

    def dot(p, v_ref):
        return jnp.dot(p.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32)

    kept = 512 * 2048 * 4 - kernel_analysis.REGISTER_HELD_BYTES
    assert scores(dot) < kept // 8, scores(dot)
    assert scores(lambda p, v_ref: row_sum(p) + dot(p, v_ref)) == kept
    first_sum = 512 * 128 * 4  # held for the add after the second
    assert scores(lambda p, v_ref: row_sum(p) + row_sum(p * p)) == kept + first_sum


def test_7x_streams_decayed_scores_into_a_matmul_of_up_to_1024_rows():
    """15p's decayed scores, read by |a|.sum() and a @ v, are kept whole on v6e (benchmarks/vmem_sweeps.py's decay
    group, 1024 x 1024: 3.30 MiB beyond the blocks) but not on 7x, which stages a matmul of up to 1024 rows the small
    way (0.36 MiB); with 2048 rows 7x keeps them too."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def decayed(rows):
        def body(q_ref, k_ref, v_ref, o_ref):
            s = jax.lax.dot_general(
                q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
            )
            a = s * jnp.exp(-0.01 * jax.lax.broadcasted_iota(jnp.int32, (1, 512), 1).astype(jnp.float32))
            o_ref[...] = jnp.dot(a.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32) / jnp.abs(
                a
            ).sum(axis=-1, keepdims=True)

        def call(q, k, v):
            whole = pl.BlockSpec((512, 128), lambda i: (0, 0))
            spec = pl.BlockSpec((rows, 128), lambda i: (i, 0))
            return pl.pallas_call(
                body,
                grid=(4,),
                in_specs=[spec, whole, whole],
                out_specs=spec,
                out_shape=jax.ShapeDtypeStruct((4 * rows, 128), jnp.float32),
            )(q, k, v)

        kernel = _described(call, ((4 * rows, 128), "bfloat16"), ((512, 128), "bfloat16"), ((512, 128), "bfloat16"))
        return kernel["body_values_bytes"], kernel["body_values_bytes_7x"]

    for rows in (1024, 2048):
        scores = rows * 512 * 4
        v6e, seven = decayed(rows)
        assert v6e >= scores - kernel_analysis.REGISTER_HELD_BYTES, (rows, v6e)
        if rows <= kernel_analysis.SMALL_DOT_ROWS_7X:
            assert seven < scores // 4, (rows, seven)
        else:
            assert seven >= scores - kernel_analysis.REGISTER_HELD_BYTES, (rows, seven)


def test_a_layernorm_over_narrow_rows_keeps_half_its_rows_beside_the_centred_ones():
    """A two-pass LayerNorm reads its centred rows after their variance (held) and makes them from its rows (held
    for their mean): over rows one vreg wide the compiler keeps half of the rows beside the centred ones
    (benchmarks/vmem_sweeps.py's norms group, 4096 x 64 on v6e: 2.90 MiB beyond the blocks), over wider rows the
    centred rows alone (512 x 512: 0.92 MiB; both 2 and 1 MiB of f32 before what the registers hold)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def layer_norm(rows, cols):
        def body(x_ref, o_ref):
            y = x_ref[...].astype(jnp.float32)
            centred = y - jnp.mean(y, axis=1, keepdims=True)
            variance = jnp.mean(centred * centred, axis=1, keepdims=True)
            o_ref[...] = (centred * jax.lax.rsqrt(variance + 1e-5)).astype(o_ref.dtype)

        def call(x):
            spec = pl.BlockSpec((rows, cols), lambda i: (i, 0))
            return pl.pallas_call(
                body, grid=(4,), in_specs=[spec], out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)
            )(x)

        return _described(call, ((4 * rows, cols), "bfloat16"))["body_values_bytes"]

    held = kernel_analysis.REGISTER_HELD_BYTES
    narrow_rows = 4096 * 128 * 4  # f32, its 64 lanes padded to 128
    assert layer_norm(4096, 64) == narrow_rows + narrow_rows // 2 - held
    assert layer_norm(512, 512) == 512 * 512 * 4 - held


def test_unrolled_softmax_copies_keep_a_share_of_each_earlier_copy():
    """n unrolled copies of an online-softmax step (5p's batch elements, 7p's KV heads) each stream p = exp(s - max)
    into a row sum and p @ v; the compiler keeps part of every copy but the last while later ones run
    (benchmarks/vmem_sweeps.py's copies group: 512 x 512 scores on v6e, 0.98, 1.59, 2.78 MiB for 1, 2, 4 copies):
    half of the first copy's p and two-thirds of each later one's, whether written out or unrolled by pl.loop; with
    the row sum alone nothing grows."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def attention(copies, by_loop=False, use_pv=True):
        def body(q_ref, k_ref, v_ref, m_ref, l_ref, acc_ref):
            def step(h):
                s = jax.lax.dot_general(
                    q_ref[h], k_ref[h], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
                )
                m_new = jnp.maximum(m_ref[h], s.max(axis=-1, keepdims=True))
                p = jnp.exp(s - jnp.tile(m_new, (1, 4)))
                l_ref[h] = l_ref[h] + p.sum(axis=-1, keepdims=True)
                if use_pv:
                    acc_ref[h] = acc_ref[h] + jnp.dot(
                        p.astype(jnp.bfloat16), v_ref[h], preferred_element_type=jnp.float32
                    )
                m_ref[h] = m_new

            if by_loop:
                pl.loop(0, copies, unroll=True)(step)
            else:
                for h in range(copies):
                    step(h)

        def call(q, k, v):
            spec = pl.BlockSpec((copies, 512, 128), lambda i: (i, 0, 0))
            kv = pl.BlockSpec((copies, 512, 128), lambda i: (0, 0, 0))
            state = jax.ShapeDtypeStruct(q.shape, jnp.float32)
            return pl.pallas_call(
                body, grid=(4,), in_specs=[spec, kv, kv], out_specs=[spec] * 3, out_shape=[state] * 3
            )(q, k, v)

        shapes = [((4 * copies, 512, 128), "bfloat16")] + [((copies, 512, 128), "bfloat16")] * 2
        return _described(call, *shapes)["body_values_bytes"]

    p_bytes = 512 * 512 * 4
    one, two, four = attention(1), attention(2), attention(4)
    assert two - one == round(kernel_analysis.FIRST_UNROLLED_FORK_KEPT * p_bytes), (one, two)
    assert four - one == round(
        (kernel_analysis.FIRST_UNROLLED_FORK_KEPT + 2 * kernel_analysis.UNROLLED_FORK_KEPT) * p_bytes
    ), (one, four)
    # pl.loop adds only its carried trip counter (scalars), the same however many copies it unrolls.
    counter = attention(2, by_loop=True) - two
    assert 0 <= counter < 4096 and attention(4, by_loop=True) - four == counter, counter
    assert attention(4, use_pv=False) == attention(1, use_pv=False)


def test_the_chip_a_measurement_record_names_gives_back_its_generation():
    from jaxbench_mcp.catalog import targets

    for generation in targets.GENERATIONS:
        assert targets.generation_of_device_kind(targets.device_kind(generation)) == generation
    with pytest.raises(ValueError, match="TPU v5 lite"):
        targets.generation_of_device_kind("TPU v9")
