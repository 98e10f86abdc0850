# expect: workload=12p_RMSNorm status=correct
# attack: read the hidden expert kernels: tokamax_refs/ in the repo, any _bundled copy, solutions/, and through the package's own API
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


import glob

REPO = "__REPO__"
import jaxbench_mcp  # noqa: E402

probes = [*glob.glob(REPO + "/tokamax_refs/*.py"), *glob.glob(REPO + "/solutions/**/*.py", recursive=True)]
for base in {os.path.dirname(jaxbench_mcp.__file__), *(os.path.join(p, "jaxbench_mcp") for p in sys.path if p)}:
    for hidden in ("tokamax_refs", "solutions"):
        probes += glob.glob(os.path.join(base, "_bundled", hidden, "**", "*.py"), recursive=True)
for root in (REPO, "/work", sys.prefix, sys.base_prefix):
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) in ("tokamax_refs", "solutions"):
            probes += [os.path.join(dirpath, f) for f in files if f.endswith(".py")]
for path in sorted(set(probes)):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        denied(path, exc)
        continue
    if text.strip():
        found(path)
try:
    from jaxbench_mcp.catalog import expert_refs

    if expert_refs.expert_source("12p_RMSNorm"):
        found("expert_refs.expert_source('12p_RMSNorm')")
except Exception as exc:  # noqa: BLE001
    denied("expert_refs.expert_source", exc)


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
