"""program_size: the size of a traced program once its nested calls are inlined (a compile bomb is told apart
from a big program before XLA sees it)."""

import functools
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxbench_mcp.analysis import program_size

KERNELS = Path(__file__).parent / "kernels"


def _doubling_chain(depth: int):
    """f_0(x) = x * 1.5 + 1; f_{i+1}(x) = f_i(f_i(x)): one jitted function per level, 2^depth calls of f_0."""

    def f0(x):
        return x * 1.5 + 1.0

    f = jax.jit(f0)
    for _ in range(depth):
        f = jax.jit(functools.partial(lambda g, x: g(g(x)), f))
    return f


def test_a_doubling_chain_counts_every_path_and_fast():
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    small = jax.make_jaxpr(_doubling_chain(3))(x)
    # Per level: 2 calls of the level below; f_0 is a mul and an add; each level's jaxpr holds its 2 call equations.
    assert program_size.inlined_equations(small) == 1 + (2 + 2 * (2 + 2 * (2 + 2 * 2)))
    bomb = jax.make_jaxpr(_doubling_chain(40))(x)
    assert len(bomb.jaxpr.eqns) == 1  # the trace is tiny
    started = time.perf_counter()
    n = program_size.inlined_equations(bomb)
    assert time.perf_counter() - started < 1.0
    assert n > 2**41  # 2^40 copies of f_0's two equations, plus the calls
    message = program_size.program_too_large(bomb)
    assert message is not None and message.startswith("program too large") and f"{n:,}" in message


def test_branches_count_each_and_loop_bodies_once():
    def with_cond(p, x):
        return jax.lax.cond(p, lambda v: v + 1.0, lambda v: jnp.sin(v) * 2.0, x)

    def with_scan(x):
        return jax.lax.scan(lambda c, _: (c * 2.0 + 1.0, None), x, None, length=1000)[0]

    x = jax.ShapeDtypeStruct((8,), jnp.float32)
    cond_jaxpr = jax.make_jaxpr(with_cond)(True, x)
    branches = next(e for e in cond_jaxpr.jaxpr.eqns if e.primitive.name == "cond").params["branches"]
    in_branches = sum(len(b.jaxpr.eqns) for b in branches)
    assert program_size.inlined_equations(cond_jaxpr) == len(cond_jaxpr.jaxpr.eqns) + in_branches
    scan_jaxpr = jax.make_jaxpr(with_scan)(x)
    body = next(e for e in scan_jaxpr.jaxpr.eqns if e.primitive.name == "scan").params["jaxpr"]
    assert program_size.inlined_equations(scan_jaxpr) == len(scan_jaxpr.jaxpr.eqns) + len(body.jaxpr.eqns)


def test_a_pallas_kernels_body_is_counted_and_honest_kernels_are_far_below_the_limit():
    import importlib.util

    from jaxbench_mcp.catalog import workloads

    for name, workload in (("good_gemm_tiled", "8p_GEMM"), ("good_flash_attention", "1p_Flash_Attention")):
        spec = importlib.util.spec_from_file_location(name, KERNELS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        w = workloads.get_workload(workload)
        closed = jax.make_jaxpr(module.workload)(*workloads.abstract_inputs(w, "full"))
        n = program_size.inlined_equations(closed)
        kernel = next(e for e in closed.jaxpr.eqns if e.primitive.name == "pallas_call")
        assert n >= len(closed.jaxpr.eqns) + len(kernel.params["jaxpr"].eqns)
        assert n < program_size.DEFAULT_LIMIT // 100
        assert program_size.program_too_large(closed) is None
