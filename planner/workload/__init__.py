"""Workload-aware limits: request-length distributions and risk-bounded ``--max-num-seqs``.

    from planner.workload import parse_workload, risk_bounded_concurrency
    profile = parse_workload({"prompt_tokens": {"p50": 800, "p99": 12000},
                              "output_tokens": {"p50": 200, "p99": 2000}})
    advice = risk_bounded_concurrency(plan.kv_cache, profile, headroom=0.1)

Pure library (numpy only): no web, metrics or cluster imports. docs/workload.md has the maths.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.workload.capacity import BlockCapacity, KvCapacity, capacity_for_blocks
    from planner.workload.concurrency import ConcurrencyAdvice, RiskPoint, risk_bounded_concurrency
    from planner.workload.distribution import LengthDistribution
    from planner.workload.files import (
        buckets_from_prometheus_result,
        histogram_csv_buckets,
        load_workload_file,
        profile_from_histograms,
    )
    from planner.workload.profile import HistogramSpec, WorkloadProfile, parse_workload, parse_workload_text

# Names are resolved on first use (PEP 562): a plan without a workload never imports numpy.
_HOME = {
    "BlockCapacity": "capacity",
    "KvCapacity": "capacity",
    "capacity_for_blocks": "capacity",
    "ConcurrencyAdvice": "concurrency",
    "RiskPoint": "concurrency",
    "risk_bounded_concurrency": "concurrency",
    "LengthDistribution": "distribution",
    "buckets_from_prometheus_result": "files",
    "histogram_csv_buckets": "files",
    "load_workload_file": "files",
    "profile_from_histograms": "files",
    "HistogramSpec": "profile",
    "WorkloadProfile": "profile",
    "parse_workload": "profile",
    "parse_workload_text": "profile",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'planner.workload' has no attribute {name!r}")
    return getattr(importlib.import_module(f"planner.workload.{home}"), name)


__all__ = [
    "BlockCapacity",
    "ConcurrencyAdvice",
    "HistogramSpec",
    "KvCapacity",
    "LengthDistribution",
    "RiskPoint",
    "WorkloadProfile",
    "buckets_from_prometheus_result",
    "capacity_for_blocks",
    "histogram_csv_buckets",
    "load_workload_file",
    "parse_workload",
    "parse_workload_text",
    "profile_from_histograms",
    "risk_bounded_concurrency",
]
