"""What the exporter learned about one target in one collection pass (the snapshot its collectors render)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from admission.observations.targets import Target

ErrorReason = Literal[
    "timeout", "connect", "http_status", "too_large", "too_many_series", "label_too_long", "parse", "not_vllm", "budget"
]
ERROR_REASONS: tuple[str, ...] = (
    "timeout",
    "connect",
    "http_status",
    "too_large",
    "too_many_series",
    "label_too_long",
    "parse",
    "not_vllm",
    "budget",
)

Buckets = list[tuple[float, float]]  # cumulative (le, count), +Inf last


class EngineObservation(BaseModel):
    """One vLLM engine (data-parallel rank) of a target, normalized across releases."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    model_name: str = ""
    kv_cache_usage: float | None = None
    usage_metric: str | None = Field(default=None, description="the vLLM family the usage came from")
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    preemptions_total: float | None = None
    running: float | None = None
    waiting: float | None = None
    prompt_tokens: Buckets | None = None
    prompt_tokens_sum: float | None = None
    generation_tokens: Buckets | None = None
    generation_tokens_sum: float | None = None
    # Counters since vLLM started (None: the page does not carry the family).
    prompt_tokens_processed: float | None = None
    generation_tokens_processed: float | None = None
    finished: dict[str, float] | None = Field(default=None, description="finished requests by vLLM finish reason")
    queue_time_sum_s: float | None = None
    queue_time_count: float | None = None
    e2e_latency_sum_s: float | None = None
    e2e_latency_count: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    waiting_by_reason: dict[str, float] | None = Field(default=None, description="capacity / deferred (0.20.2+)")
    spec_decode_drafts: float | None = None
    spec_decode_draft_tokens: float | None = None
    spec_decode_accepted_tokens: float | None = None
    kv_offload_bytes: dict[str, float] | None = Field(default=None, description="store / load bytes")


class TargetObservation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: Target
    up: bool
    error: ErrorReason | None = None
    detail: str | None = None
    duration_s: float = 0.0
    engines: list[EngineObservation] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list, description="signals the page did not carry")


class Snapshot(BaseModel):
    """One collection pass over every target."""

    model_config = ConfigDict(extra="forbid")

    targets: list[TargetObservation] = Field(default_factory=list)
    dropped_targets: int = 0
    duration_s: float = 0.0
    budget_s: float = 0.0
    source: str = "static"
    source_error: str | None = Field(
        default=None, description="why the target source itself (the Prometheus API) could not be read"
    )
