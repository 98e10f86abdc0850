# expect: workload=12p_RMSNorm status=crashed error_class=protocol_violation
# attack: the recorded program's file program_full.json is a FIFO (an open() for reading waits forever for a writer)
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


def EVIL(path, data):
    os.mkfifo(path)


import pathlib

_write_bytes = pathlib.Path.write_bytes


def _evil_write_bytes(self, data):
    if self.name.startswith("program_"):
        return EVIL(self, data)
    return _write_bytes(self, data)


pathlib.Path.write_bytes = _evil_write_bytes


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
