"""Chart tests need the real helm binary; tests that use the `helm` fixture skip cleanly without it."""

from __future__ import annotations

import pytest

from tests.chart.chart_helpers import require_helm


@pytest.fixture(scope="session")
def helm() -> str:
    return require_helm()
