"""Does skipping work earn its time in the static estimate? Pairs whose true order is known by construction.

Each pair is one of our kernels (solutions/) and the same kernel with its block skipping removed, estimated
side by side in this run at full size through the public `jaxbench_mcp.estimate`, on the arguments a profile
traces (estimator.workload_args: the workload's integer inputs concrete, the float data abstract):
  * 1p_Flash_Attention: the causal kernel visits only the (q block, kv block) pairs on or below the diagonal;
    the variant visits every pair (the masked ones compute a fully masked block).
  * 6p_Paged_Attention: the decode kernel neither fetches nor computes the KV blocks past each sequence's
    length; the variant does every block. The workload's own scenario is uniform (every length is the
    maximum, nothing to skip), so this pair uses lengths spread evenly from one page to the maximum.
  * 7p_Ragged_Paged_Attention: the ragged kernel skips the KV blocks past each work item's last visible
    key (and whole padding items); the variant does every block of every item.
The work ratio is counted here from the data (blocks the variant computes / blocks the kernel computes), not
from the estimator. Goal: the skipping kernel is estimated faster by at least half of that ratio, i.e.
estimate(no skip) / estimate(skip) - 1 >= (work ratio - 1) / 2.
The last column is the skipping kernel estimated with every input abstract, as profiles traced it before.
With --measure (a TPU host) each pair is timed instead, on the attached chip with perf/measuring (fresh float data
every run, the same integer inputs as the estimate), and the measured ratio printed beside the work ratio: what the
estimate's ratio should come near. Measured on one TPU v5e (2026-12-05, jax 0.10.2, median of 10 runs each):
  1p_Flash_Attention         work 1.60x  skip 10,505 us  no skip 16,873 us  measured 1.61x
  6p_Paged_Attention         work 1.78x  skip    950 us  no skip  1,538 us  measured 1.62x
  7p_Ragged_Paged_Attention  work 1.69x  skip  7,689 us  no skip 12,256 us  measured 1.59x
Usage: python benchmarks/skip_pairs.py [--target v6e] [--only IDS] [--measure]
"""

import argparse
import importlib.util
import math
import os
import sys
import tempfile
import time
from pathlib import Path

if "--measure" not in sys.argv:  # the estimates compile deviceless; the timed runs need the chip
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parent.parent


def load(source: str, name: str):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def replace_once(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"expected one {old!r} in the kernel source"
    return source.replace(old, new)


def flash_pair():
    source = (ROOT / "solutions/1p_Flash_Attention.py").read_text()
    no_skip = replace_once(source, "range(((qi + 1) * bq - 1) // bk + 1)", "range(seq // bk)")
    return source, no_skip


def needed_pair(path: str, old: str):
    source = (ROOT / path).read_text()
    # Every block is needed: the same code, its predicate a constant the compiler folds.
    return source, replace_once(source, old, "return jnp.asarray(block) >= 0")


def flash_work(w, args) -> float:
    S = args[0].shape[2]
    n = S // min(1024, max(128, S // 4))
    return n * n / (n * (n + 1) / 2)


def paged_args(w, args):
    import numpy as np

    kv_lens = np.asarray(args[3])
    spread = np.linspace(16, kv_lens.max(), len(kv_lens)).astype(kv_lens.dtype)
    args = list(args)
    args[3] = spread
    return args


def paged_work(module, args) -> float:
    import numpy as np

    kv_lens, page_indices, page_size = np.asarray(args[3]), np.asarray(args[4]), args[1].shape[1]
    pages_per_seq = page_indices.shape[1]
    ppb = max(1, min(module.TOKENS_PER_BLOCK // page_size, pages_per_seq // 2))
    while pages_per_seq % ppb:
        ppb -= 1
    blocks = pages_per_seq // ppb
    needed = sum(min(blocks, math.ceil(int(n) / (ppb * page_size))) for n in kv_lens)
    return len(kv_lens) * blocks / needed


def ragged_work(module, args) -> float:
    import jax
    import numpy as np

    queries, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs = args
    T, page_size, pages_per_seq = queries.shape[0], kv_pages.shape[1], page_indices.shape[1]
    bq = min(module.BQ, T)
    ppb = max(1, min(module.BK, pages_per_seq * page_size // 2) // page_size)
    while pages_per_seq % ppb:
        ppb -= 1
    with jax.default_device(jax.devices("cpu")[0]):
        meta = module._work_list(cu_q_lens, kv_lens, num_seqs, T, bq)
    kv_end = np.asarray(meta[4])
    blocks = pages_per_seq // ppb
    needed = sum(min(blocks, math.ceil(int(e) / (ppb * page_size))) for e in kv_end)
    return len(kv_end) * blocks / needed


def pairs():
    return [
        ("1p_Flash_Attention", flash_pair(), None, flash_work),
        (
            "6p_Paged_Attention",
            needed_pair("solutions/6p_Paged_Attention.py", "return block * block_tokens < length"),
            paged_args,
            paged_work,
        ),
        (
            "7p_Ragged_Paged_Attention",
            needed_pair("solutions/7p_Ragged_Paged_Attention.py", "return block * bk < kv_end"),
            None,
            ragged_work,
        ),
    ]


def measure(only: str) -> int:
    """Each pair timed on the attached TPU (perf/measuring: the profiler's device time, fresh float data per run),
    on the integer inputs the estimate uses."""
    sys.path.insert(0, str(ROOT))
    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.perf import measuring

    iterations = 10
    print(f"measured on {measuring.jax.devices()[0].device_kind}, jax {measuring.jax.__version__}, {iterations} runs")
    print(f"{'workload':28} {'work ratio':>10} {'skip us':>10} {'no-skip us':>11} {'measured ratio':>14}")
    for wid, (skip_src, no_skip_src), adjust, work in pairs():
        if only and wid not in only.split(","):
            continue
        w = workloads.get_workload(wid)

        def inputs_for(i, w=w, adjust=adjust):
            inputs = w.create_inputs("full", 7_000 + i)
            return tuple(adjust(w, inputs)) if adjust is not None else inputs

        skip_mod, no_skip_mod = load(skip_src, f"skip_{w.number}"), load(no_skip_src, f"noskip_{w.number}")
        ratio = work(skip_mod, inputs_for(0))
        times = [
            measuring.time_on_device(m.workload, w.static_argnums, inputs_for, iterations).median_us
            for m in (skip_mod, no_skip_mod)
        ]
        print(f"{wid:28} {ratio:10.2f} {times[0]:10,.0f} {times[1]:11,.0f} {times[1] / times[0]:14.2f}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="v6e")
    parser.add_argument("--only", default="", help="comma-separated workload ids")
    parser.add_argument("--measure", action="store_true", help="time the pairs on the attached TPU instead")
    args = parser.parse_args()
    if args.measure:
        return measure(args.only)

    from jaxbench_mcp.catalog import workloads
    from jaxbench_mcp.perf import estimator

    root = estimator._process_dump_root()  # before anything in this process loads libtpu
    only = {s for s in args.only.split(",") if s}
    print(f"target {args.target}: static estimates at full size, the same kernel with and without block skipping")
    print(
        f"{'workload':28} {'work ratio':>10} {'skip us':>10} {'no-skip us':>11} {'est ratio':>9} {'goal':>6}  met  "
        f"{'skip us, inputs abstract':>24}"
    )
    met_all = True
    for wid, (skip_src, no_skip_src), adjust, work in pairs():
        if only and wid not in only:
            continue
        w = workloads.get_workload(wid)
        call_args = estimator.workload_args(w, "full")
        if adjust is not None:
            call_args = adjust(w, call_args)
        skip_mod = load(skip_src, f"skip_{w.number}")
        no_skip_mod = load(no_skip_src, f"noskip_{w.number}")
        ratio = work(skip_mod, call_args)
        results = []
        for module in (skip_mod, no_skip_mod):
            t0 = time.perf_counter()
            est = estimator.estimate(module.workload, *call_args, target=args.target, static_argnums=w.static_argnums)
            results.append(est)
            print(f"  {wid} {module.__name__}: {time.perf_counter() - t0:.0f} s; flags: {est.flags}", file=sys.stderr)
        # What the estimate saw before the integer inputs were known (the skip's predicates on unknown data): the
        # same compiled program, traced on abstract inputs.
        abstract = [estimator._abstract(a) if hasattr(a, "shape") else a for a in call_args]
        compiled = estimator.compile_kernels(skip_mod.workload, call_args, w.static_argnums, args.target, root)
        blind = estimator.assemble(
            estimator.trace_kernels(skip_mod.workload, abstract, w.static_argnums, args.target),
            compiled,
            args.target,
            estimator.seconds_per_bundle(args.target, root),
        )
        skip_us, no_skip_us = results[0].total_us, results[1].total_us
        goal = 1 + (ratio - 1) / 2
        met = no_skip_us / skip_us >= goal
        met_all &= met
        print(
            f"{wid:28} {ratio:10.2f} {skip_us:10,.1f} {no_skip_us:11,.1f} {no_skip_us / skip_us:9.2f} {goal:6.2f}  "
            f"{'yes' if met else 'NO':3}  {blind.total_us:24,.1f}"
        )
    return 0 if met_all else 1


if __name__ == "__main__":
    sys.exit(main())
