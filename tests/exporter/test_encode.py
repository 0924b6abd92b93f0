"""The exporter's text encoder writes exactly what prometheus_client's generate_latest writes."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from admission.exporter.encode import render_text
from admission.exporter.service import Exporter, ScrapeSettings
from admission.observations.targets import Target
from tests.exporter.conftest import PAGES


def test_a_full_scrape_renders_byte_for_byte_like_generate_latest() -> None:
    pages = {f"t{i}": page.text for i, page in enumerate(PAGES)}

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=pages[request.url.host])

    targets = [
        Target(url=f"http://{host}:8000/metrics", namespace="ns", pod=f'pod-"{host}"\\\n', workload="w", gpu="L4")
        for host in pages
    ]
    exporter = Exporter(
        ScrapeSettings(), targets=lambda: targets, include_process_metrics=False, transport=httpx.MockTransport(handler)
    )
    registry = exporter.registry_for(asyncio.run(exporter.snapshot(5.0)))
    expected = generate_latest(registry)
    assert render_text(registry.collect()) == expected
    assert b"kv_planner_requests_finished_total{" in expected and b"kv_planner_kv_blocks_total{" in expected


def test_created_samples_and_help_escapes_follow_the_library() -> None:
    class Odd(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            counter = CounterMetricFamily("odd", "help with \\ and\nnewline", labels=["a"], created=12.5)
            counter.add_metric(["x"], 3.0, created=12.5)
            gauge = GaugeMetricFamily("big", "large and special numbers")
            gauge.add_metric([], 123456789.0)
            gauge.add_metric([], float("inf"))
            return [counter, gauge]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Odd())
    assert render_text(registry.collect()) == generate_latest(registry)
