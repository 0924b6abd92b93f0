"""How much of the catalog grid the slow lane compares between the batched sweep and make_plan.

The comparison is make_plan's cost per point, so the whole catalog at every release (~9 minutes of one
core, an unknown release alone 3) is not run by default: each release gets every catalog GPU class (the
first member of each class the sweep shares a template within) plus a stride of the other cards, and a
stride of the models. ``KV_PLANNER_FULL_SWEEP_GRID=1`` runs every model on every GPU at every release of
the grid, as was done when the sweep was ported to a new set of plan terms (docs/benchmarks.md).
"""

from __future__ import annotations

import os

from planner.gpus.catalog import all_gpus
from planner.gpus.spec import GpuSpec
from planner.models.catalog import all_models
from planner.models.spec import ModelSpec
from planner.plan.sweep import gpu_class_key
from planner.vllm.releases import RELEASES

FULL = os.environ.get("KV_PLANNER_FULL_SWEEP_GRID", "").strip().lower() in ("1", "true", "yes")
MODELS = list(all_models())
GPUS = list(all_gpus())


def gpus_of_every_class(step: int) -> list[GpuSpec]:
    """Every ``step``-th catalog GPU, plus the first member of every class the sweep shares a template
    within (:func:`planner.plan.sweep.gpu_class_key`): each class is planned at least once whatever the
    stride."""
    if FULL:
        return GPUS
    chosen = {gpu.name for gpu in GPUS[::step]}
    seen: set[tuple[object, ...]] = set()
    for gpu in GPUS:
        # The sweep's own class key over every release: a class at any release is a class here.
        key = gpu_class_key(gpu, RELEASES)
        if key not in seen:
            seen.add(key)
            chosen.add(gpu.name)
    return [gpu for gpu in GPUS if gpu.name in chosen]


def models(step: int, first: int = 0) -> list[ModelSpec]:
    """Every ``step``-th catalog model from the ``first`` (every model with ``KV_PLANNER_FULL_SWEEP_GRID=1``)."""
    return MODELS if FULL else MODELS[first::step]
