from __future__ import annotations

import pytest

from planner.k8s.gpus import GpuCatalog
from planner.policy.planning import CoreGpuCatalog


@pytest.fixture(scope="session")
def catalog() -> GpuCatalog:
    return CoreGpuCatalog()
