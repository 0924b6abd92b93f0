"""Fixtures of the dashboards/rules tests.

The generator and the schema validator use grafana-foundation-sdk, which needs Python >= 3.11; on
older interpreters these tests skip (the generated files they check are committed). promtool and
prometheus come from scripts/install-test-tools; without them the tests skip locally and fail in CI
(tests/conftest.py `missing`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import require_tool

REPO_ROOT = Path(__file__).resolve().parents[2]
# `dashboards/` is a maintainer tool, not part of the installed package: import it from the checkout.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# grafana-foundation-sdk needs Python >= 3.11: collect nothing here on older interpreters.
collect_ignore_glob = ["test_*.py"] if sys.version_info < (3, 11) else []


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return require_tool("prometheus")
