"""The retuner's knobs (flags ``--retune-*`` of ``python -m admission exporter``)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RetuneMode = Literal["off", "recommend", "apply"]

# A namespace name (RFC 1123 label): "*", "" and patterns are not namespaces.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class RetunerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: RetuneMode = "recommend"
    interval_s: float = Field(default=60.0, gt=0, description="seconds between observations")
    persist: int = Field(default=3, ge=1, description="consecutive observations a condition must hold")
    high_usage: float = Field(default=0.95, gt=0, le=1, description="'near full' KV usage: pressure")
    min_dwell_s: float = Field(default=900.0, ge=0, description="no change sooner after the last one")
    max_step_down: float = Field(default=0.5, gt=0, lt=1, description="largest cut, as a fraction")
    max_step_up: float = Field(default=0.25, gt=0, description="largest raise, as a fraction")
    min_seqs: int = Field(default=1, ge=1, description="policy floor for --max-num-seqs")
    max_seqs: int | None = Field(default=None, ge=1, description="policy ceiling for --max-num-seqs")
    target_risk: float = Field(default=0.01, gt=0, le=0.5)
    headroom: float = Field(default=0.1, ge=0, lt=1)
    min_requests: int = Field(default=20, ge=1, description="finished requests needed to trust the length means")
    annotate: bool = Field(default=False, description="write kv-planner.io/recommended-max-num-seqs")
    events: bool = True
    apply_min_interval_s: float = Field(default=3600.0, ge=0, description="per workload, between rollouts")
    apply_max_per_hour: int = Field(default=4, ge=1, description="rollouts per hour, all workloads")
    namespaces: tuple[str, ...] = Field(
        default=(), description="the only namespaces written to (Events, annotation, apply); empty: none"
    )

    @field_validator("namespaces")
    @classmethod
    def _namespace_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _NAMESPACE.fullmatch(name):
                raise ValueError(f"{name!r} is not a namespace name (one namespace per entry, no patterns)")
        return tuple(sorted(set(value)))

    @model_validator(mode="after")
    def _bands(self) -> RetunerSettings:
        if self.max_seqs is not None and self.max_seqs < self.min_seqs:
            raise ValueError(f"max_seqs ({self.max_seqs}) is below min_seqs ({self.min_seqs})")
        if self.mode == "apply" and not self.namespaces:
            raise ValueError(
                "apply mode writes to workloads: list the namespaces it may write in (--retune-namespaces)"
            )
        if self.annotate and self.mode != "off" and not self.namespaces:
            raise ValueError("the annotation is a write: list the namespaces it may write in (--retune-namespaces)")
        return self
