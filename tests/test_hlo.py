"""internals/hlo: the work of a compiled XLA program, read from its text (loops, in-place updates, slices)."""

import pytest

from jaxbench_mcp.internals import hlo

MiB = 1024 * 1024


def _counted_loop(limit: str = "%n = s32[] constant(12)", step: str = "%one = s32[] constant(1)") -> str:
    # What a fori_loop / scan becomes: a counter at tuple index 0 copied in, stepped in the body, compared in the
    # condition. The body multiplies a 1024 x 1024 matrix by itself.
    return (
        "HloModule m\n\n"
        "%body (p: (s32[], f32[1024,1024], s32[])) -> (s32[], f32[1024,1024], s32[]) {\n"
        "  %p = (s32[], f32[1024,1024]{1,0}, s32[]) parameter(0)\n"
        "  %i = s32[] get-tuple-element(%p), index=0\n"
        "  %i.copy = s32[] copy(%i)\n"
        f"  {step}\n"
        "  %next = s32[] add(%i.copy, %one)\n"
        "  %x = f32[1024,1024]{1,0} get-tuple-element(%p), index=1\n"
        "  %y = f32[1024,1024]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  %k = s32[] get-tuple-element(%p), index=2\n"
        "  ROOT %t = (s32[], f32[1024,1024]{1,0}, s32[]) tuple(%next, %y, %k)\n"
        "}\n\n"
        "%cond (p: (s32[], f32[1024,1024], s32[])) -> pred[] {\n"
        "  %p = (s32[], f32[1024,1024]{1,0}, s32[]) parameter(0)\n"
        "  %i = s32[] get-tuple-element(%p), index=0\n"
        f"  {limit}\n"
        "  ROOT %lt = pred[] compare(%i, %n), direction=LT\n"
        "}\n\n"
        "ENTRY %main (x: f32[1024,1024], k: s32[]) -> f32[1024,1024] {\n"
        "  %x = f32[1024,1024]{1,0} parameter(0)\n"
        "  %k = s32[] parameter(1)\n"
        "  %zero = s32[] constant(2)\n"
        "  %start = s32[] copy(%zero)\n"
        "  %init = (s32[], f32[1024,1024]{1,0}, /*index=2*/s32[]) tuple(%start, %x, /*index=2*/%k)\n"
        "  %loop = (s32[], f32[1024,1024]{1,0}, s32[]) while(%init), condition=%cond, body=%body\n"
        "  ROOT %out = f32[1024,1024]{1,0} get-tuple-element(%loop), index=1\n"
        "}\n"
    )


def test_a_counted_loop_runs_its_body_once_per_trip():
    ops, complete = hlo.outside_ops(_counted_loop())
    [dot] = [o for o in ops if o.opcode == "dot"]
    assert complete and dot.count == 10  # from 2 up to 12
    assert dot.flops == 2 * 1024**3
    more_flops, more_bytes = hlo.repeated_work(ops)
    assert more_flops == 9 * dot.flops
    assert more_bytes == pytest.approx(9 * dot.bytes, abs=9 * 32)  # and the counter's scalar ops


@pytest.mark.parametrize(
    "limit, step",
    [
        ("%n = s32[] get-tuple-element(%p), index=2", "%one = s32[] constant(1)"),  # a bound only known at run time
        ("%n = s32[] constant(12)", "%one = s32[] constant(2)"),  # a stride this reading does not follow
    ],
)
def test_a_loop_whose_trips_cannot_be_read_counts_once_and_says_so(limit, step):
    ops, complete = hlo.outside_ops(_counted_loop(limit, step))
    assert not complete
    assert [o.count for o in ops if o.opcode == "dot"] == [1]
    assert hlo.repeated_work(ops) == (0.0, 0.0)


def _fusion_module(fused_body: str, fused_params: str, result: str, operands: str, entry_params: str) -> str:
    return (
        "HloModule m\n\n"
        f"%fused ({fused_params}) -> {result} {{\n{fused_body}}}\n\n"
        f"ENTRY %main ({fused_params}) -> {result} {{\n{entry_params}"
        f"  ROOT %f = {result}{{1,0}} fusion({operands}), kind=kLoop, calls=%fused\n"
        "}\n"
    )


def test_an_update_in_place_moves_the_update_not_the_buffer():
    # A scan writing one 1 MiB row block per step into a 256 MiB result: the buffer is neither read nor rewritten.
    text = _fusion_module(
        "  %p0 = f32[65536,1024]{1,0} parameter(0)\n"
        "  %p1 = f32[256,1024]{1,0} parameter(1)\n"
        "  %p2 = s32[] parameter(2)\n"
        "  %e = f32[256,1024]{1,0} exponential(%p1)\n"
        "  %z = s32[] constant(0)\n"
        "  ROOT %u = f32[65536,1024]{1,0} dynamic-update-slice(%p0, %e, %p2, %z)\n",
        "p0: f32[65536,1024], p1: f32[256,1024], p2: s32[]",
        "f32[65536,1024]",
        "%p0, %p1, %p2",
        "  %p0 = f32[65536,1024]{1,0} parameter(0)\n  %p1 = f32[256,1024]{1,0} parameter(1)\n"
        "  %p2 = s32[] parameter(2)\n",
    )
    [op] = hlo.outside_ops(text)[0]
    assert op.bytes == 2 * MiB + 4  # the update read and written, and the offset


def test_a_fusion_reads_only_the_slice_it_takes_of_an_operand():
    # One expert's 1 MiB weights taken from a 128 MiB stack (11p's loop over groups), through a nested fusion.
    text = (
        "HloModule m\n\n"
        "%inner (q0: f32[128,512,512], q1: s32[]) -> f32[512,512] {\n"
        "  %q0 = f32[128,512,512]{2,1,0} parameter(0)\n"
        "  %q1 = s32[] parameter(1)\n"
        "  %z = s32[] constant(0)\n"
        "  %s = f32[1,512,512]{2,1,0} dynamic-slice(%q0, %q1, %z, %z), dynamic_slice_sizes={1,512,512}\n"
        "  ROOT %b = f32[512,512]{1,0} bitcast(%s)\n"
        "}\n\n"
        "%outer (p0: f32[128,512,512], p1: s32[]) -> f32[512,512] {\n"
        "  %p0 = f32[128,512,512]{2,1,0} parameter(0)\n"
        "  %p1 = s32[] parameter(1)\n"
        "  %w = f32[512,512]{1,0} fusion(%p0, %p1), kind=kLoop, calls=%inner\n"
        "  ROOT %e = f32[512,512]{1,0} exponential(%w)\n"
        "}\n\n"
        "ENTRY %main (p0: f32[128,512,512], p1: s32[]) -> f32[512,512] {\n"
        "  %p0 = f32[128,512,512]{2,1,0} parameter(0)\n"
        "  %p1 = s32[] parameter(1)\n"
        "  ROOT %f = f32[512,512]{1,0} fusion(%p0, %p1), kind=kLoop, calls=%outer\n"
        "}\n"
    )
    [op] = hlo.outside_ops(text)[0]
    assert op.bytes == 2 * MiB + 4  # the slice read, the result written, and the index
    # Read whole as soon as any use is not a slice.
    whole = text.replace(
        "ROOT %e = f32[512,512]{1,0} exponential(%w)",
        "%r = f32[512,512]{1,0} exponential(%w)\n"
        "  %g = f32[128,512,512]{2,1,0} exponential(%p0)\n  ROOT %e = f32[512,512]{1,0} add(%r, %r)",
    )
    [op] = hlo.outside_ops(whole)[0]
    assert op.bytes == 128 * MiB + 1 * MiB + 4


def test_a_batched_matmul_written_as_a_dilated_convolution_counts_its_real_products():
    # XLA:TPU writes 7p's per-token "kgd,lkd->kgl" as a convolution whose window spans the batch with the input
    # dilated by it: each output sums over the 128 features of one input, not over a 16 x 8 window of them.
    text = (
        "HloModule m\n\n"
        "ENTRY %main (a: bf16[16,8,8,128], b: bf16[16,4096,8,128]) -> f32[16,8,8,4096] {\n"
        "  %a = bf16[16,8,8,128]{3,2,1,0} parameter(0)\n"
        "  %b = bf16[16,4096,8,128]{3,2,1,0} parameter(1)\n"
        "  ROOT %c = f32[16,8,8,4096]{3,2,1,0} convolution(%a, %b), window={size=16x8 stride=15x7 lhs_dilate=16x8},"
        " dim_labels=01bf_0o1i->01bf\n"
        "}\n"
    )
    [op] = hlo.outside_ops(text)[0]
    assert op.flops == 2 * (16 * 8 * 8 * 4096) * 128


@pytest.mark.slow
def test_xla_baseline_counts_every_trip_of_its_loop():
    """11p's reference loops over its 128 groups; XLA's cost analysis counts the body once (1/128 of the FLOPs).
    The reference job adds the other trips: the baseline's FLOPs are the workload's own count."""
    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.perf import profiling

    checker = Checker(spares=0, slots=1)
    try:
        reference = profiling.Profiler(checker).reference_estimates("11p_Megablox_GMM", ["v5e"])["v5e"]
    finally:
        checker.close()
    assert reference["xla_loops_counted"]
    assert reference["xla_flops"] == pytest.approx(workloads.get_workload("11p_Megablox_GMM").flops("full"), rel=0.02)


def test_a_plain_update_in_place_writes_its_update_even_from_vmem():
    text = (
        "HloModule m\n\n"
        "ENTRY %main (b: f32[65536,1024], u: f32[256,1024], i: s32[]) -> f32[65536,1024] {\n"
        "  %b = f32[65536,1024]{1,0} parameter(0)\n"
        "  %u = f32[256,1024]{1,0:S(1)} parameter(1)\n"
        "  %i = s32[] parameter(2)\n"
        "  %z = s32[] constant(0)\n"
        "  ROOT %d = f32[65536,1024]{1,0} dynamic-update-slice(%b, %u, %i, %z)\n"
        "}\n"
    )
    [op] = hlo.outside_ops(text)[0]
    assert op.bytes == 1 * MiB + 4 + 4  # the update written (read from VMEM: no HBM read), and the two offsets


def _convolution(features_in: int, features_out: int) -> str:
    # A 3 x 3 convolution of 16 images of 64 x 64 (NCHW), weights OIHW.
    x, w = f"bf16[16,{features_in},64,64]", f"bf16[{features_out},{features_in},3,3]"
    y = f"bf16[16,{features_out},62,62]"
    return (
        "HloModule m\n\n"
        f"ENTRY %main (x: {x}, w: {w}) -> {y} {{\n"
        f"  %x = {x}{{3,2,1,0}} parameter(0)\n"
        f"  %w = {w}{{3,2,1,0}} parameter(1)\n"
        f"  ROOT %c = {y}{{3,2,1,0}} convolution(%x, %w), window={{size=3x3}}, dim_labels=bf01_oi01->bf01\n"
        "}\n"
    )


@pytest.mark.parametrize(
    "features_in, features_out, mxu, waste",
    [
        (64, 128, 128, 2.0),  # 18k: a tap at a time, 64 of 128 contraction lanes used
        (8, 64, 128, (128 / 72) * 2.0),  # 39k: all 9 taps at once (72 of 128), 64 of 128 outputs
        (64, 128, 256, 4.0 * 2.0),  # the same as 18k on a 256-wide MXU
        (128, 128, 128, 1.0),  # a full MXU: nothing wasted
    ],
)
def test_a_convolutions_narrow_features_are_priced_at_the_mxu_width(features_in, features_out, mxu, waste):
    [conv], _ = hlo.outside_ops(_convolution(features_in, features_out), mxu)
    assert conv.flops == 2 * 16 * features_out * 62 * 62 * features_in * 9
    assert conv.padding_flops == pytest.approx(conv.flops * (waste - 1.0))
    [unpriced], _ = hlo.outside_ops(_convolution(features_in, features_out))
    assert unpriced.padding_flops == 0.0 and unpriced.flops == conv.flops


@pytest.mark.parametrize(
    "shape, stored",
    [
        ("bf16[16,62]{1,0:T(8,128)(2,1)}", 16 * 128 * 2),  # the minor dimension padded to 128 lanes
        ("f32[3,256]{1,0:T(8,128)}", 8 * 256 * 4),  # the next to 8 rows
        ("bf16[62,16]{0,1:T(8,128)(2,1)}", 128 * 16 * 2),  # the layout says which dimension is minor
        ("f32[100,62]{1,0}", 100 * 62 * 4),  # no tiling written: as the shape says
        ("f32[100,62]{1,0:T(8,128)S(1)}", 0),  # in VMEM: no HBM bytes
    ],
)
def test_an_arrays_hbm_bytes_are_those_of_its_tiles(shape, stored):
    assert hlo.hbm_bytes(shape) == stored
