"""Does every profile return an estimate, and how long does one take? Over the solutions and big-tile variants.

For each solutions/<workload>.py (and, with --big-tiles, a variant of it whose module-level block sizes, the
integer constants named B*, BLOCK*, TILE* or T* but TOP_*, are set to 4x their value) a warm checker (one spare
worker ready; the server keeps two per slot, one of them for traces) runs what `profile_kernel` runs: the check,
then the profile for the target (CPU host with libtpu: static estimates). The first profile of a workload also
computes its reference (bundle calibration, XLA's cost analysis of the baseline) and its expert's estimate, which
the server then caches; --warm-refs runs those first (and the expert's estimate), untimed, so that the times
printed are those of an agent's later profiles ("warm").

Printed per kernel: seconds for check + profile, whether the profile holds an estimate for the target (else its
reason), then the median and the worst time and the count of profiles without an estimate.
Goal (issue 21): every profile returns an estimate, each under 60 s warm on a quiet 2-core host.
Measured since a check stops its runs once the verdict cannot be 'correct' (v6e, --warm-refs --big-tiles, jax
0.12.0.1, libtpu 0.0.50.1, 2 cores at load average 1.8; 17 min in all): 57 profiles, every one with an estimate,
median 8.5 s, worst 33.5 s (10p's check), 0 over 60 s; the two overflowing variants (7p's, 8p's) refused in 3.1 and
1.7 s. Since the profile reuses its check's compile (load 1.7): median 13.6 s, worst 38.5 s; refusals in 6.8 and
5.0 s. Before, when the profile compiled again (load 1.5):
57 profiles of correct kernels, every one with an estimate, median 17.3 s, worst 44.5 s (10p: a 30.6 s check); the two
variants that overflow VMEM (7p's, 8p's) refused by their check in 5.5 and 4.8 s. 7p took 84.6 s before the
worker announced its compiles (its expert's v6e compile ran on the trace stage's budget, timed out, and was
never cached): 20.8 s since.
Usage: python benchmarks/profile_latency.py [--target v6e] [--only SUBSTRING] [--big-tiles] [--warm-refs]
       [--budget SECONDS]
"""

from __future__ import annotations

import argparse
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

# TOP_K is no block size: 10p's "4x blocks" variant routed every token to 8 experts, wrong values by design.
_BLOCK_CONSTANT = re.compile(r"^((?!TOP_)(?:B|BLOCK|TILE|T)[A-Z0-9_]*)\s*=\s*(\d+)\s*(#.*)?$", re.M)


def big_tiles(source: str, factor: int = 4) -> str | None:
    """The source with its module-level block sizes multiplied by `factor` (None when it has none)."""
    found = _BLOCK_CONSTANT.findall(source)
    if not found:
        return None
    from jaxbench_mcp.perf import tuning

    return tuning.with_params(source, {name: int(value) * factor for name, value, _ in found})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="v6e")
    parser.add_argument("--only", default="", help="comma-separated substrings of the workload ids")
    parser.add_argument("--big-tiles", action="store_true", help="also profile 4x block-size variants")
    parser.add_argument("--warm-refs", action="store_true", help="compute references and experts first, untimed")
    parser.add_argument("--budget", type=float, default=3600.0, help="stop starting new profiles after this")
    args = parser.parse_args()

    from jaxbench_mcp.catalog import expert_refs
    from jaxbench_mcp.checking.checker import Checker
    from jaxbench_mcp.perf import cost_model, profiling
    from jaxbench_mcp.requests import ProfileRequest

    checker = Checker(spares=1, slots=1)
    profiler = profiling.Profiler(checker)
    kernels = []
    for path in sorted((ROOT / "solutions").glob("*.py")):
        if not any(part in path.stem for part in args.only.split(",")):
            continue
        source = path.read_text()
        kernels.append((path.stem, path.stem, source))
        if args.big_tiles and (big := big_tiles(source)) is not None:
            kernels.append((path.stem, f"{path.stem} (4x blocks)", big))
    started = time.monotonic()
    times, missing = [], []
    print(f"{'kernel':<62} {'check s':>8} {'profile s':>9} {'total s':>8}  estimate")
    for workload_id, label, source in kernels:
        if time.monotonic() - started > args.budget:
            print(f"budget of {args.budget:.0f} s spent: stopped before {label}")
            break
        if args.warm_refs:
            refs = profiler.reference_estimates(workload_id, [args.target])
            expert = expert_refs.expert_source(workload_id)
            if expert and refs[args.target].get("calibration_bundles"):
                spb = {
                    args.target: cost_model.seconds_per_bundle(args.target, refs[args.target]["calibration_bundles"])
                }
                profiler.expert_estimates(workload_id, expert, [args.target], spb)
        request = ProfileRequest.of(workload_id, source, [args.target])
        t0 = time.monotonic()
        verdict, _ = checker.check(request.check_request())
        t1 = time.monotonic()
        result = profiler.profile(request, verdict)
        t2 = time.monotonic()
        entry = result.targets[0] if result.targets else None
        if verdict.status != "correct":
            said = f"not profiled: check says {verdict.status} ({verdict.error_class})"
        elif entry is None or entry.candidate_us is None:
            said = f"NO ESTIMATE: {entry.error if entry else 'no target'}"
        else:
            said = f"~{entry.candidate_us:,.1f} us = {entry.roofline_pct:.0f}% of roofline"
        if verdict.status == "correct":
            times.append(t2 - t0)
            if entry is None or entry.candidate_us is None:
                missing.append(label)
        print(f"{label[:62]:<62} {t1 - t0:>8.1f} {t2 - t1:>9.1f} {t2 - t0:>8.1f}  {said[:160]}", flush=True)
    checker.close()
    if times:
        print(
            f"\n{len(times)} profiles of correct kernels: median {statistics.median(times):.1f} s, worst "
            f"{max(times):.1f} s, {sum(t > 60 for t in times)} over 60 s; {len(missing)} without an estimate"
            + (f" ({', '.join(missing)})" if missing else "")
            + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )


if __name__ == "__main__":
    main()
