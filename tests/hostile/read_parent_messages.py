# expect: workload=12p_RMSNorm status=correct
# attack: read the worker's stdin, where the parent's messages follow the job, hoping for a seed, a truth or a path (the candidate's process is sent none of them: the inputs' messages go to the process that runs the recorded program)
import sys

FOUND = []  # what the attack reached; anything here ends the process (crashed, not runtime_error)


def found(what):
    FOUND.append(what)
    print(f"HOSTILE-FOUND {what}", file=sys.stderr, flush=True)


def denied(what, exc):
    print(f"HOSTILE-DENIED {what}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr, flush=True)


import json  # noqa: E402

# The parent's messages after the job: blocks until the parent closes the pipe (all inputs written).
for line in sys.stdin.read().splitlines():
    try:
        message = json.loads(line)
    except ValueError:
        found(f"a line that is not a message: {line[:80]!r}")
        continue
    if set(message) != {"inputs_ready"} or not isinstance(message["inputs_ready"], int):
        found(f"a message beyond an input index: {line[:80]!r}")
if FOUND:
    sys.exit(3)
denied("stdin", Exception("only input indices"))


# ---- a correct Pallas RMSNorm: never run, since the worker's run lost its inputs' messages ----
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
    return rmsnorm(x, scale)
