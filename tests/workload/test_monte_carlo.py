"""The risk computation against an independent Monte Carlo of the same model (issue 8, Must show).

The simulation shares nothing with the exact computation but the inputs (the length distributions
and ``KvCacheReport.blocks_for_sequence``): it lays requests back to back on a timeline (one
request per decode step, each running ``min(O, M - P)`` steps and holding ``P + t`` tokens at its
``t``-th), picks ``n`` independent random moments for ``n`` running slots, adds up the blocks the
requests hold there, and counts how often the total exceeds the capacity. No length-biasing formula,
no convolution, no truncation trick: the timeline does that by itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.plan.models import KvCacheReport, KvGroupReport
from planner.workload import capacity_for_blocks, parse_workload, risk_bounded_concurrency
from planner.workload.profile import WorkloadProfile

BATCHES = 16
SAMPLES_PER_BATCH = 2_500
POOL = 120_000


def monte_carlo_overflow(
    kv: KvCacheReport,
    profile: WorkloadProfile,
    *,
    max_model_len: int,
    capacity: int,
    ns: list[int],
    seed: int,
) -> dict[int, tuple[float, float]]:
    """``{n: (estimated P(overflow), standard error)}`` from independent batches.

    Each batch lays out its own pool of requests, so the standard error (from the spread of the batch
    means) includes the noise of the finite pool, not only the binomial noise of the draws.
    """
    rng = np.random.default_rng(seed)
    m = max_model_len
    table = np.array([kv.blocks_for_sequence(t) for t in range(m + 1)])
    per_batch: dict[int, list[float]] = {n: [] for n in ns}
    for _ in range(BATCHES):
        prompts = profile.prompt_distribution.sample(rng, POOL, cap=m)
        outputs = profile.output_distribution.sample(rng, POOL, cap=m)
        admitted = prompts < m  # vLLM refuses a prompt of max_model_len tokens or more
        prompts, outputs = prompts[admitted], outputs[admitted]
        held_prompt = np.ceil((1.0 - profile.prefix_cache_hit_rate) * prompts).astype(np.int64)
        steps = np.minimum(outputs, m - held_prompt)  # the output stops at the context limit
        ends = np.cumsum(steps)
        for n in ns:
            moments = rng.integers(0, ends[-1], size=(SAMPLES_PER_BATCH, n))
            flat = moments.ravel()
            order = np.argsort(flat)  # sorted queries make searchsorted cache-friendly (10x faster)
            index = np.empty_like(flat)
            index[order] = np.searchsorted(ends, flat[order], side="right")
            index = index.reshape(moments.shape)
            t = moments - (ends[index] - steps[index]) + 1  # 1-based decode step of that request
            blocks = table[held_prompt[index] + t].sum(axis=1)
            per_batch[n].append(float(np.mean(blocks > capacity)))
    return {n: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(BATCHES))) for n, v in per_batch.items()}


def assert_agrees(exact: float, simulated: tuple[float, float], label: str) -> None:
    mean, stderr = simulated
    # 5 standard errors, with a floor for estimates near 0 or 1 whose batch spread is ~0: a correct model
    # passes with near certainty, a wrong length bias or truncation moves these by far more.
    floor = math.sqrt(max(exact * (1 - exact), 2e-4) / (BATCHES * SAMPLES_PER_BATCH))
    assert abs(exact - mean) <= 5 * max(stderr, floor), f"{label}: exact {exact:.5f} vs Monte Carlo {mean:.5f}"


CHAT = parse_workload(
    {
        "prompt_tokens": {"p50": 600, "p90": 1800, "p99": 4000},
        "output_tokens": {"p50": 150, "p90": 500, "p99": 1200},
        "target_risk": 0.01,
    }
)


def _neighbourhood(advice_n: int) -> list[int]:
    return sorted({max(1, advice_n - 6), advice_n, advice_n + 3, advice_n + 8})


@pytest.mark.slow
def test_full_attention_chat_mix_matches_monte_carlo() -> None:
    kv = capacity_for_blocks(num_gpu_blocks=2200, block_size=16, max_model_len=8192)
    advice = risk_bounded_concurrency(kv, CHAT, headroom=0.1)
    assert 5 < advice.max_num_seqs < 200
    ns = _neighbourhood(advice.max_num_seqs)
    simulated = monte_carlo_overflow(kv, CHAT, max_model_len=8192, capacity=advice.capacity_blocks, ns=ns, seed=1)
    for n in ns:
        assert_agrees(advice.risk_at(n), simulated[n], f"n={n}")
    # The curve really crosses the target around the answer (the comparison above is not all zeros).
    assert advice.risk_at(advice.max_num_seqs + 8) > 2 * advice.target_risk


@pytest.mark.slow
def test_hybrid_groups_prefix_credit_and_histogram_match_monte_carlo() -> None:
    # A Gemma-like layout: full layers, sliding-window layers (window 1024 + in-flight tokens) and a
    # Mamba-like group of constant blocks, sharing one pool.
    kv = KvCacheReport(
        bytes_per_token=0,
        state_bytes_per_sequence=0,
        kv_cache_dtype="auto",
        block_size=16,
        bytes_per_block=0,
        num_gpu_blocks=3000,
        tokens=48_000,
        max_concurrency=11.7,
        max_model_len=4096,
        blocks_per_request=256,
        estimated_max_model_len=48_000,
        groups=[
            KvGroupReport(kind="full", num_layers=4, page_bytes=0, block_size=16),
            KvGroupReport(
                kind="sliding_window", num_layers=20, page_bytes=0, block_size=16, window=1024, tokens_cap=1024 + 511
            ),
            KvGroupReport(kind="mamba", num_layers=2, page_bytes=0, block_size=16, blocks_per_sequence_const=2),
        ],
    )
    profile = parse_workload(
        {
            "prompt_tokens": {"histogram": [[256, 300], [1024, 500], [2048, 150], [4096, 40], ["+Inf", 10]]},
            "output_tokens": {"p50": 200, "p99": 900, "max": 2000},
            "prefix_cache_hit_rate": 0.3,
            "target_risk": 0.02,
        }
    )
    advice = risk_bounded_concurrency(kv, profile, headroom=0.05)
    ns = _neighbourhood(advice.max_num_seqs)
    simulated = monte_carlo_overflow(kv, profile, max_model_len=4096, capacity=advice.capacity_blocks, ns=ns, seed=2)
    for n in ns:
        assert_agrees(advice.risk_at(n), simulated[n], f"n={n}")
    assert advice.risk <= 0.02 < advice.risk_at(advice.max_num_seqs + 1)


@pytest.mark.slow
def test_unit_counting_on_large_pools_stays_close_and_conservative() -> None:
    # 120k blocks: counted in units of 2 blocks (mean-preserving split). Long requests hold ~1000+ blocks,
    # so the added variance is small; the answer may only err towards safety.
    kv = capacity_for_blocks(num_gpu_blocks=120_001, block_size=16, max_model_len=65_536)
    profile = parse_workload(
        {
            "prompt_tokens": {"p50": 16_000, "p90": 30_000, "p99": 50_000},
            "output_tokens": {"p50": 800, "p99": 6000},
            "target_risk": 0.05,
        }
    )
    advice = risk_bounded_concurrency(kv, profile, headroom=0.0)
    assert advice.block_unit > 1
    ns = [advice.max_num_seqs - 6, advice.max_num_seqs, advice.max_num_seqs + 6]
    simulated = monte_carlo_overflow(kv, profile, max_model_len=65_536, capacity=advice.capacity_blocks, ns=ns, seed=3)
    for n in ns:
        exact = advice.risk_at(n)
        mean, stderr = simulated[n]
        assert exact >= mean - 5 * stderr, f"n={n}: unit counting understated the risk ({exact} < {mean})"
        assert abs(exact - mean) <= 0.01 + 5 * stderr, f"n={n}: {exact} vs {mean}"


@pytest.mark.parametrize("headroom", [0.0, 0.2])
def test_requests_at_the_context_limit_give_vllms_worst_case(headroom: float) -> None:
    # Prompt M - 1 and one output token: every running request holds blocks_for_sequence(M) blocks, so the
    # risk-bounded answer must equal the worst case exactly, whatever the target.
    kv = capacity_for_blocks(num_gpu_blocks=1000, block_size=16, max_model_len=2048)
    profile = parse_workload({"prompt_tokens": 2047, "output_tokens": 1, "target_risk": 0.3})
    advice = risk_bounded_concurrency(kv, profile, headroom=headroom)
    assert advice.max_num_seqs == advice.worst_case_max_num_seqs == math.floor(999 * (1 - headroom)) // 128
    assert advice.risk == pytest.approx(0.0, abs=1e-12)
    assert advice.risk_at(advice.max_num_seqs + 1) == pytest.approx(1.0, abs=1e-12)
