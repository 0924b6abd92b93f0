"""The planner's overflow risk next to the simulator's engine, concurrency by concurrency.

Drives the simulator's engine (planner.sim.Engine: vLLM V1's scheduler and block pool) directly, in a
closed loop of ``c`` requests drawn from a workload (no HTTP, so no client turnaround), and records per
engine step the blocks in use, the requests running and waiting, and the preemptions. Prints, for each
``c``: the planner's risk P(c running sequences need more blocks than exist), the share of steps in
which a request had to wait, the preemptions per 1,000 steps, and the mean blocks per running request
(planner vs engine). Figures are in docs/workload.md.

    python3 benchmarks/workload_risk_vs_simulator.py [--steps 6000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from planner.sim.engine import Engine, EngineConfig
from planner.sim.scheduler import Request
from planner.workload import capacity_for_blocks, parse_workload, risk_bounded_concurrency

WORKLOAD = {
    "prompt_tokens": {"p10": 24, "p50": 40, "p90": 64},
    "output_tokens": {"p10": 40, "p50": 80, "p90": 120, "max": 160},
}
NUM_GPU_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN = 120, 8, 512


def run(concurrency: int, steps: int, seed: int) -> dict[str, float]:
    profile = parse_workload(WORKLOAD)
    rng = np.random.default_rng(seed)
    engine = Engine(
        EngineConfig(
            num_gpu_blocks=NUM_GPU_BLOCKS,
            block_size=BLOCK_SIZE,
            max_model_len=MAX_MODEL_LEN,
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            enable_prefix_caching=False,
        )
    )
    live: set[Request] = set()
    used, running, waiting = [], [], []
    count = 0
    for step in range(steps):
        while len(live) < concurrency:
            prompt = int(profile.prompt_distribution.sample(rng, 1, cap=MAX_MODEL_LEN)[0])
            output = int(profile.output_distribution.sample(rng, 1, cap=MAX_MODEL_LEN)[0])
            request = Request(
                f"r{count}", rng.integers(1000, 30000, size=prompt).tolist(), max_tokens=output, ignore_eos=True
            )
            count += 1
            engine.add_request(request)
            live.add(request)
        result = engine.step()
        for event in result.events:
            if event.finish_reason:
                live.discard(event.request)
        if step >= steps // 10:  # skip the start-up transient
            used.append(NUM_GPU_BLOCKS - 1 - engine.kv.pool.num_free_blocks())
            running.append(result.stats.running)
            waiting.append(result.stats.waiting > 0)
    return {
        "waiting_share": float(np.mean(waiting)),
        "preemptions_per_1000_steps": 1000 * engine.total_preemptions / steps,
        "blocks_per_running": float(np.mean(used) / np.mean(running)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    advice = risk_bounded_concurrency(
        capacity_for_blocks(NUM_GPU_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN), parse_workload(WORKLOAD), headroom=0.0
    )
    print(
        f"planner: max_num_seqs={advice.max_num_seqs}, mean blocks per running request "
        f"{advice.mean_blocks_per_sequence:.2f}"
    )
    print(
        "| concurrency | planner risk | steps with a request waiting | preemptions / 1000 steps "
        "| blocks per running request (engine) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for concurrency in range(advice.max_num_seqs - 1, advice.max_num_seqs + 6):
        row = run(concurrency, args.steps, args.seed)
        print(
            f"| {concurrency} | {advice.risk_at(concurrency):.3f} | {row['waiting_share']:.3f} "
            f"| {row['preemptions_per_1000_steps']:.1f} | {row['blocks_per_running']:.2f} |"
        )


if __name__ == "__main__":
    main()
