"""Isolation for the processes that run candidate code.

Three levels, the best this host allows (server_info and every verdict say which one ran):
  bubblewrap    bwrap: new user, PID, network, IPC, UTS and mount namespaces; uid 65534 inside; a
                read-only view of only the system, Python and the package (expert sources and the
                rest of the repository hidden); /proc of its own PID namespace; a private /tmp; the
                job directory as the only writable place; killed with its parent.
  namespaces    no bwrap: new user, network, IPC and UTS namespaces through util-linux unshare; the file system
                and process table stay visible (the environment is still scrubbed).
  process-only  neither: a process group, rlimits and a scrubbed environment only.
At every level: rlimits (file size, open files, core dumps, CPU time, address space), and, where this
host lets us create cgroups (v2, or v1 memory and pids controllers), a memory and a process-count cap
with a kill of every process in the group at the end.
"""

from __future__ import annotations

import functools
import glob
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from enum import StrEnum
from pathlib import Path

from jaxbench_mcp.catalog import assets
from jaxbench_mcp.catalog.workloads import custom_dirs


class Isolation(StrEnum):
    BUBBLEWRAP = "bubblewrap"
    NAMESPACES = "namespaces"
    PROCESS_ONLY = "process-only"


# Where the job directory appears inside a bubblewrap sandbox.
INSIDE_JOB_DIR = "/job"
# Set to a lower level to force it (tests of the fallbacks; hosts where bwrap misbehaves).
ISOLATION_ENV = "JAXBENCH_MCP_ISOLATION"
_SANDBOX_UID = 65534
_UNSHARE_FLAGS = ("--user", "--net", "--ipc", "--uts")


def _bwrap_works() -> bool:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False
    probe = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "true",
    ]
    try:
        return subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    try:
        return subprocess.run([unshare, *_UNSHARE_FLAGS, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def detect() -> Isolation:
    """The strongest isolation this host supports, or a weaker one forced through JAXBENCH_MCP_ISOLATION."""
    forced = os.environ.get(ISOLATION_ENV)
    order = list(Isolation)
    if forced:
        try:
            order = order[order.index(Isolation(forced)) :]
        except ValueError:
            raise ValueError(f"{ISOLATION_ENV}={forced!r}: choose one of {', '.join(order)}") from None
    for level in order:
        if level is Isolation.BUBBLEWRAP and _bwrap_works():
            return level
        if level is Isolation.NAMESPACES and _unshare_works():
            return level
        if level is Isolation.PROCESS_ONLY:
            return level
    return Isolation.PROCESS_ONLY


# ---- what a bubblewrap sandbox sees --------------------------------------------------------------

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc/alternatives")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf")
# jax/XLA read the CPU topology from sysfs.
_SYSFS = ("/sys/devices/system/cpu", "/sys/fs/cgroup")
# The accelerator's device nodes on a TPU host.
_DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio")


def _python_dirs() -> list[str]:
    """The interpreter's installation and the virtual environment (site-packages: jax, libtpu, the SDK)."""
    dirs = sorted({sys.base_prefix, sys.prefix})
    return [d for d in dirs if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs)]


def _hidden_dirs() -> list[str]:
    """Folders inside bound trees that candidates must not read: the expert kernels (and any bundled copy)."""
    hidden = []
    for prefix in {sys.prefix, sys.base_prefix}:
        hidden += glob.glob(
            os.path.join(prefix, "lib", "python3*", "site-packages", "jaxbench_mcp", "_bundled", "tokamax_refs")
        )
    package = assets.PACKAGE_DIR
    hidden += [
        str(package / "_bundled" / name)
        for name in ("tokamax_refs", "solutions")
        if (package / "_bundled" / name).is_dir()
    ]
    return sorted(set(hidden))


def bwrap_command(
    argv: list[str], job_dir: Path, tmp_dir: Path | None = None, shm_dir: Path | None = None
) -> list[str]:
    """The bwrap command line for argv. `tmp_dir` and `shm_dir` (host folders beside the job directory, polled
    with it) become the sandbox's /tmp and /dev/shm; without them /tmp is a private tmpfs and /dev/shm the
    sandbox's own /dev's."""
    package = assets.PACKAGE_DIR
    cmd = [
        "bwrap",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--uid",
        str(_SANDBOX_UID),
        "--gid",
        str(_SANDBOX_UID),
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        # No nested user namespaces: they are the door to most kernel attack surface.
        "--disable-userns",
    ]
    # Mounted first: a later bind (a checkout or venv under /tmp) then lands on top of the fresh /tmp instead of
    # being hidden by it.
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += ["--bind", str(tmp_dir), "/tmp"] if tmp_dir else ["--size", str(256 * 2**20), "--tmpfs", "/tmp"]
    if shm_dir:
        cmd += ["--bind", str(shm_dir), "/dev/shm"]
    for path in _SYSTEM_DIRS + _SYSFS:
        cmd += ["--ro-bind-try", path, path]
    for path in _SYSTEM_FILES:
        cmd += ["--ro-bind-try", path, path]
    for path in _python_dirs():
        cmd += ["--ro-bind", path, path]
    # The package and the workload definitions, at the paths the worker's imports expect.
    cmd += ["--ro-bind", str(package), str(package)]
    workloads_dir = assets.asset_dir("workloads")
    if not str(workloads_dir).startswith(str(package) + "/"):
        cmd += ["--ro-bind", str(workloads_dir), str(workloads_dir)]
    for path in _hidden_dirs():
        cmd += ["--tmpfs", path]
    # The operator's custom workload directories (trusted like workloads/), read-only at the same paths, after
    # the tmpfs mounts so that none hides them.

    for directory in custom_dirs():
        if directory.is_dir():
            cmd += ["--ro-bind", str(directory), str(directory)]
    for pattern in _DEVICE_GLOBS:
        for path in glob.glob(pattern):
            cmd += ["--dev-bind", path, path]
    cmd += ["--bind", str(job_dir), INSIDE_JOB_DIR, "--chdir", INSIDE_JOB_DIR, "--"]
    return cmd + argv


# ---- resource limits -----------------------------------------------------------------------------


def _rlimit_prefix(
    max_file_bytes: int, cpu_seconds: int, address_space_bytes: int, max_processes: int | None = None
) -> list[str]:
    """util-linux prlimit in front of the command: limits set without running Python code between fork and exec
    (unsafe in the server, which has threads). With `max_processes` (a worker under a host uid of its own, see
    HostUids) RLIMIT_NPROC is that cap: the kernel counts the processes of the real uid, which are the worker's."""
    limits = [
        f"--fsize={max_file_bytes}",
        "--core=0",
        "--nofile=4096",
        f"--cpu={cpu_seconds}",
        f"--as={address_space_bytes}",
    ]
    if max_processes is not None:
        limits.append(f"--nproc={max_processes}")
    elif os.getuid() != 0:  # root is exempt from RLIMIT_NPROC; the cgroup's pids cap covers it there
        running = sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*"))
        limits.append(f"--nproc={running + 1024}")
    return [shutil.which("prlimit") or "prlimit", *limits, "--"]


# ---- a host uid of its own for every worker --------------------------------------------------------

# Host uids handed to workers: "BASE:COUNT" (default below), or "off". None of them may belong to an account.
HOST_UIDS_ENV = "JAXBENCH_MCP_SANDBOX_UIDS"
_DEFAULT_HOST_UIDS = (1_500_000_000, 1024)


class HostUids:
    """Host uids for workers, one per live worker, for a server run as root.

    bubblewrap maps the sandbox's uid 65534 to the uid that starts it, so under a root server every candidate's
    per-uid kernel quotas were root's: fs.inotify.max_user_instances (a candidate that took all 128 left none to
    the host's root processes), and RLIMIT_NPROC, which does not apply to root at all. setpriv(1) starts bwrap as
    a uid that no other process has; the user namespace is then owned by it and every per-uid count (inotify
    instances and watches, processes, message queues) is the worker's own, and RLIMIT_NPROC caps its processes
    even where no cgroup can be made. Off for a server that is not root (it cannot change uid) or where the
    probe fails (unprivileged user namespaces refused, a Python installation that uid cannot read)."""

    def __init__(self, base: int, count: int):
        self.base, self.count = base, count
        self._free = list(range(base, base + count))
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            if not self._free:
                raise RuntimeError(f"all {self.count} sandbox uids are in use ({HOST_UIDS_ENV})")
            return self._free.pop(0)

    def release(self, uid: int) -> None:
        with self._lock:
            if self.base <= uid < self.base + self.count and uid not in self._free:
                self._free.append(uid)


def parse_host_uids(value: str | None) -> tuple[int, int] | None:
    if value is None or not value.strip():
        return _DEFAULT_HOST_UIDS
    if value.strip().lower() in ("off", "0", "no", "false"):
        return None
    try:
        base, count = (int(part) for part in value.split(":"))
    except ValueError:
        raise ValueError(f"{HOST_UIDS_ENV}={value!r}: write BASE:COUNT (e.g. 1500000000:1024) or off") from None
    if base <= 0 or count <= 0 or base + count > 2**32 - 2:
        raise ValueError(f"{HOST_UIDS_ENV}={value!r}: uids must lie in 1..4294967293")
    return base, count


def as_uid(uid: int, argv: list[str]) -> list[str]:
    """argv run as host uid and gid `uid`, with no supplementary groups and no way back to privileges."""
    setpriv = shutil.which("setpriv") or "setpriv"
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--", *argv]


@functools.cache
def host_uids() -> HostUids | None:
    """The pool of host uids for workers, or None where workers keep the server's uid (see HostUids)."""
    chosen = parse_host_uids(os.environ.get(HOST_UIDS_ENV))
    if chosen is None or os.geteuid() != 0 or not shutil.which("setpriv") or detect() is not Isolation.BUBBLEWRAP:
        return None
    pool = HostUids(*chosen)
    uid = pool.acquire()
    probe_dir = Path(tempfile.mkdtemp(prefix="jaxbench-uid-probe-"))
    try:
        os.chmod(probe_dir, 0o777)
        probe = as_uid(
            uid, bwrap_command([sys.executable, "-I", "-c", "import jaxbench_mcp.sandbox.protocol"], probe_dir)
        )
        works = subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    finally:
        pool.release(uid)
        remove_tree(probe_dir)
    return pool if works else None


class Cgroup:
    """A cgroup (v2, or v1 memory + pids) for one worker: memory and process-count caps, and a kill of all
    its processes. `create` returns None where this host does not let us make one."""

    _counter = itertools.count()

    def __init__(self, dirs: dict[str, Path], v2: bool):
        self.dirs, self.v2 = dirs, v2

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> Cgroup | None:
        name = f"jaxbench-{os.getpid()}-{next(cls._counter)}"
        root = Path("/sys/fs/cgroup")
        try:
            if (root / "cgroup.controllers").exists():
                own = Path(Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1].lstrip("/"))
                base = root / own
                if not {"memory", "pids"} <= set((base / "cgroup.subtree_control").read_text().split()):
                    return None
                group = base / name
                group.mkdir()
                (group / "memory.max").write_text(str(memory_bytes))
                (group / "memory.swap.max").write_text("0") if (group / "memory.swap.max").exists() else None
                (group / "pids.max").write_text(str(max_pids))
                return cls({"memory": group, "pids": group}, v2=True)
            dirs = {"memory": root / "memory" / name, "pids": root / "pids" / name}
            for d in dirs.values():
                d.mkdir()
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            (dirs["pids"] / "pids.max").write_text(str(max_pids))
            return cls(dirs, v2=False)
        except (OSError, IndexError):
            for d in locals().get("dirs", {}).values():
                try:
                    d.rmdir()
                except OSError:
                    pass
            return None

    @staticmethod
    def sweep_stale() -> int:
        """Remove the (empty) cgroups of servers that no longer run: a server killed with SIGKILL cannot."""
        removed = 0
        for group in glob.glob("/sys/fs/cgroup/**/jaxbench-*-*", recursive=True):
            pid = os.path.basename(group).split("-")[1]
            if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(group)
                    removed += 1
                except OSError:  # not empty (a process still in it) or not ours to remove
                    pass
        return removed

    def joining_command(self, argv: list[str]) -> list[str]:
        """argv run by a shell that first moves itself into this cgroup (a shell, not Python: no code may run in
        the server between fork and exec) and then execs it."""
        procs = " ".join(f"'{d / 'cgroup.procs'}'" for d in {str(d): d for d in self.dirs.values()}.values())
        return ["/bin/sh", "-c", f'for f in {procs}; do echo $$ > "$f" || exit 125; done; exec "$@"', "sh", *argv]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.dirs["pids"] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_killed(self) -> bool:
        try:
            if self.v2:
                events = dict(line.split() for line in (self.dirs["memory"] / "memory.events").read_text().splitlines())
                return int(events.get("oom_kill", 0)) > 0
            return int((self.dirs["memory"] / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def kill_all(self, wait: bool = True) -> None:
        """SIGKILL every process in the group; with wait, repeat until the group is empty (a fork loop may add
        processes while we kill; cgroup v2's cgroup.kill reaches those too)."""
        if self.v2 and (self.dirs["pids"] / "cgroup.kill").exists():
            (self.dirs["pids"] / "cgroup.kill").write_text("1")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not wait:
                return
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for d in {str(d): d for d in self.dirs.values()}.values():
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy until the killed processes are reaped
                    time.sleep(0.01)


def remove_tree(path: Path) -> None:
    """Remove a directory a candidate wrote into. shutil.rmtree holds a descriptor per level and gives up on a
    deep enough tree (thousands of nested folders); rm(1) walks any depth."""
    if not os.path.lexists(path):
        return
    subprocess.run(
        ["rm", "-rf", "--one-file-system", "--", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def process_tree(root_pid: int) -> list[int]:
    """root_pid and all its descendants (a child that calls setsid() or double-forks inside a PID namespace
    stays a descendant of the namespace's init)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed sandbox's init may wait as a zombie for the host's init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def wait_dead(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)


def rss_bytes(pids: list[int]) -> int:
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def launch(
    argv: list[str],
    job_dir: Path,
    env: dict[str, str],
    stdout,
    stderr,
    pass_fds: tuple[int, ...],
    isolation: Isolation,
    max_file_bytes: int,
    cpu_seconds: int,
    address_space_bytes: int,
    cgroup: Cgroup | None = None,
    tmp_dir: Path | None = None,
    shm_dir: Path | None = None,
    host_uid: int | None = None,
    max_processes: int | None = None,
) -> subprocess.Popen:
    """Start argv in the sandbox for `isolation`, with job_dir as its working (and only writable) directory, inside
    `cgroup` from its first instruction (joined before anything forks, so every descendant is in it). With
    bubblewrap, `tmp_dir` and `shm_dir` are its /tmp and /dev/shm; with `host_uid` (bubblewrap only, a root
    server: HostUids) it runs as that host uid, with RLIMIT_NPROC at `max_processes`."""
    cwd = None
    nproc = None
    if isolation is Isolation.BUBBLEWRAP:
        argv = bwrap_command(argv, job_dir, tmp_dir, shm_dir)
        if host_uid is not None:
            argv = as_uid(host_uid, argv)
            nproc = max_processes
    else:
        cwd = job_dir
        if isolation is Isolation.NAMESPACES:
            argv = [shutil.which("unshare") or "unshare", *_UNSHARE_FLAGS, "--", *argv]
    argv = _rlimit_prefix(max_file_bytes, cpu_seconds, address_space_bytes, nproc) + argv
    if cgroup is not None:
        argv = cgroup.joining_command(argv)
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        pass_fds=pass_fds,
        start_new_session=True,
    )
