"""Write the measured tables of docs/accuracy.md from a startup-record file.

Run: python scripts/accuracy_report.py > /tmp/tables.md   (the shipped data; or give a JSONL file)
The narrative in docs/accuracy.md is written by hand around these tables; rerun after any change to the
memory model and paste the output between the markers there.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from planner.calibration.dataset import dataset_records, load_record_file
from planner.calibration.fit import fit_report
from planner.calibration.records import StartupRecord
from planner.calibration.validate import (
    RecordResult,
    ValidationReport,
    resolve_record_model,
    serving_args,
    summarize,
    validate_records,
)
from planner.gpus.catalog import lookup_gpu
from planner.memory.coefficients import GiB
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.margin import TermBounds, default_margin
from planner.plan.recommend import round_context
from planner.vllm.releases import resolve_release


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.2f}%"


def main(path: str | None) -> None:
    loaded = dataset_records() if path is None else load_record_file(Path(path))
    records = [r for r in loaded if isinstance(r, StartupRecord)]
    report = validate_records(records, lookup_model=lookup_model, lookup_gpu=lookup_gpu)
    by_id = {r.id: r for r in records}
    print(
        "| id | model | GPU | vLLM | TP/PP | logged blocks | predicted | logged tokens | predicted | exact |"
        " budget error | full error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in report.records:
        rec = by_id[r.id]
        layout = r.layout
        print(
            f"| {r.id} | {r.model} | {rec.gpu} | {rec.vllm_version} | {rec.tensor_parallel_size}/"
            f"{rec.pipeline_parallel_size} | {layout.logged_gpu_blocks if layout and layout.logged_gpu_blocks else '–'}"
            f" | {layout.num_gpu_blocks if layout else '–'} | "
            f"{layout.logged_tokens if layout and layout.logged_tokens else '–'} | "
            f"{layout.tokens if layout else '–'} | "
            f"{'yes' if layout and layout.exact else ('no' if layout and layout.exact is False else '–')} | "
            f"{pct(r.budget.error if r.budget else None)} | {pct(r.full.error if r.full else None)} |"
        )
    s = report.summary
    print()
    print(f"Summary: {s.records} records, {s.supported} supported, layout exact {s.layout_exact}/{s.layout_scored}.")
    print()
    print("| KV memory error | records | median | p90 | max | median abs | max abs |")
    print("|---|---|---|---|---|---|---|")
    for name, stats in (("budget (logged weights)", s.budget), ("full (GPU alone)", s.full)):
        print(
            f"| {name} | {stats.count} | {pct(stats.median)} | {pct(stats.p90)} | {pct(stats.max)} | "
            f"{pct(stats.abs_median)} | {pct(stats.abs_max)} |"
        )
    print()
    print("Per-term error of the full prediction (predicted minus logged, GiB):")
    print()
    print("| id | weights | non-torch | activation peak | CUDA graphs |")
    print("|---|---|---|---|---|")
    for r in report.records:
        if r.full is None:
            continue
        t = r.full.term_errors_gib
        terms = ("weights", "non_torch", "activation_peak", "cuda_graph")
        cells = [f"{t[k]:+.3f}" if k in t else "–" for k in terms]
        print(f"| {r.id} | " + " | ".join(cells) + " |")
    fit = fit_report(records, lookup_model=lookup_model, lookup_gpu=lookup_gpu)
    print()
    print("Leave one model out (refit without the model, predict its KV memory from the GPU alone):")
    print()
    print("| model | records | in-sample median | held-out median | held-out max abs |")
    print("|---|---|---|---|---|")
    for row in fit.leave_one_model_out:
        print(
            f"| {row.model} | {row.records} | {pct(row.in_sample_median_error)} | "
            f"{pct(row.held_out_median_error)} | {pct(row.held_out_max_abs_error)} |"
        )
    print()
    print("Leave one release out (refit without the release's records, predict them from the GPU alone):")
    print()
    print("| release row | records | in-sample median | held-out median | held-out max abs |")
    print("|---|---|---|---|---|")
    for rel in fit.leave_one_release_out:
        print(
            f"| {rel.release} | {rel.records} | {pct(rel.in_sample_median_error)} | "
            f"{pct(rel.held_out_median_error)} | {pct(rel.held_out_max_abs_error)} |"
        )
    per_release(records, report)
    margin_tables(records)


def per_release(records: list[StartupRecord], report: ValidationReport) -> None:
    """Full-prediction error and per-term misses (predicted minus logged, GiB), by release row."""
    rows: dict[str, list[RecordResult]] = {}
    by_id = {r.id: r for r in records}
    for result in report.records:
        rows.setdefault(resolve_release(by_id[result.id].vllm_version)[1].since, []).append(result)
    print()
    print("Full prediction (GPU alone) by release row:")
    print()
    print("| release row | records | GPUs | median | p90 | max (over-prediction) | max abs |")
    print("|---|---|---|---|---|---|---|")
    for release, results in sorted(rows.items()):
        stats = summarize(results).full
        gpus = ", ".join(sorted({by_id[r.id].gpu or "?" for r in results}))
        print(
            f"| {release} | {len(results)} | {gpus} | {pct(stats.median)} | {pct(stats.p90)} | "
            f"{pct(stats.max)} | {pct(stats.abs_max)} |"
        )
    print()
    print("Per-term miss by release row (predicted minus logged, GiB: median / most negative / most positive):")
    print()
    terms = ("weights", "non_torch", "activation_peak", "cuda_graph")
    print("| release row | " + " | ".join(terms) + " |")
    print("|---|" + "---|" * len(terms))
    for release, results in sorted(rows.items()):
        cells = []
        for term in terms:
            values = [r.full.term_errors_gib[term] for r in results if r.full and term in r.full.term_errors_gib]
            cells.append(
                f"{statistics.median(values):+.3f} / {min(values):+.3f} / {max(values):+.3f}" if values else "–"
            )
        print(f"| {release} | " + " | ".join(cells) + " |")


def margin_tables(records: list[StartupRecord]) -> None:
    """The measured bounds, and what keeping to the band's low end costs on every record."""
    margin = default_margin()
    print()
    print("Measured bounds of the margin (largest miss per term; relative unless in GiB):")
    print()
    fields = list(TermBounds.model_fields)
    print("| release row | records | direction | " + " | ".join(fields) + " |")
    print("|---|---|---|" + "---|" * len(fields))
    for release, bounds in sorted(margin.by_release.items()):
        for direction, values in (("short", bounds.short), ("over", bounds.over)):
            cells = []
            for name in fields:
                value = getattr(values, name)
                if value is None:
                    cells.append("–")
                elif name.endswith("_bytes"):
                    cells.append(f"{value / GiB:.2f} GiB")
                else:
                    cells.append(f"{value:.2%}")
            print(f"| {release} | {bounds.records} | {direction} | " + " | ".join(cells) + " |")
    print()
    print(
        "What the margin costs (own settings; blocks the recommendation may count on vs the predicted blocks, "
        "and the longest context recommended when asked for more than fits):"
    )
    print()
    print("| id | KV band (GiB) | blocks | at low end | cost | longest context: nominal | with margin |")
    print("|---|---|---|---|---|---|---|")
    costs = []
    for record in records:
        if record.kv_cache_tokens is None or (record.nodes or 1) > 1:
            continue
        spec, online = resolve_record_model(record, lookup_model)
        gpu = lookup_gpu(record.gpu or "")
        args = serving_args(record, online_quantization=online)
        plan = make_plan(spec, gpu, args, vllm_version=record.vllm_version, headroom=0.0, with_alternatives=False)
        band = plan.margin
        assert band is not None and band.num_gpu_blocks_low is not None
        cost = 1 - band.num_gpu_blocks_low / plan.kv_cache.num_gpu_blocks
        costs.append(cost)
        longest_args = args.model_copy(update={"max_model_len": 4 * record.kv_cache_tokens})
        longest = make_plan(
            spec, gpu, longest_args, vllm_version=record.vllm_version, headroom=0.0, with_alternatives=False
        )
        nominal = round_context(longest.kv_cache.estimated_max_model_len, longest.kv_cache.block_size)
        safe = longest.recommendation.max_model_len if longest.recommendation else 0
        print(
            f"| {record.id} | {band.describe()} | {plan.kv_cache.num_gpu_blocks} | {band.num_gpu_blocks_low} | "
            f"{cost:.2%} | {nominal} | {safe} |"
        )
    print()
    print(
        f"Cost over {len(costs)} records: median {statistics.median(costs):.2%}, max {max(costs):.2%} "
        "of the predicted blocks."
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
