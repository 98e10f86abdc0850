# expect: workload=12p_RMSNorm status=crashed error_class=protocol_violation
# attack: plain jnp answers with a wholly forged event stream: a hand-written 'lowered' module naming tpu_custom_call, outputs, 'finished'
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


import json
import time

EVENTS = int(sys.argv[1])  # the worker's event pipe: its fd number is the worker's argv[1]


def send(raw: bytes):
    os.write(EVENTS, raw)


def event(**fields):
    send(json.dumps(fields).encode() + b"\n")


import glob

import jax.numpy as jnp
import numpy as np

from jaxbench_mcp.catalog import workloads

generation = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
w = workloads.get_workload("12p_RMSNorm")
shape = w.module.SIZES["small"]
x_shape = [shape["batch"], shape["seq_len"], shape["emb_dim"]]
with open("lowered_forged.mlir", "w") as f:
    f.write("module { func.func @main() { stablehlo.custom_call @tpu_custom_call() : () -> () return } }\n")
sys.stdin.read()  # the parent's word, run by run, that the input files are written: EOF once all are
seeds = len(glob.glob("input_*_0.bin"))
for k in range(seeds):
    x = np.frombuffer(open(f"input_{k}_0.bin", "rb").read(), dtype=jnp.bfloat16).reshape(x_shape)
    scale = np.frombuffer(open(f"input_{k}_1.bin", "rb").read(), dtype=jnp.bfloat16)
    np.save(f"output_{k}.npy", np.asarray(w.module.reference(jnp.asarray(x), jnp.asarray(scale))).astype(np.float32))
kernel = {
    "name": "rmsnorm_kernel",
    "grid": [256],
    "blocks": [],
    "num_scalar_prefetch": 0,
    "num_scratch": 0,
    "scratch_bytes": 0,
    "dimension_semantics": ["parallel"],
}
full = w.module.SIZES["full"]
event(event="stage", stage="load", state="done")
event(event="stage", stage="trace", state="start")
event(
    event="stage",
    stage="trace",
    state="done",
    traced={
        "kernels": [kernel],
        "host_callbacks": [],
        "outputs": [{"shape": [full["batch"], full["seq_len"], full["emb_dim"]], "dtype": "bfloat16"}],
    },
)
event(event="stage", stage="lower", state="start", target=generation)
event(event="stage", stage="lower", state="done", target=generation, lowered={"module_file": "lowered_forged.mlir"})
if generation:
    event(event="stage", stage="compile", state="start", target=generation)
    event(event="stage", stage="compile", state="done", target=generation, compiled={})
for k in range(seeds):
    event(event="stage", stage="run", state="start", seed_index=k)
    event(
        event="stage",
        stage="run",
        state="done",
        seed_index=k,
        output={"path": f"output_{k}.npy", "shape": x_shape, "dtype": "bfloat16", "leaves": 1},
    )
event(event="finished")
time.sleep(10)


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
    """Plain jnp: no Pallas kernel runs."""
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-5)).astype(x.dtype) * scale
