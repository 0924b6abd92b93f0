"""A vLLM ``/metrics`` page -> per-engine observations, the same whatever the release.

The page is parsed with prometheus_client's exposition parser. Only the families kv-planner reads are
handed to it (lines are selected by metric name first), which keeps a scrape of a 100 kB vLLM page to
a few milliseconds of CPU; lines of other families are not interpreted.

Normalization across releases (research/vllm-internals.md §7.3, checked in each release's source):

* KV usage: ``vllm:kv_cache_usage_perc`` (0.10.1+), else ``vllm:gpu_cache_usage_perc`` (0.8.5 V1,
  V0, and shown next to the new name until 0.11); the family used is reported.
* ``engine`` label: present on V1 pages; a page without it (the V0 engine) is engine ``"0"``.
* ``vllm:cache_config_info``: ``num_gpu_blocks`` / ``block_size`` labels, ``engine`` label from 0.10.1
  (without it the values apply to every engine of the page); ``"None"`` values count as missing.
* counters are read from their ``_total`` samples (0.8.5 registered the suffix itself, later releases
  let prometheus_client add it; the exposition is the same).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from admission.observations.model import Buckets, EngineObservation
from planner.errors import ScrapeError

USAGE_NEW = "vllm:kv_cache_usage_perc"
USAGE_OLD = "vllm:gpu_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
CACHE_CONFIG = "vllm:cache_config_info"
PROMPT = "vllm:request_prompt_tokens"
GENERATION = "vllm:request_generation_tokens"


SIGNALS = (
    "kv_cache_usage",
    "preemptions",
    "requests_running",
    "requests_waiting",
    "cache_config",
    "prompt_tokens",
    "generation_tokens",
)


# Whole lines (samples, HELP, TYPE) of the families read, matched in one pass over the page.
_WANTED_LINE = re.compile(
    r"^(?:# (?:HELP|TYPE) )?vllm:(?:kv_cache_usage_perc|gpu_cache_usage_perc|num_preemptions(?:_total)?"
    r"|num_requests_running|num_requests_waiting|cache_config_info"
    r"|request_(?:prompt|generation)_tokens(?:_bucket|_sum|_count)?)(?=[{ \t]).*$",
    re.MULTILINE,
)


def select_lines(text: str) -> str:
    """Keep the samples and HELP/TYPE lines of the families kv-planner reads."""
    return "\n".join(_WANTED_LINE.findall(text)) + "\n"


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(select_lines(text)):
            for sample in family.samples:
                out[sample.name].append((dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise ScrapeError(f"not a valid Prometheus exposition: {error}") from None
    return out


def _int_label(labels: dict[str, str], name: str) -> int | None:
    value = labels.get(name)
    if value is None:
        return None
    try:
        number = int(float(value))
    except ValueError:
        return None  # "None" before the engine has sized its cache
    return number if number > 0 else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def parse_page(text: str) -> tuple[list[EngineObservation], list[str]]:
    """Engines found on the page and the signals it lacks. Raises ScrapeError for unusable pages."""
    samples = _samples(text)
    if not samples:
        raise ScrapeError("no vLLM metrics on the page (is this a vLLM /metrics endpoint?)")
    engines: dict[str, dict[str, Any]] = {}

    def engine_of(labels: dict[str, str]) -> dict[str, Any]:
        key = labels.get("engine") or "0"
        entry = engines.setdefault(key, {"engine": key})
        if labels.get("model_name") and "model_name" not in entry:
            entry["model_name"] = labels["model_name"]
        return entry

    for metric, field in ((PREEMPTIONS, "preemptions_total"), (RUNNING, "running"), (WAITING, "waiting")):
        for labels, value in samples.get(metric, []):
            entry = engine_of(labels)
            entry[field] = (entry.get(field) or 0.0) + (_finite(value) or 0.0)
    for metric in (USAGE_OLD, USAGE_NEW):  # the new name wins where both are shown
        for labels, value in samples.get(metric, []):
            if _finite(value) is not None:
                entry = engine_of(labels)
                entry["kv_cache_usage"] = value
                entry["usage_metric"] = metric
    for family, field in ((PROMPT, "prompt_tokens"), (GENERATION, "generation_tokens")):
        per_engine: dict[str, dict[float, float]] = defaultdict(dict)
        for labels, value in samples.get(f"{family}_bucket", []):
            le = labels.get("le")
            if le is None:
                continue
            bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
            entry = engine_of(labels)
            buckets = per_engine[entry["engine"]]
            buckets[bound] = buckets.get(bound, 0.0) + value
        for engine, buckets in per_engine.items():
            engines[engine][field] = sorted(buckets.items())
        for labels, value in samples.get(f"{family}_sum", []):
            engine_of(labels)[f"{field}_sum"] = _finite(value)
    shared: dict[str, int] = {}
    for labels, _value in samples.get(CACHE_CONFIG, []):
        blocks, size = _int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size")
        if "engine" in labels:
            entry = engine_of(labels)
            if blocks is not None:
                entry["num_gpu_blocks"] = blocks
            if size is not None:
                entry["block_size"] = size
        else:
            shared.update({k: v for k, v in (("num_gpu_blocks", blocks), ("block_size", size)) if v is not None})
    if shared:
        if not engines:
            engines["0"] = {"engine": "0"}
        for entry in engines.values():
            for key, value in shared.items():
                entry.setdefault(key, value)
    observations = [EngineObservation(**entry) for _, entry in sorted(engines.items())]
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
