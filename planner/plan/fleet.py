"""``planner recommend --gpu G`` without a model: one row per catalog model."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.recommend import worst_case_seqs
from planner.plan.sweep import PointPlan, sweep_plans
from planner.vllm.args import ServingArgs


class FleetRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    fits: bool
    max_model_len: int | None
    max_concurrency_4096: float | None
    max_concurrency_32768: float | None
    max_concurrency_max: float | None
    # The --max-num-seqs that is safe at each length: every sequence at that length, the headroom of the
    # blocks kept free, at the low end of the KV band (what `recommend --model` would recommend).
    max_num_seqs_4096: int | None = None
    max_num_seqs_32768: int | None = None
    max_num_seqs_max: int | None = None
    weights_bytes: int | None = None
    kv_cache_bytes: int | None = None
    note: str | None = None


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence ("(131.2 GiB)" is not one)."""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _concurrency(blocks: int, per_request: int) -> float:
    return round(blocks / per_request, 2) if per_request else 0.0


def fleet_rows(
    models: Iterable[ModelSpec],
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    vllm_version: str | None,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    headroom: float = 0.1,
) -> list[FleetRow]:
    """Plan every model at its full context; concurrency at 4k / 32k / max from the same KV layout.

    One batched sweep (planner/plan/sweep.py, plain Python: numpy's import would cost more than these
    plans): each row's figures are those of the model's ``plan_without_recommendation`` without the band."""
    points = [(model, gpu, args) for model in models]
    # The headroom only enters the rows below (no band, no recommendation in the sweep).
    plans = sweep_plans(points, vllm_version=vllm_version, coefficients=coefficients, with_margin=False, headroom=0.0)
    return [_row(plan, headroom) for plan in plans]


def _row(plan: PointPlan, headroom: float) -> FleetRow:
    if plan.error is not None:
        return FleetRow(
            id=plan.model.id,
            fits=False,
            max_model_len=None,
            max_concurrency_4096=None,
            max_concurrency_32768=None,
            max_concurrency_max=None,
            note=plan.error.splitlines()[0],
        )
    usable = plan.num_gpu_blocks > 0 and plan.kv_cache_bytes > 0
    longest = plan.max_model_len if plan.fits else plan.estimated_max_model_len
    limit = max(plan.derived_max_model_len, plan.max_model_len)

    def at(length: int) -> float | None:
        if not usable or length > limit or length > longest:
            return None
        return _concurrency(plan.num_gpu_blocks, plan.sequence_blocks(length))

    def safe_at(length: int) -> int | None:
        # recommend.safe_max_num_seqs of a plan without a band: its own blocks.
        return (
            None if at(length) is None else worst_case_seqs(plan.num_gpu_blocks, plan.sequence_blocks(length), headroom)
        )

    return FleetRow(
        id=plan.model.id,
        fits=plan.fits,
        max_model_len=longest if usable and longest else None,
        max_concurrency_4096=at(4096),
        max_concurrency_32768=at(32768),
        max_concurrency_max=at(longest) if usable and longest else None,
        max_num_seqs_4096=safe_at(4096),
        max_num_seqs_32768=safe_at(32768),
        max_num_seqs_max=safe_at(longest) if usable and longest else None,
        weights_bytes=plan.weights_bytes,
        kv_cache_bytes=plan.kv_cache_bytes,
        note=None if plan.fits else first_sentence(plan.fit_error or ""),
    )
