"""Plans on a shared GPU: a per-pod budget instead of the whole card.

vLLM knows nothing of sharing. At startup it asks for ``ceil(total x --gpu-memory-utilization)`` and
refuses to start when the free memory is less (``vllm 0.33.0 v1/worker/utils.py: request_memory``;
``vllm 0.11.0 v1/worker/gpu_worker.py: Worker.init_device``), where ``total`` is the card as the
container sees it. On a card shared four ways the release default (0.9 / 0.92) claims the whole card:
the first pod starts, the others fail with "Free memory on device ... is less than desired GPU memory
utilization" (vLLM issues #20305, #14376, #2456).

So a shared-GPU plan

* plans on the memory vLLM sees (``GpuShare.visible_bytes``: the limit under HAMi and Run:ai, the whole
  card under time-slicing and MPS);
* caps ``--gpu-memory-utilization`` at ``(budget - context) / visible`` (two digits, rounded down):
  the largest value whose startup request fits this pod's share, ``context`` being the pod's own CUDA
  context and cuBLAS handles, created before vLLM's snapshot and so outside its budget;
* recommends ``--kv-cache-memory-bytes`` as well, in releases that have the flag (0.10.2+). With it vLLM
  skips the profiling arithmetic (``gpu_worker.py: determine_available_memory`` returns the given size),
  so the KV cache no longer depends on what co-tenants allocate or free while this pod profiles — a
  neighbour's allocation during profiling is otherwise counted as this pod's own non-KV memory (a
  smaller cache), and a neighbour's release aborts the profile ("Error in memory profiling ... other
  processes sharing the same container release GPU memory"). The utilization cap still applies: the
  startup check runs whether or not the flag is given. The value is the block count at the *low end* of
  the plan's KV band times the bytes of one block: pinning the size turns profiling off, so when the
  other terms (weights, activations, CUDA graphs) take as much more as their measured error allows,
  vLLM no longer gives that memory up from the KV cache; it lands on the pod's footprint. Pinned at the
  low end, the pod then takes at most what the profiled budget would (the cap keeps that in the share),
  and the limits recommended at the low end hold exactly. A context that fits only as predicted at the
  share gets no pinned size (it would not start with the low end's blocks).

With a given ``--kv-cache-memory-bytes`` the pod's demand is the sum of its terms plus their error
(:func:`planner.plan.margin.terms_error_bytes`), the most it may take.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from planner.findings import Code, Finding
from planner.gpus.share import GpuShare
from planner.gpus.spec import GpuSpec
from planner.plan.margin import fits_at_low_end, low_end_blocks, terms_error_bytes
from planner.plan.models import Plan, SharingReport
from planner.units import GiB, MiB
from planner.vllm.args import ServingArgs

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec

# The pod's CUDA context, cuBLAS/cuBLASLt handles and (TP > 1) NCCL's init buffers exist before vLLM's
# baseline snapshot (vllm 0.33.0 v1/worker/gpu_worker.py: Worker.init_device), so they are outside its
# budget but inside the pod's share. 512 MiB is an estimate of that baseline on CUDA 12 with lazy
# module loading (not a measurement of one model); kept out of the budget, never out of the plan.
CONTEXT_RESERVE_BYTES = 512 * MiB


def parse_gpu_share(value: str, gpu: GpuSpec) -> GpuShare:
    """``--gpu-share``: ``4`` (time-slicing, 4 pods per card) or a size (``20GiB``: this pod's memory)."""
    from planner.errors import PlannerInputError
    from planner.units import parse_size

    text = value.strip()
    if text.isdigit():
        replicas = int(text)
        if replicas < 1:
            raise PlannerInputError("--gpu-share: the number of pods per GPU must be at least 1")
        return GpuShare(
            mechanism="time-slicing",
            source=f"--gpu-share {replicas}",
            card_bytes=gpu.memory_bytes,
            visible_bytes=gpu.memory_bytes,
            budget_bytes=gpu.memory_bytes // replicas,
            isolated=False,
            replicas=replicas,
        )
    try:
        size = parse_size(text)
    except (ValueError, PlannerInputError):
        raise PlannerInputError(
            f"--gpu-share {value!r}: expected pods per GPU (4) or this pod's memory (20GiB)"
        ) from None
    if not 0 < size <= gpu.memory_bytes:
        raise PlannerInputError(f"--gpu-share {value}: must be more than 0 and at most the card's memory")
    return GpuShare(
        mechanism="declared",
        source=f"--gpu-share {value}",
        card_bytes=gpu.memory_bytes,
        visible_bytes=gpu.memory_bytes,
        budget_bytes=size,
        isolated=False,
    )


def visible_gpu(gpu: GpuSpec, share: GpuShare) -> GpuSpec:
    """The GPU as the container sees it (HAMi and Run:ai report their limit as the total)."""
    if share.visible_bytes == gpu.memory_bytes:
        return gpu
    return gpu.model_copy(
        update={"memory_bytes": share.visible_bytes, "memory_source": f"{share.mechanism} limit ({share.source})"}
    )


def share_max_utilization(share: GpuShare) -> float | None:
    """The largest ``--gpu-memory-utilization`` whose startup request fits this pod's share."""
    if share.budget_bytes is None or share.visible_bytes <= 0:
        return None
    usable = max(0, share.budget_bytes - CONTEXT_RESERVE_BYTES)
    return math.floor(min(1.0, usable / share.visible_bytes) * 100) / 100


def demand_bytes(plan: Plan, args: ServingArgs, *, error_bytes: int = 0) -> int:
    """Card memory this pod takes: vLLM's budget (with ``--kv-cache-memory-bytes``, the sum of its terms
    plus ``error_bytes``, how much more they may take: the budget is then only a startup check and vLLM
    no longer gives KV memory up when they do), CUDA graphs where the release captures them outside the
    budget, and the context before vLLM's snapshot."""
    memory = plan.memory
    graphs = memory.cuda_graph_bytes if not memory.cuda_graph_counted else 0
    if args.kv_cache_memory_bytes is not None:
        used = (
            memory.weights_bytes
            + memory.non_torch_bytes
            + memory.activation_peak_bytes
            + memory.cuda_graph_bytes
            + args.kv_cache_memory_bytes
            + max(0, error_bytes)
        )
    else:
        used = memory.budget_bytes + graphs
    return used + CONTEXT_RESERVE_BYTES


def kv_bytes_for(plan: Plan) -> int:
    """``--kv-cache-memory-bytes`` that gives the blocks at the low end of the plan's band: what its
    recommendations count on, and no more (see the module docstring)."""
    return low_end_blocks(plan) * plan.kv_cache.bytes_per_block


def plan_at_share(
    plan_fn: Callable[[ServingArgs], Plan], args: ServingArgs, share: GpuShare
) -> tuple[float | None, Plan | None]:
    """(the utilization cap, the plan at it) for a pod on ``share``; ``plan_fn`` plans on the GPU as the
    container sees it. Where the release captures CUDA graphs outside the budget (<= 0.19 by default)
    they come out of the share too: the cap is lowered once by what the first plan overshoots."""
    cap = share_max_utilization(share)
    if cap is None or cap <= 0 or share.budget_bytes is None:
        return cap, None
    first = plan_fn(_at(args, cap))
    excess = demand_bytes(first, _at(args, cap)) - share.budget_bytes
    if excess <= 0:
        return cap, first
    cap = max(0.0, round(cap - math.ceil(excess / share.visible_bytes * 100) / 100, 2))
    return cap, plan_fn(_at(args, cap)) if cap > 0 else None


def _at(args: ServingArgs, utilization: float) -> ServingArgs:
    return args.model_copy(update={"gpu_memory_utilization": utilization, "kv_cache_memory_bytes": None})


def sharing_report(
    plan: Plan,
    share: GpuShare,
    args: ServingArgs,
    *,
    at_share: Plan | None,
    kv_bytes_flag: bool,
    cap: float | None = None,
) -> SharingReport:
    """What this plan takes from the shared card and what to set instead (``at_share``: the plan at the
    share's utilization)."""
    # A pinned KV size leaves the other terms' error on the footprint: the profiled plan at the share
    # (the same terms, its own utilization) says how much it is.
    demand = demand_bytes(plan, args, error_bytes=terms_error_bytes(at_share))
    cap = share_max_utilization(share) if cap is None else cap
    budget = share.budget_bytes
    over = budget is not None and demand > budget
    pin = at_share is not None and fits_at_low_end(at_share) and kv_bytes_flag
    kv_bytes = kv_bytes_for(at_share) if at_share is not None and pin else None
    tenants = f"{share.replicas} pods" if share.replicas else "its co-tenants"
    if budget is None:
        explanation = (
            f"shared GPU ({share.source}) with no known per-pod memory: set kv-planner.io/gpu-memory "
            "(or the replicas label) so kv-planner can size this pod"
        )
    elif at_share is not None and not at_share.fits:
        explanation = (
            f"this pod's share is {budget / GiB:.1f} GiB of {share.card_bytes / GiB:.1f} GiB: "
            f"{at_share.fit_error or 'the model does not fit in it'}"
        )
    else:
        flag = f"--kv-cache-memory-bytes {kv_bytes} and " if kv_bytes else ""
        isolation = (
            "an enforced limit keeps the others out"
            if share.isolated
            else "nothing stops one pod from taking the whole card"
        )
        explanation = (
            f"the card is shared with {tenants} ({share.mechanism}; {isolation}): {flag}"
            f"--gpu-memory-utilization {cap:g} keep this pod within {budget / GiB:.1f} GiB"
            + ("; a fixed KV size does not depend on what neighbours allocate while vLLM profiles" if kv_bytes else "")
        )
    return SharingReport(
        mechanism=share.mechanism,
        source=share.source,
        card_bytes=share.card_bytes,
        visible_bytes=share.visible_bytes,
        budget_bytes=budget,
        isolated=share.isolated,
        replicas=share.replicas,
        demand_bytes=demand,
        co_tenant_bytes=max(0, share.card_bytes - min(demand, share.card_bytes)),
        over_budget=over,
        max_gpu_memory_utilization=cap,
        recommended_kv_cache_memory_bytes=kv_bytes,
        recommended_gpu_memory_utilization=cap if budget is not None else None,
        explanation=explanation,
    )


def with_share_args(args: ServingArgs, utilization: float, kv_bytes: int | None) -> list[str]:
    """The flags that keep a pod within its share, as words to add."""
    words = ["--gpu-memory-utilization", f"{utilization:g}"]
    if kv_bytes is not None:
        words += ["--kv-cache-memory-bytes", str(kv_bytes)]
    return words


def _replace_flag(words: list[str], flag: str, value: str) -> list[str]:
    out = list(words)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def make_shared_plan(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    share: GpuShare,
    **kwargs: Any,
) -> Plan:
    """``make_plan`` for a pod on a shared GPU: planned at its share, the report in ``plan.sharing``.

    Without ``--gpu-memory-utilization`` and ``--kv-cache-memory-bytes`` the plan is the one at the
    share's utilization (what kv-planner recommends); with them, the plan is what vLLM will do with
    them, and the report says whether that stays within the share."""
    from planner.plan import make_plan
    from planner.vllm.releases import resolve_release

    seen = visible_gpu(gpu, share)
    _, release, _ = resolve_release(kwargs.get("vllm_version"))
    cap, at_share = plan_at_share(lambda a: make_plan(model, seen, a, **kwargs), args, share)
    given = args.gpu_memory_utilization is not None or args.kv_cache_memory_bytes is not None
    plan = make_plan(model, seen, args, **kwargs) if given or at_share is None else at_share.model_copy(deep=True)
    report = sharing_report(
        plan, share, args, at_share=at_share, kv_bytes_flag=release.kv_cache_memory_bytes_flag, cap=cap
    )
    plan.sharing = report
    if report.over_budget or report.budget_bytes is None:
        plan.findings.append(Finding.of(Code.SHARED_GPU_BUDGET, f"shared GPU: {report.explanation}"))
    if at_share is not None and at_share.fits and at_share.recommendation is not None and cap is not None:
        recommendation = at_share.recommendation.model_copy(deep=True)
        words = _replace_flag(recommendation.vllm_args, "--gpu-memory-utilization", f"{cap:g}")
        if report.recommended_kv_cache_memory_bytes is not None:
            words = _replace_flag(words, "--kv-cache-memory-bytes", str(report.recommended_kv_cache_memory_bytes))
        recommendation.vllm_args = words
        recommendation.gpu_memory_utilization = cap
        recommendation.notes = [*recommendation.notes, report.explanation]
        plan.recommendation = recommendation
    return plan
