"""``planner recommend --gpu G`` without a model: one row per catalog model."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.sweep import PointPlan, _Sweeper
from planner.vllm.args import ServingArgs


class FleetRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    fits: bool = Field(description="vLLM's startup check passes at the context planned, as predicted")
    max_model_len: int | None = Field(
        description="the longest --max-model-len that holds at the low end of the KV band with one sequence "
        "keeping the headroom free (what `recommend --model` recommends); None when none does"
    )
    # vLLM's own "Maximum concurrency" figures of the plan at the context planned, as predicted (no margin).
    max_concurrency_4096: float | None
    max_concurrency_32768: float | None
    max_concurrency_max: float | None
    # The --max-num-seqs that is safe at each length: what `recommend --model --max-model-len N` recommends
    # (every sequence at that length, the headroom of the blocks kept free, at the low end of the KV band of
    # the flags themselves); None when that length has no safe limits.
    max_num_seqs_4096: int | None = None
    max_num_seqs_32768: int | None = None
    max_num_seqs_max: int | None = None
    fits_low: bool | None = Field(
        default=None,
        description="the context planned also holds at the low end of the KV band (max_model_len is that context)",
    )
    weights_bytes: int | None = None
    kv_cache_bytes: int | None = None
    note: str | None = None


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence ("(131.2 GiB)" is not one)."""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _concurrency(blocks: int, per_request: int) -> float:
    return round(blocks / per_request, 2) if per_request else 0.0


_LENGTHS = (4096, 32768)


def fleet_rows(
    models: Iterable[ModelSpec],
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    vllm_version: str | None,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    headroom: float = 0.1,
) -> list[FleetRow]:
    """Plan every model at its full context and at 4k / 32k tokens, each with make_plan's limits.

    One batched sweep (planner/plan/sweep.py, plain Python: numpy's import would cost more than these
    plans): each point's figures are those of the model's ``make_plan(..., with_alternatives=False)`` with
    those flags, so every --max-num-seqs shown is planned with the flags it would run with and holds at the
    low end of that plan's band."""
    models = list(models)
    full = [(model, gpu, args) for model in models]
    sweeper = _Sweeper(vllm_version, headroom=headroom, coefficients=coefficients, with_margin=True)
    plans = [sweeper.plan(*point) for point in full]
    at_length = {length: args.model_copy(update={"max_model_len": length}) for length in _LENGTHS}
    rows = []
    for plan in plans:
        shorter: dict[int, PointPlan | None] = {}
        for length, flags in at_length.items():
            limit = max(plan.derived_max_model_len, plan.max_model_len)
            shorter[length] = sweeper.plan(plan.model, gpu, flags) if plan.error is None and length <= limit else None
        rows.append(_row(plan, shorter))
    return rows


def _row(plan: PointPlan, shorter: dict[int, PointPlan | None]) -> FleetRow:
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
    safe = plan.recommended_max_model_len

    def at(length: int) -> float | None:
        if not usable or length > limit or length > longest:
            return None
        return _concurrency(plan.num_gpu_blocks, plan.sequence_blocks(length))

    def safe_at(length: int) -> int | None:
        found = shorter.get(length)
        if found is None or found.recommended_max_model_len != length:
            return None  # no limits hold with --max-model-len at that length
        return found.recommended_max_num_seqs

    return FleetRow(
        id=plan.model.id,
        fits=plan.fits,
        max_model_len=safe,
        max_concurrency_4096=at(4096),
        max_concurrency_32768=at(32768),
        max_concurrency_max=at(longest) if usable and longest else None,
        max_num_seqs_4096=safe_at(4096),
        max_num_seqs_32768=safe_at(32768),
        max_num_seqs_max=plan.recommended_max_num_seqs,
        fits_low=plan.fits and safe == plan.max_model_len,
        weights_bytes=plan.weights_bytes,
        kv_cache_bytes=plan.kv_cache_bytes,
        note=None if plan.fits else first_sentence(plan.fit_error or ""),
    )
