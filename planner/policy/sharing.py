"""Policy for vLLM pods on a shared GPU: their share, what to fill, what cannot start.

Runs before the other limits (:mod:`planner.policy.limits`) for containers whose GPU is shared
(:mod:`planner.k8s.sharing`):

* the share is recorded (KVP013, info); a shared card whose per-pod memory is unknown is a warning
  (KVP014) and nothing is filled — never the release's whole-card default;
* a pod whose startup request (``ceil(total x util)``, vLLM's default when not given) does not fit its
  share: with ``fill`` and no utilization or KV size given, kv-planner adds ``--gpu-memory-utilization``
  at the share (KVP022) and, in releases that have it, ``--kv-cache-memory-bytes`` (KVP027; see
  :mod:`planner.plan.shared` for why); ``clamp`` also lowers a given value (KVP026). Otherwise: under an
  enforced limit that vLLM sees as free memory of the whole card (MPS) vLLM refuses to start (KVP006,
  deny in Enforce); without isolation (time-slicing) the pod starts and its co-tenants may not (KVP012);
* a model that does not fit in its share: KVP006 when the share is enforced, KVP012 otherwise.

Pods whose card is known to be the same (replicas of one workload on a shared ResourceClaim, or pinned
to a node with one GPU) are checked together by :func:`cotenancy_findings`: more than the card holds is
KVP007 (deny in Enforce).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerInputError
from planner.gpus.share import GpuShare
from planner.plan.models import Plan
from planner.plan.shared import CONTEXT_RESERVE_BYTES, demand_bytes, plan_at_share, sharing_report
from planner.policy.codes import Code, Finding, Severity, finding
from planner.units import GiB
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release


class ShareStep(BaseModel):
    """What the share step decided for one container."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    args: ServingArgs
    changes: dict[str, str] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    report: Any | None = None


def _gib(value: int | None) -> str:
    return f"{(value or 0) / GiB:.1f} GiB"


def share_step(ctx: Any, args: ServingArgs, *, fill: bool, clamp: bool) -> ShareStep:
    """The share step for one container (``ctx``: :class:`planner.policy.limits.LimitContext`)."""
    share: GpuShare | None = ctx.found.share
    out = ShareStep(args=args)
    if share is None:
        return out
    name = ctx.name
    out.findings.append(finding(Code.SHARED_GPU, name, f"shared GPU: {share.describe()}"))
    if share.budget_bytes is None:
        out.findings.append(
            finding(
                Code.SHARE_UNKNOWN,
                name,
                f"shared GPU ({share.source}) with unknown per-pod memory: set kv-planner.io/gpu-memory; "
                "nothing filled",
            )
        )
        return out
    try:
        plan = ctx.plan(args)
        cap, at_share = plan_at_share(ctx.plan, args, share)
    except PlannerInputError:
        return out  # decide_limits reports what vLLM would refuse
    _, release, _ = resolve_release(ctx.version)
    report = sharing_report(
        plan, share, args, at_share=at_share, kv_bytes_flag=release.kv_cache_memory_bytes_flag, cap=cap
    )
    out.report = report
    if not report.over_budget:
        return out
    demand, budget = report.demand_bytes, share.budget_bytes
    given_util, given_kv = args.gpu_memory_utilization, args.kv_cache_memory_bytes
    given = given_util is not None or given_kv is not None
    fits = at_share is not None and at_share.fits and cap is not None
    # A KV size is release-specific (blocks, the flag itself): only with a known release; and only one that
    # holds the context at the low end of the band (report.recommended_kv_cache_memory_bytes).
    kv_bytes = report.recommended_kv_cache_memory_bytes if getattr(ctx, "version_known", True) else None
    # A given KV size is replaced, never dropped: without a size to set, it is reported below instead.
    settable = given_kv is None or kv_bytes is not None
    if fits and settable and ((fill and not given) or (clamp and given)):
        assert cap is not None
        out.changes["gpu_memory_utilization"] = f"{cap:g}"
        why = f"this pod's share of the {share.mechanism} GPU is {_gib(budget)}"
        if given_util is not None and given_util > cap:
            out.findings.append(
                finding(
                    Code.CLAMPED_GPU_MEMORY_UTILIZATION,
                    name,
                    f"lowered --gpu-memory-utilization {given_util:g} -> {cap:g}: {why}",
                )
            )
        else:
            out.findings.append(
                finding(Code.FILLED_GPU_MEMORY_UTILIZATION, name, f"added --gpu-memory-utilization {cap:g}: {why}")
            )
        if kv_bytes is not None:
            out.changes["kv_cache_memory_bytes"] = str(kv_bytes)
            verb = "set" if given_kv is not None else "added"
            out.findings.append(
                finding(
                    Code.FILLED_KV_CACHE_MEMORY_BYTES,
                    name,
                    f"{verb} --kv-cache-memory-bytes {kv_bytes}: a KV size co-tenants cannot change during profiling",
                )
            )
        out.args = args.model_copy(
            update={
                "gpu_memory_utilization": cap,
                "kv_cache_memory_bytes": kv_bytes if kv_bytes is not None else None,
            }
        )
        return out
    if not fits:
        detail = at_share.fit_error if at_share is not None and at_share.fit_error else "the weights do not fit"
        text = f"does not fit its {_gib(budget)} share of the {share.mechanism} GPU: {detail}"
        code = Code.SHARE_CANNOT_START if share.isolated else Code.OVER_SHARE
        out.findings.append(finding(code, name, text))
        return out
    assert cap is not None
    fix = f"use --gpu-memory-utilization {cap:g}"
    util = plan.memory.gpu_memory_utilization
    # Under an enforced limit vLLM's startup check (free >= ceil(total x util)) fails. Only certain when the
    # request alone exceeds the limit: the context reserve is an estimate, so within it this is a warning,
    # and so is the error a given KV size leaves on the footprint (the demand as planned decides).
    certain = demand_bytes(plan, args) - CONTEXT_RESERVE_BYTES > budget
    if share.isolated and certain:
        limit = "MPS gives" if share.visible_bytes == share.card_bytes else "the limit leaves"
        text = f"startup asks {util:g} x {_gib(share.visible_bytes)}, {limit} {_gib(budget)}: vLLM exits; {fix}"
        out.findings.append(finding(Code.SHARE_CANNOT_START, name, text))
    else:
        pods = f"{share.replicas} pods" if share.replicas else "other pods"
        text = f"takes {_gib(demand)} of a GPU shared by {pods} (share {_gib(budget)}); {fix}"
        out.findings.append(finding(Code.OVER_SHARE, name, text))
    return out


class Tenant(BaseModel):
    """One container's claim on a card whose co-tenants are known."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    placement: str
    card_bytes: int
    pods: int
    demand_bytes: int
    container: str | None
    entry: Any = None


def tenant(
    share: GpuShare | None,
    plan: Plan | None,
    effective: dict[str, Any],
    pods: int,
    container: str | None,
    entry: Any = None,
) -> Tenant | None:
    """A container's tenancy, when its card is known (``share.placement``) and it has a plan."""
    if share is None or share.placement is None or plan is None:
        return None
    kv = effective.get("kv_cache_memory_bytes")
    args = ServingArgs(kv_cache_memory_bytes=kv if isinstance(kv, int) else None)
    demand = demand_bytes(plan, args)
    if share.isolated and share.budget_bytes is not None:
        demand = min(demand, share.budget_bytes)  # an enforced limit is all it can take
    return Tenant(
        placement=share.placement,
        card_bytes=share.card_bytes,
        pods=max(1, pods),
        demand_bytes=demand,
        container=container,
        entry=entry,
    )


def cotenancy_findings(tenants: Sequence[Tenant]) -> list[tuple[Tenant, Finding]]:
    """KVP007 for every tenant of a card whose tenants together need more than the card has."""
    by_card: dict[str, list[Tenant]] = {}
    for item in tenants:
        by_card.setdefault(item.placement, []).append(item)
    out: list[tuple[Tenant, Finding]] = []
    for placement, members in by_card.items():
        total = sum(m.demand_bytes * m.pods for m in members)
        pods = sum(m.pods for m in members)
        card = members[0].card_bytes
        if pods < 2 or total <= card:
            continue
        where = placement.split(":", 1)[1]
        text = f"{pods} pods on one GPU ({where}) need {_gib(total)}, it has {_gib(card)}: they cannot all start"
        out += [(m, finding(Code.CARD_OVERCOMMITTED, m.container, text)) for m in members]
    return out


def is_cannot_start(findings: Sequence[Finding]) -> bool:
    return any(f.severity == Severity.cannot_start for f in findings)


def with_report(ctx: Any, args: ServingArgs, plan: Plan | None) -> Plan | None:
    """``plan`` with its sharing report (a copy: plans are memoized and shared)."""
    share: GpuShare | None = ctx.found.share
    if share is None or plan is None:
        return plan
    try:
        cap, at_share = plan_at_share(ctx.plan, args, share)
    except PlannerInputError:
        return plan
    _, release, _ = resolve_release(ctx.version)
    report = sharing_report(
        plan, share, args, at_share=at_share, kv_bytes_flag=release.kv_cache_memory_bytes_flag, cap=cap
    )
    return plan.model_copy(update={"sharing": report})
