"""Quantiles of a cumulative Prometheus histogram, computed as PromQL's ``histogram_quantile`` does,
except that a rank in the ``+Inf`` bucket may use a known upper bound instead of stopping at the last
finite bound.

vLLM's request-length buckets are 1-2-5 steps up to ``max_model_len`` (vllm X.Y.Z
``vllm/v1/metrics/loggers.py: build_1_2_5_buckets(max_model_len)``), so with a 128K context the last
finite bound is 100,000 and PromQL would report every longer request as exactly 100,000 tokens. No
request exceeds ``max_model_len``, and ``max_model_len`` is below the next 1-2-5 step, so that is a
sound upper end for the last bucket.
"""

from __future__ import annotations

import math

from admission.observations.model import Buckets

QUANTILES = (0.5, 0.9, 0.99)


def next_one_two_five(bound: float) -> float:
    """The 1-2-5 step after ``bound`` (100,000 -> 200,000; 2,000 -> 5,000)."""
    if bound <= 0:
        return 1.0
    exponent = math.floor(math.log10(bound))
    for step in (1, 2, 5, 10):
        value = step * 10.0**exponent
        if value > bound * (1 + 1e-9):
            return value
    return 10.0 ** (exponent + 1)


def token_upper_bound(buckets: Buckets | None, max_model_len: int | None) -> float | None:
    """Upper end of a request-length histogram's ``+Inf`` bucket: ``max_model_len`` when known, else the
    1-2-5 step after the last finite bound (vLLM's bucket list stops below ``max_model_len``'s step)."""
    finite = [bound for bound, _ in buckets or [] if math.isfinite(bound)]
    if not finite:
        return None
    last = finite[-1]
    ceiling = next_one_two_five(last)
    if max_model_len is not None and last < max_model_len <= ceiling:
        return float(max_model_len)
    return ceiling


def histogram_quantile(q: float, buckets: Buckets | None, upper: float | None = None) -> float | None:
    """Linear interpolation inside the bucket holding rank ``q * count`` (lower bound 0 for the first).

    A rank in the ``+Inf`` bucket interpolates up to ``upper`` when it is given (and above the last
    finite bound), else returns the largest finite bound like Prometheus. None when the histogram is
    empty or has no ``+Inf`` bucket.
    """
    if not buckets or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for index, (le, count) in enumerate(buckets):
        if count >= rank:
            bound = le
            if math.isinf(le):
                if index == 0:
                    return None
                if upper is None or upper <= previous_bound:
                    return previous_bound
                bound = upper
            in_bucket = count - previous_count
            if in_bucket <= 0:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / in_bucket
        previous_bound, previous_count = le, count
    return None
