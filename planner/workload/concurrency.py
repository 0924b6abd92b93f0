"""Risk-bounded ``--max-num-seqs``: the largest batch whose KV demand overflows with at most a target
probability, next to the worst-case and average-based answers (docs/workload.md).

Entry point for ``planner recommend --workload``, the webhook and the retuner::

    advice = risk_bounded_concurrency(plan.kv_cache, profile, headroom=0.1)
    advice.max_num_seqs, advice.risk, advice.worst_case_max_num_seqs, advice.average_max_num_seqs
    advice.expected_preemptions_per_s(2.0)      # at 2 requests/s
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from planner.errors import WorkloadProfileError
from planner.workload.capacity import KvCapacity
from planner.workload.convolution import TruncatedSums
from planner.workload.distribution import FloatArray, IntArray
from planner.workload.occupancy import Occupancy, running_occupancy
from planner.workload.profile import WorkloadProfile
from planner.workload.spectral import SpectralSums

MAX_UNITS = 1 << 16
"""Capacities above 65,536 blocks are counted in units of ``g`` blocks (see :func:`_to_units`)."""
MAX_SEQS = 1 << 20


class RiskPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int
    risk: float = Field(description="P(the running sequences need more blocks than planned)")


class ConcurrencyAdvice(BaseModel):
    """The answer of :func:`risk_bounded_concurrency` (JSON: ``model_dump(mode="json")``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(description="largest batch whose overflow risk is within target_risk (0: none)")
    risk: float = Field(description="overflow probability at max_num_seqs")
    target_risk: float
    headroom: float = Field(description="fraction of KV blocks kept free at the planned concurrency")
    usable_blocks: int = Field(description="num_gpu_blocks - 1 (vLLM's null block)")
    capacity_blocks: int = Field(description="floor(usable_blocks * (1 - headroom)): what requests may use")
    block_size: int
    max_model_len: int
    expected_usage: float = Field(description="mean KV usage (of usable blocks) at max_num_seqs")
    worst_case_max_num_seqs: int = Field(description="every request at max_model_len (vLLM's view)")
    worst_case_risk: float
    vllm_max_concurrency: float = Field(description='vLLM\'s "Maximum concurrency" (no headroom)')
    average_max_num_seqs: int = Field(description="sized on one average request (mean prompt + mean output)")
    average_risk: float
    average_request_tokens: int
    blocks_per_max_len_request: int
    mean_blocks_per_sequence: float = Field(description="mean blocks one running sequence holds")
    p99_blocks_per_sequence: int
    mean_prompt_tokens: float
    mean_output_tokens: float
    mean_decode_steps: float = Field(description="decode steps per request: E[min(output, max_len - prompt)]")
    rejected_fraction: float = Field(description="share of prompts vLLM would refuse (>= max_model_len)")
    prefix_cache_hit_rate: float
    risk_curve: list[RiskPoint]
    method: str
    block_unit: int = Field(description="blocks per counting unit (1 = exact block counts)")
    token_resolution: int = Field(description="tokens per length cell (1 = exact token counts)")
    explanation: list[str]

    _engine: TruncatedSums | None = PrivateAttr(default=None)
    _unit_pmf: FloatArray | None = PrivateAttr(default=None)

    def risk_at(self, max_num_seqs: int) -> float:
        """Overflow probability with ``max_num_seqs`` running sequences (exact when computed in this
        process, else interpolated on :attr:`risk_curve`)."""
        if max_num_seqs <= 0:
            return 0.0
        if self._engine is not None:
            return self._engine.risk(max_num_seqs)
        return float(self._interpolated(np.array([max_num_seqs]))[0])

    def _interpolated(self, ns: IntArray) -> FloatArray:
        # Between curve points the risk is convex in n near the answer, so a straight line lies above
        # it: interpolation errs on the safe side.
        points = sorted((p.max_num_seqs, p.risk) for p in self.risk_curve)
        xs = np.array([0.0] + [float(n) for n, _ in points])
        ys = np.array([0.0] + [r for _, r in points])
        result: FloatArray = np.interp(ns.astype(np.float64), xs, ys, right=float(ys[-1]))
        return result

    def expected_preemptions_per_s(
        self,
        arrival_rate: float,
        *,
        max_num_seqs: int | None = None,
        mean_request_seconds: float | None = None,
    ) -> float:
        """First-order estimate of preemptions per second at ``arrival_rate`` requests/s.

        Each arriving request joins a batch that overflows with that batch's overflow probability, and
        each overflow costs at least one preemption: ``rate ≈ λ · E[risk(K)]``. ``K``, the number of
        running requests, is ``max_num_seqs`` (a saturated server: the default, and an upper bound), or,
        given ``mean_request_seconds`` (≈ mean_decode_steps × inter-token latency), Poisson with mean
        ``λ · D`` (Little's law for an M/G/∞ server) clipped at ``max_num_seqs``. docs/workload.md.
        """
        if arrival_rate < 0 or (mean_request_seconds is not None and mean_request_seconds < 0):
            raise WorkloadProfileError("arrival_rate and mean_request_seconds must not be negative")
        limit = self.max_num_seqs if max_num_seqs is None else max_num_seqs
        if arrival_rate == 0 or limit <= 0:
            return 0.0
        if mean_request_seconds is None:
            return arrival_rate * self.risk_at(limit)
        load = arrival_rate * mean_request_seconds
        ks = np.arange(limit + 1, dtype=np.int64)
        if load > 0:
            log_pmf = ks * math.log(load) - load - np.array([math.lgamma(k + 1) for k in range(limit + 1)])
            pmf = np.exp(log_pmf)
        else:
            pmf = np.zeros(limit + 1)
            pmf[0] = 1.0
        pmf[-1] += max(0.0, 1.0 - float(pmf.sum()))  # arrivals beyond max_num_seqs wait: K stops there
        return float(arrival_rate * (pmf * self._interpolated(ks)).sum())


def _to_units(block_pmf: FloatArray, unit: int) -> FloatArray:
    """Count in units of ``unit`` blocks, splitting each mass between the two nearest unit counts so the
    mean is kept exactly (``b = unit*q + rest`` -> ``q`` with weight ``1 - rest/unit``, ``q + 1`` with
    ``rest/unit``). The split only adds variance (at most unit²/4 per sequence), which makes the overflow
    probability slightly larger: a conservative error."""
    if unit == 1:
        return block_pmf
    blocks = np.arange(len(block_pmf))
    q, rest = np.divmod(blocks, unit)
    frac = rest / unit
    size = int(q.max()) + 2
    units: FloatArray = np.bincount(q, weights=block_pmf * (1.0 - frac), minlength=size).astype(np.float64)
    units += np.bincount(q + 1, weights=block_pmf * frac, minlength=size)
    return units


@dataclass(frozen=True)
class LimitAdvice:
    """What a plan needs of :func:`risk_bounded_concurrency` (see :func:`risk_bounded_limit`)."""

    max_num_seqs: int
    risk: float
    target_risk: float
    worst_case_max_num_seqs: int
    average_max_num_seqs: int
    average_risk: float | None
    """None when not asked for (``with_average_risk=False``)."""
    average_request_tokens: int


@dataclass(frozen=True)
class _Search:
    """The risk-bounded answer and what every report of it is built from."""

    target: float
    max_model_len: int
    occupancy: Occupancy
    usable: int
    capacity: int
    unit: int
    unit_pmf: FloatArray
    engine: TruncatedSums
    n_max: int
    n_star: int
    risk: float
    per_max: int
    worst: int
    average: int
    average_tokens: int


def _search(
    kv: KvCapacity, profile: WorkloadProfile, headroom: float, target_risk: float | None, max_model_len: int | None
) -> _Search:
    if not 0.0 <= headroom < 1.0:
        raise WorkloadProfileError(f"headroom must be in [0, 1), got {headroom}")
    target = profile.target_risk if target_risk is None else target_risk
    if not 1e-9 <= target <= 0.5:
        raise WorkloadProfileError(f"target_risk must be between 1e-9 and 0.5, got {target}")
    m = kv.max_model_len if max_model_len is None else max_model_len
    occupancy = running_occupancy(kv, profile, max_model_len=m)

    usable = kv.usable_blocks
    capacity = math.floor(usable * (1.0 - headroom))
    unit = max(1, math.ceil(capacity / MAX_UNITS))
    unit_pmf = _to_units(occupancy.block_pmf, unit)
    engine = TruncatedSums(unit_pmf, capacity // unit)

    smallest = int(np.flatnonzero(unit_pmf > 0)[0]) if np.any(unit_pmf > 0) else 1
    n_max = MAX_SEQS if smallest == 0 else min(MAX_SEQS, (capacity // unit) // smallest)
    n_star, risk = _largest_within(unit_pmf, capacity // unit, target, n_max, engine) if capacity > 0 else (0, 1.0)

    per_max = kv.blocks_for_sequence(m)
    worst = capacity // per_max if per_max > 0 else 0
    average_tokens = min(m, math.ceil(occupancy.mean_prompt_tokens + occupancy.mean_output_tokens))
    average = capacity // max(1, kv.blocks_for_sequence(average_tokens))
    return _Search(
        target, m, occupancy, usable, capacity, unit, unit_pmf, engine, n_max, n_star, risk, per_max, worst, average,
        average_tokens,
    )  # fmt: skip


def _largest_within(
    unit_pmf: FloatArray, capacity: int, target: float, n_max: int, engine: TruncatedSums
) -> tuple[int, float]:
    """The largest batch within ``target`` and its risk: from one transform (:class:`SpectralSums`, a
    handful of cheap judgements), or, when that search declines (a judgement too close to call, or a case
    the exact search does more cheaply), from the exact search of ``engine`` (two to three dozen
    transforms). Either way the answer's risk, with its known error, is within the target."""
    found = SpectralSums(unit_pmf, capacity).largest_within(target, n_max)
    if found is None:
        return engine.largest_within(target, n_max)
    engine.remember(*found)
    return found


def risk_bounded_limit(
    kv: KvCapacity,
    profile: WorkloadProfile,
    *,
    headroom: float = 0.1,
    target_risk: float | None = None,
    max_model_len: int | None = None,
    with_average_risk: bool = True,
) -> LimitAdvice:
    """The figures of :func:`risk_bounded_concurrency` that a plan records (identical values), without the
    ones only reports show (risk curve, worst-case risk, explanation): each of those is one or more
    further convolutions, a third of the cost on the admission path. ``with_average_risk=False`` skips
    one more: the average request's risk, which only a plan's notes print (about an eighth of a
    profiled admission review's CPU)."""
    found = _search(kv, profile, headroom, target_risk, max_model_len)
    return LimitAdvice(
        max_num_seqs=found.n_star,
        risk=found.risk,
        target_risk=found.target,
        worst_case_max_num_seqs=found.worst,
        average_max_num_seqs=found.average,
        average_risk=found.engine.risk(found.average) if with_average_risk else None,
        average_request_tokens=found.average_tokens,
    )


def risk_bounded_concurrency(
    kv: KvCapacity,
    profile: WorkloadProfile,
    *,
    headroom: float = 0.1,
    target_risk: float | None = None,
    max_model_len: int | None = None,
    with_curve: bool = True,
) -> ConcurrencyAdvice:
    """The largest ``--max-num-seqs`` whose overflow probability stays within the target.

    Overflow: the running sequences together need more than ``floor(usable_blocks * (1 - headroom))``
    blocks. ``target_risk`` defaults to the profile's; ``max_model_len`` to the plan's.
    ``with_curve=False`` skips the risk curve (most of the cost), for callers that need only the answer
    and the worst-case/average comparison (:func:`risk_bounded_limit` skips more).
    """
    found = _search(kv, profile, headroom, target_risk, max_model_len)
    target, m, occupancy, engine = found.target, found.max_model_len, found.occupancy, found.engine
    usable, capacity, unit, unit_pmf, n_max = found.usable, found.capacity, found.unit, found.unit_pmf, found.n_max
    n_star, risk, per_max, worst, average = found.n_star, found.risk, found.per_max, found.worst, found.average
    average_tokens = found.average_tokens

    curve_points = _curve_points(
        n_star, worst=worst, average=average, capacity=capacity, mean_blocks=occupancy.mean_blocks, n_max=n_max
    )
    curve: list[RiskPoint] = []
    if with_curve:
        curve_risks = engine.risks(curve_points)
        curve = [RiskPoint(max_num_seqs=n, risk=r) for n, r in zip(curve_points, curve_risks, strict=True)]

    advice = ConcurrencyAdvice(
        max_num_seqs=n_star,
        risk=risk,
        target_risk=target,
        headroom=headroom,
        usable_blocks=usable,
        capacity_blocks=capacity,
        block_size=kv.block_size,
        max_model_len=m,
        expected_usage=(n_star * occupancy.mean_blocks / usable) if usable else 0.0,
        worst_case_max_num_seqs=worst,
        worst_case_risk=engine.risk(worst),
        vllm_max_concurrency=kv.max_concurrency,
        average_max_num_seqs=average,
        average_risk=engine.risk(average),
        average_request_tokens=average_tokens,
        blocks_per_max_len_request=per_max,
        mean_blocks_per_sequence=occupancy.mean_blocks,
        p99_blocks_per_sequence=occupancy.blocks_quantile(0.99),
        mean_prompt_tokens=occupancy.mean_prompt_tokens,
        mean_output_tokens=occupancy.mean_output_tokens,
        mean_decode_steps=occupancy.mean_decode_steps,
        rejected_fraction=occupancy.rejected_fraction,
        prefix_cache_hit_rate=profile.prefix_cache_hit_rate,
        risk_curve=curve,
        method=_method(unit, occupancy),
        block_unit=unit,
        token_resolution=occupancy.token_resolution,
        explanation=_explain(
            n_star,
            risk=risk,
            target=target,
            capacity=capacity,
            usable=usable,
            headroom=headroom,
            per_max=per_max,
            worst=worst,
            average=average,
            average_tokens=average_tokens,
            occupancy=occupancy,
            profile=profile,
            engine=engine,
        ),
    )
    engine.release()
    advice._engine = engine
    advice._unit_pmf = unit_pmf
    return advice


def _curve_points(n_star: int, *, worst: int, average: int, capacity: int, mean_blocks: float, n_max: int) -> list[int]:
    mean_based = int(capacity / mean_blocks) if mean_blocks > 0 else 0
    anchor = max(n_star, 1)
    points = {1, worst, average, mean_based, n_max + 1}
    points.update(anchor + d for d in (-2, -1, 0, 1, 2, 4))
    points.update(int(anchor * f) for f in (0.25, 0.5, 0.75, 0.9, 1.1, 1.25, 1.5, 2.0))
    return sorted(p for p in points if 1 <= p <= min(MAX_SEQS, n_max + 1))


def _method(unit: int, occupancy: Occupancy) -> str:
    parts = [
        "max_num_seqs by a spectral search of the per-sequence block distribution, each judgement with an error "
        "bound (by exact convolution where it declines); risks by exact convolution"
    ]
    if unit > 1:
        parts.append(f"blocks counted in units of {unit} (mean-preserving split)")
    if occupancy.token_resolution > 1:
        parts.append(f"lengths rounded up to {occupancy.token_resolution}-token cells")
    return "; ".join(parts)


def _explain(
    n_star: int,
    *,
    risk: float,
    target: float,
    capacity: int,
    usable: int,
    headroom: float,
    per_max: int,
    worst: int,
    average: int,
    average_tokens: int,
    occupancy: Occupancy,
    profile: WorkloadProfile,
    engine: TruncatedSums,
) -> list[str]:
    lines = [
        f"A running request holds {occupancy.mean_blocks:.1f} KV blocks on average "
        f"({occupancy.blocks_quantile(0.99)} at p99, {per_max} at max_model_len={occupancy.max_model_len}); "
        "longer requests are counted more often because they run longer.",
        f"Requests may use {capacity} of {usable} usable blocks (headroom {headroom:.0%}).",
    ]
    if n_star > 0:
        lines.append(
            f"max_num_seqs={n_star}: the running requests overflow that with probability {risk:.3%} "
            f"(target {target:.3%}); {n_star + 1} would give {engine.risk(n_star + 1):.3%}."
        )
    else:
        lines.append(
            f"Even one running request overflows {capacity} blocks with probability {engine.risk(1):.3%} "
            f"(target {target:.3%}): lower max_model_len or give the cache more memory."
        )
    lines.append(
        f"Worst case (every request at max_model_len): max_num_seqs={worst}; sized on one average request "
        f"({average_tokens} tokens): {average}, which overflows with probability {engine.risk(average):.1%}."
    )
    if occupancy.rejected_fraction > 0.0005:
        lines.append(
            f"{occupancy.rejected_fraction:.2%} of prompts are {occupancy.max_model_len} tokens or longer: "
            "vLLM refuses them (they are left out)."
        )
    if profile.prefix_cache_hit_rate > 0:
        lines.append(
            f"Prefix-cache credit: {profile.prefix_cache_hit_rate:.0%} of each prompt is assumed to sit in "
            "blocks shared with other requests."
        )
    return lines
