"""The one call into the planner's length-distribution maths.

Given vLLM's real block count and the observed prompt/generation length histograms, ask
:func:`planner.workload.risk_bounded_concurrency` for the largest ``--max-num-seqs`` whose probability
of running out of KV blocks stays within the target risk (with the policy's headroom kept free).
Everything else in the retuner works with the integer this returns, so tests can swap it for a fake.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from planner.errors import KvPlannerError

Buckets = list[tuple[float, float]]


class AdviceInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_gpu_blocks: int
    block_size: int
    max_model_len: int
    prompt_buckets: Buckets
    generation_buckets: Buckets
    headroom: float
    target_risk: float


Advisor = Callable[[AdviceInput], int | None]


def risk_bounded_max_num_seqs(data: AdviceInput) -> int | None:
    """``max_num_seqs`` from planner.workload, or None when the histograms cannot support an answer."""
    from planner.workload import capacity_for_blocks, profile_from_histograms, risk_bounded_concurrency

    try:
        kv = capacity_for_blocks(data.num_gpu_blocks, data.block_size, data.max_model_len)
        profile = profile_from_histograms(data.prompt_buckets, data.generation_buckets, target_risk=data.target_risk)
        advice = risk_bounded_concurrency(
            kv, profile, headroom=data.headroom, target_risk=data.target_risk, max_model_len=data.max_model_len
        )
    except KvPlannerError:
        return None
    return advice.max_num_seqs if advice.max_num_seqs > 0 else None
