"""Pictures of campaigns: report.html (self-contained: charts embedded as PNG, no network) and the comparison of
two runs, drawn with matplotlib (its non-interactive Agg backend, so it works on a server without a screen)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from jaxbench_mcp.campaigns import campaign

_OK, _FAIL, _REF = "#2e7d32", "#c62828", "#555555"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def speedup_chart(results: list[campaign.AttemptResult], summary: campaign.Summary) -> bytes:
    """Best attempt per workload: speedup vs XLA (log scale); failed workloads marked at 1x in red."""
    plt = _pyplot()
    best = sorted(
        campaign.best_attempts(results).values(), key=lambda r: (r.correctness.correct, r.speedup_vs_baseline or 0)
    )
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, ax = plt.subplots(figsize=(8, 0.32 * len(best) + 1.4))
    speeds = [r.speedup_vs_baseline for r in best if r.correctness.correct and r.speedup_vs_baseline]
    low, high = min([0.25, *[s / 1.5 for s in speeds]]), max([4.0, *[s * 1.5 for s in speeds]])
    for row, r in enumerate(best):
        if r.correctness.correct and r.speedup_vs_baseline:
            # Bars grow from 1x: right of the line is faster than XLA, left is slower.
            ax.barh(row, r.speedup_vs_baseline - 1, left=1, color=_OK if r.speedup_vs_baseline >= 1 else "#f9a825")
            ax.text(
                r.speedup_vs_baseline * (1.04 if r.speedup_vs_baseline >= 1 else 0.96),
                row,
                f"{r.speedup_vs_baseline:.2f}x",
                va="center",
                ha="left" if r.speedup_vs_baseline >= 1 else "right",
                fontsize=7,
            )
        else:
            ax.plot(1, row, "x", color=_FAIL)
            ax.text(1.05, row, r.status, va="center", fontsize=7, color=_FAIL)
    ax.axvline(1, color=_REF, lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if low <= t <= high]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
    ax.set_yticks(range(len(best)), [r.workload_id for r in best], fontsize=7)
    ax.set_xlabel(f"speedup vs XLA ({summary.speed_kind})")
    ax.set_title(f"Best attempt per workload: {summary.workloads_attempted} workloads, target {summary.target}")
    return _png(fig)


def status_chart(summary: campaign.Summary) -> bytes:
    plt = _pyplot()
    names = list(summary.status_counts)
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.bar(names, [summary.status_counts[n] for n in names], color=[_OK if n == "correct" else _FAIL for n in names])
    ax.set_ylabel("attempts")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.set_title("Verdicts")
    return _png(fig)


def fast_p_chart(results: list[campaign.AttemptResult], summary: campaign.Summary) -> bytes:
    """fast_p vs XLA as a curve over p, over attempted workloads."""
    plt = _pyplot()
    best = list(campaign.best_attempts(results).values())
    speeds = [r.speedup_vs_baseline or 0.0 for r in best if r.correctness.correct]
    top = max([3.0, *speeds]) * 1.05
    ps = [top * i / 200 for i in range(201)]
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.plot(ps, [sum(s > p for s in speeds) / max(1, len(best)) for p in ps], color=_OK)
    for p in campaign.FAST_P:
        ax.axvline(p, color=_REF, lw=0.5, ls=":")
    ax.set_xlabel("p (speedup vs XLA must exceed p)")
    ax.set_ylabel("fast_p")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"fast_p over {len(best)} attempted workloads ({summary.speed_kind})")
    return _png(fig)


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


# The page's style sheet and the attempts table's header row, kept out of the page template for its line length.
_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:2em;max-width:1100px} table{border-collapse:collapse;font-size:12px}\n"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left} pre{background:#f6f6f6;padding:1em} "
    "img{max-width:100%}"
)
_ATTEMPT_COLUMNS = (
    "attempt",
    "workload",
    "status",
    "error class",
    "max diff",
    "peak fraction (share of roofline)",
    "vs XLA",
    "vs expert",
    "message",
)


def write_report(run_dir: Path | str) -> Path:
    """RUN_DIR/report.html (charts inline) and RUN_DIR/speedup.png, from results.json and summary.json."""
    run_dir = Path(run_dir)
    results, summary = campaign.load(run_dir)
    main = speedup_chart(results, summary)
    (run_dir / campaign.CHART_FILE).write_bytes(main)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                r.attempt,
                r.workload_id,
                r.status,
                r.error_class or "",
                "" if r.correctness.max_diff is None else f"{r.correctness.max_diff:.3g}",
                f"{r.roofline_pct:.0f}%" if r.roofline_pct else "n/a",
                campaign._x(r.speedup_vs_baseline),
                campaign._x(r.speedup_vs_pallas),
                r.message[:160],
            )
        )
        + "</tr>"
        for r in results
    )
    header = "".join(f"<th>{name}</th>" for name in _ATTEMPT_COLUMNS)
    conventions = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in summary.conventions.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>jaxbench campaign: {html.escape(summary.run_dir)}</title>
<style>{_STYLE}</style>
</head><body>
<h1>Campaign {html.escape(summary.run_dir)}</h1>
<pre>{html.escape(summary.summary())}</pre>
{_img(main, "speedup vs XLA per workload")}
{_img(status_chart(summary), "verdict counts")}
{_img(fast_p_chart(results, summary), "fast_p curve")}
<h2>Attempts</h2>
<table><tr>{header}</tr>
{rows}</table>
<h2>Conventions</h2><ul>{conventions}</ul>
</body></html>
"""
    path = run_dir / campaign.REPORT_FILE
    path.write_text(page)
    return path


def compare(run_a: Path | str, run_b: Path | str, chart: Path | str | None = None) -> str:
    """Per-workload difference of two runs' best attempts, as text; with `chart`, a PNG of it there."""
    results_a, summary_a = campaign.load(run_a)
    results_b, summary_b = campaign.load(run_b)
    if summary_a.speed_kind != summary_b.speed_kind and "none" not in summary_a.speed_kind + summary_b.speed_kind:
        raise campaign.CampaignError(
            f"the runs' speeds are of different kinds ({summary_a.speed_kind} vs {summary_b.speed_kind}); "
            "compare runs made on the same tier"
        )
    best_a, best_b = campaign.best_attempts(results_a), campaign.best_attempts(results_b)
    lines = [f"{'workload':<48} {'A':>18} {'B':>18} {'B/A':>7}"]
    points = []
    for w in sorted(set(best_a) | set(best_b), key=lambda w: (len(w), w)):
        a, b = best_a.get(w), best_b.get(w)

        def cell(r):
            return "-" if r is None else (campaign._x(r.speedup_vs_baseline) if r.correctness.correct else r.status)

        ratio = ""
        if (
            a
            and b
            and a.correctness.correct
            and b.correctness.correct
            and a.speedup_vs_baseline
            and b.speedup_vs_baseline
        ):
            ratio = f"{b.speedup_vs_baseline / a.speedup_vs_baseline:.2f}"
            points.append((w, a.speedup_vs_baseline, b.speedup_vs_baseline))
        lines.append(f"{w[:48]:<48} {cell(a):>18} {cell(b):>18} {ratio:>7}")
    lines.append(
        f"correct: A {summary_a.correct_rate_attempted:.1%} of {summary_a.workloads_attempted}, "
        f"B {summary_b.correct_rate_attempted:.1%} of {summary_b.workloads_attempted}; geomean vs XLA over solved: "
        f"A {campaign._x(summary_a.geomean_speedup_vs_xla_solved)}, "
        f"B {campaign._x(summary_b.geomean_speedup_vs_xla_solved)}"
    )
    lines += condition_effect(summary_a, summary_b)
    if chart is not None:
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(5, 5))
        if points:
            ax.scatter([p[1] for p in points], [p[2] for p in points], color=_OK)
            for name, x, y in points:
                ax.annotate(name.split("_")[0], (x, y), fontsize=7)
            top = max(max(p[1], p[2]) for p in points) * 1.3
            ax.plot([0.01, top], [0.01, top], color=_REF, lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"A: {Path(summary_a.run_dir).name} speedup vs XLA")
        ax.set_ylabel(f"B: {Path(summary_b.run_dir).name} speedup vs XLA")
        ax.set_title("Workloads solved in both runs (above the line: B faster)")
        Path(chart).write_bytes(_png(fig))
    return "\n".join(lines)


def condition_effect(a: campaign.Summary, b: campaign.Summary) -> list[str]:
    """The per-sample metrics of two runs side by side; for a `docs` and a `none` run, the docs' effect
    (docs minus none, in percentage points)."""

    def pp(x: float) -> str:
        return f"{100 * x:.1f}%"

    rows = [("per-sample correctness", a.per_sample_correctness, b.per_sample_correctness)]
    rows.append(("solved samples", a.solved_sample_rate, b.solved_sample_rate))
    rows += [(f"pass@{k}", a.pass_at_k[k], b.pass_at_k[k]) for k in a.pass_at_k if k in b.pass_at_k]
    rows.append(("correct (best of run)", a.correct_rate_attempted, b.correct_rate_attempted))
    lines = [
        f"conditions: A {a.context}"
        + (f" ({a.model})" if a.model else "")
        + f", B {b.context}"
        + (f" ({b.model})" if b.model else "")
    ]
    lines += [f"{name}: A {pp(x)}, B {pp(y)} (B - A {100 * (y - x):+.1f} pp)" for name, x, y in rows]
    if {a.context, b.context} == {"docs", "none"}:
        docs, none = (a, b) if a.context == "docs" else (b, a)
        lines.append(
            "docs effect (docs - none): "
            + ", ".join(f"{name} {100 * ((x, y)[docs is b] - (x, y)[none is b]):+.1f} pp" for name, x, y in rows)
        )
    stale = sorted(
        w for w in set(a.workload_sha256) & set(b.workload_sha256) if a.workload_sha256[w] != b.workload_sha256[w]
    )
    if stale:
        lines.append(f"warning: the workload modules differ between the runs for {', '.join(stale)}")
    for key in ("jaxbench_commit", "jax", "libtpu", "jaxbench_mcp"):
        if a.provenance.get(key) and b.provenance.get(key) and a.provenance[key] != b.provenance[key]:
            lines.append(f"warning: {key} differs: A {a.provenance[key]}, B {b.provenance[key]}")
    return lines
