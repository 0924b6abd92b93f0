"""The truncated sums against exact figures: a direct convolution for small batches, binomial tails for
batches of up to a million sequences. The short transforms (both tails cut, 2-3-5 lengths) keep every risk
within round-off of the exact one, the search's answer holds with the round-off it allows for, and a
risk is exactly 0 when nothing can overflow."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.workload.convolution import _ROUND_OFF_PER_SEQUENCE, TruncatedSums, fft_size


def _smooth(n: int) -> bool:
    for prime in (2, 3, 5):
        while n % prime == 0:
            n //= prime
    return n == 1


def test_fft_size_is_the_smallest_2_3_5_length_that_holds_the_product() -> None:
    expected = 1
    for size in range(1, 70_000):
        while expected < size or not _smooth(expected):
            expected += 1
        assert fft_size(size) == expected, size


def _direct_risks(pmf: np.ndarray, capacity: int, ns: list[int]) -> dict[int, float]:
    """P(S_n > capacity) by adding one sequence at a time with numpy's direct convolution (no FFT, no
    cut but the capacity, which is exact: a sum past it stays past it)."""
    out: dict[int, float] = {}
    dist = np.ones(1)
    for n in range(1, max(ns) + 1):
        dist = np.convolve(dist, pmf)[: capacity + 1]
        if n in ns:
            out[n] = 1.0 - float(dist.sum())
    return out


def _random_pmf(rng: np.random.Generator, lengths: tuple[int, ...] = (70, 300, 900)) -> np.ndarray:
    length = int(rng.choice(lengths))
    pmf = rng.random(length) ** 4  # skewed, with a long thin upper tail as request lengths have
    pmf[: int(rng.integers(1, length // 3))] = 0.0
    pmf[int(rng.integers(length // 2, length)) :] *= 1e-6
    return pmf / pmf.sum()


@pytest.mark.parametrize("seed", range(10))
def test_risks_match_a_direct_convolution(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pmf = _random_pmf(rng)
    mean = float((np.arange(len(pmf)) * pmf).sum())
    capacity = int(rng.integers(2_000, 6_000))
    around = int(capacity / mean)
    ns = sorted({1, 2, max(1, around // 2), max(1, around - 3), around, around + 2, around + 10})
    reference = _direct_risks(pmf, capacity, ns)
    engine = TruncatedSums(pmf, capacity)
    for n in ns:
        risk = engine.risk(n)
        assert risk == pytest.approx(reference[n], abs=1e-12), n
        assert risk >= reference[n] - 1e-13, n  # what the cuts drop only raises a risk
    for target in (1e-9, 1e-4, 1e-2):
        found, risk = TruncatedSums(pmf, capacity).largest_within(target, 1 << 20)
        check = _direct_risks(pmf, capacity, [found + 1] if found == 0 else [found, found + 1])
        assert check[found + 1] > target - 1e-12
        if found:
            assert risk == pytest.approx(check[found], abs=1e-12) and risk <= target


def test_a_risk_is_zero_when_every_sequence_at_its_longest_fits() -> None:
    pmf = np.zeros(101)
    pmf[[3, 40, 100]] = [0.5, 0.3, 0.2]
    engine = TruncatedSums(pmf, 1_000)
    assert engine.risk(10) == 0.0  # 10 x 100 units: exactly the capacity
    assert engine.risk(11) == pytest.approx(11 * 0.2**10 * 0.8 + 0.2**11, rel=1e-9, abs=0)  # ten or more at 100
    assert engine.largest_within(1e-9, 1 << 20) == (10, 0.0)
    assert engine.risks([9, 10]) == [0.0, 0.0]


def test_a_sum_of_many_sequences_keeps_only_its_bulk() -> None:
    """Without the upper cut, every power of two kept its upper tail (entries below 1e-18) up to the
    capacity; with it a power holds a few standard deviations on either side of its mean."""
    pmf = np.full(64, 1 / 64)
    engine = TruncatedSums(pmf, 60_000)
    power = engine._power(9)  # 512 sequences: mean 16,128 units, standard deviation ~418
    assert 16_128 - 20 * 418 < power.offset < 16_128
    assert len(power.values) < 40 * 418
    assert power.mass == pytest.approx(1.0, abs=1e-12)


def test_the_rule_is_for_whole_distributions_only() -> None:
    """A pmf with less than all of its mass counts the rest as overflowing; an empty one always overflows."""
    short = np.zeros(11)
    short[10] = 0.5
    assert TruncatedSums(short, 100).risk(3) == pytest.approx(1 - 0.5**3)
    empty = TruncatedSums(np.zeros(5), 100)
    assert empty.risk(1) == 1.0 and empty.risks([1, 2]) == [1.0, 1.0]


def _binomial_tail(n: int, p: float, k: int) -> float:
    """P(Binomial(n, p) > k), summed in log space term by term (exact to ~1e-13 relative)."""
    log_p, log_q = math.log(p), math.log1p(-p)
    total, j = 0.0, k + 1
    while j <= n:
        term = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q)
        total += term
        if term < total * 1e-20 and j > n * p:
            break
        j += 1
    return total


@pytest.mark.parametrize(
    ("p", "step", "capacity", "target"),
    [(2**-12, 100, 33_799, 1e-9), (2**-10, 65, 47_579, 1e-9), (2**-8, 65, 61_684, 1e-9), (2**-12, 100, 33_799, 1e-8)],
)
def test_a_million_sequences_stay_within_the_target(p: float, step: int, capacity: int, target: float) -> None:
    """Sequences that hold 0 or ``step`` units (what a large pool counted in units looks like for short
    requests): ``S_n > C`` is a binomial tail, known exactly. Before the round-off was kept signed, the
    search admitted up to 0.5% more sequences than the exact answer at these sizes (true risk up to 1.6e-9
    for a 1e-9 target); now the computed risk is within 1e-16 x n of the exact one and the answer's true
    risk is within the target."""
    pmf = np.zeros(step + 1)
    pmf[0], pmf[step] = 1.0 - p, p
    k = capacity // step
    engine = TruncatedSums(pmf, capacity)
    found, risk = engine.largest_within(target, 1 << 20)
    exact = _binomial_tail(found, p, k)
    assert exact <= target
    assert abs(risk - exact) <= 1e-16 * found
    assert risk + found * _ROUND_OFF_PER_SEQUENCE <= target
    # and not needlessly low: the allowance (2e-10 at a million sequences, a fifth of a 1e-9 target) costs
    # under 1% of the batch
    assert _binomial_tail(int(found * 1.01) + 1, p, k) > target
