#!/usr/bin/env python3
"""Time the risk-bounded ``--max-num-seqs`` search (what a profiled admission review pays) on fixed cases.

Each case is a KV pool (blocks of 16 tokens), a context and a request-length profile, from a small pool
and a short context to a 131,072-token context on a pool counted in units of blocks. For each case the
script runs :func:`planner.workload.concurrency.risk_bounded_limit` (the figures a plan records; the
decisions' backend asks for the same without the average request's risk) ``--repeats`` times and prints
the median CPU time, the answer and its risk, and a SHA-256 over every case's answer (``max_num_seqs``; the
risks are printed to 10 digits, as a change to the arithmetic may move their last bits), so two trees can
be compared on the same machine::

    python3 benchmarks/risk_search.py                          # this checkout
    PYTHONPATH=/path/to/other/worktree python3 benchmarks/risk_search.py   # another commit, same cases

``--corpus N`` times the search alone, both ways, on the searches the webhook makes: it answers the first
``N`` profiled never-seen reviews of ``webhook_decisions.py --only cold --profiles all --once``, keeps
every search's input (the per-sequence distribution, the pool, the target, the largest batch considered),
then runs each search ``--repeats`` times as decisions run it (``SpectralSums.largest_within``, then
``TruncatedSums.largest_within`` when it declines) and with the exact one alone, interleaved, and prints
the median CPU per search of each, their ratio, how many answers differ (must be 0), the largest
difference between the two risks, and how often the spectral search declined::

    python3 benchmarks/risk_search.py --corpus 300

Not run by the test suite.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from planner.native_threads import use_one_native_thread

use_one_native_thread()  # as the webhook's workers run (one BLAS thread), before numpy loads

import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from planner.workload import capacity_for_blocks, concurrency, parse_workload  # noqa: E402
from planner.workload.concurrency import risk_bounded_limit  # noqa: E402
from planner.workload.convolution import TruncatedSums  # noqa: E402
from planner.workload.spectral import SpectralSums  # noqa: E402

CHAT = {
    "prompt_tokens": {"p50": 800, "p90": 3000, "p99": 12000},
    "output_tokens": {"p50": 200, "p90": 800, "p99": 2000},
}
# the profile of the webhook benchmarks' reviews
LATENCY = {"prompt_tokens": {"p50": 1500, "p99": 6000}, "output_tokens": {"p50": 300, "p99": 1200}}
LONG = {"prompt_tokens": {"p50": 6000, "p99": 30000}, "output_tokens": 500, "target_risk": 1e-6}
SHORT = {"prompt_tokens": 100, "output_tokens": {"p50": 20, "p99": 80}, "target_risk": 0.05}

# (name, GPU blocks, max_model_len, profile)
CASES = [
    ("L4-like pool, 1K context", 5_230, 1_024, LATENCY),
    ("A100-like pool, 4K context", 25_000, 4_096, LATENCY),
    ("H100-like pool, 5.7K context", 58_000, 5_760, LATENCY),
    ("30K blocks, 32K context, chat", 30_000, 32_768, CHAT),
    ("12K blocks, 2K context, short requests", 12_000, 2_048, SHORT),
    ("1.5K blocks, 32K context, long prompts", 1_543, 32_768, LONG),
    ("90K blocks, 131K context, long prompts (units of 2 blocks)", 90_000, 131_072, LONG),
    ("200K blocks, 8K context, chat (units of 3 blocks)", 200_000, 8_192, CHAT),
]


def webhook_searches(count: int) -> list[tuple[Any, int, float, int]]:
    """(distribution, capacity in units, target, largest batch) of every search the decisions of the first
    ``count`` profiled never-seen reviews of the webhook benchmark make."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from webhook_decisions import Server, corpus

    searches: list[tuple[Any, int, float, int]] = []
    original = concurrency._largest_within

    def keep(unit_pmf: Any, capacity: int, target: float, n_max: int, engine: TruncatedSums) -> tuple[int, float]:
        searches.append((unit_pmf.copy(), capacity, target, n_max))
        return original(unit_pmf, capacity, target, n_max, engine)

    server = Server()  # (first: its warm-up plans a profiled review of its own, not one of the N)
    concurrency._largest_within = keep  # type: ignore[assignment]
    try:
        for _, body in corpus("cold", count, "all"):
            server.answer(body, "default", "mutate", False)
    finally:
        concurrency._largest_within = original  # type: ignore[assignment]
    return searches


def compare_on_corpus(count: int, repeats: int) -> None:
    searches = webhook_searches(count)
    spectral_ms: list[float] = []
    exact_ms: list[float] = []
    differ = declined = 0
    largest_gap = 0.0
    for _ in range(repeats):
        spectral_total = exact_total = 0.0
        for pmf, capacity, target, n_max in searches:
            started = time.process_time()
            fast = SpectralSums(pmf, capacity).largest_within(target, n_max)
            middle = time.process_time()
            exact = TruncatedSums(pmf, capacity).largest_within(target, n_max)
            exact_time = time.process_time() - middle
            # what a decision pays: the spectral search, and the exact one after it when it declines
            spectral_total += middle - started + (exact_time if fast is None else 0.0)
            exact_total += exact_time
            if fast is None:
                declined += 1
            elif fast[0] != exact[0]:
                differ += 1
            else:
                largest_gap = max(largest_gap, abs(fast[1] - exact[1]))
        spectral_ms.append(spectral_total / len(searches) * 1000)
        exact_ms.append(exact_total / len(searches) * 1000)
    spectral, exact = statistics.median(spectral_ms), statistics.median(exact_ms)
    print(
        f"{len(searches)} searches from {count} profiled never-seen reviews, {repeats} rounds: CPU per search, "
        f"median of the rounds: as decisions run it (spectral, then exact when it declines) {spectral:.3f} ms, "
        f"exact alone {exact:.3f} ms ({spectral / exact:.2f}x); "
        f"answers that differ: {differ // repeats}; largest risk difference: {largest_gap:.2e}; "
        f"declined (the exact search answers): {declined // repeats}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="searches per case (the median is reported)")
    parser.add_argument("--corpus", type=int, metavar="N", help="the webhook's searches of N profiled reviews")
    args = parser.parse_args()
    if args.corpus:
        compare_on_corpus(args.corpus, args.repeats)
        return
    digest = hashlib.sha256()
    total = 0.0
    print("| case | CPU per search, median (ms) | max_num_seqs | risk |")
    print("|---|---:|---:|---:|")
    for name, blocks, context, profile_data in CASES:
        kv = capacity_for_blocks(num_gpu_blocks=blocks, block_size=16, max_model_len=context)
        profile = parse_workload(profile_data)
        times = []
        for _ in range(args.repeats):
            started = time.process_time()
            advice = risk_bounded_limit(kv, profile, headroom=0.1, with_average_risk=False)
            times.append((time.process_time() - started) * 1000)
        median = statistics.median(times)
        total += median
        digest.update(f"{name}|{advice.max_num_seqs}\n".encode())
        print(f"| {name} | {median:.2f} | {advice.max_num_seqs} | {advice.risk:.10g} |")
    print(f"\nsum of the medians: {total:.1f} ms; sha256 of the answers: {digest.hexdigest()}")


if __name__ == "__main__":
    main()
