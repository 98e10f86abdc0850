"""The worker protocol as the parent reads it: validated events, first of each kind, bounded. No processes."""

import json

import pytest

from jaxbench_mcp.sandbox import protocol
from jaxbench_mcp.taxonomy import Stage


def line(**event) -> bytes:
    return json.dumps(event).encode()


def test_a_well_formed_stream_is_accepted_in_order():
    log = protocol.EventLog()
    for raw in (
        line(event="stage", stage="load", state="start"),
        line(event="stage", stage="load", state="done", seconds=0.1),
        line(event="stage", stage="run", state="start", seed_index=0),
        line(
            event="stage",
            stage="run",
            state="done",
            seed_index=0,
            output={"path": "output_0.npy", "shape": [2, 2], "dtype": "float32", "leaves": 1},
        ),
        line(event="finished"),
    ):
        log.accept(protocol.parse_event(raw))
    assert log.finished and [e.stage for e in log.ended()] == [Stage.LOAD, Stage.RUN]


@pytest.mark.parametrize(
    "raw, why",
    [
        (line(event="stage", stage="exfiltrate", state="start"), "malformed"),  # an unknown stage
        (line(event="stage", stage="load", state="start", extra="x"), "malformed"),  # an unknown field
        (line(event="telemetry"), "malformed"),  # an unknown event
        (b"not json", "malformed"),
        (line(event="stage", stage="compare", state="start"), "malformed"),  # the parent's own stage
        (
            line(
                event="stage",
                stage="run",
                state="done",
                seed_index=0,
                output={"path": "../../etc/passwd", "shape": [1], "dtype": "float32", "leaves": 1},
            ),
            "malformed",
        ),  # not a bare name
        (
            line(
                event="stage", stage="load", state="done", traced={"kernels": [], "host_callbacks": [], "outputs": []}
            ),
            "malformed",
        ),  # a payload on the wrong stage
        (line(event="stage", stage="lower", state="done", lowered={"module_file": "/tmp/x.mlir"}), "malformed"),
        (b"{" + b" " * protocol.MAX_EVENT_BYTES + b"}", "bytes"),
    ],
)
def test_bad_events_are_violations(raw, why):
    with pytest.raises(protocol.ProtocolViolation, match=why):
        protocol.parse_event(raw)


def test_repeats_out_of_order_and_late_events_are_violations():
    start = protocol.parse_event(line(event="stage", stage="compile", state="start", target="v6e"))
    log = protocol.EventLog()
    log.accept(start)
    # A repeated start would otherwise restart the stage's deadline.
    with pytest.raises(protocol.ProtocolViolation, match="repeated"):
        log.accept(start)
    with pytest.raises(protocol.ProtocolViolation, match="without its start"):
        log.accept(protocol.parse_event(line(event="stage", stage="run", state="done", seed_index=0)))
    log.accept(protocol.parse_event(line(event="finished")))
    with pytest.raises(protocol.ProtocolViolation, match="after 'finished'"):
        log.accept(protocol.parse_event(line(event="stage", stage="run", state="start", seed_index=1)))


def test_a_flood_of_events_is_cut_off():
    log = protocol.EventLog()
    with pytest.raises(protocol.ProtocolViolation, match="more than"):
        for index in range(protocol.MAX_EVENTS + 1):
            log.accept(protocol.parse_event(line(event="stage", stage="compile", state="start", target=f"t{index}")))
    assert len(log.events) == protocol.MAX_EVENTS


def test_jobs_carry_only_what_the_parent_put_in():
    job = protocol.CheckJob(
        workload_id="8p_GEMM",
        targets=["v6e"],
        size="small",
        interpret=True,
        shuffle_seeds=[1],
        inputs=[
            [protocol.InputFile(file="input_0_0.bin", shape=[2], dtype="bfloat16"), protocol.StaticInput(static=4)]
        ],
        programs=[protocol.ProgramFile(size="full", file="program_full.json")],
    )
    sent = json.loads(protocol.JobEnvelope(job=job).model_dump_json())["job"]
    assert "seed" not in json.dumps(sent).replace("shuffle_seeds", "")
    with pytest.raises(ValueError):
        protocol.CheckJob(
            workload_id="x", targets=[], size="small", interpret=True, shuffle_seeds=[], inputs=[], seeds=[42]
        )


def test_cut_text_keeps_head_and_tail_and_says_how_much_went():
    text = "a" * 50 + "b" * 50
    cut = protocol.cut_text(text, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters cut" in cut
    assert protocol.cut_text("short", 20) == "short"


def test_what_the_worker_sends_the_parent_accepts_even_with_fields_left_empty(tmp_path):
    import os

    from jaxbench_mcp.sandbox.worker import Reporter

    read_fd, write_fd = os.pipe()
    report = Reporter(write_fd)
    traced = protocol.Traced(
        kernels=[],
        host_callbacks=[],
        outputs=[],
        work=protocol.Work(kernel_flops=0.0, kernel_bytes=0.0, outside_flops=None, outside_bytes=None, exact=True),
    )
    report.stage(Stage.TRACE, "done", traced=traced)
    report.send(protocol.Ready())
    lines = os.read(read_fd, 1 << 20).splitlines()
    assert protocol.parse_event(lines[0]).traced == traced
    assert isinstance(protocol.parse_event(lines[1]), protocol.Ready)


def _check_job() -> protocol.CheckJob:
    return protocol.CheckJob(
        workload_id="8p_GEMM",
        targets=["v6e"],
        size="small",
        interpret=True,
        shuffle_seeds=[1],
        inputs=[[protocol.InputFile(file="input_0_0.bin", shape=[2], dtype="bfloat16")]],
        programs=[protocol.ProgramFile(size="full", file="program_full.json")],
    )


def test_events_about_stages_targets_or_seeds_the_job_does_not_have_are_violations():
    job = _check_job()
    for raw, why in (
        (line(event="stage", stage="lower", state="start", target="v99"), "did not ask for"),
        (line(event="stage", stage="compile", state="start"), "did not ask for"),
        (line(event="stage", stage="run", state="start", seed_index=1), "does not have"),
        (line(event="stage", stage="run", state="start"), "does not have"),
        (line(event="stage", stage="trace", state="start", target="v6e"), "names a target"),
        (line(event="stage", stage="measure", state="start"), "in a check job"),
    ):
        with pytest.raises(protocol.ProtocolViolation, match=why):
            protocol.EventLog(job).accept(protocol.parse_event(raw))
    ok = protocol.EventLog(job)
    ok.accept(protocol.parse_event(line(event="stage", stage="lower", state="start", target="v6e")))
    ok.accept(protocol.parse_event(line(event="stage", stage="run", state="start", seed_index=0)))
    # A job with a full_reduction run has one run more, with the index after the seeds', and no other.
    longer = job.model_copy(
        update={
            "full_reduction": [protocol.InputFile(file="input_1_0.bin", shape=[4], dtype="bfloat16")],
            "shuffle_seeds": [1, 2],
        }
    )
    log = protocol.EventLog(longer)
    log.accept(protocol.parse_event(line(event="stage", stage="run", state="start", seed_index=1)))
    with pytest.raises(protocol.ProtocolViolation, match="does not have"):
        log.accept(protocol.parse_event(line(event="stage", stage="run", state="start", seed_index=2)))


def test_json_nested_too_deep_to_parse_is_a_violation_not_a_crash():
    with pytest.raises(protocol.ProtocolViolation):
        protocol.parse_event(b"[" * 100_000 + b"]" * 100_000)


def test_a_trace_job_reports_its_programs_once_inside_the_trace_stage_and_never_a_verdict_of_its_own():
    job = protocol.TraceJob(workload_id="8p_GEMM", sizes=["full", "small"], chip="v6e")
    programs = line(
        event="programs",
        programs=[{"size": "full", "file": "program_full.json"}, {"size": "small", "error": "no trace"}],
    )
    started = [line(event="stage", stage="load", state="start"), line(event="stage", stage="load", state="done")]
    trace_start = line(event="stage", stage="trace", state="start")

    def log_after(*raws):
        log = protocol.EventLog(job)
        for raw in raws:
            log.accept(protocol.parse_event(raw))
        return log

    log = log_after(*started, trace_start, programs)
    assert log.programs is not None and [p.size for p in log.programs.programs] == ["full", "small"]
    for raws, why in (
        ((*started, programs), "outside the trace stage"),
        ((*started, trace_start, programs, programs), "repeated 'programs'"),
        ((*started, trace_start, line(event="stage", stage="trace", state="done")), "trace done"),
        ((*started, trace_start, line(event="stage", stage="lower", state="start", target="v6e")), "trace job"),
        (
            (*started, trace_start, line(event="programs", programs=[{"size": "full", "file": "program_full.json"}])),
            "not \\['full', 'small'\\]",
        ),
        (
            (*started, trace_start, line(event="programs", programs=[{"size": "full", "file": "../x.json"}])),
            "malformed event",
        ),
    ):
        with pytest.raises(protocol.ProtocolViolation, match=why):
            log_after(*raws)
    # A judging job never receives programs from its process: they come as files the parent copied in.
    check = _check_job()
    with pytest.raises(protocol.ProtocolViolation, match="in a check job"):
        protocol.EventLog(check).accept(protocol.parse_event(programs))
