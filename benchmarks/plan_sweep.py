"""Benchmark: a full planning sweep — every catalog model x every catalog GPU x {auto, fp8} KV cache x
TP {1, 2, 4, 8} — the work behind comparing deployments across a fleet.

Run: python benchmarks/plan_sweep.py [--repeats 3] [--compare DIR] [--no-unknown]

Prints, for a known vLLM release and for an unknown one (whose safety band adds the spread over every
checked release), the median CPU time (time.process_time: the machines are shared) of

* per plan: ``plan_without_recommendation`` once per combination (figures and band, no limits);
* batched, plain: ``sweep_plans`` (planner/plan/sweep.py) — figures, band and make_plan's recommended
  limits of every combination, one PointPlan each;
* batched, numpy: ``sweep_table`` — the same figures as numpy columns;
* with ``--compare DIR``: the per-plan sweep of another checkout (e.g. a ``git archive`` of the commit
  before), and its numpy sweep where it has one, in a child process with that checkout on PYTHONPATH,
  timed the same way in the same run (repeats interleaved with this checkout's rows);

with plans per second and the ratio to a baseline measured in the same run: constructing the sweep's
ServingArgs (pydantic validation of the flags, the least any plan costs). Each timing starts warm (catalog
loaded, per-model memos filled by a first sweep). Figures go in docs/benchmarks.md. Not part of the test
suite (timings on shared machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from planner.errors import KvPlannerError
from planner.gpus.catalog import all_gpus
from planner.models.catalog import all_models
from planner.plan.build import plan_without_recommendation
from planner.vllm.args import ServingArgs
from planner.vllm.releases import LATEST_KNOWN

KV_DTYPES = ("auto", "fp8")
TP_SIZES = (1, 2, 4, 8)


def baseline() -> int:
    """Only the flags of every combination: what a sweep costs before any arithmetic."""
    count = 0
    for _model in all_models():
        for _gpu in all_gpus():
            for kv in KV_DTYPES:
                for tp in TP_SIZES:
                    ServingArgs(kv_cache_dtype=kv, tensor_parallel_size=tp)
                    count += 1
    return count


def per_plan(vllm_version: str | None) -> tuple[int, int, int]:
    """(plans, fitting, refused) planning each combination on its own (any checkout has this API)."""
    plans = fits = refused = 0
    for model in all_models():
        for gpu in all_gpus():
            for kv in KV_DTYPES:
                for tp in TP_SIZES:
                    try:
                        plan, _ = plan_without_recommendation(
                            model,
                            gpu,
                            ServingArgs(kv_cache_dtype=kv, tensor_parallel_size=tp),
                            vllm_version=vllm_version,
                        )
                    except KvPlannerError:
                        refused += 1  # e.g. TP does not divide the heads: vLLM refuses it too
                        continue
                    plans += 1
                    fits += plan.fits
    return plans, fits, refused


def _points() -> list[Any]:
    from planner.plan.sweep import grid

    return grid(list(all_models()), list(all_gpus()), tensor_parallel_sizes=TP_SIZES, kv_cache_dtypes=KV_DTYPES)


def batched_plain(vllm_version: str | None) -> tuple[int, int, int]:
    from planner.plan.sweep import sweep_plans

    points = sweep_plans(_points(), vllm_version=vllm_version)
    refused = sum(p.error is not None for p in points)
    return len(points) - refused, sum(p.fits for p in points), refused


def batched_numpy(vllm_version: str | None) -> tuple[int, int, int]:
    from planner.plan.sweep import sweep_table

    table = sweep_table(_points(), vllm_version=vllm_version)
    refused = sum(e is not None for e in table.errors)
    return len(table) - refused, int(table["fits"].sum()), refused


def cpu_median(run: Callable[[], tuple[int, int, int]], repeats: int) -> tuple[float, tuple[int, int, int]]:
    """(median CPU seconds of ``repeats`` runs, the first run's counts)."""
    times, results = [], []
    for _ in range(repeats):
        start = time.process_time()
        results.append(run())
        times.append(time.process_time() - start)
    return statistics.median(times), results[0]


def _child(version: str | None, repeats: int) -> None:
    per_plan(LATEST_KNOWN)  # warm caches as the parent does
    median, result = cpu_median(lambda: per_plan(version), repeats)
    rows = {"per plan": {"result": result, "cpu": median}}
    try:  # a checkout with the batched sweep: its numpy row too
        batched_numpy(LATEST_KNOWN)
        median, result = cpu_median(lambda: batched_numpy(version), repeats)
        rows["batched, numpy"] = {"result": result, "cpu": median}
    except ImportError:
        pass
    print(json.dumps(rows))


def _compare(directory: str, version: str | None, repeats: int) -> dict[str, tuple[tuple[int, int, int], float]]:
    """Row name -> (counts, median CPU) of the other checkout's rows, in a child process on its code."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(directory)}
    command = [sys.executable, os.path.abspath(__file__), "--child", version or "unknown", "--repeats", str(repeats)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    found = json.loads(out.strip().splitlines()[-1])
    return {name: (tuple(row["result"]), float(row["cpu"])) for name, row in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare", metavar="DIR", help="another checkout whose per-plan sweep to time too")
    parser.add_argument("--no-unknown", action="store_true", help="skip the unknown release (slow per plan)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(None if options.child == "unknown" else options.child, options.repeats)
        return
    load = os.getloadavg()[0]
    per_plan(LATEST_KNOWN)  # warm caches (catalog loading, per-model invariants) before timing
    base, _ = cpu_median(lambda: (baseline(), 0, 0), options.repeats)
    models, gpus = len(list(all_models())), len(list(all_gpus()))
    print(f"sweep: {models} models x {gpus} GPUs x 2 KV dtypes x 4 TP = {models * gpus * 8} combinations")
    print(f"load average at the start: {load:.1f}")
    print(f"baseline (ServingArgs of every combination): median CPU {base:.3f} s")
    releases: list[tuple[str, str | None]] = [(f"vLLM {LATEST_KNOWN}", LATEST_KNOWN)]
    if not options.no_unknown:
        releases.append(("release unknown", None))
    runs: list[tuple[str, Callable[[str | None], tuple[int, int, int]]]] = [
        ("per plan", per_plan),
        ("batched, plain", batched_plain),
        ("batched, numpy", batched_numpy),
    ]
    for label, version in releases:
        # Interleaved: repeat r of every row runs before repeat r + 1 of any, so a change in the machine's
        # load during the run reaches every row alike.
        rows: dict[str, tuple[list[float], tuple[int, int, int]]] = {}
        for _ in range(options.repeats):
            if options.compare:
                for name, (counts, cpu) in _compare(options.compare, version, 1).items():
                    rows.setdefault(f"{name}, {options.compare}", ([], counts))[0].append(cpu)
            for name, run in runs:
                cpu, counts = cpu_median(lambda run=run, version=version: run(version), 1)
                rows.setdefault(name, ([], counts))[0].append(cpu)
        for name, (times, (plans, fits, refused)) in rows.items():
            _report(f"{label}, {name}", plans, fits, refused, statistics.median(times), base, options.repeats)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def _report(label: str, plans: int, fits: int, refused: int, median: float, base: float, repeats: int) -> None:
    print(
        f"{label}: {plans} plans ({fits} fit, {plans - fits} do not), {refused} refused; median CPU "
        f"{median:.2f} s over {repeats} runs; {plans / median:,.0f} plans/s; {median / base:.1f}x the baseline"
    )


if __name__ == "__main__":
    main()
