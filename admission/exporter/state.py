"""State the exporter keeps between scrapes: per-target error counters, each target's last state, and
other parts' metrics.

Everything else is rebuilt per scrape. Error counters of a target are dropped when the target is no
longer discovered, so a deleted pod leaves no series behind. When a target's state changes (first seen
down, up -> down, down -> up, or down for another reason) one log line says so with the reason and
detail; the alert runbooks (KVPlannerTargetScrapeFailing) send operators to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from admission.observations.model import Snapshot, TargetObservation

logger = logging.getLogger("admission.exporter.targets")

PodKey = tuple[str, str, str]
FamilyProvider = Callable[[], Iterable[Metric]]


class ExporterState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: dict[PodKey, dict[str, int]] = {}
        self._states: dict[PodKey, str | None] = {}  # None: up; else the reason it is down
        self._providers: list[FamilyProvider] = []

    def record(self, snapshot: Snapshot) -> None:
        with self._lock:
            present = {(o.target.namespace, o.target.pod, o.target.workload) for o in snapshot.targets}
            for key in list(self._errors):
                if key not in present:
                    del self._errors[key]
            for key in list(self._states):
                if key not in present:
                    del self._states[key]
            for obs in snapshot.targets:
                key = (obs.target.namespace, obs.target.pod, obs.target.workload)
                if not obs.up and obs.error is not None:
                    reasons = self._errors.setdefault(key, {})
                    reasons[obs.error] = reasons.get(obs.error, 0) + 1
                self._log_change(key, obs)

    def _log_change(self, key: PodKey, obs: TargetObservation) -> None:
        state = None if obs.up else (obs.error or "unknown")
        known = key in self._states
        previous = self._states.get(key)
        self._states[key] = state
        if known and previous == state:
            return
        name = f"{key[0]}/{key[1]}" if key[0] else key[1]
        if state is None:
            if known:
                logger.info("target %s (%s) is up again (was down: %s)", name, obs.target.url, previous)
            return
        logger.warning("target %s (%s) is down: reason=%s: %s", name, obs.target.url, state, obs.detail or "no detail")

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
