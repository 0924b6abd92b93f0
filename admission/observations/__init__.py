"""Observations shared by the exporter and the retuner: targets, what one collection pass saw, and the
protocol of a snapshot source.

This package sits below both (it imports neither); see admission's layers contract in pyproject.toml.
"""

from __future__ import annotations

from admission.observations.model import (
    ERROR_REASONS,
    Buckets,
    EngineObservation,
    ErrorReason,
    Snapshot,
    TargetObservation,
)
from admission.observations.source import SnapshotSource
from admission.observations.targets import Target, parse_static_target

__all__ = [
    "ERROR_REASONS",
    "Buckets",
    "EngineObservation",
    "ErrorReason",
    "Snapshot",
    "SnapshotSource",
    "Target",
    "TargetObservation",
    "parse_static_target",
]
