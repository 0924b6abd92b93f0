"""Policy ``targetSeqs``: fill the smallest KV budget that holds the target concurrency.

With ``mutation: fill`` (or ``clamp``) and a policy (or namespace) ``targetSeqs: N``, a vLLM container
that says neither ``--gpu-memory-utilization`` nor ``--kv-cache-memory-bytes`` gets the budget
:func:`planner.plan.inverse.smallest_budget` computes — worst case, or risk-bounded with the workload
profile in force — as ``--kv-cache-memory-bytes`` (releases that have it) plus the smallest
``--gpu-memory-utilization`` that holds it (vLLM checks the free memory against it at startup), and
``--max-num-seqs N`` when none is given. Shared GPUs are left to :mod:`planner.policy.sharing`.
"""

from __future__ import annotations

from typing import Any

from planner.errors import PlannerInputError
from planner.plan.inverse import smallest_budget
from planner.policy.codes import Code, finding
from planner.policy.sharing import ShareStep
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release


def target_step(ctx: Any, args: ServingArgs, *, fill: bool) -> ShareStep:
    """The ``targetSeqs`` fill for one container (``ctx``: :class:`planner.policy.limits.LimitContext`)."""
    out = ShareStep(args=args)
    target = ctx.policy.target_seqs
    if (
        target is None
        or not fill
        or not getattr(ctx, "version_known", True)
        or ctx.found.share is not None
        or args.gpu_memory_utilization is not None
        or args.kv_cache_memory_bytes is not None
    ):
        return out
    _, release, _ = resolve_release(ctx.version)
    try:
        advice, plan = smallest_budget(
            ctx.plan,
            args,
            target_seqs=target,
            headroom=ctx.policy.headroom,
            kv_bytes_flag=release.kv_cache_memory_bytes_flag,
            profile=ctx.profile,
        )
    except PlannerInputError:
        return out
    if not advice.fits_on_gpu or not plan.fits or advice.gpu_memory_utilization is None:
        return out  # the target does not fit: decide_limits says what does
    name = ctx.name
    update: dict[str, Any] = {"gpu_memory_utilization": advice.gpu_memory_utilization}
    out.changes["gpu_memory_utilization"] = f"{advice.gpu_memory_utilization:g}"
    why = f"for targetSeqs {target} at {advice.max_model_len} tokens ({advice.basis})"
    if advice.kv_cache_memory_bytes is not None:
        update["kv_cache_memory_bytes"] = advice.kv_cache_memory_bytes
        out.changes["kv_cache_memory_bytes"] = str(advice.kv_cache_memory_bytes)
        out.findings.append(
            finding(
                Code.FILLED_KV_CACHE_MEMORY_BYTES,
                name,
                f"added --kv-cache-memory-bytes {advice.kv_cache_memory_bytes} {why}",
            )
        )
    out.findings.append(
        finding(
            Code.FILLED_GPU_MEMORY_UTILIZATION,
            name,
            f"added --gpu-memory-utilization {advice.gpu_memory_utilization:g} {why}",
        )
    )
    if args.max_num_seqs is None:
        update["max_num_seqs"] = target
        out.changes["max_num_seqs"] = str(target)
        out.findings.append(finding(Code.FILLED_MAX_NUM_SEQS, name, f"added --max-num-seqs {target} (targetSeqs)"))
    out.args = args.model_copy(update=update)
    return out
