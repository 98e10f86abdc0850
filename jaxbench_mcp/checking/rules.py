"""The rules judged on the trusted side from what the worker's analyses report (analysis/coverage): the same
program at every size, and Pallas kernels that do the workload's dominant work. Plain data in, plain data out."""

from __future__ import annotations


def first_difference(a: list[str], b: list[str], labels=("small size", "full size")) -> dict | None:
    """Where two outlines (program_structure) first differ: None when equal, else
    {"position": i, "a": token or None (ended), "b": ..., "a_context": [...], "b_context": [...],
     "text": one line naming both sides}. The contexts hold up to 2 tokens before and 3 from i."""
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if not _same_step(x, y)), min(len(a), len(b)))
    if i == len(a) == len(b):
        return None

    def at(seq):
        return seq[i] if i < len(seq) else None

    def around(seq):
        return list(seq[max(0, i - 2) : i + 3])

    def said(seq):
        return f"`{seq[i]}`" if i < len(seq) else "the end of the program"

    text = (
        f"the programs differ at step {i}: the {labels[0]} trace has {said(a)} where the {labels[1]} trace "
        f"has {said(b)} ({len(a)} vs {len(b)} steps in all)"
    )
    return {"position": i, "a": at(a), "b": at(b), "a_context": around(a), "b_context": around(b), "text": text}


def _constant(token: str) -> tuple[bool, str]:
    """(derives from shapes, value) of an outline's constant token: analysis/coverage writes "const~VALUE" for a
    constant that derives from shapes, "const=VALUE" for one that does not."""
    return token[5] == "~", token[6:]


def _same_step(a: str, b: str) -> bool:
    """Two outline tokens stand for the same step: equal; constants of one value, or both derived from shapes;
    kernel bodies with the same arithmetic and control flow whose constants differ only where shapes give them."""
    if a == b:
        return True
    if a.startswith("const") and b.startswith("const"):
        (a_derived, a_value), (b_derived, b_value) = _constant(a), _constant(b)
        return a_value == b_value or a_derived and b_derived
    if a.startswith("body:") and b.startswith("body:"):
        a_parts, b_parts = a[5:].split("|"), b[5:].split("|")
        if a_parts[:2] != b_parts[:2]:
            return False
        a_constants = {_constant(t) for t in a_parts[2].split(",") if t}
        b_constants = {_constant(t) for t in b_parts[2].split(",") if t}
        values = {v for _, v in a_constants} ^ {v for _, v in b_constants}
        return all(derived for derived, v in a_constants | b_constants if v in values)
    return False


# ---- the Pallas kernels must do the work -------------------------------------------------------

# The kernels must do at least this share of the program's dominant work (its FLOPs where the workload is
# compute-bound, its HBM bytes where it is memory-bound). Not a half: an expert attention kernel may leave a
# workload's projections to XLA (3p's MLA reference does 42% of the FLOPs in Pallas), while the slivers seen in
# gamed candidates are 1-3%.
DOMINANT_SHARE = 0.25
# A workload with at least this many FLOPs per byte of its inputs and outputs is compute-bound: GEMMs, convolutions,
# attention, MoE and SSM scans sit in the hundreds or more; norms and elementwise chains near 1-10.
COMPUTE_BOUND_INTENSITY = 32.0
# Work outside the kernels counts as substantial from this share of the workload's own dominant work: below it,
# the kernels do all that is left (an algebraic fold may remove most of a workload's FLOPs).
SUBSTANTIAL_OUTSIDE = 0.10


def work_share(kernels: dict, outside: dict | None) -> dict:
    """The kernels' share of the program's FLOPs and bytes: {"kernel_flops", "kernel_bytes",
    "outside_flops", "outside_bytes", "flops_share", "bytes_share", "exact"}; a share is None when the
    outside work is unknown or the program does no work of that kind at all."""
    of = outside["flops"] if outside else None
    ob = outside["bytes"] if outside else None

    def share(inside, rest):
        if rest is None or inside + rest <= 0:
            return None
        return inside / (inside + rest)

    return {
        "kernel_flops": kernels["flops"],
        "kernel_bytes": kernels["bytes"],
        "outside_flops": of,
        "outside_bytes": ob,
        "flops_share": share(kernels["flops"], of),
        "bytes_share": share(kernels["bytes"], ob),
        "exact": bool(kernels.get("exact")) and outside is not None,
    }


def judge_work_share(share: dict, workload_flops: float | None = None, workload_bytes: float | None = None) -> dict:
    """Whether the Pallas kernels do the workload's dominant work: {"error_class": None |
    "pallas_not_doing_the_work", "reason": str}.

    The dominant work is the FLOPs of a compute-bound workload (COMPUTE_BOUND_INTENSITY FLOPs per byte or more:
    GEMM, convolution, attention, MoE, SSM families) and the HBM bytes of a memory-bound one (norms, elementwise
    chains), whose kernels may instead do its FLOPs. Unless the work outside the kernels is small (under
    SUBSTANTIAL_OUTSIDE of the workload's dominant work), the kernels must do at least DOMINANT_SHARE (a quarter)
    of the program's dominant work. Outside work that cannot be counted fails: an unknown is never a pass.
    """
    intensity = workload_flops / workload_bytes if workload_flops and workload_bytes else None
    dominant = "flops" if intensity is None or intensity >= COMPUTE_BOUND_INTENSITY else "bytes"
    kind = f"compute-bound ({intensity:,.0f} FLOPs per byte)" if intensity else "compute-bound"
    if dominant == "bytes":
        kind = f"memory-bound ({intensity:,.1f} FLOPs per byte)"
    outside, kernel_share = (
        (share["outside_flops"], share["flops_share"])
        if dominant == "flops"
        else (share["outside_bytes"], share["bytes_share"])
    )
    if outside is None:
        return {
            "error_class": "pallas_not_doing_the_work",
            "reason": "the work outside the Pallas kernels cannot be counted (a while loop with unknown trips around "
            "the work), so whether the kernels do the workload's work cannot be told; keep the work in the kernels",
        }
    fs = share["flops_share"] if share["flops_share"] is not None else 0.0
    bs = share["bytes_share"] if share["bytes_share"] is not None else 0.0
    said = f"the Pallas kernels do {fs:.2%} of the program's FLOPs and move {bs:.2%} of its bytes"
    scale = workload_flops if dominant == "flops" else workload_bytes
    if scale and outside < SUBSTANTIAL_OUTSIDE * scale or not scale and outside <= 0:
        return {"error_class": None, "reason": said + "; the work outside them is small"}
    # A memory-bound workload's kernels may also do its arithmetic instead of its bytes: a paged decode kernel
    # skips the pages no sequence reaches (6p's expert moves 20% of the bytes and does all the FLOPs).
    if dominant == "bytes" and (share["flops_share"] or 0.0) >= DOMINANT_SHARE:
        return {"error_class": None, "reason": said}
    if kernel_share is None or kernel_share < DOMINANT_SHARE:
        what = "FLOPs" if dominant == "flops" else "HBM bytes"
        return {
            "error_class": "pallas_not_doing_the_work",
            "reason": said + f"; this workload is {kind}, so the kernels must do at least {DOMINANT_SHARE:.0%} of "
            f"its {what}: XLA does the rest outside them",
        }
    return {"error_class": None, "reason": said}
