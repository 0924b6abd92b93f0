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

Not run by the test suite.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from planner.native_threads import use_one_native_thread

use_one_native_thread()  # as the webhook's workers run (one BLAS thread), before numpy loads

from planner.workload import capacity_for_blocks, parse_workload  # noqa: E402
from planner.workload.concurrency import risk_bounded_limit  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="searches per case (the median is reported)")
    args = parser.parse_args()
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
