"""The seams between JaxBench, its executor and the fleet, without a worker or Ray: the Executor protocol both
executors satisfy, the one request JaxBench builds and hands on unchanged, background jobs as futures, and the
host actor's typed dispatch."""

import inspect
import subprocess
import sys
import threading
import time
import typing

import pytest

from jaxbench_mcp import api
from jaxbench_mcp.catalog import targets, workloads
from jaxbench_mcp.checking.checker import Cancelled
from jaxbench_mcp.errors import BadRequest
from jaxbench_mcp.fleet import executors, ray_executor
from jaxbench_mcp.fleet.actor import HostActor
from jaxbench_mcp.fleet.protocol import ActorReply, FleetCheckJob, FleetProfileJob
from jaxbench_mcp.models import Profile, QueueInfo, Verdict
from jaxbench_mcp.requests import CheckRequest, ProfileRequest
from jaxbench_mcp.store import Store

PROTOCOL_MEMBERS = {
    "tier",
    "default_target",
    "isolation",
    "default_targets",
    "queue",
    "fleet",
    "start",
    "close",
    "check",
    "profile",
}
PROPERTIES = {"tier", "default_target", "isolation"}


def _members(protocol) -> set[str]:
    get = getattr(typing, "get_protocol_members", None)  # Python 3.13; 3.12 keeps them in __protocol_attrs__
    return set(get(protocol) if get else protocol.__protocol_attrs__)


def _parameters(function) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("cls", [executors.LocalExecutor, ray_executor.RayExecutor])
def test_both_executors_satisfy_the_executor_protocol_structurally(cls):
    assert _members(executors.Executor) == PROTOCOL_MEMBERS
    for name in sorted(PROTOCOL_MEMBERS):
        ours, theirs = getattr(executors.Executor, name), getattr(cls, name)
        if name in PROPERTIES:
            assert isinstance(theirs, property), f"{cls.__name__}.{name} is not a property"
        else:
            assert _parameters(theirs) == _parameters(ours), f"{cls.__name__}.{name}{inspect.signature(theirs)}"


def test_instances_of_both_executors_are_executors_and_nothing_starts():
    local = executors.LocalExecutor()
    fleet = ray_executor.RayExecutor("127.0.0.1:1")  # constructed only: no proxy, no Ray
    assert isinstance(local, executors.Executor) and isinstance(fleet, executors.Executor)
    assert fleet._proc is None and fleet.fleet().ready_hosts == 0


def test_the_fleet_executor_imports_without_ray_and_starts_its_proxy_as_a_module():
    code = (
        "import sys, importlib.util; import jaxbench_mcp.fleet.ray_executor as r; "
        "assert 'ray' not in sys.modules, 'ray imported'; "
        "assert importlib.util.find_spec(r.PROXY_MODULE) is not None; "
        "import jaxbench_mcp.fleet.proxy as p; assert callable(p.main); "
        "assert 'ray' not in sys.modules, 'ray imported by the proxy module'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert ray_executor.PROXY_MODULE == "jaxbench_mcp.fleet.proxy"
    start = inspect.getsource(ray_executor.RayExecutor.start)
    assert '"-m", PROXY_MODULE' in start and '"-c"' not in start


# ---- JaxBench and an executor that records what it is handed ------------------------------------------


class _Recording:
    """An Executor that answers at once and keeps every request it gets; a check of `HANG` waits for its cancel."""

    HANG = "# hang"

    def __init__(self, tier=targets.Tier.CPU_LIBTPU, default_target: str | None = "v6e"):
        self._tier, self._default = tier, default_target
        self.requests: list = []
        self.started = threading.Event()

    @property
    def tier(self):
        return self._tier

    @property
    def default_target(self):
        return self._default

    @property
    def isolation(self):
        return "process-only"

    def default_targets(self):
        return [self._default] if self._default else []

    def queue(self):
        return QueueInfo(slots=1, running=0, waiting=0)

    def fleet(self):
        return None

    def start(self):
        pass

    def close(self):
        pass

    def check(self, request, on_progress=None, cancel=None):
        self.requests.append(request)
        if on_progress:
            on_progress("load: done")
        if request.source == self.HANG:
            self.started.set()
            assert cancel is not None and cancel.wait(30), "never cancelled"
            raise Cancelled()
        verdict = Verdict(
            status="correct",
            message="",
            workload_id=request.workload_id,
            size=request.size or "small",
            targets=list(request.targets),
            tier=str(self._tier),
        )
        return verdict, "the log"

    def profile(self, request, verdict, on_progress=None, cancel=None):
        self.requests.append(request)
        return Profile(
            workload_id=request.workload_id, tier=str(self._tier), kind="static estimate", label="x", verdict=verdict
        )


@pytest.fixture
def recorded(tmp_path):
    executor = _Recording()
    bench = api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), executor=executor)
    yield bench, executor
    bench.store.close()


def test_the_fake_is_an_executor():
    assert isinstance(_Recording(), executors.Executor)


def test_check_kernel_validates_once_and_hands_the_executor_the_request_unchanged(recorded):
    bench, executor = recorded
    verdict = bench.check_kernel("8p", "x = 1", size="full", seeds=2, require_pallas=False)
    [request] = executor.requests
    assert request == CheckRequest(
        workload_id="8p_GEMM", source="x = 1", targets=["v6e"], size="full", seeds=2, require_pallas=False
    )
    assert verdict.status == "correct" and verdict.targets == ["v6e"] and verdict.attempt_id is not None
    assert bench.store.get(verdict.attempt_id)["log"] == "the log"
    # Named targets, canonical; the keyword of the public call is `targets`.
    bench.check_kernel("8p_GEMM", "x = 1", targets=["TPU-V5E", "v5e"])
    assert executor.requests[-1].targets == ["v5e"]
    # The request JaxBench would build is the one it hands on.
    assert bench.check_request("8p_GEMM", "x = 1") == executor.requests[0].model_copy(
        update={"size": None, "seeds": 3, "require_pallas": True}
    )


def test_a_mistake_raises_before_any_attempt_and_reaches_no_executor(recorded):
    bench, executor = recorded
    with pytest.raises(workloads.UnknownWorkload):
        bench.check_kernel("8p_GEM", "x = 1")
    with pytest.raises(BadRequest, match="seeds must be between 1 and 16"):
        bench.check_kernel("8p_GEMM", "x = 1", seeds=17)
    with pytest.raises(targets.UnknownTarget):
        bench.profile_kernel("8p_GEMM", "x = 1", "v9")
    with pytest.raises(BadRequest, match="not valid Unicode"):
        bench.profile_kernel("8p_GEMM", "x = '\udfff'")
    assert executor.requests == [] and bench.store.recent(None, 10) == []


def test_profile_kernel_checks_the_same_candidate_then_profiles_its_request(recorded):
    bench, executor = recorded
    profile = bench.profile_kernel("12p", "x = 1")
    check, profiled = executor.requests
    assert profiled == ProfileRequest(workload_id="12p_RMSNorm", source="x = 1", targets=["v6e"])
    assert check == profiled.check_request()
    assert profile.attempt_id is not None and profile.verdict.attempt_id not in (None, profile.attempt_id)
    assert sorted(r["kind"] for r in bench.store.recent(None, 10)) == ["check", "profile"]


def test_a_plain_cpu_executor_gets_requests_without_targets(tmp_path):
    executor = _Recording(targets.Tier.CPU, default_target=None)
    bench = api.JaxBench(store=Store(tmp_path / "attempts.sqlite3"), executor=executor)
    bench.check_kernel("8p_GEMM", "x = 1")
    bench.profile_kernel("8p_GEMM", "x = 1")
    assert [r.targets for r in executor.requests] == [[], [], []]


# ---- background jobs ---------------------------------------------------------------------------------


def test_a_background_check_has_its_attempt_id_at_once_and_its_verdict_in_the_future(recorded):
    bench, _ = recorded
    progress: list[str] = []
    job = bench.submit_check("8p_GEMM", "x = 1", seeds=1, on_progress=progress.append)
    assert isinstance(job, api.BackgroundJob) and job.attempt_id is not None
    verdict = job.future.result(timeout=10)
    assert verdict.attempt_id == job.attempt_id and job.done() and progress == ["load: done"]
    assert bench.store.get(job.attempt_id)["state"] == "done"
    profiled = bench.submit_profile("8p_GEMM", "x = 1")
    assert profiled.future.result(timeout=10).attempt_id == profiled.attempt_id


def test_a_refused_background_request_has_no_attempt_and_its_error_in_the_future(recorded):
    bench, _ = recorded
    job = bench.submit_check("8p_GEMM", "x = 1", seeds=0)
    assert job.attempt_id is None and job.done()
    assert isinstance(job.future.exception(), BadRequest)
    assert bench.store.recent(None, 10) == []


def test_cancelling_a_background_job_records_the_attempt_cancelled(recorded):
    bench, executor = recorded
    job = bench.submit_check("8p_GEMM", _Recording.HANG)
    assert job.attempt_id is not None and executor.started.wait(10) and not job.done()
    assert not job.future.cancel()  # a running job is stopped by the job's cancel, not the future's
    job.cancel()
    with pytest.raises(Cancelled):
        job.future.result(timeout=10)
    assert bench.store.get(job.attempt_id)["state"] == "cancelled"


def test_a_background_job_of_every_configuration_names_its_latest_attempt(recorded):
    bench, executor = recorded
    job = bench.submit_check("8p_GEMM", "x = 1", config="all")
    verdict = job.future.result(timeout=10)
    assert [c.config for c in verdict.configs] == bench.runnable_configs("8p_GEMM")
    assert job.attempt_id == verdict.configs[-1].attempt_id == max(r["id"] for r in bench.store.recent(None, 10))


def test_any_call_of_the_same_shape_runs_as_a_background_job(recorded):
    bench, _ = recorded
    seen = {}

    def tune(x, on_progress=None, on_attempt=None, cancel=None):
        on_attempt(41)
        seen["cancel"] = cancel
        time.sleep(0.05)
        return x * 2

    job = bench.submit(tune, 21)
    assert job.attempt_id == 41 and job.future.result(timeout=5) == 42 and job.name == "tune"
    job.cancel()
    assert seen["cancel"].is_set()


# ---- the host actor's dispatch ------------------------------------------------------------------------


def _actor(executor) -> HostActor:
    actor = HostActor.__new__(HostActor)  # its __init__ starts a checker with workers; this one has a fake
    actor.executor, actor._jobs, actor._lock = executor, {}, threading.Lock()
    return actor


def test_the_host_actor_runs_typed_jobs_and_replies_typed():
    executor = _Recording()
    actor = _actor(executor)
    request = CheckRequest.of("8p_GEMM", "x = 1", ["v6e"], seeds=2)
    reply = ActorReply.model_validate(actor.run("try-1", FleetCheckJob(request=request).model_dump(mode="json")))
    assert executor.requests == [request]  # the request that was sent, validated back on arrival
    assert reply.verdict.workload_id == "8p_GEMM" and reply.log == "the log" and reply.progress == ["load: done"]
    profile_request = ProfileRequest.of("8p_GEMM", "x = 1", ["v6e"])
    job = FleetProfileJob(request=profile_request, verdict=reply.verdict)
    reply = ActorReply.model_validate(actor.run("try-2", job.model_dump(mode="json")))
    assert executor.requests[-1] == profile_request and reply.profile.verdict.workload_id == "8p_GEMM"
    assert actor._jobs == {}  # each try's state goes with it


def test_the_host_actor_replies_cancelled_to_a_cancelled_try():
    executor = _Recording()
    actor = _actor(executor)
    request = CheckRequest.of("8p_GEMM", _Recording.HANG)
    actor.cancel("try-1")  # a cancel that comes before its try starts stops it at once
    reply = ActorReply.model_validate(actor.run("try-1", FleetCheckJob(request=request).model_dump(mode="json")))
    assert reply.cancelled and reply.verdict is None
