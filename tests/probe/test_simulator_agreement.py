"""Issue 8, Must show: against the simulator, the probe's safe concurrency agrees with the planner's
risk-bounded answer; the simulator shows no preemptions at that concurrency and some above it.

The workload is decode-heavy enough that running out of blocks means preemption (vLLM admits a
request only when its prompt fits, so a prompt-heavy mix queues instead of preempting), and narrow
enough that the risk climbs steeply: with 186 blocks of 4 tokens the planner allows 7 sequences
(overflow risk ~5e-5); 8 overflow 11% of the time, 9 most of the time. The simulator runs at 0.3x
real time so a step (~4.5 ms) stays long next to the client's turnaround between two requests.
"""

from __future__ import annotations

import asyncio

import pytest

from planner.probe import ProbeConfig, ProbeReport, run_probe
from planner.sim import SimulatorSettings, start_simulator
from planner.workload import capacity_for_blocks, parse_workload, risk_bounded_concurrency

pytestmark = pytest.mark.slow

NUM_GPU_BLOCKS = 186
BLOCK_SIZE = 4
MAX_MODEL_LEN = 512
WORKLOAD = parse_workload(
    {
        "prompt_tokens": {"p10": 56, "p50": 64, "p90": 72},
        "output_tokens": {"p10": 36, "p50": 40, "p90": 44},
        "target_risk": 0.01,
    }
)


def _simulator() -> object:
    return start_simulator(
        SimulatorSettings(
            num_gpu_blocks=NUM_GPU_BLOCKS,
            block_size=BLOCK_SIZE,
            max_model_len=MAX_MODEL_LEN,
            enable_prefix_caching=False,
            time_scale=0.3,
            seed=7,
        )
    )


def _probe(url: str, **fields: object) -> ProbeReport:
    settings: dict[str, object] = {
        "endpoint": url,
        "workload": WORKLOAD,
        "sample_interval_s": 0.05,
        "max_duration_s": 120.0,
        "seed": 3,
    }
    settings.update(fields)
    return asyncio.run(run_probe(ProbeConfig(**settings)))  # type: ignore[arg-type]


def _preemptions(sim: object) -> int:
    return sum(int(e["preemptions"]) for e in sim.snapshot()["engines"])  # type: ignore[attr-defined]


def test_planner_answer_for_these_numbers() -> None:
    advice = risk_bounded_concurrency(
        capacity_for_blocks(NUM_GPU_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN), WORKLOAD, headroom=0.0
    )
    assert advice.max_num_seqs == 7
    assert advice.risk < 1e-3 and advice.risk_at(8) > 0.05 and advice.risk_at(9) > 0.5


def test_probe_safe_concurrency_agrees_with_the_planner() -> None:
    kv = capacity_for_blocks(NUM_GPU_BLOCKS, BLOCK_SIZE, MAX_MODEL_LEN)
    planned = risk_bounded_concurrency(kv, WORKLOAD, headroom=0.0).max_num_seqs
    with _simulator() as sim:  # type: ignore[attr-defined]
        report = _probe(sim.url, start_concurrency=2, max_concurrency=2 * planned)
    # The probe read the simulator's vllm:cache_config_info and made the same plan.
    assert report.num_gpu_blocks == NUM_GPU_BLOCKS and report.block_size == BLOCK_SIZE
    assert report.planner is not None and report.planner.max_num_seqs == planned
    # Agreement: at 7 the risk is 5e-5, at 8 it is 11% (a short window may or may not catch one), at 9
    # it is 84%.
    assert report.safe_concurrency in (planned, planned + 1), [(s.concurrency, s.preemptions) for s in report.steps]
    assert report.stop_reason == "limit-crossed"
    failed = [s for s in report.steps if not s.passed]
    assert failed and all(s.preemptions and s.preemptions > 0 for s in failed)


def test_simulator_shows_no_preemptions_at_the_planned_concurrency() -> None:
    planned = 7
    with _simulator() as sim:  # type: ignore[attr-defined]
        report = _probe(sim.url, levels=[planned], requests_per_step=6 * planned)
        assert _preemptions(sim) == 0  # the simulator's own counter, over warm-up and window
    assert report.steps[0].passed and report.steps[0].requests_completed >= 6 * planned
    assert report.steps[0].kv_cache_usage_max is not None and report.steps[0].kv_cache_usage_max > 0.8


def test_simulator_preempts_above_the_planned_concurrency() -> None:
    with _simulator() as sim:  # type: ignore[attr-defined]
        report = _probe(sim.url, levels=[9], requests_per_step=18)
        assert _preemptions(sim) > 0
    assert not report.steps[0].passed
