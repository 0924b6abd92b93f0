"""Which limits to add or lower for one vLLM container, each change proven by a plan that fits.

Called by :mod:`planner.policy.container` once the command line, GPU and model are known. See that
module's docstring for the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from planner.errors import PlannerInputError
from planner.gpus.spec import GpuSpec
from planner.k8s.inspect import ContainerFinding
from planner.models.spec import ModelSpec
from planner.plan.models import Plan
from planner.plan.shared import visible_gpu
from planner.policy.codes import Code, Finding, finding, passthrough
from planner.policy.model import WORKLOAD_ANNOTATION, EffectivePolicy
from planner.policy.outcome import ContainerOutcome
from planner.policy.planning import PlanningBackend
from planner.units import GiB
from planner.vllm.args import ServingArgs


class LimitContext(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    found: ContainerFinding
    model: ModelSpec
    profile: Any | None
    policy: EffectivePolicy
    backend: Any
    version: str | None
    version_known: bool = True  # False: planned for a candidate release; nothing release-specific is filled
    draft: ModelSpec | None = None  # the resolved drafter of --speculative-config, when it resolved

    @property
    def name(self) -> str:
        return self.found.container.name

    @property
    def gpu_name(self) -> str:
        return self.found.gpu.spec.name if self.found.gpu.spec else "the GPU"

    def plan(self, args: ServingArgs, *, with_workload: bool = False) -> Plan:
        """The plan for ``args``. The workload profile (the costly risk computation) is only passed
        when the risk-bounded --max-num-seqs is wanted; fit checks do not depend on it."""
        assert self.found.gpu.spec is not None
        backend: PlanningBackend = self.backend
        extra: dict[str, Any] = {"draft": self.draft} if self.draft is not None else {}
        return backend.plan(
            self.model,
            self.gpu_spec,
            args,
            vllm_version=self.version,
            headroom=self.policy.headroom,
            workload=self.profile if with_workload else None,
            **extra,
        )

    @property
    def shared(self) -> bool:
        return self.found.share is not None

    @property
    def gpu_spec(self) -> GpuSpec:
        """The GPU as vLLM sees it in this pod (a HAMi or Run:ai limit shows as the card's total)."""
        assert self.found.gpu.spec is not None
        share = self.found.share
        return visible_gpu(self.found.gpu.spec, share) if share is not None else self.found.gpu.spec

    def effective(self, args: ServingArgs, plan: Plan) -> dict[str, Any]:
        assert self.found.gpu.spec is not None
        backend: PlanningBackend = self.backend
        try:
            return backend.effective_args(
                self.model,
                self.gpu_spec,
                args,
                vllm_version=self.version,
                max_model_len=plan.kv_cache.max_model_len,
            )
        except PlannerInputError:
            return {}


def parallel_text(args: ServingArgs) -> str:
    text = f"TP {args.tensor_parallel_size} x PP {args.pipeline_parallel_size}"
    if args.data_parallel_size > 1:
        text += f" x DP {args.data_parallel_size}"
    return text


def _fix_hint(plan: Plan, *, besides: str | None = None) -> str:
    """The first two alternatives that fit, as flags (``besides``: a fix already named)."""
    fixes: list[str] = []
    for alternative in plan.alternatives:
        # "more GPUs: --tensor-parallel-size 2 (2 GPUs)" -> "--tensor-parallel-size 2"
        fix = _without_parenthetical(alternative.change.split(":", 1)[-1].strip())
        if alternative.fits and fix not in fixes and not (besides and fix.split()[0] == besides.split()[0]):
            fixes.append(fix)
    return " or ".join(fixes[:2]) if fixes else "more GPUs or a bigger GPU"


def _with(args: ServingArgs, changes: Mapping[str, str]) -> ServingArgs:
    update: dict[str, Any] = {}
    for dest, value in changes.items():
        update[dest] = float(value) if dest == "gpu_memory_utilization" else int(value)
    return args.model_copy(update=update)


def decide_limits(ctx: LimitContext, args: ServingArgs, mutable: bool) -> ContainerOutcome:
    """Findings and argv changes for ``args`` (mutable: whether changes may be made)."""
    out = ContainerOutcome()
    name, policy = ctx.name, ctx.policy
    try:
        plan = ctx.plan(args)
    except PlannerInputError as error:
        out.findings.append(finding(Code.SETTING_REFUSED, name, f"vLLM would refuse: {error.message}"))
        out.effective_args = _effective_as_given(args)
        return out
    out.findings += [passthrough(name, w) for w in plan.warnings]
    out.plan = plan
    # What vLLM would run with; replaced below when limits are filled or clamped.
    out.effective_args = _effective(args, plan, ctx.effective(args, plan))
    fill = mutable and policy.mutation in ("fill", "clamp")
    clamp = mutable and policy.mutation == "clamp"
    kv = plan.kv_cache
    changes: dict[str, str] = {}
    notes: dict[str, Finding] = {}

    if not plan.fits:
        memory = plan.memory
        if memory.kv_cache_bytes <= 0 or memory.weights_bytes >= memory.budget_bytes:
            out.findings.append(
                finding(
                    Code.WEIGHTS_DO_NOT_FIT,
                    name,
                    f"weights {memory.weights_bytes / GiB:.1f} GiB/GPU exceed "
                    f"{memory.gpu_memory_utilization:g} x {memory.total_bytes / GiB:.1f} GiB "
                    f"({ctx.gpu_name}); fix: {_fix_hint(plan)}",
                )
            )
            return out
        fit = plan.recommendation.max_model_len if plan.recommendation else None
        given = args.max_model_len is not None
        what = f"--max-model-len {kv.max_model_len}" if given else f"default context {kv.max_model_len}"
        blocks = f"{kv.blocks_per_request} KV blocks > {kv.usable_blocks} on {ctx.gpu_name}"
        need = f"{what}: {blocks}"
        if fit is not None and (clamp if given else fill):
            changes["max_model_len"] = str(fit)
            if given:
                notes["max_model_len"] = finding(
                    Code.CLAMPED_MAX_MODEL_LEN,
                    name,
                    f"lowered --max-model-len {kv.max_model_len} -> {fit}: {blocks}",
                )
            else:
                notes["max_model_len"] = finding(
                    Code.FILLED_MAX_MODEL_LEN,
                    name,
                    f"added --max-model-len {fit}: default {kv.max_model_len} needs {blocks}",
                )
        else:
            first = f"--max-model-len {fit}" if fit else None
            fixes = ([first] if first else []) + [_fix_hint(plan, besides=first)]
            out.findings.append(finding(Code.CONTEXT_DOES_NOT_FIT, name, f"{need}; fix: {' or '.join(fixes)}"))
            return out
    elif fill and args.max_model_len is None:
        changes["max_model_len"] = str(kv.max_model_len)
        notes["max_model_len"] = finding(
            Code.FILLED_MAX_MODEL_LEN,
            name,
            f"added --max-model-len {kv.max_model_len} (the model's default; it fits)",
        )
    # Never the release's whole-card default on a shared GPU: the share step fills its share instead.
    if (
        fill
        and ctx.version_known
        and args.gpu_memory_utilization is None
        and args.kv_cache_memory_bytes is None
        and not ctx.shared
    ):
        value = f"{plan.memory.gpu_memory_utilization:g}"
        changes["gpu_memory_utilization"] = value
        notes["gpu_memory_utilization"] = finding(
            Code.FILLED_GPU_MEMORY_UTILIZATION,
            name,
            f"added --gpu-memory-utilization {value} (vLLM {plan.vllm_version} default)",
        )

    if changes:
        candidate = _replan(ctx, args, changes)
        if candidate is None:
            out.findings.append(finding(Code.PATCH_DROPPED, name, "limits not added: the planned values do not fit"))
            if not plan.fits:
                out.findings.append(
                    finding(
                        Code.CONTEXT_DOES_NOT_FIT,
                        name,
                        f"--max-model-len {kv.max_model_len} does not fit; fix: {_fix_hint(plan)}",
                    )
                )
                return out
            changes, notes = {}, {}
        else:
            args, plan = candidate
            out.plan = plan

    seqs = _max_num_seqs(ctx, args, plan, fill=fill, clamp=clamp)
    if seqs is not None:
        seqs_value, note = seqs
        if seqs_value is None:
            out.findings.append(note)
        else:
            candidate = _replan(ctx, args, {"max_num_seqs": str(seqs_value)})
            if candidate is not None:
                args, plan = candidate
                out.plan = plan
                changes["max_num_seqs"] = str(seqs_value)
                notes["max_num_seqs"] = note
    out.findings += [notes[dest] for dest in changes if dest in notes]
    out.changes = changes
    out.effective_args = _effective(args, plan, ctx.effective(args, plan))
    return out


def _replan(ctx: LimitContext, args: ServingArgs, changes: Mapping[str, str]) -> tuple[ServingArgs, Plan] | None:
    """``args`` with ``changes`` and its plan, when that plan fits (a mutation must be proven safe)."""
    new_args = _with(args, changes)
    try:
        new_plan = ctx.plan(new_args)
    except PlannerInputError:
        return None
    return (new_args, new_plan) if new_plan.fits else None


def _max_num_seqs(
    ctx: LimitContext, args: ServingArgs, plan: Plan, *, fill: bool, clamp: bool
) -> tuple[int | None, Finding] | None:
    """(value to set or None, the finding) for --max-num-seqs, or None when there is nothing to say."""
    if not plan.fits or plan.recommendation is None:
        return None
    if ctx.profile is not None:
        try:
            plan = ctx.plan(args, with_workload=True)
        except PlannerInputError:
            return None
    recommendation = plan.recommendation
    if recommendation is None:
        return None
    name = ctx.name
    effective = ctx.effective(args, plan)
    default = int(effective.get("max_num_seqs") or recommendation.max_num_seqs)
    given = args.max_num_seqs
    configured = given if given is not None else default
    kv = plan.kv_cache
    if ctx.profile is not None:
        limit = recommendation.max_num_seqs
        if configured > limit:
            if given is None and fill:
                return limit, finding(
                    Code.FILLED_MAX_NUM_SEQS,
                    name,
                    f"added --max-num-seqs {limit}: the workload profile preempts at vLLM's default {default}",
                )
            if given is not None and clamp:
                return limit, finding(
                    Code.CLAMPED_MAX_NUM_SEQS,
                    name,
                    f"lowered --max-num-seqs {given} -> {limit} (workload profile)",
                )
            return None, finding(
                Code.THRASH,
                name,
                f"--max-num-seqs {configured} needs more KV blocks than {ctx.gpu_name} holds "
                f"for this workload; safe: {limit}",
            )
        if given is None and fill:
            return limit, finding(Code.FILLED_MAX_NUM_SEQS, name, f"added --max-num-seqs {limit} (workload profile)")
        return None
    worst = int(kv.usable_blocks * (1.0 - ctx.policy.headroom) // max(1, kv.blocks_per_request))
    if configured > worst:
        if worst >= 1:
            detail = f"only {worst} sequence{'s' if worst != 1 else ''} of {kv.max_model_len} tokens fit at once"
        else:
            detail = f"one {kv.max_model_len}-token sequence fits, but not with {ctx.policy.headroom:.0%} headroom"
        return None, finding(
            Code.ABOVE_WORST_CASE,
            name,
            f"--max-num-seqs {configured}: {detail}; add a {WORKLOAD_ANNOTATION} profile",
        )
    if given is None and fill and ctx.version_known:  # vLLM's default differs by release
        return default, finding(
            Code.FILLED_MAX_NUM_SEQS,
            name,
            f"added --max-num-seqs {default} (vLLM's default; the worst case fits)",
        )
    return None


def _effective_as_given(args: ServingArgs) -> dict[str, Any]:
    """The same keys as :func:`_effective` when no plan exists (vLLM would refuse the settings)."""
    return {
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "tensor_parallel_size": args.tensor_parallel_size,
        "pipeline_parallel_size": args.pipeline_parallel_size,
        "data_parallel_size": args.data_parallel_size,
        "kv_cache_dtype": args.kv_cache_dtype,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "block_size": args.block_size,
        "quantization": args.quantization,
        "dtype": args.dtype,
    }


def _effective(args: ServingArgs, plan: Plan, effective: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "max_model_len": plan.kv_cache.max_model_len,
        "max_num_seqs": effective.get("max_num_seqs", args.max_num_seqs),
        "gpu_memory_utilization": plan.memory.gpu_memory_utilization,
        "tensor_parallel_size": args.tensor_parallel_size,
        "pipeline_parallel_size": args.pipeline_parallel_size,
        "data_parallel_size": args.data_parallel_size,
        "kv_cache_dtype": plan.kv_cache.kv_cache_dtype,
        "max_num_batched_tokens": effective.get("max_num_batched_tokens", args.max_num_batched_tokens),
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "block_size": plan.kv_cache.block_size,
        "quantization": args.quantization,
        "dtype": effective.get("dtype", args.dtype),
    }


def _without_parenthetical(text: str) -> str:
    """``text`` without a trailing ``(...)`` remark (no regex: the module reads manifest values)."""
    start = text.find("(")
    return text[:start].rstrip() if start != -1 and text.endswith(")") else text
