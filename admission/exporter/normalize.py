"""A vLLM ``/metrics`` page -> per-engine observations, the same whatever the release.

Names come from the one catalogue (:mod:`planner.vllm.metrics_catalog`), the page is read by the one
parser (:mod:`planner.vllm.exposition`), which interprets only the families listed in :data:`READ_NAMES`
and enforces :class:`ReadLimits`. Normalization across releases (research/vllm-internals.md §7.3,
checked in each release's source):

* KV usage: ``vllm:kv_cache_usage_perc`` (0.10.1+), else ``vllm:gpu_cache_usage_perc`` (0.8.5 V1,
  V0, and shown next to the new name until 0.11); the family used is reported.
* prefix cache: ``vllm:prefix_cache_*`` (0.10.1+), else ``vllm:gpu_prefix_cache_*`` (V1 <= 0.11).
* ``engine`` label: present on V1 pages; a page without it (the V0 engine) is engine ``"0"``.
* ``vllm:cache_config_info``: ``num_gpu_blocks`` / ``block_size`` labels, ``engine`` label from 0.10.1
  (without it the values apply to every engine of the page); ``"None"`` values count as missing.
* KV offload traffic: ``vllm:kv_offload_store_bytes``/``load_bytes`` (0.33), else
  ``vllm:kv_offload_total_bytes{transfer_type="GPU_to_CPU"|"CPU_to_GPU"}`` (0.16+).
* counters are read from their ``_total`` samples (0.8.5 registered the suffix itself, later releases
  let prometheus_client add it; the exposition is the same).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from admission.observations.model import Buckets, EngineObservation
from planner.errors import ExpositionLimitError, ScrapeError
from planner.vllm import metrics_catalog as catalog
from planner.vllm.exposition import Exposition, ParseLimits, Sample, Steps, bucket_bound, parse_steps, run_steps

USAGE_NEW = catalog.exposed_name("kv_cache_usage")
USAGE_OLD = catalog.exposed_name("gpu_cache_usage")
CACHE_CONFIG = catalog.CACHE_CONFIG_INFO
PROMPT = catalog.exposed_name("request_prompt_tokens")
GENERATION = catalog.exposed_name("request_generation_tokens")
QUEUE_TIME = catalog.exposed_name("request_queue_time")
PREEMPTIONS = catalog.exposed_name("num_preemptions")
RUNNING = catalog.exposed_name("running")
WAITING = catalog.exposed_name("waiting")
E2E_LATENCY = catalog.exposed_name("e2e_request_latency")

# The queue-time and end-to-end histograms are read as _sum/_count only (a mean per rate window):
# their buckets are the costliest lines of a page and the dashboards take quantiles from vLLM directly.
READ_NAMES: frozenset[str] = catalog.read_sample_names() - {f"{QUEUE_TIME}_bucket", f"{E2E_LATENCY}_bucket"}

# Finish reasons vLLM knows (vllm X.Y.Z vllm/v1/engine/__init__.py: FINISH_REASON_STRINGS, all releases);
# any other value is counted as "other", so a page cannot mint label values.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
WAITING_REASONS = catalog.WAITING_REASONS

SIGNALS = (
    "kv_cache_usage",
    "preemptions",
    "requests_running",
    "requests_waiting",
    "cache_config",
    "prompt_tokens",
    "generation_tokens",
)


class ReadLimits(BaseModel):
    """What one target's page may make the exporter hold; beyond it the target is down with a reason."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_samples: int = Field(default=20_000, ge=1, description="samples of the read families per page")
    max_label_value_chars: int = Field(default=256, ge=1, description="characters per label value read")
    max_engines: int = Field(default=64, ge=1, description="engines (data-parallel ranks) per target")

    def parse_limits(self) -> ParseLimits:
        return ParseLimits(max_samples=self.max_samples, max_label_value_chars=self.max_label_value_chars)


def _int_label(labels: dict[str, str], name: str) -> int | None:
    value = labels.get(name)
    if value is None:
        return None
    try:
        number = int(float(value))
    except (ValueError, OverflowError):
        return None  # "None" before the engine has sized its cache
    return number if number > 0 else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _count(value: float) -> float | None:
    """A histogram's bucket count or sum: finite and not negative, else unusable (None)."""
    return value if math.isfinite(value) and value >= 0 else None


class _Engines:
    """Per-engine accumulation, bounded in number of engines."""

    def __init__(self, max_engines: int) -> None:
        self.max_engines = max_engines
        self.entries: dict[str, dict[str, Any]] = {}

    def of(self, labels: dict[str, str]) -> dict[str, Any]:
        key = labels.get("engine") or "0"
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= self.max_engines:
                raise ExpositionLimitError("too_many_series", f"more than {self.max_engines} engines on one page")
            entry = self.entries[key] = {"engine": key}
        if "model_name" not in entry and labels.get("model_name"):
            entry["model_name"] = labels["model_name"]
        return entry

    def add(self, samples: list[Sample], field: str) -> None:
        for labels, value in samples:
            entry = self.of(labels)
            entry[field] = (entry.get(field) or 0.0) + (_finite(value) or 0.0)

    def add_by(self, samples: list[Sample], field: str, label: str, allowed: tuple[str, ...], other: str) -> None:
        for labels, value in samples:
            entry = self.of(labels)
            given = labels.get(label, "")
            kind = given if given in allowed else other
            table = entry.setdefault(field, {})
            table[kind] = table.get(kind, 0.0) + (_finite(value) or 0.0)


def _buckets(page: Exposition, engines: _Engines, family: str, field: str) -> None:
    """An engine's histogram, left out when a bucket is not a count (NaN, infinite, negative): the
    quantiles, the exporter's summary and the retuner's length means are computed from it."""
    per_engine: dict[str, dict[float, float]] = {}
    unusable: set[str] = set()
    for labels, value in page.get(f"{family}_bucket"):
        le = labels.get("le")
        if le is None:
            continue
        entry = engines.of(labels)
        bound = bucket_bound(le)
        if _count(value) is None:
            unusable.add(entry["engine"])
            continue
        buckets = per_engine.setdefault(entry["engine"], {})
        buckets[bound] = buckets.get(bound, 0.0) + value
    for engine, buckets in per_engine.items():
        if engine not in unusable:
            engines.entries[engine][field] = sorted(buckets.items())
    for labels, value in page.get(f"{family}_sum"):
        engines.of(labels)[f"{field}_sum"] = _count(value)


def _offload(page: Exposition, engines: _Engines) -> None:
    flat = (
        ("store", page.get(catalog.exposed_name("kv_offload_store_bytes"))),
        ("load", page.get(catalog.exposed_name("kv_offload_load_bytes"))),
    )
    if any(samples for _, samples in flat):
        for flat_direction, samples in flat:
            for labels, value in samples:
                table = engines.of(labels).setdefault("kv_offload_bytes", {})
                table[flat_direction] = table.get(flat_direction, 0.0) + (_finite(value) or 0.0)
        return
    for labels, value in page.get(catalog.exposed_name("kv_offload_bytes")):
        direction = catalog.offload_direction(labels.get("transfer_type", ""))
        if direction is not None:
            table = engines.of(labels).setdefault("kv_offload_bytes", {})
            table[direction] = table.get(direction, 0.0) + (_finite(value) or 0.0)


def parse_page(text: str, limits: ReadLimits | None = None) -> tuple[list[EngineObservation], list[str]]:
    """Engines found on the page and the signals it lacks.

    Raises ScrapeError for unusable pages: :class:`~planner.errors.ExpositionError` for broken ones,
    :class:`~planner.errors.ExpositionLimitError` for pages beyond ``limits``.
    """
    return run_steps(parse_page_steps(text, limits))


def parse_page_steps(text: str, limits: ReadLimits | None = None) -> Steps[tuple[list[EngineObservation], list[str]]]:
    """:func:`parse_page`, yielding every few lines of the page (see planner.vllm.exposition.parse_steps)."""
    limits = limits or ReadLimits()
    page = yield from parse_steps(text, READ_NAMES, limits.parse_limits())
    return _observations(page, limits)


def _observations(page: Exposition, limits: ReadLimits) -> tuple[list[EngineObservation], list[str]]:
    if not any(page.samples.values()):
        raise ScrapeError("no vLLM metrics on the page (is this a vLLM /metrics endpoint?)")
    engines = _Engines(limits.max_engines)
    name = catalog.exposed_name
    for key, field in (
        ("num_preemptions", "preemptions_total"),
        ("running", "running"),
        ("waiting", "waiting"),
        ("prompt_tokens", "prompt_tokens_processed"),
        ("generation_tokens", "generation_tokens_processed"),
        ("spec_decode_drafts", "spec_decode_drafts"),
        ("spec_decode_draft_tokens", "spec_decode_draft_tokens"),
        ("spec_decode_accepted_tokens", "spec_decode_accepted_tokens"),
    ):
        engines.add(page.get(name(key)), field)
    for new, old, field in (
        ("prefix_cache_queries", "gpu_prefix_cache_queries", "prefix_cache_queries"),
        ("prefix_cache_hits", "gpu_prefix_cache_hits", "prefix_cache_hits"),
    ):
        engines.add(page.get(name(new)) or page.get(name(old)), field)
    for family, field in ((QUEUE_TIME, "queue_time"), (E2E_LATENCY, "e2e_latency")):
        engines.add(page.get(f"{family}_sum"), f"{field}_sum_s")
        engines.add(page.get(f"{family}_count"), f"{field}_count")
    engines.add_by(page.get(name("request_success")), "finished", "finished_reason", FINISH_REASONS, "other")
    engines.add_by(page.get(name("waiting_by_reason")), "waiting_by_reason", "reason", WAITING_REASONS, "other")
    _offload(page, engines)
    for metric in (USAGE_OLD, USAGE_NEW):  # the new name wins where both are shown
        for labels, value in page.get(metric):
            if _finite(value) is not None:
                entry = engines.of(labels)
                entry["kv_cache_usage"] = value
                entry["usage_metric"] = metric
    _buckets(page, engines, PROMPT, "prompt_tokens")
    _buckets(page, engines, GENERATION, "generation_tokens")
    shared: dict[str, int] = {}
    for labels, _value in page.get(CACHE_CONFIG):
        blocks, size = _int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size")
        if "engine" in labels:
            entry = engines.of(labels)
            if blocks is not None:
                entry["num_gpu_blocks"] = blocks
            if size is not None:
                entry["block_size"] = size
        else:
            shared.update({k: v for k, v in (("num_gpu_blocks", blocks), ("block_size", size)) if v is not None})
    if shared:
        if not engines.entries:
            engines.of({})
        for entry in engines.entries.values():
            for key, value in shared.items():
                entry.setdefault(key, value)
    observations = [EngineObservation(**entry) for _, entry in sorted(engines.entries.items())]
    return observations, missing_signals(observations)


def _present(engine: EngineObservation, signal: str) -> bool:
    if signal == "cache_config":
        return engine.num_gpu_blocks is not None and engine.block_size is not None
    field = {
        "kv_cache_usage": "kv_cache_usage",
        "preemptions": "preemptions_total",
        "requests_running": "running",
        "requests_waiting": "waiting",
        "prompt_tokens": "prompt_tokens",
        "generation_tokens": "generation_tokens",
    }[signal]
    return getattr(engine, field) is not None


def missing_signals(engines: list[EngineObservation]) -> list[str]:
    return [s for s in SIGNALS if not engines or not all(_present(e, s) for e in engines)]


def bucket_count(buckets: Buckets | None) -> float:
    return buckets[-1][1] if buckets else 0.0
