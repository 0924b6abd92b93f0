"""Write the measured tables of docs/accuracy.md from a startup-record file.

Run: python scripts/accuracy_report.py > /tmp/tables.md   (the shipped data; or give a JSONL file)
The narrative in docs/accuracy.md is written by hand around these tables; rerun after any change to the
memory model and paste the output between the markers there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from planner.calibration.dataset import dataset_records, load_record_file
from planner.calibration.fit import fit_report
from planner.calibration.records import StartupRecord
from planner.calibration.validate import validate_records
from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model


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


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
