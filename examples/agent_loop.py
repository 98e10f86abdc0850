"""A minimal scripted agent loop over MCP: check -> fix -> profile for one workload.

The "agent" is a function you plug in: propose(spec, feedback) -> source, given the workload's spec text and
the last verdict's text (None on the first turn). Every proposal is written to RUN_DIR/<workload_id>/turn<N>.py,
the layout `jaxbench-mcp evaluate RUN_DIR` scores, so a run of this loop is a campaign too.

    python examples/agent_loop.py 12p_RMSNorm runs/demo            # the built-in demo proposer
    jaxbench-mcp evaluate runs/demo                                 # score what it wrote

The server is started over stdio with the official MCP SDK client, as an agent's host would start it.
Replace `demo_proposer` with a call to your model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

Proposer = Callable[[str, str | None], str]
# A check that outlasts the server's call budget comes back 'running'; collect it this often.
POLL_SECONDS = 5.0


async def _finished(client: Client, tool: str, arguments: dict) -> dict:
    """Call check_kernel or profile_kernel and wait for the result (collecting a long one with list_attempts)."""
    result = (await client.call_tool(tool, arguments)).structured_content
    while result["state"] == "running":
        await anyio.sleep(POLL_SECONDS)
        listed = (await client.call_tool("list_attempts", {"attempt_id": result["attempt_id"]})).structured_content
        detail = listed["detail"]
        if detail["state"] != "running":
            key = "profile" if tool == "profile_kernel" else "verdict"
            return {"state": "done", "attempt_id": result["attempt_id"], key: detail[key]}
    return result


async def agent_loop(
    workload_id: str, propose: Proposer, run_dir: Path, turns: int = 3, server: StdioServerParameters | None = None
) -> dict | None:
    """Up to `turns` proposals until one is correct; then its profile. Returns the profile, or None."""
    server = server or StdioServerParameters(command=sys.executable, args=["-m", "jaxbench_mcp", "serve"])
    out = Path(run_dir) / workload_id
    out.mkdir(parents=True, exist_ok=True)
    async with Client(stdio_client(server)) as client:
        spec = (await client.call_tool("get_workload", {"workload_id": workload_id, "size": "full"})).content[0].text
        feedback = None
        for turn in range(1, turns + 1):
            source = propose(spec, feedback)
            (out / f"turn{turn}.py").write_text(source)
            verdict = (await _finished(client, "check_kernel", {"workload_id": workload_id, "source": source}))[
                "verdict"
            ]
            print(f"turn {turn}: {verdict['status']} {verdict.get('error_class') or ''}", file=sys.stderr)
            if verdict["status"] == "correct":
                profile = (await _finished(client, "profile_kernel", {"workload_id": workload_id, "source": source}))[
                    "profile"
                ]
                for target in profile["targets"]:
                    print(
                        f"  {target['target']}: {target.get('speedup_vs_xla')} x XLA ({target['kind']})",
                        file=sys.stderr,
                    )
                return profile
            feedback = verdict["message"] + "\n" + (verdict.get("hint") or "")
    return None


# ---- a demo proposer: a plain-XLA first try, then a Pallas RMSNorm once the verdict asks for one ----------

_JNP = """import jax
import jax.numpy as jnp


def workload(x, scale):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-5)).astype(x.dtype) * scale
"""

_PALLAS = """import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS = 64  # 64 x 8192 bf16 = 1 MiB a block: in and out double-buffered fit VMEM


def _rmsnorm(x_ref, scale_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    var = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = (x * jax.lax.rsqrt(var + 1e-5) * scale_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def workload(x, scale):
    rows = x.shape[0] * x.shape[1]
    flat = x.reshape(rows, x.shape[-1])
    out = pl.pallas_call(
        _rmsnorm, grid=(pl.cdiv(rows, ROWS),),
        in_specs=[
            pl.BlockSpec((ROWS, x.shape[-1]), lambda i: (i, 0)),
            pl.BlockSpec((1, x.shape[-1]), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((ROWS, x.shape[-1]), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(flat.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(flat, scale.reshape(1, -1))
    return out.reshape(x.shape)
"""


def demo_proposer(spec: str, feedback: str | None) -> str:
    """Stands in for a model: the jnp version first; the Pallas kernel once told that one is required."""
    return _PALLAS if feedback and "pallas" in feedback.lower() else _JNP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload_id", nargs="?", default="12p_RMSNorm")
    parser.add_argument("run_dir", nargs="?", type=Path, default=Path("runs/demo"))
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    profile = anyio.run(agent_loop, args.workload_id, demo_proposer, args.run_dir, args.turns)
    sys.exit(0 if profile else 1)


if __name__ == "__main__":
    main()
