"""The Ray fleet (jaxbench_mcp.fleet: ray_executor, proxy, actor, placement): placement, and a local Ray cluster of
two simulated hosts on this machine that must give the verdicts the local executor gives, survive a host that dies
mid-campaign, and fall back to local execution when the whole cluster goes away."""

import os

# Before Ray is imported anywhere in this process (and inherited by the nodes and the fleet's proxy): every
# address stays on loopback (Ray otherwise swaps 127.0.0.1 for the machine's outward address), no usage report,
# and no memory monitor that would kill a host's actor when the shared machine runs low.
os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_memory_monitor_refresh_ms="0")

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from ray.cluster_utils import Cluster

from conftest import verdict_of
from jaxbench_mcp import api
from jaxbench_mcp.campaigns import campaign
from jaxbench_mcp.catalog import workloads
from jaxbench_mcp.checking.checker import Checker
from jaxbench_mcp.fleet import proxy, ray_executor as fleet
from jaxbench_mcp.fleet.placement import HostView, NoHostForTarget, NoLiveHost, place
from jaxbench_mcp.frontends.server import build_server
from jaxbench_mcp.store import Store

# Starting Ray nodes and the fleet's proxy forks this process after jax started threads; each child execs at once,
# which is safe, and Python's warning about it says nothing about these tests.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

KERNELS = Path(__file__).parent / "kernels"
# (workload, kernel file); each file's first line says what the local checker must find.
CASES = [("12p_RMSNorm", "good_rmsnorm.py"), ("8p_GEMM", "bad_all_zeros.py"), ("8p_GEMM", "bad_syntax.py")]
# Small nodes: no CPUs to prestart Ray workers for (the host actors ask for none), a minimal object store.
NODE = {"num_cpus": 0, "object_store_memory": 80 * 2**20, "node_ip_address": "127.0.0.1"}
# One check at a time per simulated host, no warm spare: two hosts share this machine's two cores.
HOST_OPTIONS = {"slots": 1, "spares": 0}


def _expected(kernel: str) -> tuple[str, str | None]:
    fields = dict(
        f.split("=", 1) for f in (KERNELS / kernel).read_text().splitlines()[0].removeprefix("# expect:").split()
    )
    return fields["status"], fields.get("error_class")


# ---- placement ------------------------------------------------------------------------------------


def _host(name, tier="cpu_libtpu", chip=None, state="ready", inflight=0, slots=1, last_used=0):
    return HostView(
        node_id=name,
        name=name,
        state=state,
        tier=tier,
        attached_tpu=chip,
        slots=slots,
        inflight=inflight,
        last_used=last_used,
    )


def test_placement_prefers_a_host_with_the_chip_then_any_host_that_compiles_then_the_least_loaded():
    hosts = [
        _host("cpu-a"),
        _host("v5e-a", "tpu", "v5e", inflight=3),
        _host("v6e-a", "tpu", "v6e", inflight=1),
        _host("v6e-b", "tpu", "v6e"),
        _host("plain", "cpu"),
    ]
    assert place(hosts, ["v6e"]).name == "v6e-b"  # the chip, and the idler of the two that carry it
    assert place(hosts, ["7x", "v5e"]).name == "v5e-a"  # the first listed generation the fleet has decides, busy or not
    assert place(hosts, ["7x"]).name in ("cpu-a", "v6e-b")  # nobody has a 7x: any idle host that compiles
    assert place(hosts, ["7x"]).name != "plain"
    assert place(hosts, ["v6e"], exclude={"v6e-b"}).name == "v6e-a"  # a retry skips the host that died
    # Equal load: the host used longest ago, so that a sequential campaign alternates between hosts.
    assert place([_host("a", last_used=5), _host("b", last_used=2)], ["v6e"]).name == "b"
    assert place([_host("a", inflight=2, slots=4), _host("b", inflight=1, slots=1)], ["v6e"]).name == "a"
    assert place([_host("plain", "cpu")], []).name == "plain"  # no target: a lowering-only host will do


def test_placement_says_at_once_when_no_host_can_serve():
    with pytest.raises(NoHostForTarget, match="plain CPU hosts without libtpu"):
        place([_host("plain", "cpu"), _host("gone", state="dead")], ["v6e"])
    with pytest.raises(NoLiveHost, match="gone \\(dead"):
        place([_host("gone", state="dead"), _host("busy-elsewhere", state="refused")], [])
    with pytest.raises(NoLiveHost):
        place([_host("a")], ["v6e"], exclude={"a"})


def test_a_fleet_that_is_not_there_at_start_is_an_error_not_a_fallback(tmp_path, monkeypatch, capsys):
    from jaxbench_mcp.frontends import cli

    started = time.monotonic()
    executor = fleet.RayExecutor("127.0.0.1:1", claim_timeout=30)  # port 1: nothing listens there
    with pytest.raises(fleet.FleetUnavailable, match="nothing answers at 127.0.0.1:1"):
        executor.start()
    executor.close()
    assert time.monotonic() - started < 30  # refused at once, not after the claim timeout
    monkeypatch.setenv("JAXBENCH_MCP_HOME", str(tmp_path))
    (tmp_path / "run").mkdir()
    shutil.copy(KERNELS / "bad_syntax.py", tmp_path / "run" / "8p_GEMM.py")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["evaluate", str(tmp_path / "run"), "--ray", "127.0.0.1:1"])
    assert exit_.value.code == 2 and "no fleet at 127.0.0.1:1" in capsys.readouterr().err


# ---- a local cluster of two simulated hosts ---------------------------------------------------------


def _add_host(cluster: Cluster):
    return cluster.add_node(resources={fleet.HOST_RESOURCE: 1}, **NODE)


@pytest.fixture(scope="module")
def cluster():
    # The head is the server's side of the cluster: it offers no host resource, so no check runs there.
    c = Cluster(initialize_head=True, head_node_args=dict(NODE))
    for _ in range(2):
        _add_host(c)
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def local_verdicts(tmp_path_factory):
    """(status, error class) per kernel from the local executor: what the fleet must also say."""
    bench = api.JaxBench(
        store=Store(tmp_path_factory.mktemp("local") / "attempts.sqlite3"), checker=Checker(spares=0, slots=1)
    )
    try:
        found = {k: bench.check_kernel(w, (KERNELS / k).read_text()) for w, k in CASES}
    finally:
        bench.close()
    outcome = {k: (str(v.status), v.error_class and str(v.error_class)) for k, v in found.items()}
    # Equal verdicts prove nothing if both sides fail the same wrong way: the local ones must be the expected ones.
    assert outcome == {k: _expected(k) for _, k in CASES}, {k: v.message for k, v in found.items()}
    return outcome


def _fleet_bench(cluster, path: Path, **options) -> api.JaxBench:
    store = Store(path / "attempts.sqlite3")
    executor = fleet.RayExecutor(
        cluster.address, checker_options={**HOST_OPTIONS, **options}, claim_timeout=90, cache=store
    )
    return api.JaxBench(store=store, executor=executor)


@pytest.mark.slow
def test_mcp_checks_on_the_fleet_get_the_local_verdicts_and_server_info_shows_the_fleet(
    cluster, local_verdicts, tmp_path
):
    bench = _fleet_bench(cluster, tmp_path)
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message)

    async def go():
        async with Client(build_server(bench)) as client:
            info = await client.call_tool("server_info", {})
            verdicts, busy = [], []
            for workload, kernel in CASES:
                arguments = {"workload_id": workload, "source": (KERNELS / kernel).read_text(), "seeds": 2}
                async with anyio.create_task_group() as group:
                    box = {}

                    async def check(arguments=arguments, box=box):
                        box["result"] = await client.call_tool("check_kernel", arguments, progress_callback=on_progress)

                    group.start_soon(check)
                    # While the check runs, server_info shows it as a share of the fleet's slots.
                    while "result" not in box:
                        fleet_now = (await client.call_tool("server_info", {})).structured_content["fleet"]
                        busy.append(fleet_now["busy_share"])
                        await anyio.sleep(0.5)
                verdicts.append(await verdict_of(client, box["result"]))
            # A second server on the same cluster finds both hosts claimed, and says so instead of waiting.
            second = fleet.RayExecutor(cluster.address, checker_options=HOST_OPTIONS, claim_timeout=60)
            started = time.monotonic()
            with pytest.raises(fleet.FleetUnavailable, match="claimed by another jaxbench server"):
                second.start()
            second.close()
            return info, verdicts, busy, time.monotonic() - started

    info, verdicts, busy, refused_after = anyio.run(go)
    fleet_info = info.structured_content["fleet"]
    names = {h["name"] for h in fleet_info["hosts"]}
    assert fleet_info["ready_hosts"] == 2 and len(names) == 2 and fleet_info["resource"] == "jaxbench_host"
    assert fleet_info["tpu_chips"] == 0 and fleet_info["fallback"] is None and fleet_info["queue_length"] == 0
    assert info.structured_content["tier"] == "cpu_libtpu" and "fleet: Ray cluster at" in info.content[0].text
    assert max(busy) > 0  # one check on two one-slot hosts: half the fleet busy
    for (_workload, kernel), verdict in zip(CASES, verdicts, strict=True):
        assert (verdict["status"], verdict["error_class"]) == local_verdicts[kernel], verdict["message"]
        assert verdict["host"] in names and verdict["tier"] == "cpu_libtpu"
    assert {v["host"] for v in verdicts} == names  # equal load: the checks alternate between the two hosts
    assert any("placed on host" in m for m in progress)
    assert any(m.startswith("[") and "compile v6e: done" in m for m in progress)  # the hosts' own progress, relayed
    assert refused_after < proxy.CLAIM_GRACE_SECONDS + 15


@pytest.mark.slow
def test_serve_with_ray_over_stdio_keeps_stdout_for_mcp(cluster, local_verdicts, tmp_path):
    """The real `jaxbench-mcp serve --ray` process, as an agent starts it: Ray's own printing must not reach the
    MCP channel (stdout), or the client would drop the session."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "jaxbench_mcp", "serve", "--ray", cluster.address, "--host-slots", "1"],
        env={**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path / "home")},
    )

    async def go():
        async with Client(stdio_client(server)) as client:
            info = (await client.call_tool("server_info", {})).structured_content
            checked = await client.call_tool(
                "check_kernel", {"workload_id": "8p_GEMM", "source": (KERNELS / "bad_syntax.py").read_text()}
            )
            return info, await verdict_of(client, checked)

    info, verdict = anyio.run(go)
    assert info["fleet"]["ready_hosts"] == 2 and {h["slots"] for h in info["fleet"]["hosts"]} == {1}
    assert (verdict["status"], verdict["error_class"]) == local_verdicts["bad_syntax.py"]
    assert verdict["host"] in {h["name"] for h in info["fleet"]["hosts"]}


@pytest.mark.slow
def test_evaluate_with_ray_on_the_command_line(cluster, local_verdicts, tmp_path):
    run = tmp_path / "run"
    (run / "8p_GEMM").mkdir(parents=True)
    shutil.copy(KERNELS / "bad_syntax.py", run / "8p_GEMM" / "b_syntax.py")
    env = {**os.environ, "JAXBENCH_MCP_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxbench_mcp",
            "evaluate",
            str(run),
            "--ray",
            cluster.address,
            "--host-slots",
            "1",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # stdout holds the JSON alone: Ray's own output went to stderr
    assert summary["status_counts"] == {"invalid_kernel": 1} and summary["tier"] == "cpu_libtpu"
    (result,) = json.loads((run / campaign.RESULTS_FILE).read_text())["attempts"]
    assert (result["status"], result["error_class"]) == local_verdicts["bad_syntax.py"]
    store = Store(tmp_path / "home" / "attempts.sqlite3")
    check = next(r for r in store.recent(None, 10) if r["kind"] == "check")
    assert json.loads(check["result_json"])["host"] and "== fleet: try 1 on host" in check["log"]
    store.close()


@pytest.mark.slow
def test_cancelling_a_check_stops_it_on_its_host(cluster, tmp_path):
    from jaxbench_mcp.checking.checker import Cancelled

    bench = _fleet_bench(cluster, tmp_path)
    bench.start()
    try:
        job = bench.submit_check("12p_RMSNorm", (KERNELS / "good_rmsnorm.py").read_text(), seeds=16)
        assert job.attempt_id is not None
        deadline = time.monotonic() + 120
        while not any(h.running for h in bench.executor.fleet().hosts) and time.monotonic() < deadline:
            time.sleep(0.1)
        asked = time.monotonic()
        job.cancel()
        with pytest.raises(Cancelled):
            job.future.result(timeout=60)
        assert time.monotonic() - asked < 15  # the host killed the worker; nothing ran to its stage limits
        assert bench.store.get(job.attempt_id)["state"] == "cancelled"
        # The host's slot is free again.
        assert all(h.running == 0 for h in bench.executor.fleet().hosts)
    finally:
        bench.close()


@pytest.mark.slow
def test_a_host_that_dies_mid_campaign_costs_a_retry_not_an_attempt(cluster, local_verdicts, tmp_path):
    run = tmp_path / "run"
    (run / "8p_GEMM").mkdir(parents=True)
    shutil.copy(KERNELS / "good_rmsnorm.py", run / "12p_RMSNorm.py")
    shutil.copy(KERNELS / "bad_all_zeros.py", run / "8p_GEMM" / "a_zeros.py")
    shutil.copy(KERNELS / "bad_syntax.py", run / "8p_GEMM" / "b_syntax.py")
    files = {
        "12p_RMSNorm.py": "good_rmsnorm.py",
        "8p_GEMM/a_zeros.py": "bad_all_zeros.py",
        "8p_GEMM/b_syntax.py": "bad_syntax.py",
    }
    bench = _fleet_bench(cluster, tmp_path)
    bench.start()
    nodes = {n.node_id: n for n in cluster.worker_nodes}
    killed: dict = {}

    def kill_the_busy_host():
        """Crash (SIGKILL, no grace) the host that runs the campaign's second attempt, while it runs."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for h in bench.executor.fleet().hosts:
                if h.state == "ready" and h.running:
                    time.sleep(1.0)  # into the check's worker, past its start
                    killed["host"] = h.name
                    cluster.remove_node(nodes[h.node_id], allow_graceful=False)
                    return
            time.sleep(0.1)

    threads = []

    def progress(done, total, name):
        if done == 1 and name != "done":  # the first attempt is finished; 8p_GEMM/a_zeros.py starts now
            threads.append(threading.Thread(target=kill_the_busy_host))
            threads[-1].start()

    started = time.monotonic()
    try:
        # One attempt at a time, so that "the busy host" is the one running the second attempt.
        summary = campaign.evaluate(run, bench, progress=progress, jobs=1)
    finally:
        bench.close()
        for t in threads:
            t.join()
        _add_host(cluster)  # two hosts again for what follows
    assert killed, "no host was seen running the second attempt"
    results, _ = campaign.load(run)
    assert [r.attempt for r in results] == list(files)
    for r in results:
        assert (r.status, r.error_class) == local_verdicts[files[r.attempt]], r.message
    assert summary.attempts == 3 and not summary.interrupted

    store = Store(tmp_path / "attempts.sqlite3")
    rows = store.recent(None, 50)
    # Each attempt once: a profile attempt per file, the check each profile made first, and a check per held-out
    # configuration of the one correct attempt's workload; all of them done.
    held_out = len(workloads.get_workload("12p_RMSNorm").configs)
    assert held_out >= 1
    assert sorted(r["kind"] for r in rows) == ["check"] * (3 + held_out) + ["profile"] * 3
    assert {r["state"] for r in rows} == {"done"}
    zeros = (KERNELS / "bad_all_zeros.py").read_text()
    (retried,) = [r for r in rows if r["kind"] == "check" and r["source"] == zeros]
    verdict = json.loads(retried["result_json"])
    log = retried["log"]
    assert f"== fleet: try 1 on host {killed['host']}" in log and "the host died mid-check" in log
    assert "== fleet: try 2 on host" in log and "== events ==" in log  # both tries, then the second try's own log
    assert verdict["host"] != killed["host"] and any("died during this check" in w for w in verdict["warnings"])
    store.close()
    print(
        f"campaign with a host killed mid-check: {time.monotonic() - started:.0f} s; "
        f"the retried check's log, head:\n{log[:700]}"
    )


@pytest.mark.slow
def test_no_host_for_a_target_is_said_at_once_and_a_lost_cluster_falls_back_to_local(cluster, tmp_path):
    """Runs last: it shuts the cluster down. The hosts are made plain CPU hosts (no compile for any generation)."""
    bench = _fleet_bench(cluster, tmp_path, tier="cpu")
    bench.start()
    syntax, rmsnorm = (KERNELS / "bad_syntax.py").read_text(), (KERNELS / "good_rmsnorm.py").read_text()
    try:
        # A host that joins the running fleet is claimed within seconds.
        _add_host(cluster)
        deadline = time.monotonic() + 60
        while bench.executor.fleet().ready_hosts < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert bench.executor.fleet().ready_hosts == 3, bench.executor.fleet().summary_lines()

        asked = time.monotonic()
        with pytest.raises(NoHostForTarget, match="plain CPU hosts without libtpu"):
            bench.check_kernel("8p_GEMM", syntax, ["v6e"])
        assert time.monotonic() - asked < 5  # said at once, nothing queued
        assert bench.store.recent(None, 1)[0]["state"] == "failed"

        # A check in flight when the whole cluster goes away is run again on the server's own host.
        job = bench.submit_check("12p_RMSNorm", rmsnorm, seeds=16)  # long enough to be caught
        deadline = time.monotonic() + 120
        while (
            not any(h.running for h in bench.executor.fleet().hosts) and time.monotonic() < deadline and not job.done()
        ):
            time.sleep(0.1)
        cluster.shutdown()
        verdict = job.future.result(timeout=300)
        assert verdict.attempt_id == job.attempt_id
        assert (
            str(verdict.status) == "correct"
            and verdict.host.endswith("(local fallback)")
            and verdict.tier == "cpu_libtpu"
        )
        assert any("ran on the server's own host" in w for w in verdict.warnings)
        log = bench.store.get(verdict.attempt_id)["log"]
        assert "== fleet: try 1 on host" in log and "ran on the server's own host" in log
        print("the attempt's log, head:\n" + log[:700])

        # From now on: server_info says so, and checks run here. The job may be told to run here (no host left)
        # a few seconds before the driver declares the whole cluster lost (its GCS refuses probes in a row).
        deadline = time.monotonic() + 60
        while bench.executor.fallback is None and time.monotonic() < deadline:
            time.sleep(0.2)
        info = bench.server_info()
        assert info.fleet.fallback and "FALLEN BACK" in info.summary() and info.tier == "cpu_libtpu"
        later = bench.check_kernel("8p_GEMM", syntax)
        assert (str(later.status), str(later.error_class)) == _expected("bad_syntax.py")
        assert later.host.endswith("(local fallback)") and "local fallback" in later.summary()
    finally:
        bench.close()
