"""``planner recommend --gpu G`` without a model: one row per catalog model."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from planner.errors import KvPlannerError
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.build import plan_without_recommendation
from planner.plan.models import KvCacheReport, Plan
from planner.plan.recommend import safe_max_num_seqs
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
    """Plan every model at its full context; concurrency at 4k / 32k / max from the same KV layout."""
    rows = []
    for model in models:
        try:
            plan, _ = plan_without_recommendation(
                model, gpu, args, vllm_version=vllm_version, coefficients=coefficients, with_margin=False
            )
        except KvPlannerError as error:
            rows.append(
                FleetRow(
                    id=model.id,
                    fits=False,
                    max_model_len=None,
                    max_concurrency_4096=None,
                    max_concurrency_32768=None,
                    max_concurrency_max=None,
                    note=str(error).splitlines()[0],
                )
            )
            continue
        kv = plan.kv_cache
        usable = kv.num_gpu_blocks > 0 and plan.memory.kv_cache_bytes > 0
        longest = kv.max_model_len if plan.fits else kv.estimated_max_model_len
        derived = plan.model.derived_max_model_len

        def at(
            length: int,
            *,
            usable: bool = usable,
            longest: int = longest,
            kv: KvCacheReport = kv,
            limit: int = max(derived, kv.max_model_len),
        ) -> float | None:
            if not usable or length > limit or length > longest:
                return None
            return _concurrency(kv.num_gpu_blocks, kv.blocks_for_sequence(length))

        def safe_at(length: int, *, plan: Plan = plan) -> int | None:
            return None if at(length) is None else safe_max_num_seqs(plan, length, headroom)

        rows.append(
            FleetRow(
                id=model.id,
                fits=plan.fits,
                max_model_len=longest if usable and longest else None,
                max_concurrency_4096=at(4096),
                max_concurrency_32768=at(32768),
                max_concurrency_max=at(longest) if usable and longest else None,
                max_num_seqs_4096=safe_at(4096),
                max_num_seqs_32768=safe_at(32768),
                max_num_seqs_max=safe_at(longest) if usable and longest else None,
                weights_bytes=plan.memory.weights_bytes,
                kv_cache_bytes=plan.memory.kv_cache_bytes,
                note=None if plan.fits else first_sentence(plan.fit_error or ""),
            )
        )
    return rows
