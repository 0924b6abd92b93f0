"""vLLM's metric definitions per release, as recorded from each release's wheel.

``vllm_metric_facts.json`` beside this file is written by ``scripts/vllm_facts.py``, which reads the
wheels' Python source with :mod:`ast` (and ``--check`` re-reads them); each release there names the wheel
it came from and its sha256. The tests compare the simulator's catalogue and the exporter's fixture pages
with these facts, so they need neither vLLM's source nor a download.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("vllm_metric_facts.json")


@dataclass(frozen=True)
class SourceFamily:
    name: str  # exposition base name (counters without _total)
    kind: str  # gauge | counter | histogram
    labels: str  # the labelnames expression as written
    buckets: str | None  # the buckets expression, with local names resolved
    conditions: tuple[str, ...]  # enclosing if-tests inside __init__ (empty = always registered)


@functools.cache
def _releases() -> dict[str, dict[str, Any]]:
    releases: dict[str, dict[str, Any]] = json.loads(RECORD.read_text())["releases"]
    return releases


def _release(version: str) -> dict[str, Any]:
    facts = _releases().get(version)
    assert facts is not None, f"vLLM {version} is not recorded in {RECORD.name}: run scripts/vllm_facts.py"
    return facts


def _families(records: list[dict[str, Any]]) -> list[SourceFamily]:
    return [SourceFamily(**{**r, "conditions": tuple(r["conditions"])}) for r in records]


def available_versions() -> list[str]:
    """The releases whose facts are recorded (wheel versions, e.g. 0.8.5.post1), oldest first."""
    return sorted(_releases(), key=lambda v: [int(p) if p.isdigit() else -1 for p in re.split(r"[.-]", v)])


def v1_families(version: str) -> list[SourceFamily]:
    return _families(_release(version)["v1_families"])


def v0_families(version: str) -> list[SourceFamily]:
    records = _release(version)["v0_families"]
    assert records is not None, f"vLLM {version} has no V0 engine metrics"
    return _families(records)


def cache_config_fields(version: str) -> list[str]:
    fields: list[str] = _release(version)["cache_config_fields"]
    return fields


def finish_reason_strings(version: str) -> tuple[str, ...]:
    return tuple(_release(version)["finish_reasons"])


def cache_config_has_engine_label(version: str) -> bool:
    return bool(_release(version)["cache_config_has_engine_label"])


def static_bucket_source(version: str, family: str) -> list[float] | None:
    """0.33 keeps bucket families in vllm/v1/metrics/buckets.py as module constants."""
    constants: dict[str, list[float]] | None = _release(version)["static_buckets"]
    if constants is None:
        return None
    return constants.get(f"{family.upper()}_BUCKETS")
