"""A scrape in steady state looks nothing up in the import system.

httpcore asks ``import sniffio`` on every request and every connection (``current_async_library``), and
anyio>=4.12 no longer installs it. Without the package, each ask was a failed search of every directory on
``sys.path``: 14-17% of the exporter's instructions per scrape of 50 targets (docs/benchmarks.md). Any other
lazy import on the scrape path would cost the same way, so the test catches the class: after one warm-up
scrape, a second one over real sockets must not reach a path finder at all.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

from admission.exporter.service import Exporter, ScrapeSettings
from admission.observations.targets import Target
from tests.exporter.conftest import PAGES
from tests.exporter.helpers import page_server

GOOD = next(p for p in PAGES if p.release == "0.19.0").text


class _Recorder(importlib.abc.MetaPathFinder):
    """Sits first on ``sys.meta_path``, notes each name looked up, and lets the real finders answer."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        self.names.append(fullname)
        return None


def test_a_warm_scrape_imports_nothing() -> None:
    with page_server(GOOD.encode()) as first, page_server(GOOD.encode()) as second:
        targets = [
            Target(url=server.url, namespace="ml", pod=f"pod-{index}", workload="llm")
            for index, server in enumerate((first, second))
        ]
        exporter = Exporter(ScrapeSettings(), targets=lambda: targets, include_process_metrics=False)

        async def scrape_twice() -> tuple[bytes, list[str]]:
            await exporter.render(5.0)  # warm-up: the first scrape may import what it needs
            recorder = _Recorder()
            sys.meta_path.insert(0, recorder)
            try:
                body, _ = await exporter.render(5.0)
            finally:
                sys.meta_path.remove(recorder)
                await exporter.aclose()
            return body, recorder.names

        body, looked_up = asyncio.run(scrape_twice())
    up = [line for line in body.decode().splitlines() if line.startswith("kv_planner_target_up{")]
    assert len(up) == 2 and all(line.endswith(" 1.0") for line in up), up
    assert looked_up == []
