"""State the exporter keeps between scrapes: per-target error counters and other parts' metrics.

Everything else is rebuilt per scrape. Error counters of a target are dropped when the target is no
longer discovered, so a deleted pod leaves no series behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from admission.observations.model import Snapshot

PodKey = tuple[str, str, str]
FamilyProvider = Callable[[], Iterable[Metric]]


class ExporterState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: dict[PodKey, dict[str, int]] = {}
        self._providers: list[FamilyProvider] = []

    def record(self, snapshot: Snapshot) -> None:
        with self._lock:
            present = {(o.target.namespace, o.target.pod, o.target.workload) for o in snapshot.targets}
            for key in list(self._errors):
                if key not in present:
                    del self._errors[key]
            for obs in snapshot.targets:
                if not obs.up and obs.error is not None:
                    key = (obs.target.namespace, obs.target.pod, obs.target.workload)
                    reasons = self._errors.setdefault(key, {})
                    reasons[obs.error] = reasons.get(obs.error, 0) + 1

    def scrape_errors(self) -> dict[PodKey, dict[str, int]]:
        with self._lock:
            return {key: dict(value) for key, value in self._errors.items()}

    def add_provider(self, provider: FamilyProvider) -> None:
        """Discovery and the retuner contribute their own families (rendered on every scrape)."""
        self._providers.append(provider)

    def extra_families(self) -> list[Metric]:
        out: list[Metric] = []
        for provider in list(self._providers):
            out.extend(provider())
        return out
