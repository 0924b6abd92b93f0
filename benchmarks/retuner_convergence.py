"""Where the retuner settles on the simulator, from above and from below, for two loads.

Issue 15's deployment (Llama-3.1-8B-Instruct on an L4, vLLM 0.19.0, 8K context, 2,178 KV blocks) with
64 users sending requests back to back: fixed 1,024 + 1,024-token requests, and lengths drawn
uniformly within +-75% of those means. For each load: the true no-preemption limit from a sweep
(10 simulated minutes per value), then the retuner in apply mode (every change a rollout: a new
simulated pod) from --max-num-seqs 64 and from 4, with the default settings except
``--retune-min-dwell 0``; and recommend mode at 64 (advice never applied). The engine runs on its
virtual clock, one observation per simulated 60 s: the figures are the controller's, not timings.

    python benchmarks/retuner_convergence.py [--spreads 0 0.75] [--windows 60]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.retuner import Retuner, RetunerSettings
from tests.retuner.closed_loop import ClosedLoop

KEY = ("ml", "llama")


def limit(spread: float) -> int:
    def clean(n: int) -> bool:
        loop = ClosedLoop(n, spread=spread, seed=n)
        loop.run(600.0, stop_on_preemption=True)
        return loop.preemptions == 0

    n = 1
    while clean(n + 1):
        n += 1
    return n


def converge(start: int, spread: float, windows: int) -> tuple[list[int], int, int]:
    """Apply mode: (configurations in order, preemptions on the way, preemptions in 10 min at the end)."""
    retuner = Retuner(RetunerSettings(mode="apply", min_dwell_s=0, namespaces=("ml",)))
    config, generation, path, preempted = start, 0, [start], 0
    loop = ClosedLoop(config, spread=spread, seed=1000 + generation)
    for window in range(windows):
        loop.run(60.0)
        decision = retuner.observe(loop.snapshot(f"llama-{generation}"), now=60.0 * window)[KEY]
        if decision.recommended is not None and decision.recommended != config:
            preempted += loop.preemptions
            config, generation = decision.recommended, generation + 1
            path.append(config)
            loop = ClosedLoop(config, spread=spread, seed=1000 + generation)
    preempted += loop.preemptions
    check = ClosedLoop(config, spread=spread, seed=7)
    check.run(600.0)
    return path, preempted, check.preemptions


def recommend(configured: int, spread: float, windows: int) -> list[int | None]:
    retuner = Retuner(RetunerSettings(mode="recommend"))
    loop = ClosedLoop(configured, spread=spread)
    advice = []
    for window in range(windows):
        loop.run(60.0)
        advice.append(retuner.observe(loop.snapshot("llama-0"), now=60.0 * window)[KEY].recommended)
    return advice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spreads", type=float, nargs="+", default=[0.0, 0.75])
    parser.add_argument("--windows", type=int, default=60, help="observations per run (simulated minutes)")
    args = parser.parse_args()
    print(
        "| lengths | limit (sweep) | start | path (apply mode) | final / limit | preemptions: on the way | at final |"
    )
    print("|---|---:|---:|---|---:|---:|---:|")
    for spread in args.spreads:
        label = "1,024 + 1,024" if not spread else f"1,024 + 1,024 +-{spread:.0%}"
        truth = limit(spread)
        for start in (64, 4):
            path, on_the_way, after = converge(start, spread, args.windows)
            ratio = path[-1] / truth
            steps = " -> ".join(map(str, path))
            print(f"| {label} | {truth} | {start} | {steps} | {ratio:.2f} | {on_the_way} | {after} |")
        advice = recommend(64, spread, 12)
        print(f"| {label} | | 64, recommend mode | advice per observation: {advice} | | | |")


if __name__ == "__main__":
    main()
