"""Which limits to add or lower for one vLLM container, each change proven by a plan that fits.

Called by :mod:`planner.policy.container` once the command line, GPU and model are known. See that
module's docstring for the rules.

"Fits" means at the low end of the plan's KV band (:mod:`planner.plan.margin`): the least KV memory
vLLM may find when the prediction is off by its measured error. A ``--max-model-len`` filled or lowered
here holds one sequence there (re-planned with its own value, stepping down where a shorter context
leaves less memory, as V0 does), and the ``--max-num-seqs`` worst case counts the blocks there. A
context that fits only as predicted is not filled; given by the user it is warned about (KVP016) or,
with ``clamp``, lowered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from planner.errors import PlannerInputError
from planner.gpus.spec import GpuSpec
from planner.k8s.inspect import ContainerFinding
from planner.models.spec import ModelSpec
from planner.plan.margin import fits_at_low_end, low_end_blocks
from planner.plan.models import Plan
from planner.plan.recommend import round_context, safe_max_model_len, worst_case_seqs
from planner.plan.shared import visible_gpu
from planner.policy.codes import Code, Finding, Fix, finding, fix_args, passthrough
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
    # Release unknown: the context a decision under another candidate release found to hold at its low end.
    # A decision under this release fills or clamps no longer one (planner.policy.container._settle_release).
    context_cap: int | None = None

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


def _fix_options(plan: Plan, *, besides: str | None = None) -> list[tuple[str, list[str]]]:
    """The first two alternatives that fit: (as text, their flags); ``besides``: a fix already named."""
    fixes: list[tuple[str, list[str]]] = []
    for alternative in plan.alternatives:
        # "more GPUs: --tensor-parallel-size 2 (2 GPUs)" -> "--tensor-parallel-size 2"
        fix = _without_parenthetical(alternative.change.split(":", 1)[-1].strip())
        named = [text for text, _ in fixes]
        if alternative.fits and fix not in named and not (besides and fix.split()[0] == besides.split()[0]):
            fixes.append((fix, alternative.args))
    return fixes[:2]


def _fix_hint(plan: Plan, *, besides: str | None = None) -> str:
    """The first two alternatives that fit, as flags (``besides``: a fix already named)."""
    fixes = _fix_options(plan, besides=besides)
    return " or ".join(text for text, _ in fixes) if fixes else "more GPUs or a bigger GPU"


def _fix(plan: Plan, *, first: tuple[str, list[str]] | None = None) -> Fix:
    """The structured fix: ``first`` (or the first fitting alternative) as flags, every option in words."""
    options = ([first] if first else []) + _fix_options(plan, besides=first[0] if first else None)
    if not options:
        return Fix(text="more GPUs or a bigger GPU")
    args = next((flags for _, flags in options if flags), [])
    return Fix(args=args, text=" or ".join(text for text, _ in options))


def _with(args: ServingArgs, changes: Mapping[str, str]) -> ServingArgs:
    update: dict[str, Any] = {}
    for dest, value in changes.items():
        update[dest] = float(value) if dest == "gpu_memory_utilization" else int(value)
    return args.model_copy(update=update)


@dataclass
class _Edits:
    """The argv changes decided so far (dest -> value) and the finding that announces each."""

    changes: dict[str, str] = field(default_factory=dict)
    notes: dict[str, Finding] = field(default_factory=dict)
    warnings: list[Finding] = field(default_factory=list)  # said whatever is changed (KVP016)

    def add(self, dest: str, value: str, note: Finding) -> None:
        self.changes[dest] = value
        self.notes[dest] = note


def decide_limits(ctx: LimitContext, args: ServingArgs, mutable: bool) -> ContainerOutcome:
    """Findings and argv changes for ``args`` (mutable: whether changes may be made).

    Steps: plan as written; a context that cannot start (deny, or a fitted ``--max-model-len``); the
    release's utilization; re-plan with those changes (each must fit); then ``--max-num-seqs``.
    """
    out = ContainerOutcome()
    name, policy = ctx.name, ctx.policy
    try:
        plan = ctx.plan(args)
    except PlannerInputError as error:
        out.findings.append(finding(Code.SETTING_REFUSED, name, f"vLLM would refuse: {error.message}"))
        out.effective_args = _effective_as_given(args)
        return out
    out.findings += [passthrough(name, note) for note in plan.findings]
    out.plan = plan
    # What vLLM would run with; replaced below when limits are filled or clamped.
    out.effective_args = _effective(args, plan, ctx.effective(args, plan))
    fill = mutable and policy.mutation in ("fill", "clamp")
    clamp = mutable and policy.mutation == "clamp"
    edits = _Edits()
    cannot_start = _context_edits(ctx, args, plan, edits, fill=fill, clamp=clamp)
    if cannot_start is not None:
        out.findings.append(cannot_start)
        return out
    out.findings += edits.warnings
    _utilization_edit(ctx, args, plan, edits, fill=fill)
    if edits.changes:
        # A context filled or lowered must hold at the low end of its band; the release's utilization
        # alone changes nothing, so it needs no more than the plan as written had.
        candidate = _replan(ctx, args, edits.changes, at_low_end="max_model_len" in edits.changes)
        if candidate is None:
            out.findings.append(finding(Code.PATCH_DROPPED, name, "limits not added: the planned values do not fit"))
            if not plan.fits:
                out.findings.append(
                    finding(
                        Code.CONTEXT_DOES_NOT_FIT,
                        name,
                        f"--max-model-len {plan.kv_cache.max_model_len} does not fit; fix: {_fix_hint(plan)}",
                        _fix(plan),
                    )
                )
                return out
            edits = _Edits()
        else:
            args, plan = candidate
            out.plan = plan
    args, plan = _max_num_seqs_edit(ctx, args, plan, edits, out, fill=fill, clamp=clamp)
    out.findings += [edits.notes[dest] for dest in edits.changes if dest in edits.notes]
    out.changes = edits.changes
    out.effective_args = _effective(args, plan, ctx.effective(args, plan))
    return out


def _context_edits(
    ctx: LimitContext, args: ServingArgs, plan: Plan, edits: _Edits, *, fill: bool, clamp: bool
) -> Finding | None:
    """``--max-model-len``: the cannot-start finding when the plan does not fit and nothing may fix it;
    else the fitted (or, with fill, the default) context is added to ``edits``."""
    name, kv = ctx.name, plan.kv_cache
    auto = args.max_model_len == -1  # vLLM fits the context to the memory it finds, whatever the error
    over_cap = ctx.context_cap is not None and kv.max_model_len > ctx.context_cap and not auto
    if (fits_low(plan) or (plan.fits and auto)) and not over_cap:
        if fill and args.max_model_len is None:
            edits.add(
                "max_model_len",
                str(kv.max_model_len),
                finding(
                    Code.FILLED_MAX_MODEL_LEN,
                    name,
                    f"added --max-model-len {kv.max_model_len} (the model's default; it fits)",
                    fix_args(["--max-model-len", str(kv.max_model_len)]),
                ),
            )
        return None
    if plan.fits:
        _fits_only_as_predicted(ctx, args, plan, edits, fill=fill, clamp=clamp)
        return None
    memory = plan.memory
    if memory.given_kv_overflows:
        return finding(
            Code.GIVEN_KV_TOO_LARGE,
            name,
            f"--kv-cache-memory-bytes {memory.kv_cache_bytes / GiB:.1f} GiB + weights {memory.weights_bytes / GiB:.1f} "
            f"GiB + {memory.non_torch_bytes / GiB:.1f} GiB outside PyTorch > {memory.total_bytes / GiB:.1f} GiB "
            f"({ctx.gpu_name}): CUDA out of memory at startup",
        )
    if memory.kv_cache_bytes <= 0 or memory.weights_bytes >= memory.budget_bytes:
        budget = f"{memory.gpu_memory_utilization:g} x {memory.total_bytes / GiB:.1f} GiB ({ctx.gpu_name})"
        if memory.weights_bytes >= memory.budget_bytes:
            text = f"weights {memory.weights_bytes / GiB:.1f} GiB/GPU exceed {budget}"
        else:  # the weights fit: the other terms take the rest (e.g. a huge --max-num-batched-tokens)
            graphs = memory.cuda_graph_bytes if memory.cuda_graph_counted else 0
            text = (
                f"weights {memory.weights_bytes / GiB:.1f} + activation peak "
                f"{memory.activation_peak_bytes / GiB:.1f} + non-torch {memory.non_torch_bytes / GiB:.1f}"
                + (f" + CUDA graphs {graphs / GiB:.1f}" if graphs else "")
                + f" GiB/GPU leave no KV cache in {budget}"
            )
        return finding(Code.WEIGHTS_DO_NOT_FIT, name, f"{text}; fix: {_fix_hint(plan)}", _fix(plan))
    fit = safe_context(ctx, args, plan)
    given = args.max_model_len is not None
    blocks = f"{kv.blocks_per_request} KV blocks > {kv.usable_blocks} on {ctx.gpu_name}"
    if fit is not None and (clamp if given else fill):
        _edit_context(
            edits, name, given, kv.max_model_len, fit, f"{blocks}", f"default {kv.max_model_len} needs {blocks}"
        )
        return None
    what = f"--max-model-len {kv.max_model_len}" if given else f"default context {kv.max_model_len}"
    first = f"--max-model-len {fit}" if fit else None
    fixes = ([first] if first else []) + [_fix_hint(plan, besides=first)]
    shorter = (first, ["--max-model-len", str(fit)]) if first else None
    return finding(
        Code.CONTEXT_DOES_NOT_FIT, name, f"{what}: {blocks}; fix: {' or '.join(fixes)}", _fix(plan, first=shorter)
    )


def fits_low(plan: Plan) -> bool:
    """The context in force holds one sequence at the low end of the plan's KV band (a plan without a
    band, or with a given ``--kv-cache-memory-bytes``, is exact: its nominal fit)."""
    return fits_at_low_end(plan)


def safe_context(ctx: LimitContext, args: ServingArgs, plan: Plan) -> int | None:
    """The longest context to fill or clamp to: the plan's safe context (the low end of its band), checked by
    planning it and stepping down while its own plan does not fit at its low end (a shorter context can
    leave less KV memory: V0 profiles at the context below 32K tokens; or more: V0's profile batch is the
    context, so where nothing is left at the low end the context that fits as predicted is tried). None
    when none holds."""
    length = safe_max_model_len(plan) or _nominal_shorter(plan, plan.kv_cache.max_model_len)
    cap = ctx.context_cap
    if cap is not None and length is not None and length >= cap:
        length = cap
    elif cap is not None and cap < plan.kv_cache.max_model_len:
        # Release unknown: the context another release holds is tried first (in V0 a shorter context can
        # leave more memory than this plan's own estimate says: the profile batch is the context).
        length = cap if length is None else max(length, cap)
    for _ in range(_CONTEXT_STEPS):
        if length is None or length <= 0:
            return None
        if length == plan.kv_cache.max_model_len and fits_low(plan):
            return length
        try:
            current = ctx.plan(args.model_copy(update={"max_model_len": length}))
        except PlannerInputError:
            return None
        if fits_low(current):
            return length
        shorter = safe_max_model_len(current) or _nominal_shorter(current, length)
        if shorter is None or shorter >= length:
            return None
        length = shorter
    return None


def _nominal_shorter(plan: Plan, below: int) -> int | None:
    """The longest context that fits ``plan`` as predicted, rounded, when it is shorter than ``below``."""
    kv = plan.kv_cache
    if kv.estimated_max_model_len <= 0 or kv.num_gpu_blocks <= 0:
        return None
    length = round_context(kv.estimated_max_model_len, kv.block_size)
    return length if 0 < length < below else None


# Each step plans a shorter context; two suffice in V0 (past the 32K switch, then inside it).
_CONTEXT_STEPS = 6


def _low_end_text(plan: Plan) -> str:
    """``one sequence needs 2,048 KV blocks; 2,129 usable as predicted, 1,951 at the low end of the band
    (6.24 GiB +1.39/-0.52)``."""
    kv, band = plan.kv_cache, plan.margin
    low = max(0, low_end_blocks(plan) - 1)
    where = f" ({band.describe()})" if band is not None else ""
    return (
        f"one sequence needs {kv.blocks_per_request:,} KV blocks; {kv.usable_blocks:,} usable as predicted, "
        f"{low:,} at the low end of the band{where}"
    )


def _fits_only_as_predicted(
    ctx: LimitContext, args: ServingArgs, plan: Plan, edits: _Edits, *, fill: bool, clamp: bool
) -> None:
    """The context fits as predicted but not at the low end of the KV band: vLLM refuses to start when the
    prediction is off by its measured error (or, release unknown, it does so under another candidate
    release: ``ctx.context_cap``). Filled or clamped to the safe context, else warned about."""
    name, kv = ctx.name, plan.kv_cache
    given = args.max_model_len is not None
    fit = safe_context(ctx, args, plan)
    if fits_low(plan):  # over the cap
        why = "it does not hold at the low end of the KV band under every vLLM release it may run"
    else:
        why = f"it fits only as predicted: {_low_end_text(plan)}"
    if fit is not None and (clamp if given else fill):
        _edit_context(
            edits, name, given, kv.max_model_len, fit, why, f"the default {kv.max_model_len} is too long, {why}"
        )
        return
    what = f"--max-model-len {kv.max_model_len}" if given else f"default context {kv.max_model_len}"
    first = f"--max-model-len {fit}" if fit else None
    # (a plan that fits as predicted has no alternatives computed: the context is the fix)
    others = [_fix_hint(plan, besides=first)] if plan.alternatives or not first else []
    fixes = ([first] if first else []) + others
    shorter = (first, ["--max-model-len", str(fit)]) if first else None
    edits.warnings.append(
        finding(
            Code.CONTEXT_FITS_ONLY_AS_PREDICTED,
            name,
            f"{what}: {why}; fix: {' or '.join(fixes)}",
            _fix(plan, first=shorter),
        )
    )


def _utilization_edit(ctx: LimitContext, args: ServingArgs, plan: Plan, edits: _Edits, *, fill: bool) -> None:
    # Never the release's whole-card default on a shared GPU: the share step fills its share instead.
    if (
        fill
        and ctx.version_known
        and args.gpu_memory_utilization is None
        and args.kv_cache_memory_bytes is None
        and not ctx.shared
    ):
        value = f"{plan.memory.gpu_memory_utilization:g}"
        edits.add(
            "gpu_memory_utilization",
            value,
            finding(
                Code.FILLED_GPU_MEMORY_UTILIZATION,
                ctx.name,
                f"added --gpu-memory-utilization {value} (vLLM {plan.vllm_version} default)",
                fix_args(["--gpu-memory-utilization", value]),
            ),
        )


def _max_num_seqs_edit(
    ctx: LimitContext,
    args: ServingArgs,
    plan: Plan,
    edits: _Edits,
    out: ContainerOutcome,
    *,
    fill: bool,
    clamp: bool,
) -> tuple[ServingArgs, Plan]:
    """``--max-num-seqs``: a warning, or a change kept only when its plan fits. Returns the args and plan
    in force afterwards."""
    seqs = _max_num_seqs(ctx, args, plan, fill=fill, clamp=clamp)
    if seqs is None:
        return args, plan
    seqs_value, note = seqs
    if seqs_value is None:
        out.findings.append(note)
        return args, plan
    candidate = _replan(ctx, args, {"max_num_seqs": str(seqs_value)}, at_low_end=fits_low(plan))
    if candidate is None:
        return args, plan
    args, plan = candidate
    out.plan = plan
    edits.add("max_num_seqs", str(seqs_value), note)
    return args, plan


def _replan(
    ctx: LimitContext, args: ServingArgs, changes: Mapping[str, str], *, at_low_end: bool
) -> tuple[ServingArgs, Plan] | None:
    """``args`` with ``changes`` and its plan, when that plan fits (a mutation must be proven safe);
    ``at_low_end``: at the low end of its KV band too."""
    new_args = _with(args, changes)
    try:
        new_plan = ctx.plan(new_args)
    except PlannerInputError:
        return None
    ok = fits_low(new_plan) if at_low_end else new_plan.fits
    return (new_args, new_plan) if ok else None


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
                    fix_args(["--max-num-seqs", str(limit)]),
                )
            if given is not None and clamp:
                return limit, finding(
                    Code.CLAMPED_MAX_NUM_SEQS,
                    name,
                    f"lowered --max-num-seqs {given} -> {limit} (workload profile)",
                    fix_args(["--max-num-seqs", str(limit)]),
                )
            return None, finding(
                Code.THRASH,
                name,
                f"--max-num-seqs {configured} needs more KV blocks than {ctx.gpu_name} holds "
                f"for this workload; safe: {limit}",
                fix_args(["--max-num-seqs", str(limit)]),
            )
        if given is None and fill:
            return limit, finding(
                Code.FILLED_MAX_NUM_SEQS,
                name,
                f"added --max-num-seqs {limit} (workload profile)",
                fix_args(["--max-num-seqs", str(limit)]),
            )
        return None
    # The worst case counts the blocks at the low end of the band: the pool vLLM may find.
    low = low_end_blocks(plan)
    worst = worst_case_seqs(low, kv.blocks_per_request, ctx.policy.headroom)
    if configured > worst:
        if worst >= 1:
            detail = f"only {worst} sequence{'s' if worst != 1 else ''} of {kv.max_model_len} tokens fit at once"
        elif low - 1 >= kv.blocks_per_request:
            detail = f"one {kv.max_model_len}-token sequence fits, but not with {ctx.policy.headroom:.0%} headroom"
        else:
            detail = f"not one {kv.max_model_len}-token sequence fits for sure"
        basis = f"worst case at the low end of the KV band, {low:,} blocks" if low < kv.num_gpu_blocks else "worst case"
        return None, finding(
            Code.ABOVE_WORST_CASE,
            name,
            f"--max-num-seqs {configured}: {detail}; add a {WORKLOAD_ANNOTATION} profile",
            Fix(
                args=["--max-num-seqs", str(worst)] if worst >= 1 else [],
                text=f"add a {WORKLOAD_ANNOTATION} profile"
                + (f" or lower --max-num-seqs to {worst} ({basis})" if worst >= 1 else ""),
            ),
        )
    if given is None and fill and ctx.version_known:  # vLLM's default differs by release
        return default, finding(
            Code.FILLED_MAX_NUM_SEQS,
            name,
            f"added --max-num-seqs {default} (vLLM's default; the worst case fits)",
            fix_args(["--max-num-seqs", str(default)]),
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


def _edit_context(
    edits: _Edits, name: str, given: bool, current: int, fit: int, clamp_reason: str, fill_reason: str
) -> None:
    """Lower a given ``--max-model-len`` to ``fit`` (KVP024), or add it where the default is too long (KVP020)."""
    fix = fix_args(["--max-model-len", str(fit)])
    if given:
        text = f"lowered --max-model-len {current} -> {fit}: {clamp_reason}"
        edits.add("max_model_len", str(fit), finding(Code.CLAMPED_MAX_MODEL_LEN, name, text, fix))
    else:
        text = f"added --max-model-len {fit}: {fill_reason}"
        edits.add("max_model_len", str(fit), finding(Code.FILLED_MAX_MODEL_LEN, name, text, fix))
