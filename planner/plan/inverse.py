"""Inverse sizing: the smallest KV budget that holds a target concurrency (vLLM #33263).

The forward plan answers "how many sequences fit in this memory"; users pinning
``--kv-cache-memory-bytes`` by hand after vLLM sized the cache for 851x concurrency ask the reverse:
"how little KV cache holds N sequences at this context, with the headroom kept free?"

* worst case (no profile): every sequence at ``max_model_len`` — the same count
  :func:`planner.plan.recommend.worst_case_max_num_seqs` computes forward,
  ``floor((blocks - 1) x (1 - headroom)) // blocks_per_sequence >= N`` (block 0 is vLLM's null block);
* with a workload profile: the risk-bounded count of :mod:`planner.workload` (overflow probability at
  most the target risk) — searched over the block count, since it grows with it.

The block count becomes ``--kv-cache-memory-bytes = blocks x bytes_per_block`` (vLLM divides the given
bytes by the bytes of one block, ``vllm 0.19.0 v1/core/kv_cache_utils.py: get_num_blocks``), so feeding
it back gives exactly those blocks; in releases without the flag (before 0.10.2) the answer is the
smallest ``--gpu-memory-utilization`` (two digits) whose plan has at least those blocks *at the low end
of its KV band* (the prediction off by its measured error: vLLM profiles, and finds that little when the
other terms take that much more). With the flag the same utilization is given: vLLM's startup check
then claims what the pod may really take. What the pod leaves on the card for co-tenants is the card
minus the pod's whole use (weights, activations, CUDA graphs, non-torch memory, the KV cache and the
context before vLLM's snapshot) where the other terms take their measured error more: a pinned KV size
no longer gives that memory up (:func:`planner.plan.margin.terms_error_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from planner.errors import PlannerInputError
from planner.findings import Code, Finding
from planner.plan.margin import fits_at_low_end, low_end_blocks, terms_error_bytes
from planner.plan.models import BudgetAdvice, KvCacheReport, Plan
from planner.plan.shared import CONTEXT_RESERVE_BYTES, demand_bytes
from planner.vllm.args import ServingArgs

PlanFn = Callable[[ServingArgs], Plan]
_MAX_STEPS = 64


def worst_case_seqs(blocks: int, blocks_per_sequence: int, headroom: float) -> int:
    """Sequences of ``max_model_len`` that ``blocks`` hold with ``headroom`` kept free (as recommend does)."""
    usable = max(0, blocks - 1)
    return int(usable * (1.0 - headroom) // max(1, blocks_per_sequence))


def blocks_for_worst_case(target: int, blocks_per_sequence: int, headroom: float) -> int:
    """The smallest block count with ``worst_case_seqs >= target``."""
    blocks = math.ceil(target * blocks_per_sequence / (1.0 - headroom)) + 1
    while blocks > 1 and worst_case_seqs(blocks - 1, blocks_per_sequence, headroom) >= target:
        blocks -= 1  # float rounding may overshoot by one
    while worst_case_seqs(blocks, blocks_per_sequence, headroom) < target:
        blocks += 1
    return blocks


def blocks_for_workload(
    target: int, kv: KvCacheReport, profile: Any, headroom: float, target_risk: float | None
) -> tuple[int, float]:
    """The smallest block count whose risk-bounded ``--max-num-seqs`` is at least ``target`` (and its risk)."""
    from planner.workload.concurrency import risk_bounded_limit

    def seqs(blocks: int) -> tuple[int, float]:
        sized = kv.model_copy(update={"num_gpu_blocks": blocks})
        # (only the answer and its risk are read: the average request's risk is not computed)
        advice = risk_bounded_limit(
            sized,
            profile,
            headroom=headroom,
            target_risk=target_risk,
            max_model_len=kv.max_model_len,
            with_average_risk=False,
        )
        return advice.max_num_seqs, advice.risk

    per = max(1, kv.blocks_for_sequence(kv.max_model_len))
    high = blocks_for_worst_case(target, per, headroom)  # the worst case always suffices
    low = 2
    while low < high:
        middle = (low + high) // 2
        if seqs(middle)[0] >= target:
            high = middle
        else:
            low = middle + 1
    return high, seqs(high)[1]


def _words(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def smallest_budget(
    plan_fn: PlanFn,
    args: ServingArgs,
    *,
    target_seqs: int,
    headroom: float,
    kv_bytes_flag: bool,
    profile: Any | None = None,
    target_risk: float | None = None,
) -> tuple[BudgetAdvice, Plan]:
    """The smallest KV budget for ``target_seqs`` sequences, and the plan at it (``plan_fn`` plans a
    deployment on the GPU in question; ``args`` are the user's flags)."""
    if target_seqs < 1:
        raise PlannerInputError("--target-seqs must be at least 1")
    base_args = args.model_copy(update={"kv_cache_memory_bytes": None})
    base = plan_fn(base_args)
    kv = base.kv_cache
    if kv.bytes_per_block <= 0:
        raise PlannerInputError("--target-seqs: the model keeps no KV cache, there is no KV budget to size")
    per = max(1, kv.blocks_for_sequence(kv.max_model_len))
    if profile is not None:
        blocks, risk = blocks_for_workload(target_seqs, kv, profile, headroom, target_risk)
        basis: Literal["worst-case", "workload"] = "workload"
    else:
        blocks, risk, basis = blocks_for_worst_case(target_seqs, per, headroom), None, "worst-case"
    # The fit check must pass too: one sequence of max_model_len (and vLLM 0.33's null block).
    kv_bytes = blocks * kv.bytes_per_block
    pinned = args.model_copy(update={"kv_cache_memory_bytes": kv_bytes, "max_model_len": kv.max_model_len})
    at_budget = plan_fn(pinned) if kv_bytes_flag else None
    steps = 0
    # (more blocks help the fit check of one sequence, never a cache the card cannot hold at all)
    while (
        at_budget is not None and not at_budget.fits and not at_budget.memory.given_kv_overflows and steps < _MAX_STEPS
    ):
        blocks, steps = blocks + per, steps + 1
        kv_bytes = blocks * kv.bytes_per_block
        pinned = pinned.model_copy(update={"kv_cache_memory_bytes": kv_bytes})
        at_budget = plan_fn(pinned)
    utilization, util_plan = _smallest_utilization(plan_fn, base_args, base, blocks)
    chosen = at_budget if at_budget is not None else util_plan
    if chosen is None:
        chosen = base
    seqs_words = ["--max-num-seqs", str(target_seqs)]
    words = list(chosen.recommendation.vllm_args) if chosen.recommendation else []
    words = _words(words, *seqs_words)
    if at_budget is not None:
        words = _words(words, "--kv-cache-memory-bytes", str(kv_bytes))
    # vLLM checks free >= ceil(total x utilization) at startup even with --kv-cache-memory-bytes: the
    # smallest utilization that holds the budget is what leaves the rest of the card to co-tenants.
    if utilization is not None:
        words = _words(words, "--gpu-memory-utilization", f"{utilization:g}")
    used_args = (
        pinned if at_budget is not None else base_args.model_copy(update={"gpu_memory_utilization": utilization})
    )
    # (the terms' error from the profiled plan: the pinned one has no band)
    error = terms_error_bytes(base)
    pod = (
        demand_bytes(chosen, used_args, error_bytes=error) if (at_budget is not None or utilization is not None) else 0
    )
    if utilization is None:
        chosen = chosen.model_copy(deep=True)
        chosen.findings.append(
            Finding.of(
                Code.TARGET_SEQS_DO_NOT_FIT,
                f"{target_seqs} sequences of {kv.max_model_len} tokens need {blocks} KV blocks "
                f"({blocks * kv.bytes_per_block / (1 << 30):.1f} GiB per GPU): more than this GPU has",
            )
        )
    if utilization is not None:
        pod = max(pod, math.ceil(base.memory.total_bytes * utilization) + CONTEXT_RESERVE_BYTES)
    advice = BudgetAdvice(
        target_seqs=target_seqs,
        max_model_len=kv.max_model_len,
        headroom=headroom,
        basis=basis,
        target_risk=target_risk if profile is not None else None,
        risk=risk,
        blocks_per_sequence=per,
        num_gpu_blocks=blocks,
        bytes_per_block=kv.bytes_per_block,
        kv_cache_memory_bytes=kv_bytes if kv_bytes_flag else None,
        gpu_memory_utilization=utilization,
        vllm_args=words,
        pod_bytes=pod,
        left_for_co_tenants_bytes=max(0, base.memory.total_bytes - pod) if pod else 0,
        fits_on_gpu=utilization is not None,
    )
    return advice, chosen


def _smallest_utilization(
    plan_fn: PlanFn, args: ServingArgs, base: Plan, blocks: int
) -> tuple[float | None, Plan | None]:
    """The smallest two-digit utilization whose plan has at least ``blocks`` blocks at the low end of its KV
    band (and fits there)."""
    memory = base.memory
    terms = memory.weights_bytes + memory.non_torch_bytes + memory.activation_peak_bytes
    terms += memory.cuda_graph_bytes if memory.cuda_graph_counted else 0
    need = terms + blocks * base.kv_cache.bytes_per_block
    start = max(1, math.ceil(need / memory.total_bytes * 100))
    for percent in range(start, 101):
        plan = plan_fn(args.model_copy(update={"gpu_memory_utilization": percent / 100}))
        if low_end_blocks(plan) >= blocks and fits_at_low_end(plan):
            return percent / 100, plan
    return None, None


__all__ = ["CONTEXT_RESERVE_BYTES", "BudgetAdvice", "blocks_for_worst_case", "smallest_budget", "worst_case_seqs"]
