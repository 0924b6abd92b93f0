"""Chart tests need the real helm binaries (scripts/install-test-tools): see tests/conftest.py `missing`."""

from __future__ import annotations

import pytest

from tests.chart.chart_helpers import require_helm
from tests.conftest import require_tool


@pytest.fixture(scope="session")
def helm() -> str:
    return require_helm()


@pytest.fixture
def binary(request: pytest.FixtureRequest) -> str:
    """The Helm binary named by the test's `helm_binaries()` parameter."""
    return require_tool(request.param)
