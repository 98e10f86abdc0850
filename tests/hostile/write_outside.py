# expect: workload=12p_RMSNorm status=correct
# attack: write outside the job directory (/tmp, /var/tmp, $HOME, the repo, the package, site-packages .pth, the store's folder) and overwrite/delete the test's sentinel files
# Placeholders (__NAME__) are filled in by tests/test_hostile.py.
import os
import sys

FOUND = []  # what the attack reached; anything here spoils the answer, so a leak flips the verdict


def found(what):
    FOUND.append(what)
    print(f"HOSTILE-FOUND {what}", file=sys.stderr, flush=True)


def denied(what, exc):
    print(f"HOSTILE-DENIED {what}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr, flush=True)


def in_pid_namespace():
    """A few processes and a small pid: we are inside a PID namespace (the sandbox), not on the host."""
    return os.getpid() < 100 and sum(1 for p in os.listdir("/proc") if p.isdigit()) < 50


import sysconfig

MARKER = "__MARKER__"
HOME = "__HOME__"
REPO = "__REPO__"
STORE = "__STORE__"
SENTINELS = __SENTINELS__
purelib = sysconfig.get_paths()["purelib"]


def _mounts():
    """(root within its file system, mount point, file system type) of every mount this process sees."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            yield fields[3], fields[4], fields[fields.index("-") + 1]


# The host folder the job directory lies in (the worker's own, removed with it): the sandbox's /tmp and /dev/shm
# are folders beside the job directory there, which the job's poll counts.
JOB_PARENT = next((os.path.dirname(root) for root, point, _ in _mounts() if point == "/job"), None)


def private(directory):
    """On one of the sandbox's own tmpfs mounts (its /, /dev), or in the worker's own folder beside the job directory
    (its /tmp and /dev/shm): what lands there dies with it. The test checks the host for anything that did not."""
    path, best, fstype, source = os.path.realpath(directory), "", "", ""
    for root, point, kind in _mounts():
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, fstype, source = point, kind, root
    return fstype == "tmpfs" or (JOB_PARENT is not None and os.path.dirname(source) == JOB_PARENT)


for directory in (
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/dev",
    "/",
    "/work",
    "/job/..",
    HOME,
    os.path.join(HOME, ".local/state"),
    REPO,
    REPO + "/jaxbench_mcp",
    REPO + "/jaxbench_mcp/__pycache__",
    REPO + "/workloads",
    REPO + "/tests",
    sys.prefix,
    purelib,
    sys.base_prefix,
    os.path.dirname(STORE),
):
    path = os.path.join(directory, f"{MARKER}-written")
    try:
        with open(path, "w") as f:
            f.write("written by a candidate")
    except OSError as exc:
        denied(path, exc)
        continue
    if not private(directory):
        found(path)
try:  # a .pth file in site-packages runs code in every later Python process, the server's included
    with open(os.path.join(purelib, f"{MARKER}.pth"), "w") as f:
        f.write("import os\n")
    found("site-packages .pth")
except OSError as exc:
    denied("site-packages .pth", exc)
for sentinel in SENTINELS:
    for what, action in (
        ("overwrite", lambda path: open(path, "w").write("owned")),
        ("utime", lambda path: os.utime(path, (0, 0))),
        ("rename", lambda path: os.rename(path, f"{path}-{MARKER}")),
        ("unlink", lambda path: os.unlink(path)),
    ):
        try:
            action(sentinel)
        except OSError as exc:
            denied(f"{what} {sentinel}", exc)
        else:
            if not private(
                os.path.dirname(sentinel)
            ):  # the sandbox's own /tmp holds a file of that name now, not the host's
                found(f"{what} {sentinel}")


# ---- a correct Pallas RMSNorm: the answer when the attack fails; zeros (wrong values) once FOUND has anything ----
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402


def _rmsnorm_kernel(x_ref, s_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * s_ref[...].astype(jnp.float32)
    o_ref[...] = y.astype(o_ref.dtype)


def rmsnorm(x, scale):
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    br = max(8, min(x2.shape[0], (2 << 20) // (d * x.dtype.itemsize)))
    out = pl.pallas_call(
        _rmsnorm_kernel,
        grid=(x2.shape[0] // br,),
        in_specs=[pl.BlockSpec((br, d), lambda i: (i, 0)), pl.BlockSpec((1, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x2.shape, x.dtype),
    )(x2, scale.reshape(1, d))
    return out.reshape(x.shape)


def workload(x, scale):
    return rmsnorm(x, scale * 0 if FOUND else scale)
