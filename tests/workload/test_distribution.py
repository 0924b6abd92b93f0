"""Length distributions: the percentile fit, histograms, fixed lengths, sampling."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from planner.errors import WorkloadProfileError
from planner.workload import LengthDistribution

CAP = 131_072


def test_the_fit_passes_through_every_given_percentile() -> None:
    points = {"p50": 800, "p90": 3000, "p99": 12000, "p99.9": 30000}
    dist = LengthDistribution.from_percentiles(points)
    for key, value in points.items():
        level = float(key[1:]) / 100
        assert dist.cdf([value], cap=CAP)[0] == pytest.approx(level, abs=1e-9)
        assert dist.quantile(level, cap=CAP) == value


def test_a_log_normal_is_reproduced_exactly() -> None:
    mu, sigma = 6.2, 1.3
    normal = NormalDist()
    points = {f"p{q}": math.exp(mu + sigma * normal.inv_cdf(q / 100)) for q in (5, 50, 95)}
    dist = LengthDistribution.from_percentiles(points)
    xs = np.array([20.0, 150.0, 500.0, 2000.0, 9000.0, 60000.0])  # inside and in both tails
    expected = [NormalDist(mu, sigma).cdf(math.log(x)) for x in xs]
    assert np.allclose(dist.cdf(xs, cap=CAP), expected, atol=1e-12)


def test_the_right_tail_continues_beyond_p99_until_max() -> None:
    heavy = LengthDistribution.from_percentiles({"p50": 800, "p99": 12000})
    assert 0.99 < heavy.cdf([20000], cap=CAP)[0] < 1.0  # mass beyond p99 (conservative)
    capped = LengthDistribution.from_percentiles({"p50": 800, "p99": 12000, "max": 16000})
    assert capped.cdf([16000], cap=CAP)[0] == 1.0
    assert 0.99 < capped.cdf([14000], cap=CAP)[0] < 1.0


def test_with_only_p50_and_max_the_lower_half_is_spread_not_a_point_mass() -> None:
    # The p50..max segment's log-linear slope continues below p50 (to 880 * 880/1000 = 774 tokens).
    dist = LengthDistribution.from_percentiles({"p50": 880, "max": 1000})
    assert 0.0 < dist.cdf([800], cap=CAP)[0] < 0.5
    assert dist.cdf([770], cap=CAP)[0] == 0.0


def test_equal_percentiles_mean_a_point_mass() -> None:
    dist = LengthDistribution.from_percentiles({"p50": 500, "p99": 500})
    assert dist.cdf([499], cap=CAP)[0] == pytest.approx(0.0, abs=1e-6)
    assert dist.cdf([500], cap=CAP)[0] == 1.0


def test_histogram_is_uniform_inside_buckets_and_spreads_the_open_bucket_to_the_cap() -> None:
    dist = LengthDistribution.from_histogram([(100, 10), (1000, 80), (math.inf, 10)])
    cdf = dist.cdf([100, 550, 1000, 2548, 4096], cap=4096)
    assert np.allclose(cdf, [0.1, 0.5, 0.9, 0.95, 1.0])


def test_cumulative_buckets_as_prometheus_exposes_them() -> None:
    cumulative = [(1.0, 0), (2.0, 0), (5.0, 1), (10.0, 3), (20.0, 10), (math.inf, 10)]
    dist = LengthDistribution.from_cumulative_buckets(cumulative)
    assert dist.cdf([5, 10, 20], cap=100).tolist() == pytest.approx([0.1, 0.3, 1.0])


def test_fixed_length_and_sampling() -> None:
    fixed = LengthDistribution.fixed(512)
    rng = np.random.default_rng(0)
    assert set(fixed.sample(rng, 50, cap=4096).tolist()) == {512}
    assert fixed.mean(cap=4096) == 512.0
    assert fixed.sample(rng, 5, cap=100).tolist() == [100] * 5  # clipped at the cap


def test_sampling_follows_the_distribution() -> None:
    dist = LengthDistribution.from_percentiles({"p50": 800, "p90": 3000, "p99": 12000})
    draws = dist.sample(np.random.default_rng(1), 200_000, cap=CAP)
    assert np.quantile(draws, 0.5) == pytest.approx(800, rel=0.02)
    assert np.quantile(draws, 0.9) == pytest.approx(3000, rel=0.03)
    assert draws.mean() == pytest.approx(dist.mean(cap=CAP), rel=0.02)


def test_very_long_contexts_use_a_coarse_grid() -> None:
    dist = LengthDistribution.from_percentiles({"p50": 100_000, "p99": 2_000_000})
    xs, _ = dist.grid(10_000_000)
    assert len(xs) <= (1 << 20) + 2 and xs[-1] == 10_000_000
    draws = dist.sample(np.random.default_rng(2), 20_000, cap=10_000_000)
    assert np.quantile(draws, 0.5) == pytest.approx(100_000, rel=0.05)


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ({"p50": 800}, "at least two percentiles"),
        ({"p50": 800, "p90": 500}, "must not decrease"),
        ({"p0": 100, "p50": 800}, "strictly between"),
        ({"p50": 800, "p100": 900}, "unknown percentile key"),
        ({"median": 800, "p90": 900}, "unknown percentile key"),
        ({"p50": 0, "p90": 900}, "outside 1.."),
        ({"p50": 800, "p90": float("nan")}, "must be a number"),
    ],
)
def test_bad_percentiles_are_refused(points: dict[str, float], message: str) -> None:
    with pytest.raises(WorkloadProfileError, match=message):
        LengthDistribution.from_percentiles(points)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ([], "no buckets"),
        ([(100, 0), (math.inf, 0)], "empty"),
        ([(100, -1)], "count must be"),
        ([(-5, 3)], "positive number"),
        ([(100, 1), (100, 2)], "appears twice"),
    ],
)
def test_bad_histograms_are_refused(buckets: list[tuple[float, float]], message: str) -> None:
    with pytest.raises(WorkloadProfileError, match=message):
        LengthDistribution.from_histogram(buckets)


@pytest.mark.parametrize(
    "points",
    [
        {"p50": 800, "p99": 12000},
        {"min": 5, "p50": 300, "p90": 900, "p99": 1200, "max": 30000},
        {"p10": 50, "p50": 100, "p99.9": 90000},
        {"p50": 3, "p90": 3, "p99": 10},
    ],
)
def test_the_kept_token_table_holds_the_values_computed_fresh(points: dict[str, float]) -> None:
    """F at whole tokens is kept per fit and extended for longer contexts: every read, in any order of
    contexts, is bit-identical to evaluating the CDF on that context's tokens alone."""
    kept = LengthDistribution.from_percentiles(points)
    for count in (1, 2, 700, 40_000, 39_999, 41_003, 5, 120_001, 3_000):
        fresh = LengthDistribution.from_percentiles(points).cdf(np.arange(count, dtype=np.float64), cap=count)
        assert kept.cdf_tokens(count, cap=count).tobytes() == fresh.tobytes()
        assert kept.cdf_tokens(count, cap=7).tobytes() == fresh.tobytes()  # (a fit's F does not read cap)


def test_the_occupancy_of_a_profile_is_the_same_whichever_contexts_came_first() -> None:
    from planner.workload import parse_workload
    from planner.workload.capacity import capacity_for_blocks
    from planner.workload.occupancy import running_occupancy

    text = {"prompt_tokens": {"p50": 800, "p99": 12000}, "output_tokens": {"p50": 200, "p99": 2000}}
    shared = parse_workload(text)
    for m in (20_000, 1_024, 8_192, 33_000, 8_191):
        kv = capacity_for_blocks(num_gpu_blocks=4_000, block_size=16, max_model_len=m)
        warm = running_occupancy(kv, shared, max_model_len=m)
        cold = running_occupancy(kv, parse_workload(text), max_model_len=m)
        assert warm.block_pmf.tobytes() == cold.block_pmf.tobytes()
        assert (warm.mean_decode_steps, warm.mean_tokens_held) == (cold.mean_decode_steps, cold.mean_tokens_held)
