"""Plans: what vLLM will compute at startup for a model on a GPU, and the safe limits.

from planner.plan import make_plan
plan = make_plan(model_spec, gpu_spec, ServingArgs(max_model_len=32768), vllm_version="0.19.0")
plan.kv_cache.num_gpu_blocks, plan.fits, plan.recommendation.vllm_args
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.build import Prediction, plan_without_recommendation
from planner.plan.engine import TermCorrections
from planner.plan.models import Plan
from planner.plan.recommend import (
    alternatives,
    check_headroom,
    recommendation,
    recommendation_from_alternative,
    safe_cache,
    verified_context,
)
from planner.vllm.args import ServingArgs

if TYPE_CHECKING:
    from planner.workload.profile import WorkloadProfile

__all__ = ["Plan", "make_plan"]


def make_plan(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    vllm_version: str | None = None,
    headroom: float = 0.1,
    workload: WorkloadProfile | None = None,
    gpu_count: int | None = None,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    corrections: TermCorrections | None = None,
    bigger_gpus: Sequence[GpuSpec] = (),
    with_alternatives: bool = True,
    draft: ModelSpec | None = None,
    average_risk: bool = True,
    base: tuple[Plan, Prediction] | None = None,
) -> Plan:
    """Predict vLLM's startup for one engine and recommend safe limits.

    ``draft``: the resolved drafter of ``--speculative-config`` (a draft model, an EAGLE head's config);
    without it an EAGLE or MTP drafter is sized from the target's shapes.

    ``average_risk=False``: with a workload, the recommendation's notes leave out the overflow risk of the
    count sized on one average request (a further convolution chain, and only those notes print it):
    for callers that show no notes, such as the admission path. Every other figure is the same.

    ``base``: what :func:`plan_without_recommendation` returned for these same model, GPU, args, release,
    ``gpu_count``, coefficients, corrections and drafter, when the caller kept it (the admission path plans
    one setting without and then with a workload profile). It is used as it is, not planned again, and
    left unchanged: the plan returned is a copy.

    Never raises because the model does not fit: ``fits`` is False, ``fit_error`` holds vLLM's error and
    ``alternatives`` say what would fit. Raises :class:`planner.errors.PlannerInputError` subclasses for
    settings vLLM refuses before sizing anything.
    """
    check_headroom(headroom)
    if base is None:
        plan, prediction = plan_without_recommendation(
            model,
            gpu,
            args,
            vllm_version=vllm_version,
            gpu_count=gpu_count,
            coefficients=coefficients,
            corrections=corrections,
            draft=draft,
        )
    else:
        # (a shallow copy: below, fields are replaced, never changed in place, except the findings list,
        # which later steps such as make_shared_plan append to)
        plan, prediction = base[0].model_copy(update={"findings": list(base[0].findings)}), base[1]
    workload_limit: int | None = None
    basis: str | None = None
    notes: list[str] = []
    if workload is not None and plan.fits:
        from planner.workload.concurrency import risk_bounded_limit  # numpy: only with a workload

        # The blocks the recommendation may count on: the low end of the KV band (planner/plan/margin.py).
        advice = risk_bounded_limit(
            safe_cache(plan),
            workload,
            headroom=headroom,
            max_model_len=plan.kv_cache.max_model_len,
            with_average_risk=average_risk,
        )
        workload_limit, basis = advice.max_num_seqs, "workload"
        average = f"average request ({advice.average_request_tokens:,} tokens): {advice.average_max_num_seqs} sequences"
        notes = [
            f"risk-bounded: {advice.max_num_seqs} sequences, P(needing more blocks than exist) = "
            f"{advice.risk:.2%} (target {advice.target_risk:.2%}, {headroom:.0%} headroom)",
            f"worst case (every request at {plan.kv_cache.max_model_len:,} tokens): "
            f"{advice.worst_case_max_num_seqs} sequences",
            average if advice.average_risk is None else f"{average}, P(overflow) = {advice.average_risk:.1%}",
        ]
    spread = (
        next((t.low_bytes for t in plan.margin.terms if t.name == "unknown_release"), None) if plan.margin else None
    )

    def replan(m: ModelSpec, g: GpuSpec, a: ServingArgs) -> Plan:
        return plan_without_recommendation(
            m,
            g,
            a,
            vllm_version=vllm_version,
            coefficients=coefficients,
            corrections=corrections,
            draft=draft,
            spread_hint=spread,
        )[0]

    plan.recommendation = recommendation(
        plan, prediction, args, headroom=headroom, workload_limit=workload_limit, workload_basis=basis
    )
    rec = plan.recommendation
    if rec is not None and plan.fits and rec.max_model_len != plan.kv_cache.max_model_len:
        # A shorter context than planned is checked by planning it (V0's profile batch grows when the
        # context drops to 32K or below): the limits come from the plan of the context recommended.
        verified, checked = verified_context(plan, rec.max_model_len, args, model, gpu, replan)
        if verified != rec.max_model_len:
            plan.recommendation = (
                None
                if verified is None
                else recommendation(
                    checked, prediction, args, headroom=headroom, workload_limit=workload_limit, workload_basis=basis
                )
            )
    if plan.recommendation is not None and workload_limit is not None:
        plan.recommendation.notes = notes
    if with_alternatives:
        search: Callable[[Sequence[GpuSpec]], int | None] | None = None
        if corrections is None and draft is None and bigger_gpus and not plan.fits:
            # The bigger GPUs through the batched sweep (which takes no corrections or draft model).
            from planner.plan.sweep import first_fitting_gpu

            def search(gpus: Sequence[GpuSpec]) -> int | None:
                return first_fitting_gpu(
                    model, gpus, args, vllm_version=vllm_version, coefficients=coefficients, spread_hint=spread
                )

        options = alternatives(plan, model, gpu, args, replan=replan, bigger_gpus=bigger_gpus, first_fitting=search)
        plan.alternatives = [alt for alt, _ in options]
        if plan.recommendation is None or not plan.fits:
            fitting = next(((alt, alt_plan) for alt, alt_plan in options if alt.fits), None)
            if fitting is not None:
                plan.recommendation = recommendation_from_alternative(*fitting)
    return plan
