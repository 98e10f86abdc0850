# expect: workload=12p_RMSNorm status=incorrect error_class=wrong_values
# attack: replay: rebuild the inputs an earlier check used (its hidden seeds, as if learnt) and answer for whichever of them this check's input equals
# harness: replay
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


from jaxbench_mcp.catalog import workloads

SEEDS = __SEEDS__  # the hidden seeds of the check just before this one
_module = workloads.get_workload("12p_RMSNorm").module


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
    b, s, d = x.shape
    seen = [_module.create_inputs(seed=k, batch=b, seq_len=s, emb_dim=d) for k in SEEDS]
    pick_x, pick_s = seen[0]
    for seen_x, seen_s in seen:  # the answer for whichever earlier input this one is
        same = jnp.all(seen_x == x)
        pick_x, pick_s = jnp.where(same, seen_x, pick_x), jnp.where(same, seen_s, pick_s)
    return rmsnorm(pick_x, pick_s)
