"""The batched sweep equals make_plan with the release unknown (every checked release's engine stage, V0 rows
included, per point), and its bigger-GPU search offers what make_plan's loop offers (slow lane; the grid's
extent is tests/core/sweep_grid.py's)."""

from __future__ import annotations

import pytest

from planner.plan.sweep import grid
from planner.vllm.args import ServingArgs
from tests.core.sweep_grid import MODELS, gpus_of_every_class, models
from tests.core.test_sweep import assert_bigger_gpu_search_is_the_loop, assert_same


@pytest.mark.slow
def test_every_catalog_gpu_class_with_an_unknown_release() -> None:
    # (a stride of 6: every limit plans each checked release, V0 rows included, with its own flags)
    points = grid(
        models(6), gpus_of_every_class(100), tensor_parallel_sizes=(1, 2, 4, 8), kv_cache_dtypes=("auto", "fp8")
    )
    assert_same(points, None)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("versions", "step"),
    # An unknown release plans every checked release for each option's limits (their own flags, their own
    # spread): a stride of the models there.
    [(["0.33.0", "0.10.1"], 1), ([None], 6)],
)
def test_the_bigger_gpu_search_on_every_model(
    monkeypatch: pytest.MonkeyPatch, versions: list[str | None], step: int
) -> None:
    flags = [ServingArgs(), ServingArgs(kv_cache_dtype="fp8", tensor_parallel_size=2), ServingArgs(max_model_len=-1)]
    assert_bigger_gpu_search_is_the_loop(monkeypatch, MODELS[::step], ["T4", "L4", "MI250X"], flags, versions)
