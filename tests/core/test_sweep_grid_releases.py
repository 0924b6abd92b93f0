"""The batched sweep equals make_plan on the catalog grid at known releases (slow lane; the grid's extent
is tests/core/sweep_grid.py's). A file of its own so that the test runner's workers share the grid with
tests/core/test_sweep_grid_unknown.py."""

from __future__ import annotations

import pytest

from planner.plan.sweep import grid
from tests.core.sweep_grid import gpus_of_every_class, models
from tests.core.test_sweep import assert_same


@pytest.mark.slow
@pytest.mark.parametrize(
    ("version", "model_step", "first_model"),
    [
        ("0.33.0", 1, 0),
        ("0.10.1", 2, 0),
        ("0.8.0", 3, 1),
        ("0.13.0", 3, 2),
        ("0.15.0", 3, 0),
        ("0.20.0", 3, 1),
        ("0.26.0", 3, 2),
    ],
)
def test_every_catalog_gpu_class_at_a_known_release(version: str, model_step: int, first_model: int) -> None:
    # Every GPU class with a quarter of the other cards (members of one class differ in memory, and so in
    # every figure after the engine stage). Every model at the newest release; at the others a stride
    # whose start moves from release to release, so that every model is compared at several of them.
    points = grid(
        models(model_step, first_model),
        gpus_of_every_class(4),
        tensor_parallel_sizes=(1, 2, 4, 8),
        kv_cache_dtypes=("auto", "fp8"),
    )
    assert_same(points, version)
