"""The largest batch within a risk target, from one Fourier transform of the per-sequence distribution.

:class:`~planner.workload.convolution.TruncatedSums` finds the answer by building the distribution of ``2^k``
sequences by repeated squaring and adding binary digits: two to three dozen transforms, most of a profiled
admission review's CPU. Here the distribution ``q`` of one sequence is transformed once, on a circle of ``W``
points just wider than the bulk of the sum ``S_n`` of ``n`` sequences; the transform of ``S_n`` is then
``Q^n``, entry by entry, and the mass of ``S_n`` on ``0..C`` is a sum over the frequencies where ``|Q|^n``
is not negligible (a few dozen for a smooth distribution). Judging one ``n`` costs microseconds, so the search
starts at a normal approximation of the answer and needs a handful of them.

Every judgement carries an error bound, and a batch is accepted only when its risk plus that bound is within
the target, refused only when its risk minus the bound is above it (the true risk never decreases with
``n``, so the search then finds exactly the largest ``n`` whose true risk is within the target). When a
judgement is too close to call, or where the exact search is cheaper (a circle longer than two of its
products, a judgement keeping more than :data:`_MOST_FREQUENCIES` frequencies, an answer under
:data:`_FEWEST` sequences), :meth:`SpectralSums.largest_within` returns None and the caller runs the exact
search instead. The bound adds:

- the two tails of ``S_n`` outside the circle's window, each at most :data:`_TAIL` by a Chernoff bound
  computed from ``q`` (the only way mass reaches the wrong place on a circle);
- the frequencies left out, at most ``e^``:data:`_KEEP_LOG` each;
- the transform's round-off: an entry of ``Q`` is off by at most :func:`_transform_error` (about 12x the
  largest error measured against an extended-precision transform, tests/workload/test_spectral.py), which
  ``Q^n`` amplifies by at most ``n |Q|^(n-1)``;
- the round-off of the powers' phases (``n`` times that of the centred phase, measured at up to ~10 eps),
  of ``exp``, of the window's coefficients (a sine's absolute round-off near its zeros included), of the
  final sum and of ``1 - sum``, each bounded per frequency.

A review (2026-12-07) fuzzed it against extended-precision and exact references (lattices, point masses,
thin tails, missing mass, a million sequences): the bounds held and every answer given was the exact one,
once a batch whose every sequence fits was judged with the distribution's missing mass (it had been taken
as 0). The bounds are loose (the true error is typically under a tenth of the bound).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from planner.workload.convolution import fft_size, is_whole
from planner.workload.distribution import FloatArray, IntArray

_TAIL = 1e-20
"""Mass of ``S_n`` left outside the circle's window at each end (a Chernoff bound): far below any risk."""
_LOG_TAIL = math.log(_TAIL)
_SMALLEST = 1e-300
"""Entries of the distribution at or below this are taken as 0 (see :class:`SpectralSums`)."""
_KEEP_LOG = -60.0
"""A frequency whose ``|Q|^n`` is below ``e^-60`` (~9e-27) is left out of the sum (and its share bounded)."""
_EPS = float(np.finfo(np.float64).eps)
_TILTS = np.geomspace(1e-4, 30.0, 16)
"""Chernoff exponents, in units of one over the distribution's standard deviation (any exponent gives a valid
bound; the grid only decides how tight the window is)."""
_COARSE = 256
"""A distribution longer than this is grouped into this many cells for the Chernoff bounds (each cell's mass
at its far end: still an upper bound on the moment generating function)."""
_FEWEST = 8
"""Below this many sequences (by the normal approximation) the exact search answers: it needs only a few
squarings, and often screens them out without a product, where a spectral judgement of a batch of one or two
long sequences keeps most of the circle's frequencies."""
_GALLOP = 64
"""The first step away from the normal approximation is 1/64 of it."""
_MOST_FREQUENCIES = 8192
"""A judgement that would keep more frequencies than this (a batch of a few sequences whose distribution has
sharp edges: ``|Q|`` then decays slowly) is left to the exact search, which is cheaper there."""


def _transform_error(length: int) -> float:
    """An upper bound on the absolute error of an entry of ``rfft(q, length)`` for non-negative ``q`` of
    total mass at most 1: ``2 eps (log2(length) + 1)``; the largest error measured is 0.17 eps log2(length)."""
    return 2.0 * _EPS * (math.log2(max(length, 2)) + 1.0)


class _Circle:
    """``Q = rfft(q, W)`` and ``log |Q|``, for every ``n`` whose window fits in ``W`` points."""

    __slots__ = ("length", "log_abs", "magnitude", "spectrum")

    def __init__(self, values: FloatArray, length: int) -> None:
        self.length = length
        self.spectrum = np.fft.rfft(values, length)
        self.magnitude: FloatArray = np.abs(self.spectrum)
        with np.errstate(divide="ignore"):
            self.log_abs: FloatArray = np.log(self.magnitude)


class SpectralSums:
    """``P(S_n > capacity)`` with an error bound, for sums of ``n`` independent copies of one block-count
    distribution (the same question as :class:`~planner.workload.convolution.TruncatedSums`)."""

    def __init__(self, pmf: FloatArray, capacity: int) -> None:
        values = np.asarray(pmf, dtype=np.float64)
        # (as TruncatedSums, from the whole array: only a distribution, nothing past the capacity, may have a
        # risk of exactly 0)
        whole = is_whole(values)
        # A sequence longer than the capacity overflows alone, and so does every sum it is part of: its mass is
        # left out, and counts as overflowing as any missing mass does (every risk the same, the circles
        # no longer than the pool).
        beyond = len(values) > capacity + 1 and bool(np.any(values[capacity + 1 :] > 0.0))
        values = values[: capacity + 1]
        # Entries below 1e-300 are left out: a subnormal at the end of the support could underflow in the
        # Chernoff sums and narrow a window. What they hold (under len x 1e-300) is far below any error term.
        values = np.where(values > _SMALLEST, values, 0.0)
        support = np.flatnonzero(values)
        self.capacity = capacity
        self._empty = len(support) == 0
        if self._empty:
            return
        # S_n = n * lowest + (a sum of n copies of q): q starts at 0, which keeps every window's numbers small
        self._lowest = int(support[0])
        self._q: FloatArray = values[self._lowest : int(support[-1]) + 1]
        self._span = len(self._q) - 1
        mass = float(self._q.sum())
        self._mass = mass
        self._whole = whole and not beyond
        cells = np.arange(len(self._q), dtype=np.float64)
        mean = float((self._q * cells).sum()) / mass
        self._mean = mean
        self._sd = math.sqrt(max(0.0, float((self._q * (cells - mean) ** 2).sum()) / mass))
        # The transform of q shifted left by its rounded mean: the phases of Q^n then stay small where
        # |Q|^n matters (the shift is put back exactly, in integers, in the window's coefficients).
        self._centre = round(mean)
        self._bounds: tuple[FloatArray, FloatArray, FloatArray] | None = None  # (the Chernoff grid, when needed)
        self._circles: dict[int, _Circle] = {}

    def _cumulants(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``log E[e^{tX}]`` (upper bounds) on a grid of ``t > 0``, and at ``-t``: the Chernoff bounds of
        :meth:`_window`."""
        q, top = self._q, self._span
        size = max(1, math.ceil(len(q) / _COARSE))
        cells = -(-len(q) // size)
        masses = np.zeros(cells * size)
        masses[: len(q)] = q
        grouped = masses.reshape(cells, size).sum(axis=1)
        near = np.arange(cells, dtype=np.float64) * size  # each cell's lowest value (for t < 0)
        far = np.minimum(near + size - 1, top)  # and its highest (for t > 0)
        tilts: FloatArray = _TILTS / max(self._sd, 1.0)
        # (exponents kept at or below 0: nothing overflows)
        up: FloatArray = tilts * top + np.log(np.exp(np.outer(tilts, far - top)) @ grouped)
        down: FloatArray = np.log(np.exp(np.outer(-tilts, near)) @ grouped)
        return tilts, up, down

    def _window(self, n: int) -> tuple[int, int]:
        """``(low, high)`` with ``P(S'_n < low) <= _TAIL`` and ``P(S'_n > high) <= _TAIL`` (``S'_n``: the
        sum of ``n`` copies of ``q``), by Chernoff: ``P(S' >= x) <= exp(n K(t) - t x)`` for every ``t > 0``."""
        if self._bounds is None:
            self._bounds = self._cumulants()
        tilts, up, down = self._bounds
        high = float(np.min((n * up - _LOG_TAIL) / tilts))
        low = float(np.max((n * down - _LOG_TAIL) / -tilts))
        return max(0, math.floor(low)), min(n * self._span, math.ceil(high))

    def _circle(self, width: int) -> _Circle | None:
        """The transform on at least ``width`` points (None: more than twice the exact search's longest
        product, ``2 (capacity + 2)``)."""
        for length, circle in self._circles.items():
            if length >= width:
                return circle
        length = fft_size(max(width, len(self._q)))
        if length > fft_size(4 * (self.capacity + 2)):
            return None
        circle = self._circles[length] = _Circle(self._q, length)
        return circle

    def _fits_at_longest(self, n: int) -> bool:
        """Whether ``n`` sequences of ``q`` fit even at their longest."""
        return n * (self._lowest + self._span) <= self.capacity

    def bounded_risk(self, n: int) -> tuple[float, float] | None:
        """``(risk, error)``: ``P(S_n > capacity)`` is within ``error`` of ``risk`` (None: left to the exact
        search, see :meth:`_circle` and :data:`_MOST_FREQUENCIES`)."""
        if n <= 0:
            return 0.0, 0.0
        if self._empty:
            return 1.0, 0.0
        room = self.capacity - n * self._lowest  # what S'_n may reach
        if room < 0:
            return 1.0, 0.0
        if self._fits_at_longest(n):
            # Every sequence of q fits even at its longest: only the mass missing from q overflows. (Reported
            # as 0 when q is a whole distribution, as the exact search reports it: see largest_within.)
            missing = -math.expm1(n * math.log(self._mass)) if self._mass < 1.0 else 0.0
            return max(0.0, missing), n * _EPS * (math.log2(len(self._q)) + 2.0)
        if n == 1:  # one sequence: its own tail, summed directly (round-off at most len x eps)
            return min(1.0, max(0.0, 1.0 - float(self._q[: room + 1].sum()))), 2.0 * _EPS * len(self._q)
        low, high = self._window(n)
        top = min(high, room)
        if top < low:  # the capacity is below the window: all but the lower tail overflows
            return 1.0, 2.0 * _TAIL
        circle = self._circle(high - low + 1)
        if circle is None:
            return None
        return self._risk_on(circle, n, low, top)

    def _risk_on(self, circle: _Circle, n: int, low: int, top: int) -> tuple[float, float] | None:
        length = circle.length
        log_power = n * circle.log_abs
        kept = log_power > _KEEP_LOG
        freqs: IntArray = np.flatnonzero(kept)
        if len(freqs) > _MOST_FREQUENCIES:
            return None  # a few sequences with sharp edges: the exact search is cheaper
        # Q^n on the kept frequencies, of q centred on its rounded mean: |Q|^n e^{i n phase}, phase in (-pi, pi]
        shift = 2.0 * np.pi * ((freqs * self._centre) % length) / length
        phase = np.remainder(np.angle(circle.spectrum[freqs]) + shift + np.pi, 2.0 * np.pi) - np.pi
        magnitude = np.exp(log_power[freqs])
        # The window's coefficients: D_m = sum over k in [start, start + count) of e^{2 pi i m k / W} =
        # e^{i middle} sin(pi m count / W) / sin(pi m / W), with start the window's first value of the
        # centred sum; every angle reduced in integers first.
        start, count, twice = low - n * self._centre, top - low + 1, 2 * length
        middle = np.pi * ((freqs * ((2 * start + count - 1) % twice)) % twice) / length
        numerator = np.sin(np.pi * ((freqs * (count % twice)) % twice) / length)
        zero = freqs == 0
        denominator = np.sin(np.pi * np.where(zero, 1, freqs) / length)
        ratio = np.where(zero, float(count), numerator / denominator)
        weight = np.where(zero | (2 * freqs == length), 1.0, 2.0)  # the mirrored half of the spectrum
        # mass on the window = (1/W) sum_m weight Re(Q^n D_m)
        terms = weight * magnitude * ratio * np.cos(n * phase + middle)
        risk = 1.0 - float(terms.sum()) / length
        # The bound: the transform's error as n |Q|^(n-1) amplifies it; the round-off of the phase, exp and
        # cos, of the coefficients and of the sum; then the frequencies left out and the two tails.
        delta = _transform_error(length)
        reach = weight * np.abs(ratio) / length
        amplified = n * delta * np.exp((n - 1) * np.log(circle.magnitude[freqs] + delta))
        rounding = magnitude * (_EPS * n * (16.0 + 2.0 * np.abs(phase)) + 64.0 * _EPS)
        error = float((reach * (amplified + rounding)).sum())
        # (a sine's absolute round-off, ~2 pi eps, is not relative to it: the numerator near a zero)
        coefficient = np.where(zero, 0.0, 8.0 * _EPS / denominator)
        error += float((weight * magnitude * coefficient).sum()) / length
        error += _EPS * math.log2(len(freqs) + 2) * float(np.abs(terms).sum()) / length + _EPS  # the sum, 1 - sum
        if len(freqs) < len(log_power):
            largest = float(circle.magnitude.max(where=~kept, initial=0.0)) + delta
            error += 2.0 * largest**n * (math.log(length) + 2.0)  # sum |D_m| / W <= log W + 2
        error += 2.0 * _TAIL
        return min(1.0, max(0.0, risk)), error

    def largest_within(self, target: float, n_max: int) -> tuple[int, float] | None:
        """The largest ``n <= n_max`` whose risk is within ``target``, and its risk; None when the exact search
        should answer (a judgement within its error bound of the target, or one of the cases the exact
        search does more cheaply: see the module docstring)."""
        if self._empty:
            return 0, 0.0  # every batch overflows (as the exact search: nothing added, risk 0)
        judged: dict[int, float] = {0: 0.0}

        def within(n: int) -> bool | None:
            found = self.bounded_risk(n)
            if found is None:
                return None
            risk, error = found
            judged[n] = 0.0 if self._whole and self._fits_at_longest(n) else risk
            if risk + error <= target:
                return True
            if risk - error > target:
                return False
            return None

        lo, hi = 0, n_max  # the answer is in [lo, hi]
        guess = self._guess(target, n_max)
        if guess < _FEWEST:
            return None
        step = max(1, guess // _GALLOP)
        # one circle wide enough for every batch the search is likely to judge (a wider one if not)
        low, high = self._window(min(n_max, guess + step))
        self._circle(high - low + 1)
        first = within(guess)
        if first is None:
            return None
        if first:
            lo = guess
            while lo < hi:  # up, doubling the step, until a batch is over the target
                n = min(hi, lo + step)
                verdict = within(n)
                if verdict is None:
                    return None
                if not verdict:
                    hi = n - 1
                    break
                lo, step = n, 2 * step
        else:
            hi = guess - 1
            while lo < hi:  # down, doubling the step, until a batch is within it
                n = max(lo + 1, hi + 1 - step)
                verdict = within(n)
                if verdict is None:
                    return None
                if verdict:
                    lo = n
                    break
                hi, step = n - 1, 2 * step
        while lo < hi:
            n = (lo + hi + 1) // 2
            verdict = within(n)
            if verdict is None:
                return None
            lo, hi = (n, hi) if verdict else (lo, n - 1)
        return lo, judged[lo]

    def _guess(self, target: float, n_max: int) -> int:
        """The ``n`` at which a normal ``S_n`` reaches the capacity with probability ``target`` (clipped to
        ``1..n_max``): the search's starting point, usually within a few per cent of the answer."""
        if self._empty or n_max <= 0:
            return 0
        mean = self._lowest + self._mean
        if mean <= 0:
            return n_max
        z = NormalDist().inv_cdf(1.0 - target)
        spread = z * self._sd
        # n * mean + z * sd * sqrt(n) = capacity, a quadratic in sqrt(n) (a tiny mean can make it overflow)
        root = (-spread + math.sqrt(spread * spread + 4.0 * mean * self.capacity)) / (2.0 * mean)
        return max(1, int(min(float(n_max), root * root)))
