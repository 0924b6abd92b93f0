"""The exporter: on each Prometheus scrape, read every target inside the announced budget and render.

Prometheus sends ``X-Prometheus-Scrape-Timeout-Seconds``; the exporter answers within that minus
``timeout_offset_s`` (like blackbox/snmp exporters): that is the deadline of the whole collection, and
each target gets a share of it derived from its own recent reads (:mod:`admission.exporter.timeouts`:
``scrape_timeout_s`` for a fast or unresponsive target, more for one that is normally slow, at most
``scrape_timeout_max_s``).
Targets beyond ``max_targets`` are dropped (deterministically, by namespace/pod) and counted, which
bounds the exporter's own cardinality; each target's page is bounded by ``max_body_bytes`` and
:class:`~admission.exporter.normalize.ReadLimits`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

import httpx
from prometheus_client import REGISTRY
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field

from admission.exporter.collector import SnapshotCollector
from admission.exporter.encode import CONTENT_TYPE, render_text
from admission.exporter.normalize import ReadLimits
from admission.exporter.promapi import PrometheusSource
from admission.exporter.scrape import KEEPALIVE_EXPIRY_S, scrape_all
from admission.exporter.state import ExporterState
from admission.exporter.timeouts import TargetTimeouts, TimeoutPolicy
from admission.observations.model import Snapshot, TargetObservation
from admission.observations.targets import Target
from planner.errors import ScrapeError

TargetProvider = Callable[[], Sequence[Target]]

_LOG = logging.getLogger("admission.exporter")


class ScrapeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scrape_timeout_s: float = Field(default=1.0, gt=0, description="per target, unless its history asks more")
    scrape_timeout_max_s: float = Field(default=5.0, gt=0, description="per target, at most")
    timeout_offset_s: float = Field(default=0.5, ge=0, description="kept back from Prometheus' timeout")
    default_budget_s: float = Field(default=10.0, gt=0, description="Prometheus' default scrape timeout")
    max_targets: int = Field(default=500, ge=1)
    max_concurrency: int = Field(default=64, ge=1)
    # A vLLM 0.33 page with 8 data-parallel engines is ~0.5 MB; 4 MiB leaves room and bounds memory
    # (64 concurrent reads x 4 MiB).
    max_body_bytes: int = Field(default=4 << 20, ge=1024)
    read_limits: ReadLimits = ReadLimits()

    def budget(self, header: str | None) -> float:
        """Seconds this collection may take, from ``X-Prometheus-Scrape-Timeout-Seconds``."""
        announced = self.default_budget_s
        if header:
            try:
                value = float(header)
                if value > 0:
                    announced = value
            except ValueError:
                pass
        return max(0.1, announced - self.timeout_offset_s)


def unique_targets(targets: Sequence[Target]) -> list[Target]:
    """Targets with distinct (namespace, pod): a later one sharing both gets its URL path in ``pod``.

    Two servers of one pod (or of one host behind a proxy, ``host:port/a/metrics`` and
    ``host:port/b/metrics``) must not export the same series twice.
    """
    seen: set[tuple[str, str]] = set()
    out: list[Target] = []
    for given in targets:
        target = given
        if target.key in seen:
            base = f"{target.pod}{urlsplit(target.url).path}"
            target, suffix = target.model_copy(update={"pod": base}), 2
            while target.key in seen:
                target, suffix = target.model_copy(update={"pod": f"{base}#{suffix}"}), suffix + 1
        seen.add(target.key)
        out.append(target)
    return out


class _Composite(Collector):
    def __init__(self, parts: Iterable[Collector]) -> None:
        self.parts = list(parts)

    def collect(self) -> Iterable[Metric]:
        for part in self.parts:
            yield from part.collect()


class Exporter:
    def __init__(
        self,
        settings: ScrapeSettings,
        *,
        targets: TargetProvider | None = None,
        prometheus: PrometheusSource | None = None,
        state: ExporterState | None = None,
        source: str = "static",
        include_process_metrics: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._targets = targets or (lambda: [])
        self.prometheus = prometheus
        self.state = state or ExporterState()
        self.source = source
        self.include_process_metrics = include_process_metrics
        self.transport = transport  # None: real network; tests pass an httpx.MockTransport
        # One HTTP client per event loop: an httpx client belongs to the loop that created it (the server
        # has one loop; tests and the benchmark may drive the exporter from others).
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        # Target reads use one small client per target origin: httpcore's pool re-examines every
        # connection it holds on each request and response, so one pool of 50 busy connections cost
        # about half of the exporter's CPU per scrape; 50 pools of one connection cost nothing.
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, httpx.AsyncClient]] = (
            weakref.WeakKeyDictionary()
        )
        self.last_snapshot: Snapshot | None = None
        self.timeouts = TargetTimeouts(
            TimeoutPolicy(
                floor_s=settings.scrape_timeout_s, cap_s=max(settings.scrape_timeout_s, settings.scrape_timeout_max_s)
            )
        )
        # Built once: a new client would otherwise load the CA bundle again (~35 ms of CPU each).
        self._tls = ssl.create_default_context()

    def _client(self, connections: int) -> httpx.AsyncClient:
        limits = httpx.Limits(
            max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=KEEPALIVE_EXPIRY_S
        )
        # Per-request deadlines come from the budget (asyncio.wait_for); this is only a backstop.
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.settings.scrape_timeout_s),
            limits=limits,
            follow_redirects=False,
            trust_env=False,
            verify=self._tls,
            transport=self.transport,
        )

    def _http(self) -> httpx.AsyncClient:
        """The client for the Prometheus API source."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._client(self.settings.max_concurrency)
        return client

    def _target_client(self, target: Target) -> httpx.AsyncClient:
        pools = self._pools.setdefault(asyncio.get_running_loop(), {})
        parts = urlsplit(target.url)
        origin = f"{parts.scheme}://{parts.netloc}"
        client = pools.get(origin)
        if client is None:
            # Two connections: a scrape and a retuner round may read one target at the same time.
            client = pools[origin] = self._client(2)
        return client

    async def _prune_pools(self, targets: Sequence[Target]) -> None:
        pools = self._pools.get(asyncio.get_running_loop(), {})
        wanted = {f"{urlsplit(t.url).scheme}://{urlsplit(t.url).netloc}" for t in targets}
        for origin in [o for o in pools if o not in wanted]:
            await pools.pop(origin).aclose()

    def targets(self) -> tuple[list[Target], int]:
        everything = unique_targets(sorted(self._targets(), key=lambda t: (t.key, t.url)))
        kept = everything[: self.settings.max_targets]
        return kept, len(everything) - len(kept)

    async def snapshot(self, budget_s: float, *, record: bool = True) -> Snapshot:
        """Read every target now. ``record=False`` for the retuner's own rounds (no error counting)."""
        started = time.monotonic()
        targets, dropped = self.targets()
        observations: list[TargetObservation]
        source_error: str | None = None
        if self.prometheus is not None:
            try:
                observations = await self.prometheus.collect(self._http(), budget_s=budget_s, metadata=targets)
            except ScrapeError as error:
                # Prometheus itself is unreadable: every known target is unknown, not zero; say so once
                # as a metric (kv_planner_source_up 0) and in the log, even when no target is known yet.
                source_error = error.message
                _LOG.warning("cannot read the Prometheus API: %s", error.message)
                observations = [
                    TargetObservation(target=t, up=False, error="connect", detail=error.message) for t in targets
                ]
            dropped += max(0, len(observations) - self.settings.max_targets)
            observations = observations[: self.settings.max_targets]
        else:
            await self._prune_pools(targets)
            observations = await scrape_all(
                self._target_client,
                targets,
                budget_s=budget_s,
                timeout_for=lambda target: self.timeouts.timeout_for(target.url),
                max_bytes=self.settings.max_body_bytes,
                concurrency=self.settings.max_concurrency,
                limits=self.settings.read_limits,
            )
            self.timeouts.forget_except({t.url for t in targets})
            for obs in observations:
                if obs.error != "budget":  # the collection's fault, not the target's
                    self.timeouts.record(obs.target.url, obs.duration_s if obs.up else None)
        snapshot = Snapshot(
            targets=observations,
            dropped_targets=dropped,
            budget_s=budget_s,
            duration_s=time.monotonic() - started,
            source=self.source,
            source_error=source_error,
        )
        if record:
            self.state.record(snapshot)
            self.last_snapshot = snapshot
        return snapshot

    def registry_for(self, snapshot: Snapshot) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=False)
        parts: list[Collector] = [SnapshotCollector(snapshot, self.state)]
        if self.include_process_metrics:
            parts.append(REGISTRY)  # process_*, python_* of the exporter itself
        registry.register(_Composite(parts))
        return registry

    async def render(self, budget_s: float, accept: str | None = None) -> tuple[bytes, str]:
        """The scrape's body, always in the text format 0.0.4 (Prometheus reads it whatever it asked
        for first; ``accept`` is kept for the caller's signature): see :mod:`admission.exporter.encode`."""
        snapshot = await self.snapshot(budget_s)
        return render_text(self.registry_for(snapshot).collect()), CONTENT_TYPE

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.aclose()
        for pooled in self._pools.pop(loop, {}).values():
            await pooled.aclose()
