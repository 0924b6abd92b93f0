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
    PlanView,
    PredictFn,
    Replanner,
    alternatives,
    check_headroom,
    no_safe_limits,
    recommendation,
    recommendation_from_alternative,
    safe_cache,
    worst_case_seqs,
)
from planner.vllm.args import ServingArgs

if TYPE_CHECKING:
    from planner.workload.concurrency import LimitAdvice
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
    replan: PredictFn | None = None,
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

    ``replan``: what :func:`plan_without_recommendation` returns for another model, GPU and flags with this
    call's release, coefficients, corrections and drafter (the recommendation's and the alternatives'
    plans), when the caller keeps such plans (the admission path: planner/policy/planning.py). Its plans are
    read, never changed.

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
    first = PlanView(plan, prediction, args)

    def plan_fn(m: ModelSpec, g: GpuSpec, a: ServingArgs) -> tuple[Plan, Prediction]:
        # Every plan of other flags gets its own band, the unknown release's spread included (it follows the
        # context in V0, the count, the GPUs): limits are checked with the flags they will run with.
        if replan is not None:
            return replan(m, g, a)
        return plan_without_recommendation(
            m, g, a, vllm_version=vllm_version, coefficients=coefficients, corrections=corrections, draft=draft
        )

    def plans(g: GpuSpec, a: ServingArgs) -> Replanner:
        return Replanner(model, g, a, plan_fn)

    limit: Callable[[PlanView, int], int] | None = None
    advices: list[LimitAdvice] = []
    if workload is not None and plan.fits:
        limit = _workload_limit(workload, headroom, average_risk, advices)
    found = recommendation(
        first, plans(gpu, args), headroom=headroom, limit=limit, basis="worst-case" if limit is None else "workload"
    )
    plan.recommendation = None if found is None else found[0]
    if plan.recommendation is not None and advices:
        notes = _workload_notes(advices[-1], plan.recommendation.max_model_len, headroom)
        plan.recommendation.notes = [*notes, *plan.recommendation.notes]
    if plan.fits and plan.recommendation is None and not plan.memory.given_kv_overflows:
        plan.findings.append(no_safe_limits(plan, headroom))
    if with_alternatives and (not plan.fits or plan.recommendation is None):
        search: Callable[[Sequence[GpuSpec]], int | None] | None = None
        if corrections is None and draft is None and bigger_gpus:
            # The bigger GPUs through the batched sweep (which takes no corrections or draft model).
            from planner.plan.sweep import first_fitting_gpu

            def search(gpus: Sequence[GpuSpec]) -> int | None:
                return first_fitting_gpu(
                    model, gpus, args, vllm_version=vllm_version, coefficients=coefficients, headroom=headroom
                )

        options = alternatives(
            first, model, gpu, args, plans=plans, headroom=headroom, bigger_gpus=bigger_gpus, first_fitting=search
        )
        plan.alternatives = [alt for alt, _ in options]
        if plan.recommendation is None or not plan.fits:
            fitting = next(((alt, alt_plan) for alt, alt_plan in options if alt.fits), None)
            if fitting is not None:
                plan.recommendation = recommendation_from_alternative(*fitting)
    return plan


def _workload_limit(
    workload: WorkloadProfile, headroom: float, average_risk: bool, advices: list[LimitAdvice]
) -> Callable[[PlanView, int], int]:
    """The risk-bounded ``--max-num-seqs`` of a plan at a context, at the low end of its band (appending each
    computed advice to ``advices``). A plan with at least the blocks of one already asked, in the same
    layout, keeps that answer (the overflow risk only falls with more blocks): the replan of the emitted
    count rarely costs another convolution."""
    from planner.workload.concurrency import risk_bounded_limit  # numpy: only with a workload

    known: list[tuple[tuple[object, ...], int, int]] = []

    def limit(view: PlanView, max_len: int) -> int:
        kv = safe_cache(view.plan)
        shape = (
            max_len,
            kv.block_size,
            tuple(tuple(group.model_dump().values()) for group in kv.groups),
        )
        for seen, blocks, count in known:
            if seen == shape and blocks <= kv.num_gpu_blocks:
                return count
        advice = risk_bounded_limit(
            kv, workload, headroom=headroom, max_model_len=max_len, with_average_risk=average_risk
        )
        advices.append(advice)
        # Never below the worst case (every sequence at the full context fits by construction), which the risk
        # search can miss when it counts blocks in coarse units and one sequence nearly fills the pool.
        count = max(advice.max_num_seqs, worst_case_seqs(kv.num_gpu_blocks, kv.blocks_for_sequence(max_len), headroom))
        known.append((shape, kv.num_gpu_blocks, count))
        return count

    return limit


def _workload_notes(advice: LimitAdvice, max_len: int, headroom: float) -> list[str]:
    average = f"average request ({advice.average_request_tokens:,} tokens): {advice.average_max_num_seqs} sequences"
    return [
        f"risk-bounded: {advice.max_num_seqs} sequences, P(needing more blocks than exist) = "
        f"{advice.risk:.2%} (target {advice.target_risk:.2%}, {headroom:.0%} headroom)",
        f"worst case (every request at {max_len:,} tokens): {advice.worst_case_max_num_seqs} sequences",
        average if advice.average_risk is None else f"{average}, P(overflow) = {advice.average_risk:.1%}",
    ]
