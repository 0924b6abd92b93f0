"""Request-length distributions: prompt or output tokens per request.

A :class:`LengthDistribution` is a cumulative distribution function ``F(x) = P(length <= x)`` over
token counts. Lengths are whole tokens: a continuous length ``y`` counts as ``ceil(y)`` tokens, so
``P(length = k) = F(k) - F(k - 1)`` and lengths are at least 1.

Three sources (docs/workload.md has the maths):

* **percentiles** (``{p50: 800, p90: 3000, p99: 12000}``): between two given percentiles the
  *logarithm* of the length is interpolated linearly in the normal score ``z = Phi^-1(u)``, i.e. each
  segment is a piece of a log-normal. A log-normal through the points is reproduced exactly; request
  lengths of chat and RAG traffic are close to log-normal, with a long right tail. Beyond the last
  percentile the last segment's log-normal continues (a heavy tail: conservative for KV risk) until
  ``max`` or the context limit cuts it. Segments ending at ``min`` (u = 0) or ``max`` (u = 1) are
  log-linear in ``u`` instead, because ``z`` is infinite there.
* **histogram buckets** ``(le, count)``: uniform within each bucket (as Prometheus'
  ``histogram_quantile`` assumes); the ``+Inf`` bucket is spread evenly up to the context limit.
* **fixed**: every request has the same length.

This module is pure numpy; nothing here reads files or the network.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from planner.errors import WorkloadProfileError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_LENGTH = 100_000_000
"""No request is longer than this (10^8 tokens); larger values are typos."""

_PERCENTILE_KEY = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _normal_cdf(z: FloatArray) -> FloatArray:
    # erfc keeps full relative precision in the lower tail, where 1 - erf would cancel.
    result: FloatArray = 0.5 * _erfc(-z / math.sqrt(2.0))
    return result


def _normal_ppf(u: float) -> float:
    return NormalDist().inv_cdf(u)


def percentile_level(key: str) -> float:
    """``"p50"`` -> 0.5, ``"p99.9"`` -> 0.999, ``"min"`` -> 0.0, ``"max"`` -> 1.0."""
    if key == "min":
        return 0.0
    if key == "max":
        return 1.0
    match = _PERCENTILE_KEY.match(key)
    if not match:
        raise WorkloadProfileError(
            f"unknown percentile key {key!r}",
            hint="use p1..p99.9 (e.g. p50, p90, p99, p99.9), min or max",
        )
    level = float(match.group(1)) / 100.0
    if not 0.0 < level < 1.0:
        raise WorkloadProfileError(f"percentile {key!r} must lie strictly between p0 and p100")
    return level


class LengthDistribution(ABC):
    """A distribution of request lengths in tokens. Build it with the ``from_*`` class methods."""

    description: str

    @abstractmethod
    def _cdf(self, x: FloatArray, cap: int) -> FloatArray:
        """``P(length <= x)`` for ``x >= 0``; ``cap`` bounds mass the source leaves open (``+Inf``)."""

    # -- constructors ------------------------------------------------------------------------------

    @staticmethod
    def from_percentiles(points: Mapping[str, float]) -> LengthDistribution:
        """Fit through percentiles such as ``{"p50": 800, "p90": 3000, "p99": 12000, "max": 32768}``."""
        return _PercentileDistribution(points)

    @staticmethod
    def fixed(tokens: int) -> LengthDistribution:
        """Every request has exactly ``tokens`` tokens."""
        return _FixedDistribution(tokens)

    @staticmethod
    def from_histogram(buckets: Iterable[tuple[float, float]]) -> LengthDistribution:
        """Buckets ``(le, count)``: ``count`` requests with ``previous le < length <= le`` (not cumulative).

        ``le`` may be ``math.inf`` for the open last bucket.
        """
        return _HistogramDistribution(list(buckets))

    @staticmethod
    def from_cumulative_buckets(buckets: Iterable[tuple[float, float]]) -> LengthDistribution:
        """Prometheus-style buckets ``(le, cumulative count)``, e.g. ``vllm:request_prompt_tokens_bucket``."""
        return _HistogramDistribution(cumulative_to_counts(buckets))

    # -- evaluation --------------------------------------------------------------------------------

    def cdf(self, x: npt.ArrayLike, *, cap: int) -> FloatArray:
        """``P(length <= x)`` (0 below 1 token); ``cap`` is the context limit in tokens."""
        values = np.asarray(x, dtype=np.float64)
        out = self._cdf(np.maximum(values, 0.0), cap)
        return np.where(values < 1.0, 0.0, np.clip(out, 0.0, 1.0))

    def cdf_tokens(self, count: int, *, cap: int) -> FloatArray:
        """``cdf(np.arange(count), cap=cap)``: ``F`` at 0, 1, ..., ``count - 1`` tokens (read-only)."""
        return self.cdf(np.arange(count, dtype=np.float64), cap=cap)

    def grid(self, cap: int) -> tuple[FloatArray, FloatArray]:
        """``(x, F(x))`` at whole tokens ``0, r, 2r, ..., cap`` with ``r = ceil(cap / 2^20)``.

        ``r`` is 1 for every context up to a million tokens; longer contexts are gridded coarser so the
        arrays stay small (8 MiB).
        """
        return _cached_grid(self, cap)

    def quantile(self, level: float, *, cap: int) -> int:
        """The smallest length ``k <= cap`` on the grid with ``F(k) >= level`` (``cap`` when none)."""
        xs, fs = self.grid(cap)
        index = int(np.searchsorted(fs, level - 1e-12, side="left"))
        return max(1, int(xs[min(index, len(xs) - 1)]))

    def mean(self, *, cap: int) -> float:
        """Mean length with lengths above ``cap`` counted as ``cap``."""
        xs, fs = self.grid(cap)
        # E[min(L, cap)] = sum over k < cap of P(L > k); each grid cell stands for its width of k.
        widths = np.diff(xs)
        return float(np.sum((1.0 - fs[:-1]) * widths))

    def sample(self, rng: np.random.Generator, size: int, *, cap: int) -> IntArray:
        """``size`` lengths drawn by inverse transform, each clipped to ``[1, cap]``."""
        xs, fs = self.grid(cap)
        u = rng.random(size)
        index = np.minimum(np.searchsorted(fs, u, side="left"), len(xs) - 1)
        drawn = xs[index]
        if len(xs) - 1 < cap:  # coarse grid: spread uniformly inside the cell
            lower = xs[np.maximum(index - 1, 0)]
            drawn = np.ceil(lower + (drawn - lower) * rng.random(size))
        return np.clip(drawn.astype(np.int64), 1, cap)

    def __repr__(self) -> str:
        return f"LengthDistribution({self.description})"


def cumulative_to_counts(buckets: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Prometheus buckets ``(le, cumulative count)`` -> ``(le, count in this bucket)``, sorted by ``le``."""
    ordered = sorted(buckets, key=lambda b: b[0])
    if not ordered:
        raise WorkloadProfileError("the histogram has no buckets")
    previous = 0.0
    plain: list[tuple[float, float]] = []
    for le, cumulative in ordered:
        # Buckets scraped at slightly different moments can dip below the one before; clamp rather than
        # fail (the dip is noise of a few requests).
        plain.append((le, max(0.0, cumulative - previous)))
        previous = max(previous, cumulative)
    return plain


GRID_POINTS = 1 << 20


@lru_cache(maxsize=16)
def _cached_grid(dist: LengthDistribution, cap: int) -> tuple[FloatArray, FloatArray]:
    step = max(1, math.ceil(cap / GRID_POINTS))
    xs = np.arange(0, cap + 1, step, dtype=np.float64)
    if xs[-1] != cap:
        xs = np.append(xs, float(cap))
    fs = np.maximum.accumulate(dist.cdf(xs, cap=cap))  # guard monotonicity against rounding in the fits
    xs.setflags(write=False)
    fs.setflags(write=False)
    return xs, fs


class _FixedDistribution(LengthDistribution):
    def __init__(self, tokens: int) -> None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_LENGTH:
            raise WorkloadProfileError(f"a fixed length must be a whole number of tokens >= 1, got {tokens!r}")
        self.tokens = tokens
        self.description = f"fixed {tokens}"

    def _cdf(self, x: FloatArray, cap: int) -> FloatArray:
        return np.where(x >= self.tokens, 1.0, 0.0)


class _TokenTables:
    """``F`` at every whole token up to the longest context asked so far, for a few distributions.

    A workload profile is planned for one context after another (each workload its own
    ``--max-model-len``), and each plan needs ``F(0..m)`` of the prompt and output distributions: for a
    percentile fit that is one ``erfc`` per token in Python, most of a new plan's occupancy cost. ``F``
    of a percentile fit does not depend on the context (``cap``) and each value is computed on its own
    (elementwise numpy and ``math.erfc``), so the values for a shorter context are the first ones of a
    longer context's: kept per distribution and extended when a longer context comes, they are the same
    numbers. At most :data:`_TOKEN_TABLES` distributions keep a table (the last used), each at most
    :data:`_TOKEN_TABLE_LIMIT` entries (2 MiB).
    """

    def __init__(self) -> None:
        self._tables: OrderedDict[int, tuple[weakref.ref[LengthDistribution], FloatArray]] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, dist: LengthDistribution, count: int, compute: Callable[[FloatArray], FloatArray]) -> FloatArray:
        """``compute(np.arange(count))`` from the table of ``dist`` (extended with ``compute`` as needed)."""
        if count > _TOKEN_TABLE_LIMIT:
            return compute(np.arange(count, dtype=np.float64))
        with self._lock:
            entry = self._tables.get(id(dist))
            table = entry[1] if entry is not None and entry[0]() is dist else None
            if table is not None:
                self._tables.move_to_end(id(dist))
        if table is None or len(table) < count:
            start = 0 if table is None else len(table)
            more = compute(np.arange(start, count, dtype=np.float64))
            table = more if table is None else np.concatenate((table, more))
            table.setflags(write=False)
            with self._lock:
                self._tables[id(dist)] = (weakref.ref(dist), table)  # (the weak reference tells a reused id)
                self._tables.move_to_end(id(dist))
                while len(self._tables) > _TOKEN_TABLES:
                    self._tables.popitem(last=False)
        return table[:count]


_TOKEN_TABLES = 8
_TOKEN_TABLE_LIMIT = (1 << 18) + 2
_token_tables = _TokenTables()


class _PercentileDistribution(LengthDistribution):
    """Piecewise log-normal through the given percentiles (see the module docstring)."""

    def cdf_tokens(self, count: int, *, cap: int) -> FloatArray:
        # (the fit's F does not depend on cap: any cap gives the same table, see _TokenTables)
        return _token_tables.first(self, count, lambda x: self.cdf(x, cap=cap))

    def __init__(self, points: Mapping[str, float]) -> None:
        knots: list[tuple[float, float]] = []
        for key, value in points.items():
            level = percentile_level(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise WorkloadProfileError(f"{key} must be a number of tokens, got {value!r}")
            if not 1 <= value <= MAX_LENGTH:
                raise WorkloadProfileError(f"{key} = {value} is outside 1..{MAX_LENGTH} tokens")
            knots.append((level, float(value)))
        knots.sort()
        if len(knots) < 2:
            raise WorkloadProfileError(
                "give at least two percentiles (for example p50 and p99): one point cannot fix the spread",
                hint="for a single length write the number itself, e.g. output_tokens: 512",
            )
        for (u0, x0), (u1, x1) in itertools.pairwise(knots):
            if x1 < x0:
                raise WorkloadProfileError(
                    f"percentiles must not decrease: the {u1:.4g} quantile ({x1:g}) is below the "
                    f"{u0:.4g} quantile ({x0:g})"
                )
        self.levels = np.array([u for u, _ in knots])
        self.logs = np.log(np.array([x for _, x in knots]))
        # z of interior knots; +-inf at min/max (those segments use u-space, see _segment_cdf).
        self.zs = np.array([_normal_ppf(u) if 0.0 < u < 1.0 else math.copysign(math.inf, u - 0.5) for u, _ in knots])
        self.description = "percentiles " + ", ".join(f"{k}={v:g}" for k, v in points.items())

    def _cdf(self, x: FloatArray, cap: int) -> FloatArray:
        with np.errstate(divide="ignore"):
            lx = np.log(x)
        out = np.empty_like(lx)
        levels, logs = self.levels, self.logs
        last = len(levels) - 1
        # Lower tail: below the first knot.
        below = lx < logs[0]
        out[below] = self._tail(lx[below], 0, 1) if levels[0] > 0.0 else 0.0
        # Upper tail: at or above the last knot.
        above = lx >= logs[last]
        out[above] = self._tail(lx[above], last, last - 1) if levels[last] < 1.0 else 1.0
        # Interior segments.
        index = np.searchsorted(logs, lx, side="right") - 1
        inside = ~below & ~above
        for seg in np.unique(index[inside]):
            mask = inside & (index == seg)
            out[mask] = self._segment_cdf(lx[mask], int(seg))
        return out

    def _segment_cdf(self, lx: FloatArray, i: int) -> FloatArray:
        u0, u1 = self.levels[i], self.levels[i + 1]
        l0, l1 = self.logs[i], self.logs[i + 1]
        if l1 <= l0:  # a flat stretch of the quantile function: a point mass
            return np.full_like(lx, u1)
        w = (lx - l0) / (l1 - l0)
        if u0 == 0.0 or u1 == 1.0:  # z is infinite at min/max: interpolate log-length in u
            linear: FloatArray = u0 + w * (u1 - u0)
            return linear
        z = self.zs[i] + w * (self.zs[i + 1] - self.zs[i])
        return _normal_cdf(z)

    def _tail(self, lx: FloatArray, i: int, j: int) -> FloatArray:
        """Continue segment (i, j) beyond knot i (below the first knot or above the last one)."""
        li, lj, zi, zj = self.logs[i], self.logs[j], self.zs[i], self.zs[j]
        ui, uj = self.levels[i], self.levels[j]
        if lj == li:
            # A flat stretch (p90 = p99): no spread to continue, the rest of the mass sits at the knot.
            return np.full_like(lx, 0.0 if j > i else 1.0)
        if math.isfinite(zi) and math.isfinite(zj):
            slope = (zj - zi) / (lj - li)  # dz / dlog(length): the segment's log-normal goes on
            return _normal_cdf(zi + (lx - li) * slope)
        # The neighbour is min or max: continue log-linearly in u, as that segment is interpolated.
        linear: FloatArray = np.clip(ui + (lx - li) * (uj - ui) / (lj - li), 0.0, 1.0)
        return linear


class _HistogramDistribution(LengthDistribution):
    """Uniform within buckets; the open ``+Inf`` bucket is spread evenly up to ``cap``."""

    def __init__(self, buckets: Sequence[tuple[float, float]]) -> None:
        if not buckets:
            raise WorkloadProfileError("the histogram has no buckets")
        ordered = sorted(buckets, key=lambda b: b[0])
        bounds: list[float] = []
        counts: list[float] = []
        inf_count = 0.0
        for le, count in ordered:
            if not (isinstance(count, (int, float)) and math.isfinite(count) and count >= 0):
                raise WorkloadProfileError(f"bucket le={le}: count must be a number >= 0, got {count!r}")
            if le == math.inf:
                inf_count += count
                continue
            if not (math.isfinite(le) and le > 0):
                raise WorkloadProfileError(f"bucket bound le={le!r} must be a positive number of tokens")
            if bounds and le == bounds[-1]:
                raise WorkloadProfileError(f"bucket bound le={le:g} appears twice")
            bounds.append(float(le))
            counts.append(float(count))
        total = sum(counts) + inf_count
        if total <= 0:
            raise WorkloadProfileError("the histogram is empty (no requests counted)")
        self.bounds = np.array([0.0, *bounds])
        self.cum = np.concatenate([[0.0], np.cumsum(counts)]) / total
        self.inf_mass = inf_count / total
        self.total = total
        self.description = f"histogram of {total:g} requests in {len(bounds)} buckets"

    def _cdf(self, x: FloatArray, cap: int) -> FloatArray:
        out = np.interp(x, self.bounds, self.cum)
        last = self.bounds[-1]
        if self.inf_mass > 0.0:
            top = max(float(cap), last)
            beyond = x > last
            # No room above the last bound: the open bucket sits at it.
            frac = np.clip((x[beyond] - last) / (top - last), 0.0, 1.0) if top > last else np.ones_like(x[beyond])
            out[beyond] = self.cum[-1] + self.inf_mass * frac
        return out
