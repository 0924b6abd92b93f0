"""Quantiles of a cumulative Prometheus histogram, computed as PromQL's ``histogram_quantile`` does."""

from __future__ import annotations

import math

from admission.observations.model import Buckets

QUANTILES = (0.5, 0.9, 0.99)


def histogram_quantile(q: float, buckets: Buckets | None) -> float | None:
    """Linear interpolation inside the bucket holding rank ``q * count`` (lower bound 0 for the first).

    Like Prometheus: a rank in the ``+Inf`` bucket returns the largest finite bound. None when the
    histogram is empty or has no ``+Inf`` bucket.
    """
    if not buckets or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for index, (bound, count) in enumerate(buckets):
        if count >= rank:
            if math.isinf(bound):
                return buckets[index - 1][0] if index > 0 else None
            in_bucket = count - previous_count
            if in_bucket <= 0:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / in_bucket
        previous_bound, previous_count = bound, count
    return None
