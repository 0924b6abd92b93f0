"""The truncated sums against a direct computation: the short transforms (both tails cut, 2-3-5 lengths)
keep every risk within ~1e-13 of the exact one, on the conservative side, and exactly 0 when nothing
can overflow."""

from __future__ import annotations

import numpy as np
import pytest

from planner.workload.convolution import TruncatedSums, fft_size


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


def _random_pmf(rng: np.random.Generator) -> np.ndarray:
    length = int(rng.choice([70, 300, 900]))
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
    assert engine.risk(11) == pytest.approx(11 * 0.2**10 * 0.8 + 0.2**11, rel=1e-9)  # ten or more at 100
    assert engine.largest_within(1e-9, 1 << 20)[0] >= 10
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
