"""Exact distribution of the total blocks of ``n`` running sequences, below the capacity.

``S_n = B_1 + ... + B_n`` with ``B_i`` independent block counts (non-negative integers). We need
``P(S_n > C)`` for a capacity ``C``. Because every ``B_i >= 0``, a partial sum that already exceeds ``C``
stays above it, so the distribution of ``S_n`` on ``0..C`` can be computed with every intermediate
result cut at ``C`` (the mass cut off is exactly the overflow). Sums of ``2^k`` sequences are built by
repeated squaring, any ``n`` from its binary digits; each product is one FFT convolution of arrays of
at most ``C + 1`` entries. The FFT's round-off is about 1e-16 per entry, so a probability from here is
good to ~1e-11 for capacities up to 10^5 units.

Two things keep the transforms short: entries below :data:`_NEGLIGIBLE` are dropped at both ends of every
result (a sum of many sequences is concentrated far inside ``0..C``: without the upper cut a power of two
kept thousands of entries of its upper tail, each below 1e-18, up to ``C``, and they made its transform 2-3
times longer), and a transform has the smallest length of the form ``2^a 3^b 5^c`` that holds the product
(pocketfft's cost per entry is the same for those lengths, and a power of two wastes a quarter of the
length on average). A cut drops less than ``C x 1e-18`` of mass (under 7e-14), and mass dropped only
raises a risk: a power built from it carries the deficit into every sum, so at worst a risk is raised by
the number of sequences times that (7e-11 for 1,000 sequences on the largest pool, where a target is at
least 1e-9).

Round-off, measured against exact binomial tails (two-point block distributions, up to 2^20 sequences):
a product's negative round-off entries are kept, not clipped to 0, because clipping made the kept mass
grow with every squaring, and a risk came out up to 1.2e-15 x n too small (at n = 10^6 and a target of
1e-9, 0.5% more sequences than the exact answer); unclipped, the error is within 7.2e-17 x n either way.
A candidate batch of ``n`` is accepted only when its risk plus :data:`_ROUND_OFF_PER_SEQUENCE` x ``n`` is
within the target, so an answer holds when the computed risk is off by its known error. A risk is exactly
0 when ``n`` sequences of the longest length fit (:meth:`TruncatedSums.risk`), whatever the round-off.
"""

from __future__ import annotations

import bisect

import numpy as np
import numpy.typing as npt

from planner.workload.distribution import FloatArray

ComplexArray = npt.NDArray[np.complex128]

_DIRECT_LIMIT = 64
"""Arrays this short are convolved directly (exact, and faster than an FFT)."""
_NEGLIGIBLE = 1e-18
"""Entries below this at either end of a result are dropped (the mass lost only raises a risk)."""
_SURE = 1e-9
"""A risk this far above the target is above it whatever the round-off (results are good to ~1e-11)."""
_ROUND_OFF_PER_SEQUENCE = 2e-16
"""What a computed risk of ``n`` sequences may lack, per sequence: ~3x the largest error measured (7.2e-17 x
``n``); 2e-13 for 1,000 sequences."""


def _smooth_lengths(limit: int) -> tuple[int, ...]:
    """Every ``2^a 3^b 5^c <= limit``, ascending (660 numbers up to 2^22)."""
    lengths = []
    five = 1
    while five <= limit:
        three = five
        while three <= limit:
            length = three
            while length <= limit:
                lengths.append(length)
                length *= 2
            three *= 3
        five *= 5
    return tuple(sorted(lengths))


_SMOOTH_LENGTHS = _smooth_lengths(1 << 22)
"""Transform lengths up to 4M entries (products here are at most ~530K entries long: 2 x 2^18 length cells)."""


def fft_size(size: int) -> int:
    """The smallest ``2^a 3^b 5^c >= size``: a transform length that holds a product of ``size`` entries
    (pocketfft transforms these as fast per entry as a power of two, which can be almost twice as long)."""
    index = bisect.bisect_left(_SMOOTH_LENGTHS, size)
    return _SMOOTH_LENGTHS[index] if index < len(_SMOOTH_LENGTHS) else 1 << (size - 1).bit_length()


def convolve(a: FloatArray, b: FloatArray, *, clip: bool = True) -> FloatArray:
    """The full linear convolution of two non-negative arrays (FFT for long ones); the FFT's round-off
    leaves tiny negative entries, which are set to 0 unless ``clip`` is False (:class:`TruncatedSums`
    keeps them: see the module docstring)."""
    if min(len(a), len(b)) <= _DIRECT_LIMIT:
        return np.convolve(a, b)
    size = len(a) + len(b) - 1
    fft_length = fft_size(size)
    out: FloatArray = np.fft.irfft(np.fft.rfft(a, fft_length) * np.fft.rfft(b, fft_length), fft_length)[:size]
    return np.clip(out, 0.0, None) if clip else out


def is_whole(pmf: FloatArray) -> bool:
    """Whether ``pmf`` is a distribution (mass 1 within 1e-9): only then may a risk be exactly 0; a pmf with
    less mass counts the rest as overflowing."""
    return abs(float(pmf.sum()) - 1.0) <= 1e-9


class _Truncated:
    """A distribution on ``offset .. offset + len(values) - 1`` (all <= capacity); the rest overflowed."""

    __slots__ = ("_cdf", "offset", "spectra", "values")

    def __init__(self, offset: int, values: FloatArray) -> None:
        self.offset = offset
        self.values = values
        self.spectra: dict[int, ComplexArray] = {}
        self._cdf: FloatArray | None = None

    @property
    def mass(self) -> float:
        return float(self.values.sum())

    def spectrum(self, length: int) -> ComplexArray:
        """``rfft(values, length)``, computed once per length: a power of the distribution takes part in
        several products (its own square, candidate sums, the sums of :meth:`TruncatedSums.risk`), and
        an accumulated sum in one per candidate digit. The same transform of the same array is the same
        numbers, so every product is exactly what :func:`convolve` computes (unclipped)."""
        spectrum = self.spectra.get(length)
        if spectrum is None:
            spectrum = self.spectra[length] = np.fft.rfft(self.values, length)
        return spectrum

    def cdf(self) -> FloatArray:
        """``cumsum(values)``, once: the mass each product with this distribution keeps (:func:`_kept_mass`)."""
        if self._cdf is None:
            self._cdf = np.cumsum(self.values)
        return self._cdf


def _kept_mass(a: _Truncated, b: _Truncated, capacity: int) -> float:
    """The mass of ``a * b`` on ``0..capacity``, by a direct sum in O(len(a)): ``sum_i a_i P(b <= K - i)``
    with ``K = capacity - a.offset - b.offset``. It is exact up to ordinary summation round-off (~1e-13 at
    the sizes that occur, and it keeps the entries below ``_NEGLIGIBLE`` a product trims), so it decides
    whether a product is needed, never what a product is: every figure kept still comes from
    :meth:`TruncatedSums._mul`."""
    top = capacity - a.offset - b.offset
    if top < 0 or len(a.values) == 0 or len(b.values) == 0:
        return 0.0
    count = min(len(a.values), top + 1)
    index = np.minimum(np.arange(top, top - count, -1), len(b.values) - 1)
    # (a product and a sum, not np.dot: BLAS may spread a dot product over threads the webhook's worker
    # does not have to give)
    return float((a.values[:count] * b.cdf()[index]).sum())


class TruncatedSums:
    """``P(S_n > capacity)`` for sums of ``n`` independent copies of one block-count distribution."""

    def __init__(self, pmf: FloatArray, capacity: int) -> None:
        self.capacity = capacity
        values = np.asarray(pmf, dtype=np.float64)
        support = np.flatnonzero(values > 0.0)
        # The most units one sequence can hold: n sequences with n * _longest <= capacity never overflow
        # (their risk is 0 exactly, not whatever round-off leaves of 1 - mass). Only for a distribution
        # (mass 1): a pmf with less mass counts the rest as overflowing, and an empty one overflows always.
        whole = len(support) > 0 and is_whole(values)
        self._longest: int | None = int(support[-1]) if whole else None
        self._powers: list[_Truncated] = [self._trim(0, values)]
        self._cache: dict[int, float] = {0: 0.0}

    def _trim(self, offset: int, values: FloatArray) -> _Truncated:
        keep = values[: max(0, self.capacity - offset + 1)]
        nonzero = np.flatnonzero(keep > _NEGLIGIBLE)
        if len(nonzero) == 0:
            return _Truncated(self.capacity + 1, np.zeros(0))
        first, last = int(nonzero[0]), int(nonzero[-1])
        return _Truncated(offset + first, keep[first : last + 1])

    def _risk_of(self, n: int, kept: _Truncated) -> float:
        """``P(S_n > capacity)`` from the kept part of ``S_n``'s distribution."""
        if self._longest is not None and n * self._longest <= self.capacity:
            return 0.0
        return min(1.0, max(0.0, 1.0 - kept.mass))

    def _mul(self, a: _Truncated, b: _Truncated) -> _Truncated:
        if len(a.values) == 0 or len(b.values) == 0:
            return _Truncated(self.capacity + 1, np.zeros(0))
        if min(len(a.values), len(b.values)) <= _DIRECT_LIMIT:
            return self._trim(a.offset + b.offset, np.convolve(a.values, b.values))
        # convolve(a.values, b.values), with each operand's transform computed once per size (a square
        # transforms its operand once).
        size = len(a.values) + len(b.values) - 1
        length = fft_size(size)
        spectrum_a = a.spectrum(length)
        spectrum_b = spectrum_a if b is a else b.spectrum(length)
        # (negative round-off is kept: clipping it biased every mass upwards, see the module docstring)
        out: FloatArray = np.fft.irfft(spectrum_a * spectrum_b, length)[:size]
        return self._trim(a.offset + b.offset, out)

    def release(self) -> None:
        """Drop the transforms and cumulative sums kept for later products (an engine kept after its search
        holds only its distributions; a product needed later computes them again)."""
        for power in self._powers:
            power.spectra.clear()
            power._cdf = None

    def _power(self, k: int) -> _Truncated:
        while len(self._powers) <= k:
            last = self._powers[-1]
            self._powers.append(self._mul(last, last))
        return self._powers[k]

    def _sum_of(self, n: int) -> _Truncated:
        acc = _Truncated(0, np.ones(1))
        k = 0
        while n:
            if n & 1:
                acc = self._mul(acc, self._power(k))
            n >>= 1
            k += 1
        return acc

    def risk(self, n: int) -> float:
        """``P(S_n > capacity)``."""
        if n not in self._cache:
            self._cache[n] = self._risk_of(n, self._sum_of(n))
        return self._cache[n]

    def remember(self, n: int, risk: float) -> None:
        """Record ``risk`` as ``P(S_n > capacity)``: the answer of :class:`~planner.workload.spectral.SpectralSums`,
        so that every report of that answer (the risk curve, the plan's note) shows the same figure."""
        self._cache[n] = risk

    def risks(self, ns: list[int]) -> list[float]:
        """``P(S_n > capacity)`` for each ``n`` of ``ns``, walking them in increasing order so each sum is
        built from the previous one (one or a few products per point instead of ``popcount(n)``)."""
        results: dict[int, float] = {}
        current_n, current = 0, _Truncated(0, np.ones(1))
        for n in sorted(set(ns)):
            if n in self._cache:
                results[n] = self._cache[n]
                continue
            if current.mass <= 0.0:  # everything already overflowed: more sequences cannot help
                results[n] = self._cache[n] = 1.0
                continue
            current = self._mul(current, self._sum_of(n - current_n))
            current_n = n
            results[n] = self._cache[n] = self._risk_of(n, current)
        return [results[n] for n in ns]

    def largest_within(self, target: float, n_max: int) -> tuple[int, float]:
        """The largest ``n <= n_max`` whose risk ``P(S_n > capacity)``, plus ``n`` times the round-off
        allowance (:data:`_ROUND_OFF_PER_SEQUENCE`), is within ``target``; and that risk.

        ``P(S_n > C)`` never decreases with ``n``, so the binary digits of the answer can be fixed from
        the top: add ``2^k`` sequences whenever the risk, with its allowance, stays within the target. A
        digit ``2^k`` at or past the first power of two whose own risk is surely above the target (by
        :data:`_SURE`) cannot be added either (the sum with it has at least that many sequences), so
        neither that product nor the larger powers are computed: same answer, same probability, a
        fraction of the convolutions.
        """
        n = 0
        acc = _Truncated(0, np.ones(1))
        top = max(n_max, 1).bit_length() - 1
        over = self._first_power_over(target + _SURE, top)
        for k in range(top, -1, -1):
            if n + (1 << k) > n_max or k >= over:
                continue
            power = self._power(k)
            if 1.0 - _kept_mass(acc, power, self.capacity) > target + _SURE:
                continue  # surely over the target: the FFT product would be refused too
            candidate = self._mul(acc, power)
            if 1.0 - candidate.mass + (n + (1 << k)) * _ROUND_OFF_PER_SEQUENCE <= target:
                acc = candidate
                n += 1 << k
        risk = self._risk_of(n, acc)
        self._cache[n] = risk
        return n, risk

    def _first_power_over(self, risk: float, top: int) -> int:
        """The smallest ``k <= top`` with ``P(S_{2^k} > capacity) > risk`` (``top + 1``: none).

        A square not computed yet is first judged by its kept mass (:func:`_kept_mass`): when that puts
        it surely above ``risk`` (by :data:`_SURE`), the square itself is not computed, since no digit
        uses that power; otherwise it is computed and judged exactly as before."""
        for k in range(top + 1):
            if 0 < k == len(self._powers):
                half = self._powers[k - 1]
                if 1.0 - _kept_mass(half, half, self.capacity) > risk + _SURE:
                    return k
            if 1.0 - self._power(k).mass > risk:
                return k
        return top + 1
