"""The workload profile: the request-length mix a deployment serves (CONTRACTS.md "Workload profile").

The same shape is accepted in the ``kv-planner.io/workload`` annotation, the policy's ``workload``
key and ``--workload FILE``::

    prompt_tokens: {p50: 800, p90: 3000, p99: 12000}   # percentiles (p1..p99.9, min, max)
    output_tokens: {p50: 200, p90: 800, p99: 2000}
    prefix_cache_hit_rate: 0.0     # optional credit, 0..1
    target_risk: 0.01              # P(running sequences need more blocks than exist)

A length may also be a plain number (every request has that length) or inline histogram buckets
``{histogram: [[128, 40], [512, 300], ["+Inf", 2]]}`` (``le``, requests in the bucket, not cumulative).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import PlannerInputError, WorkloadProfileError
from planner.untrusted import load_yaml
from planner.workload.distribution import LengthDistribution, percentile_level

MIN_TARGET_RISK = 1e-9
"""Below this the FFT round-off (about 1e-12 on a probability) is no longer negligible."""


def _parse_le(value: Any) -> float:
    if isinstance(value, str) and value.strip().lower() in ("+inf", "inf"):
        return math.inf
    if isinstance(value, bool):
        raise ValueError(f"bucket bound {value!r} is not a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"bucket bound {value!r} is not a number or '+Inf'") from None


class HistogramSpec(BaseModel):
    """Inline histogram: ``[[le, count], ...]``, counts per bucket (not cumulative), ``le`` may be +Inf."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    histogram: list[tuple[Any, float]] = Field(min_length=1)

    @field_validator("histogram")
    @classmethod
    def _check(cls, buckets: list[tuple[Any, float]]) -> list[tuple[Any, float]]:
        parsed = [(_parse_le(le), count) for le, count in buckets]
        LengthDistribution.from_histogram(parsed)  # raises WorkloadProfileError (a ValueError) if unusable
        return [("+Inf" if le == math.inf else le, count) for le, count in parsed]

    def distribution(self) -> LengthDistribution:
        return LengthDistribution.from_histogram((_parse_le(le), count) for le, count in self.histogram)


def _check_percentiles(points: dict[str, float]) -> dict[str, float]:
    for key in points:
        percentile_level(key)
    LengthDistribution.from_percentiles(points)
    return points


LengthSpec = Union[  # noqa: UP007  (pydantic needs the Union spelled out for the smart-mode choice)
    Annotated[int, Field(ge=1, le=100_000_000)],
    HistogramSpec,
    dict[str, float],
]


_Spec = Union[int, HistogramSpec, dict[str, float]]  # noqa: UP007


def _distribution(spec: _Spec) -> LengthDistribution:
    if isinstance(spec, HistogramSpec):
        return spec.distribution()
    if isinstance(spec, dict):
        return LengthDistribution.from_percentiles(spec)
    return LengthDistribution.fixed(spec)


class WorkloadProfile(BaseModel):
    """Request lengths (prompt and output tokens) and the overflow risk the operator accepts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: LengthSpec = Field(description="prompt length: percentiles, a number or histogram buckets")
    output_tokens: LengthSpec = Field(description="output length: percentiles, a number or histogram buckets")
    prefix_cache_hit_rate: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="fraction of prompt tokens served from blocks shared with other requests (a credit)",
    )
    target_risk: float = Field(
        default=0.01,
        ge=MIN_TARGET_RISK,
        le=0.5,
        description="accepted probability that the running sequences need more KV blocks than exist",
    )

    @field_validator("prompt_tokens", "output_tokens")
    @classmethod
    def _check_lengths(cls, value: _Spec) -> _Spec:
        if isinstance(value, dict):
            return _check_percentiles(value)
        return value

    @cached_property
    def prompt_distribution(self) -> LengthDistribution:
        return _distribution(self.prompt_tokens)

    @cached_property
    def output_distribution(self) -> LengthDistribution:
        return _distribution(self.output_tokens)


def parse_workload(data: Any, *, source: str = "workload") -> WorkloadProfile:
    """Validate a decoded profile (dict), raising :class:`WorkloadProfileError` with a readable message."""
    if isinstance(data, WorkloadProfile):
        return data
    if not isinstance(data, dict):
        raise WorkloadProfileError(
            f"{source}: expected a mapping with prompt_tokens and output_tokens, got {type(data).__name__}"
        )
    try:
        return WorkloadProfile.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in error.errors()[:5])
        raise WorkloadProfileError(
            f"{source}: {problems}",
            hint="see docs/workload.md for the format, e.g. "
            "{prompt_tokens: {p50: 800, p99: 12000}, output_tokens: {p50: 200, p99: 2000}}",
        ) from None


def parse_workload_text(text: str, *, source: str = "workload") -> WorkloadProfile:
    """Parse YAML or JSON text (an annotation value, a policy entry, a file's content)."""
    try:
        data = load_yaml(text, source=source)
    except PlannerInputError as error:
        raise WorkloadProfileError(str(error)) from None
    return parse_workload(data, source=source)
