"""Fixtures for the planner core: GPUs built in the test (independent of the catalog), shared configs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from planner.gpus.spec import GpuSpec
from planner.models.config import parse_config
from planner.models.spec import ModelSpec
from tests.conftest import load_shared_config

GiB = 1 << 30


def make_gpu(name: str, memory_gib: float, architecture: str = "hopper", *, nvls: bool = False) -> GpuSpec:
    return GpuSpec(
        name=name,
        vendor="nvidia",
        memory_bytes=int(memory_gib * GiB),
        memory_source="test",
        bandwidth_bytes_per_s=2_000_000_000_000,
        architecture=architecture,
        compute_capability="9.0" if architecture == "hopper" else "8.0",
        nvswitch_multicast=nvls,
    )


@pytest.fixture
def h100() -> GpuSpec:
    return make_gpu("H100-80GB", 79.19, "hopper", nvls=True)


@pytest.fixture
def a100() -> GpuSpec:
    return make_gpu("A100-80GB", 79.15, "ampere")


@pytest.fixture
def shared_model() -> Callable[[str], ModelSpec]:
    """``shared_model("meta-llama--Llama-3.1-8B")`` parses a config from ../shared (skips when absent)."""

    def load(name: str) -> ModelSpec:
        return parse_config(load_shared_config(name), model_id=name.replace("--", "/"))

    return load
