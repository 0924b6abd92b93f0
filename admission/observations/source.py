"""What a reader of observations needs from whoever collects them (the exporter implements it).

The retuner runs in the exporter process and reads targets with the exporter's own scraper, but it
depends only on this protocol, so the exporter can host the retuner without the two importing each
other (admission's layers contract in pyproject.toml).
"""

from __future__ import annotations

from typing import Protocol

from admission.observations.model import Snapshot


class SnapshotSource(Protocol):
    async def snapshot(self, budget_s: float, *, record: bool = True) -> Snapshot:
        """Read every target now, within ``budget_s`` seconds. ``record=False``: do not count it as a scrape."""
        ...
