"""The bubblewrap command line: what a sandbox sees, in what order it is mounted."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from jaxbench_mcp.sandbox import isolation as sandbox


def test_the_private_tmp_is_mounted_before_the_binds_so_a_checkout_under_tmp_stays_visible():
    cmd = sandbox.bwrap_command(["python"], Path("/tmp/job"))
    tmpfs_tmp = next(i for i in range(len(cmd) - 1) if cmd[i] == "--tmpfs" and cmd[i + 1] == "/tmp")
    first_bind = cmd.index("--ro-bind")
    # bwrap mounts in order: a tmpfs on /tmp mounted after the binds would hide a venv or package under /tmp.
    assert tmpfs_tmp < first_bind
    assert cmd[cmd.index("--chdir") + 1] == sandbox.INSIDE_JOB_DIR and cmd[-1] == "python"


def test_the_sandboxs_tmp_and_shm_are_host_folders_beside_the_job_bound_before_the_binds():
    cmd = sandbox.bwrap_command(["python"], Path("/w/job"), tmp_dir=Path("/w/tmp"), shm_dir=Path("/w/shm"))
    triples = list(zip(cmd, cmd[1:], cmd[2:], strict=False))  # every window of three: the shifted copies are shorter
    tmp, shm = triples.index(("--bind", "/w/tmp", "/tmp")), triples.index(("--bind", "/w/shm", "/dev/shm"))
    assert triples.index(("--dev", "/dev", "--bind")) < shm < cmd.index("--ro-bind")
    assert tmp < cmd.index("--ro-bind") and "--tmpfs" not in cmd[tmp - 3 : tmp + 3]


def test_host_uids_parse_and_are_handed_out_once():
    assert sandbox.parse_host_uids(None) == sandbox.parse_host_uids("") == (1_500_000_000, 1024)
    assert sandbox.parse_host_uids("off") is None
    assert sandbox.parse_host_uids("2000000:4") == (2_000_000, 4)
    for bad in ("2000000", "a:b", "0:4", "4294967290:10"):
        with pytest.raises(ValueError, match=sandbox.HOST_UIDS_ENV):
            sandbox.parse_host_uids(bad)
    pool = sandbox.HostUids(100, 2)
    first, second = pool.acquire(), pool.acquire()
    assert {first, second} == {100, 101}
    with pytest.raises(RuntimeError, match="in use"):
        pool.acquire()
    pool.release(first)
    pool.release(first)  # twice: still one free uid
    assert pool.acquire() == first
    with pytest.raises(RuntimeError):
        pool.acquire()
    cmd = sandbox.as_uid(123, ["bwrap", "x"])
    assert cmd[1:6] == ["--reuid=123", "--regid=123", "--clear-groups", "--no-new-privs", "--"]


# ---- a real sandbox under a host uid of its own (bubblewrap, a root server) ------------------------------

_PROBE_UID = 1_500_000_900  # in the default pool's range, above what a test server hands out


@pytest.fixture
def worker_root():
    """A folder like a worker's (under the system's temp directory; pytest's own is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="jaxbench-test-"))
    os.chmod(root, 0o711)
    yield root
    sandbox.remove_tree(root)


def _run_as_own_uid(tmp_path, monkeypatch, script: str, host_uid: int | None, max_processes: int | None = None):
    """/usr/bin/python3 (readable by any uid; the interpreter of this checkout may live where only root reaches)
    running `script` in a bubblewrap sandbox whose job, /tmp and /dev/shm folders are in tmp_path; its stdout."""
    if os.geteuid() != 0 or sandbox.detect() is not sandbox.Isolation.BUBBLEWRAP or not shutil.which("setpriv"):
        pytest.skip("needs bubblewrap and a root server (the only one that can give workers a uid of their own)")
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3")
    monkeypatch.setattr(sandbox, "_python_dirs", lambda: [])
    tmp_path.mkdir(exist_ok=True)
    job, tmp, shm = (tmp_path / n for n in ("job", "tmp", "shm"))
    for d in (job, tmp, shm):
        d.mkdir()
        os.chmod(d, 0o1777)
    os.chmod(tmp_path, 0o711)
    out = tmp_path / "out.txt"
    with open(out, "wb") as stdout, open(tmp_path / "err.txt", "wb") as stderr:
        process = sandbox.launch(
            ["/usr/bin/python3", "-I", "-S", "-c", script],
            job,
            {"PATH": "/usr/bin:/bin"},
            stdout,
            stderr,
            (),
            sandbox.Isolation.BUBBLEWRAP,
            max_file_bytes=2**20,
            cpu_seconds=60,
            address_space_bytes=8 * 2**30,
            tmp_dir=tmp,
            shm_dir=shm,
            host_uid=host_uid,
            max_processes=max_processes,
        )
        process.stdin.close()
        assert process.wait(timeout=60) == 0, (tmp_path / "err.txt").read_text()
    return out.read_text()


_COUNT_INOTIFY = """
import ctypes
libc = ctypes.CDLL(None)
held = []
while len(held) < 100000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print(len(held), int(open("/proc/sys/fs/inotify/max_user_instances").read()))
"""


def test_a_worker_under_its_own_uid_has_an_inotify_quota_of_its_own(worker_root, monkeypatch):
    import ctypes

    held = ctypes.CDLL(None).inotify_init1(0)  # one instance of the server's uid, held throughout
    assert held >= 0
    try:
        shared_count, limit = map(int, _run_as_own_uid(worker_root / "a", monkeypatch, _COUNT_INOTIFY, None).split())
        own_count, _ = map(int, _run_as_own_uid(worker_root / "b", monkeypatch, _COUNT_INOTIFY, _PROBE_UID).split())
    finally:
        os.close(held)
    assert shared_count < limit  # the control: under the server's uid the sandbox shares its quota
    assert own_count == limit


_FORK_UNTIL_REFUSED = """
import os, time
children = []
while len(children) < 2000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children.append(pid)
print(len(children))
for pid in children:
    os.kill(pid, 9)
"""


def test_a_worker_under_its_own_uid_is_held_to_its_process_cap_without_a_cgroup(worker_root, monkeypatch):
    started = int(_run_as_own_uid(worker_root, monkeypatch, _FORK_UNTIL_REFUSED, _PROBE_UID, max_processes=40))
    # RLIMIT_NPROC counts the uid's processes: bwrap's two and the script itself take three of the 40.
    assert 0 < started <= 40 - 3


def test_files_in_the_sandboxs_tmp_and_shm_land_where_the_job_directory_poll_counts_them(worker_root, monkeypatch):
    tmp_path = worker_root
    from jaxbench_mcp.sandbox import jobs

    script = "open('/tmp/a', 'w').write('x' * 1000)\nimport os\nos.makedirs('/dev/shm/d/e')\nprint('ok')"
    assert _run_as_own_uid(tmp_path, monkeypatch, script, None).strip() == "ok"
    assert (tmp_path / "tmp" / "a").stat().st_size == 1000 and (tmp_path / "shm" / "d" / "e").is_dir()
    size, entries = jobs._dir_usage([tmp_path / n for n in ("job", "tmp", "shm")], 20_000)
    # bwrap makes the mount points of binds that lie under /tmp (a checkout or venv cloned there) in the sandbox's
    # /tmp folder: empty folders, which count too. The script made no folder in /tmp.
    mount_points = [p for p in (tmp_path / "tmp").rglob("*") if p.is_dir()]
    assert (size, entries) == (1000, 3 + len(mount_points))
