"""How close is cost_model.vmem_bytes (VMEM from a kernel's block shapes, before any compile) to the compiler's own
figure? Side by side, per corpus kernel and generation, in one run.

The compiler's figure: each kernel is compiled (deviceless, full size) with a scoped VMEM limit far below its need;
Mosaic then refuses it with "Scoped allocation with size S and limit L exceeded ...". Below some allocations it
reports only the first one it could not place, so the limit is raised to just under the size reported and the
kernel compiled again until the size reported stops growing: that size is what the kernel needs (the limit under
which it no longer compiles). Failing compiles stop early (about a second each), so no full compile is needed.
Only the kernel being measured gets the small limit; every other kernel of the program gets the chip's whole VMEM.

Corpus: tests/kernels/good_*.py (the workload from each file's "# expect:" line) and solutions/*.py.
Prints estimate / compiler per kernel; goal: within 10% (0.91x-1.1x) on every kernel that compiles.
The compiler's figures are cached under ~/.cache/jaxbench-mcp/vmem (a kernel file's bytes, the workload, the
generation and the jax and libtpu versions): a rerun after a change to the estimate costs only the traces.
Usage: python benchmarks/vmem_fidelity.py [--targets v6e,v5e] [--only SUBSTRING] [--budget SECONDS] [--cached-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The compiler's figures, per kernel file, workload, generation, kernel and jax/libtpu version (the estimate is
# recomputed on every run).
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jaxbench-mcp" / "vmem"
_SIZE = re.compile(r"Scoped allocation with size ([\d.]+)(\w?) and limit")
_USED = re.compile(r"Used ([\d.]+)(\w?) of ([\d.]+)(\w?) vmem")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
# Which kernel (in lowering order) gets the small limit, and the limit; None: every kernel gets the chip's VMEM.
_PROBE: dict = {"index": None, "limit": 0, "capacity": 0, "seen": 0}


def _install_limit_hook() -> None:
    """Each pallas_call's backend config gets the probe's limit (the measured kernel) or the chip's whole VMEM."""
    from jax._src import tpu_custom_call

    original = tpu_custom_call.CustomCallBackendConfig.to_json

    def to_json(self, *args, **kwargs):
        index = _PROBE["seen"]
        _PROBE["seen"] += 1
        limit = _PROBE["limit"] if index == _PROBE["index"] else _PROBE["capacity"]
        return original(dataclasses.replace(self, vmem_limit_bytes=int(limit)), *args, **kwargs)

    tpu_custom_call.CustomCallBackendConfig.to_json = to_json


def _libtpu() -> str:
    from jaxbench_mcp.catalog import targets

    return targets.libtpu_version() or "none"


def corpus() -> list[tuple[str, Path]]:
    found = []
    for path in sorted((ROOT / "tests" / "kernels").glob("good_*.py")):
        head = re.search(r"workload=(\S+)", path.read_text().splitlines()[0])
        if head:
            found.append((head.group(1), path))
    found.extend((path.stem, path) for path in sorted((ROOT / "solutions").glob("*.py")))
    return found


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"corpus_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiler_need(fn, abstract, static, generation: str, index: int, capacity: int) -> tuple[int | None, str]:
    """The VMEM the compiler says kernel `index` needs (None and why when it cannot tell): the largest size it
    refused before the kernel compiled under a limit just above it."""
    import jax

    from jaxbench_mcp.catalog import targets

    limit, last = 64 * 2**10, None
    for _ in range(12):
        jax.clear_caches()  # a cached lowering would keep the previous limit
        _PROBE.update(index=index, limit=limit, capacity=capacity, seen=0)
        try:
            targets.lower_for_tpu(fn, abstract, static, generation).compile()
        except Exception as exc:  # noqa: BLE001 -- the refusal is the measurement
            text = str(exc)
            found = _SIZE.search(text) or _USED.search(text)
            if not found:
                return None, "compile failed: " + text.strip().splitlines()[-1][:120]
            need = float(found.group(1)) * _UNITS[found.group(2)]
            if need > capacity:
                return int(need), "over the chip's VMEM: does not compile"
            # Mosaic reports the first allocation it could not place: allow it (0.5% above its rounded size)
            # and look for the next one.
            last, limit = need, int(need * 1.005) + 1
            continue
        finally:
            _PROBE["index"] = None
        return (int(last), "ok") if last else (limit, "compiled under 64 KiB: an upper bound")
    return None, "the reported size kept growing"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="v6e,v5e")
    parser.add_argument("--only", default="", help="substring of the kernel file's path")
    parser.add_argument("--budget", type=float, default=1800.0, help="stop starting new kernels after this many s")
    parser.add_argument("--cached-only", action="store_true", help="only kernels whose compiler figure is cached")
    args = parser.parse_args()

    import jax

    from jaxbench_mcp.analysis import kernels as kernel_analysis
    from jaxbench_mcp.catalog import targets, workloads
    from jaxbench_mcp.perf import cost_model, estimator
    from jaxbench_mcp.sandbox import protocol

    _install_limit_hook()
    t_start = time.perf_counter()
    rows = []
    print(f"{'kernel file':<46} {'gen':<4} {'kernel':<28} {'estimate':>9} {'compiler':>9} {'ratio':>6}")
    for workload_id, path in corpus():
        if args.only not in str(path):
            continue
        if time.perf_counter() - t_start > args.budget:
            print(f"budget of {args.budget:.0f} s spent: stopped before {path.name}")
            break
        w = workloads.get_workload(workload_id)
        static = tuple(w.static_argnums)
        module = _load(path)
        values = estimator.workload_args(w, "full")
        abstract = [a if i in static else jax.ShapeDtypeStruct(a.shape, a.dtype) for i, a in enumerate(values)]
        for g in args.targets.split(","):
            capacity = targets.chip_facts(g).vmem_bytes
            with targets.chip_context(g, targets.cores_per_device(g)):
                closed = jax.make_jaxpr(module.workload, static_argnums=static)(*abstract)
            kernels, _ = kernel_analysis.describe_kernels(closed.jaxpr)
            pallas = [k for k in kernels if k["blocks"] or k["grid"]]
            for index, k in enumerate(pallas):
                estimate = cost_model.vmem_bytes(protocol.KernelInfo(**k))
                key = hashlib.sha256(
                    f"{path.read_bytes().hex()}|{workload_id}|{g}|{index}|{jax.__version__}|{_libtpu()}".encode()
                ).hexdigest()[:32]
                cached = CACHE / f"{key}.json"
                if cached.exists():
                    need, how = json.loads(cached.read_text())
                elif args.cached_only:
                    continue
                else:
                    need, how = compiler_need(module.workload, abstract, static, g, index, capacity)
                    CACHE.mkdir(parents=True, exist_ok=True)
                    cached.write_text(json.dumps([need, how]))
                name = f"{path.parent.name}/{path.name}"
                if need is None:
                    print(f"{name:<46} {g:<4} {k['name'][:28]:<28} {estimate / 2**20:>8.2f}M {'-':>9} {'-':>6}  {how}")
                    continue
                ratio = estimate / need
                rows.append((name, g, k["name"], ratio))
                mark = "" if 1 / 1.1 <= ratio <= 1.1 else "  OUTSIDE 10%"
                print(
                    f"{name:<46} {g:<4} {k['name'][:28]:<28} {estimate / 2**20:>8.2f}M {need / 2**20:>8.2f}M "
                    f"{ratio:>5.2f}x{mark}",
                    flush=True,
                )
    if rows:
        ratios = [r[3] for r in rows]
        within = sum(1 / 1.1 <= r <= 1.1 for r in ratios)
        print(
            f"\n{len(rows)} kernel x generation figures: {within} within 10% of the compiler "
            f"({100 * within / len(rows):.0f}%); estimate / compiler median {statistics.median(ratios):.2f}x, "
            f"min {min(ratios):.2f}x, max {max(ratios):.2f}x; {time.perf_counter() - t_start:.0f} s"
        )


if __name__ == "__main__":
    main()
