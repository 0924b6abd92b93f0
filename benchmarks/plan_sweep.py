"""Benchmark: a full planning sweep — every catalog model x every catalog GPU x {auto, fp8} KV cache x
TP {1, 2, 4, 8} — the work behind `planner recommend --gpu` for a whole fleet.

Run: python benchmarks/plan_sweep.py [--repeats 5]
Prints, for a known vLLM release and for an unknown one (whose safety band adds the spread over every
checked release), the median CPU time of the sweep (time.process_time: the machines are shared), plans
per second, and the ratio to a baseline measured in the same run: constructing the sweep's ServingArgs
(pydantic validation of the flags, the least any plan costs). Figures go in docs/benchmarks.md. Not part
of the test suite (timings on shared machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

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


def sweep(vllm_version: str | None) -> tuple[int, int, int]:
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


def cpu_median(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    sweep(LATEST_KNOWN)  # warm caches (catalog loading, per-model invariants) before timing
    base = cpu_median(baseline, options.repeats)
    models, gpus = len(list(all_models())), len(list(all_gpus()))
    print(f"sweep: {models} models x {gpus} GPUs x 2 KV dtypes x 4 TP = {models * gpus * 8} combinations")
    print(f"baseline (ServingArgs of every combination): median CPU {base:.3f} s")
    for label, version in ((f"vLLM {LATEST_KNOWN} (release known)", LATEST_KNOWN), ("release unknown", None)):
        result = sweep(version)
        median = cpu_median(lambda version=version: sweep(version), options.repeats)
        plans, fits, refused = result
        print(
            f"{label}: {plans} plans ({fits} fit, {plans - fits} do not), {refused} refused; median CPU "
            f"{median:.2f} s over {options.repeats} runs; {plans / median:,.0f} plans/s; "
            f"{median / base:.1f}x the baseline"
        )


if __name__ == "__main__":
    main()
