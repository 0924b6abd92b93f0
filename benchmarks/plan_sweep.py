"""Benchmark: a full planning sweep — every catalog model x every catalog GPU x {auto, fp8} KV cache x
TP {1, 2, 4, 8} — the work behind `planner recommend --gpu` for a whole fleet.

Run: python benchmarks/plan_sweep.py [--repeats 5]
Prints the median wall time of the sweep, plans per second, and how many plans fit / were refused.
Figures go in docs/benchmarks.md. Not part of the test suite (timings on shared machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import time

from planner.errors import KvPlannerError
from planner.gpus.catalog import all_gpus
from planner.models.catalog import all_models
from planner.plan.build import plan_without_recommendation
from planner.vllm.args import ServingArgs


def sweep() -> tuple[int, int, int]:
    plans = fits = refused = 0
    for model in all_models():
        for gpu in all_gpus():
            for kv in ("auto", "fp8"):
                for tp in (1, 2, 4, 8):
                    try:
                        plan, _ = plan_without_recommendation(
                            model, gpu, ServingArgs(kv_cache_dtype=kv, tensor_parallel_size=tp)
                        )
                    except KvPlannerError:
                        refused += 1  # e.g. TP does not divide the heads: vLLM refuses it too
                        continue
                    plans += 1
                    fits += plan.fits
    return plans, fits, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    sweep()  # warm caches (catalog loading) before timing
    times = []
    result = (0, 0, 0)
    for _ in range(options.repeats):
        start = time.perf_counter()
        result = sweep()
        times.append(time.perf_counter() - start)
    plans, fits, refused = result
    median = statistics.median(times)
    models, gpus = len(list(all_models())), len(list(all_gpus()))
    print(f"sweep: {models} models x {gpus} GPUs x 2 KV dtypes x 4 TP = {models * gpus * 8} combinations")
    print(f"plans computed: {plans} ({fits} fit, {plans - fits} do not fit), refused by vLLM rules: {refused}")
    print(
        f"median wall time over {options.repeats} runs: {median:.2f} s "
        f"(min {min(times):.2f} s, max {max(times):.2f} s); {plans / median:,.0f} plans/s"
    )


if __name__ == "__main__":
    main()
