"""The probe's plot: KV-cache usage, preemptions and latency against concurrency (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlannerInputError
from planner.probe.report import ProbeReport

SUFFIXES = (".png", ".svg")


def plot_report(report: ProbeReport, path: str | Path) -> Path:
    """Write a three-panel figure to ``path`` (``.png`` or ``.svg``) and return the path."""
    target = Path(path)
    if target.suffix.lower() not in SUFFIXES:
        raise PlannerInputError(f"--plot {target}: the file must end in .png or .svg")
    # Lazy: matplotlib takes a second to import and only --plot needs it.
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot is a file, also on headless servers
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    # SVG keeps its labels as text (searchable, smaller) rather than glyph outlines.
    matplotlib.rcParams["svg.fonttype"] = "none"

    steps = sorted(report.steps, key=lambda s: s.concurrency)
    xs = [s.concurrency for s in steps]
    fig, (ax_kv, ax_pre, ax_lat) = plt.subplots(3, 1, figsize=(8, 9), sharex=True, constrained_layout=True)
    fig.suptitle(f"kv-planner probe: {report.model}")

    def pct(values: list[float | None]) -> list[float]:
        return [v * 100 if v is not None else float("nan") for v in values]

    kv_max = pct([s.kv_cache_usage_max for s in steps])
    kv_mean = pct([s.kv_cache_usage_mean for s in steps])
    ax_kv.plot(xs, kv_max, "o-", label="max")
    ax_kv.plot(xs, kv_mean, "s--", label="mean")
    ax_kv.set_ylabel("KV-cache usage (%)")
    ax_kv.set_ylim(0, 105)

    preempt = [s.preemptions if s.preemptions is not None else 0.0 for s in steps]
    colors = ["tab:green" if s.passed else "tab:red" for s in steps]
    ax_pre.bar(xs, preempt, color=colors, width=0.6)
    ax_pre.set_ylabel("preemptions per step")
    # Counts: never below zero (all-zero bars would centre the axis on 0), whole numbers on both axes.
    ax_pre.set_ylim(bottom=0, top=max(1.0, *preempt) * 1.1)
    ax_pre.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_lat.xaxis.set_major_locator(MaxNLocator(integer=True))

    def ms(values: list[float | None]) -> list[float]:
        return [v * 1000 if v is not None else float("nan") for v in values]

    ax_lat.plot(xs, ms([s.ttft_p95_s for s in steps]), "o-", label="TTFT p95")
    ax_lat.plot(xs, ms([s.ttft_p50_s for s in steps]), "o:", label="TTFT p50")
    ax_lat.plot(xs, ms([s.itl_p95_s for s in steps]), "s-", label="ITL p95")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_yscale("log")
    ax_lat.set_xlabel("concurrent requests")

    for axis in (ax_kv, ax_pre, ax_lat):
        if report.safe_concurrency is not None:
            axis.axvline(
                report.safe_concurrency,
                color="tab:green",
                linestyle="-",
                alpha=0.6,
                label=f"probe: safe {report.safe_concurrency}",
            )
        if report.planner is not None:
            axis.axvline(
                report.planner.max_num_seqs,
                color="tab:purple",
                linestyle="--",
                alpha=0.6,
                label=f"planner: {report.planner.max_num_seqs}",
            )
        axis.grid(alpha=0.3)
    ax_kv.legend(loc="lower right", fontsize="small")
    ax_lat.legend(loc="upper left", fontsize="small")
    target.parent.mkdir(parents=True, exist_ok=True)
    # A fixed metadata date keeps the SVG byte-stable between runs of the same data.
    metadata = {"Date": None} if target.suffix.lower() == ".svg" else {}
    fig.savefig(target, dpi=110, metadata=metadata)
    plt.close(fig)
    return target
