"""The decision for one vLLM container: can it start, will it thrash, which limits to add or lower.

Rules (DESIGN.md, Policy):

* cannot start — the weights do not fit, ``--max-model-len`` cannot hold one sequence, TP x PP x DP
  needs more GPUs than the pod (or LeaderWorkerSet group) gets. Enforce denies; Audit warns. The message
  gives the numbers and the fix.
* ``fill`` adds the limits the user left out, each one proven by a plan that fits at the low end of its
  KV band (the prediction off by its measured error): ``--max-model-len`` (the model's default context,
  or the longest that fits there when the default does not — vLLM would refuse to start),
  ``--gpu-memory-utilization`` (the release default) and ``--max-num-seqs``: the risk-bounded value with
  a workload profile; without one only vLLM's own default, and only when the worst case (at the low end)
  supports it (never a cut below vLLM's default on a worst-case guess).
* a given ``--max-model-len`` that fits only as predicted is a warning (KVP016); ``clamp`` lowers it, and
  one that cannot hold one sequence, and (with a profile) a given ``--max-num-seqs`` above the
  risk-bounded value.
* Only ``argv``/``image`` containers are changed; for ``sh -c`` scripts the change is a warning.
* kv-planner's own failures (unknown model or GPU, lookup timeout, parse error, internal error) allow
  the workload with a warning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import yaml

from planner.errors import (
    HfOverridesError,
    InputCapError,
    KvPlannerError,
    ModelResolutionError,
    PlannerInputError,
    RepoNotAllowedError,
    UnknownModelError,
)
from planner.k8s.detect import VllmContainer
from planner.k8s.inspect import ContainerFinding
from planner.models.spec import ModelSpec
from planner.plan.models import Plan
from planner.plan.speculative import parse_speculative_config
from planner.policy.caps import cap_finding, check_model_name
from planner.policy.codes import Code, Finding, Fix, Severity, finding, fix_args
from planner.policy.limits import LimitContext, decide_limits, parallel_text
from planner.policy.model import WORKLOAD_ANNOTATION, EffectivePolicy
from planner.policy.offload import host_memory_findings
from planner.policy.outcome import ContainerOutcome
from planner.policy.planning import PlanningBackend
from planner.policy.rightsize import target_step
from planner.policy.sharing import share_step, with_report
from planner.policy.versions import ReleaseSpread, VersionBasis, assumption_findings, release_spread, soften
from planner.untrusted import load_embedded_yaml
from planner.vllm.args import ServingArgs
from planner.vllm.argv import VllmCommand, format_args
from planner.vllm.hf_overrides import parse_hf_overrides, with_rope_flags
from planner.vllm.releases import resolve_release

_SIZING_DESTS = (
    "model",
    "max_model_len",
    "max_num_seqs",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "kv_cache_dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "block_size",
    "quantization",
    "dtype",
    "hf_overrides",
    "rope_scaling",
)


def written_args(serving: ServingArgs | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``args`` object of ``planner check`` JSON: the sizing flags as written (None if absent)."""
    keys = (
        "max_model_len",
        "max_num_seqs",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "kv_cache_dtype",
        "max_num_batched_tokens",
        "kv_cache_memory_bytes",
        "block_size",
        "quantization",
        "dtype",
    )
    result: dict[str, Any] = {}
    for key in keys:
        if key not in values or serving is None:
            result[key] = None
        else:
            result[key] = getattr(serving, key)
    return result


@lru_cache(maxsize=256)
def _yaml_json(text: str) -> str:
    return json.dumps(load_embedded_yaml(text, source="annotation"), default=str)


def _yaml(text: str) -> Any:
    """YAML of an annotation, parsed once per distinct text (a fresh copy each time)."""
    return json.loads(_yaml_json(text))


def _drafter(
    serving: ServingArgs,
    version: str | None,
    backend: PlanningBackend,
    policy: EffectivePolicy,
    allow_local_models: bool,
    name: str,
    findings: list[Finding],
) -> tuple[ModelSpec | None, bool]:
    """(the drafter's spec, stop) for ``--speculative-config``: a draft model must resolve to be sized
    (otherwise the container is not checked); an EAGLE head that does not resolve is sized from the
    target's shapes (planner/plan/speculative.py)."""
    if not serving.speculative_config:
        return None, False
    try:
        settings = parse_speculative_config(serving.speculative_config, resolve_release(version)[0])
    except KvPlannerError as error:
        findings.append(finding(Code.COMMAND_LINE_REJECTED, name, error.message))
        return None, True
    if settings.model is None or settings.method in ("ngram", "ngram_gpu", "suffix", "mtp"):
        return None, False
    try:
        check_model_name(settings.model, policy.limits)  # the drafter's name is manifest input too
    except InputCapError as error:
        findings.append(cap_finding(error, name))
        return None, True
    try:
        spec = backend.resolve_model(
            settings.model,
            timeout=policy.model_lookup.timeout_seconds,
            offline=policy.model_lookup.offline,
            allow_local=allow_local_models,
            allow_repos=policy.model_lookup.allow_repos,
        )
    except KvPlannerError:
        if settings.method == "draft_model":
            text = f"draft model {settings.model} could not be read: not checked"
            findings.append(finding(Code.UNKNOWN_MODEL, name, text))
            return None, True
        return None, False
    return spec, False


def _applied(args: ServingArgs, result: ContainerOutcome) -> ServingArgs:
    """``args`` with the limits ``result`` adds (the object as it will be admitted)."""
    update: dict[str, Any] = {}
    for dest, value in result.changes.items():
        update[dest] = float(value) if dest == "gpu_memory_utilization" else int(value)
    return args.model_copy(update=update)


def workload_profile(
    annotations: list[Mapping[str, Any] | None],
    policy: EffectivePolicy,
    backend: PlanningBackend,
    container: str,
    findings: list[Finding],
) -> Any | None:
    """The profile in force: the workload's annotation, else the template's, else the policy's."""
    for meta in annotations:
        text = (meta or {}).get(WORKLOAD_ANNOTATION)
        if isinstance(text, str) and text.strip():
            try:
                return backend.parse_workload(_yaml(text))
            except (yaml.YAMLError, KvPlannerError) as error:
                message = getattr(error, "message", str(error)).splitlines()[0]
                findings.append(
                    finding(Code.BAD_WORKLOAD_PROFILE, container, f"{WORKLOAD_ANNOTATION} ignored: {message}")
                )
                break
    if policy.workload is not None:
        try:
            return backend.parse_workload(policy.workload)
        except KvPlannerError:
            return None
    return None


def evaluate(
    found: ContainerFinding,
    *,
    policy: EffectivePolicy,
    backend: PlanningBackend,
    annotations: list[Mapping[str, Any] | None],
    allow_local_models: bool,
) -> ContainerOutcome:
    """Evaluate one vLLM container. Never raises for kv-planner's own failures (they become findings).

    Steps: read the command line, check the GPU count against TP x PP x DP, resolve the GPU and the
    model, then plan the limits (shared-GPU share, target sequences, fill/clamp) and, for a container
    kv-planner does not edit, say what it would add.
    """
    out = ContainerOutcome()
    read = _read_command(found, policy, out)
    if read is None:
        return out
    command, serving, mutable, overrides = read
    out.findings += _gpu_count_findings(found, serving)
    if isinstance(overrides, HfOverridesError):  # (after the GPU count, which no config changes)
        out.findings.append(finding(Code.CONFIG_OVERRIDDEN, found.container.name, f"{overrides.message}: not checked"))
        return out
    serving = _with_group_nodes(found, serving)
    unknown_gpu = _unknown_gpu(found)
    if unknown_gpu is not None:
        out.findings.append(unknown_gpu)
        return out
    model = _resolve_model(found, command.model or "", policy, backend, allow_local_models, out)
    if model is None:
        return out
    name = found.container.name
    version = found.container.vllm_version or policy.vllm_version
    if overrides:
        model = _overridden(found, model, overrides, version, backend, out)
        if model is None:
            return out
    profile = workload_profile(annotations, policy, backend, name, out.findings)
    draft, stop = _drafter(serving, version, backend, policy, allow_local_models, name, out.findings)
    if stop:
        return out
    ctx = LimitContext(
        found=found,
        model=model,
        profile=profile,
        policy=policy,
        backend=backend,
        version=version,
        draft=draft,
    )
    if any(f.severity == Severity.cannot_start for f in out.findings):
        mutable = False  # (TP x PP vs GPUs) no limits are filled into a workload that cannot start
    result = _plan_limits(ctx, serving, mutable, out)
    result.findings = out.findings + result.findings
    if command.assumed:
        result.findings = soften(result.findings)  # the model vLLM serves may be the other one
    result.args = out.args
    result.model_id = out.model_id
    return result


def _overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """``--hf-overrides`` as vLLM reads it, with ``--rope-scaling`` / ``--rope-theta`` (<= 0.11.0) folded in
    after it, as vLLM does. Raises HfOverridesError."""
    overrides = parse_hf_overrides(values.get("hf_overrides"))
    if values.get("rope_scaling") is not None or values.get("rope_theta") is not None:
        overrides = with_rope_flags(overrides, values.get("rope_scaling"), values.get("rope_theta"))
    return overrides


def _overridden(
    found: ContainerFinding,
    model: ModelSpec,
    overrides: Mapping[str, Any],
    version: str | None,
    backend: PlanningBackend,
    out: ContainerOutcome,
) -> ModelSpec | None:
    """The model vLLM builds after ``--hf-overrides`` (vLLM applies them to the Hugging Face config before it
    derives the context or sizes anything), with the finding that says what was planned; None (with a
    warning) when kv-planner cannot apply them as this release does. Planning the published config instead
    denied workloads that fit and filled contexts vLLM then refused."""
    name = found.container.name
    try:
        applied = backend.apply_overrides(model, overrides, vllm_version=version)
    except HfOverridesError as error:
        hint = (
            ""
            if version is not None or "name the release" not in error.message
            else " (set kv-planner.io/vllm-version)"
        )
        out.findings.append(finding(Code.CONFIG_OVERRIDDEN, name, f"{error.message}{hint}: not checked"))
        return None
    rules = f"vLLM {version} rules" if version is not None else "every release's rules"
    text = f"--hf-overrides applied ({rules}): {applied.summary()}"
    # A RoPE override this release takes without deriving the context from it is a warning: the context the
    # manifest asks for is not the one vLLM serves. Otherwise the overrides are planned: a note.
    severity = Severity.warn if applied.unapplied else Severity.info
    out.findings.append(Finding.of(Code.CONFIG_OVERRIDDEN, text, container=name, severity=severity))
    return applied.spec


def _read_command(
    found: ContainerFinding, policy: EffectivePolicy, out: ContainerOutcome
) -> tuple[VllmCommand, ServingArgs, bool, dict[str, Any] | HfOverridesError] | None:
    """The command, its serving args, whether it may be changed and its ``--hf-overrides`` (or why they
    cannot be read); None (with a finding) when the command line cannot be checked."""
    container = found.container
    name = container.name
    command = container.command
    if command is None:
        unknowable = _runtime_finding(container, "the command line", container.parse_error or "")
        out.findings.append(
            unknowable or finding(Code.COMMAND_LINE_REJECTED, name, container.parse_error or "unreadable")
        )
        return None
    out.model_id = command.model
    mutable = policy.mutation != "off"  # (the command's style decides later whether it can be edited)
    # A value only the running script gives (`--max-model-len "$(cat /cfg/len)"`, an array kv-planner does not
    # model) cannot be checked, and vLLM's parser must not be taken to reject the text as written: in a sizing
    # flag or the model, among the arguments vLLM would not recognise, or in the error it would raise.
    unknowable = next(
        (
            hit
            for what, text in (
                *((_flag_name(dest), str(command.values.get(dest, ""))) for dest in _SIZING_DESTS),
                ("the model", str(command.model or "")),
                ("vLLM's arguments", " ".join(command.unknown)),
                ("the command line", command.errors[0] if command.errors else ""),
            )
            if (hit := _runtime_finding(container, what, text)) is not None
        ),
        None,
    )
    if unknowable is not None:
        out.findings.append(unknowable)
        return None
    if command.errors:
        out.findings.append(
            finding(
                Code.COMMAND_LINE_REJECTED,
                name,
                f"vLLM {container.vllm_version or command.release} would reject the command line: {command.errors[0]}",
            )
        )
        mutable = False
    if command.assumed:
        # vLLM serves one of the --model values, by the image's entrypoint: plan the one assumed, but change
        # nothing (limits filled for one model can keep the other from starting) and deny nothing.
        out.findings.append(finding(Code.ENTRYPOINT_ASSUMED, name, command.assumed))
        mutable = False
    if command.config_file and not command.config_loaded:
        out.findings.append(
            finding(
                Code.CONFIG_FILE_UNKNOWN,
                name,
                f"--config {command.config_file} is not readable here: its flags are not checked",
            )
        )
        return None
    values = command.values
    unresolved = list(container.unresolved)
    sizing_text = " ".join(str(values.get(d, "")) for d in _SIZING_DESTS) + " " + str(command.model or "")
    if unresolved and any(
        f"$({v})" in sizing_text or f"${v}" in sizing_text or f"${{{v}" in sizing_text for v in unresolved
    ):
        out.findings.append(
            finding(
                Code.UNRESOLVED_VARIABLE,
                name,
                f"${{{unresolved[0]}}} has no value in the manifest: not checked",
            )
        )
        return None
    try:
        serving = command.serving_args(env=container.env)
    except KvPlannerError as error:
        unknowable = _runtime_finding(container, "the command line", error.message)
        out.findings.append(unknowable or finding(Code.COMMAND_LINE_REJECTED, name, error.message))
        return None
    out.args = written_args(serving, values)
    overrides: dict[str, Any] | HfOverridesError
    try:
        overrides = _overrides(values)
    except HfOverridesError as error:
        overrides = error
    if not command.model:
        out.findings.append(finding(Code.UNKNOWN_MODEL, name, "no model on the command line: not checked"))
        return None
    try:
        check_model_name(command.model, policy.limits)
    except InputCapError as error:
        out.findings.append(cap_finding(error, name))
        return None
    return command, serving, mutable, overrides


def _runtime_finding(container: VllmContainer, what: str, text: str) -> Finding | None:
    """KVP032 when ``text`` holds a part of the script kept as written (a command substitution ...): its
    value is only known when the script runs, so ``what`` is not checked."""
    part = next((part for part in container.runtime if part and part in text), None)
    if part is None:
        return None
    shown = " ".join(part.split())
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    return finding(
        Code.UNRESOLVED_VARIABLE, container.name, f"{shown} has a value only when the script runs: {what} not checked"
    )


def _flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _gpu_count_findings(found: ContainerFinding, serving: ServingArgs) -> list[Finding]:
    """TP x PP x DP against the GPUs the pod (or LeaderWorkerSet group) gets."""
    name = found.container.name
    gpu = found.gpu
    needed = serving.gpus_total
    if gpu.count is None and found.claims:
        claim = found.claims[0]
        return [
            finding(
                Code.NO_GPU_REQUEST,
                name,
                f"GPUs come from DRA {claim.kind} {claim.object_name}, not readable here: TP x PP not checked",
            )
        ]
    if gpu.count is None:
        return [finding(Code.NO_GPU_REQUEST, name, "no nvidia.com/gpu or amd.com/gpu request: TP x PP not checked")]
    if gpu.group_gpus is not None and needed > gpu.group_gpus:
        where = f"the group of {gpu.group_size} pods" if (gpu.group_size or 1) > 1 else "the pod"
        return [
            finding(
                Code.TOO_FEW_GPUS,
                name,
                f"{parallel_text(serving)} = {needed} GPUs but {where} gets {gpu.group_gpus}: "
                f"request {needed} GPUs or lower --tensor-parallel-size",
                Fix(text=f"request {needed} GPUs or lower --tensor-parallel-size"),
            )
        ]
    if gpu.group_gpus is not None and needed < gpu.group_gpus:
        return [
            finding(
                Code.IDLE_GPUS,
                name,
                f"the pod gets {gpu.group_gpus} GPUs, vLLM uses {parallel_text(serving)} = "
                f"{needed}: {gpu.group_gpus - needed} idle",
                Fix(text=f"request {needed} GPUs or raise --tensor-parallel-size to use {gpu.group_gpus}"),
            )
        ]
    return []


def _with_group_nodes(found: ContainerFinding, serving: ServingArgs) -> ServingArgs:
    """An engine larger than its pod spans the pods of its group (LeaderWorkerSet, multi-node Ray), one
    node each: the plan's band then covers tensor parallelism across nodes. ``--nnodes`` wins."""
    per_pod, group = found.gpu.count, found.gpu.group_size or 1
    if serving.nnodes > 1 or group <= 1 or not per_pod or serving.gpus_per_engine <= per_pod:
        return serving
    return serving.model_copy(update={"nnodes": min(group, -(-serving.gpus_per_engine // per_pod))})


def _unknown_gpu(found: ContainerFinding) -> Finding | None:
    gpu = found.gpu
    if gpu.spec is not None:
        return None
    label = f"{gpu.label!r} is not in the catalog" if gpu.label else "no GPU label or inventory"
    return finding(
        Code.UNKNOWN_GPU,
        found.container.name,
        f"GPU type unknown ({label}): set kv-planner.io/gpu",
        Fix(text="set the kv-planner.io/gpu annotation (e.g. H100-80GB)"),
    )


def _resolve_model(
    found: ContainerFinding,
    model_name: str,
    policy: EffectivePolicy,
    backend: PlanningBackend,
    allow_local_models: bool,
    out: ContainerOutcome,
) -> ModelSpec | None:
    """The model's spec, or None with the finding that says why it is not checked."""
    name = found.container.name
    try:
        return backend.resolve_model(
            model_name,
            timeout=policy.model_lookup.timeout_seconds,
            offline=policy.model_lookup.offline,
            allow_local=allow_local_models,
            allow_repos=policy.model_lookup.allow_repos,
        )
    except RepoNotAllowedError:
        out.findings.append(
            finding(Code.MODEL_NOT_ALLOWED, name, f"model {model_name} is not in allowRepos: not checked")
        )
    except UnknownModelError:
        out.findings.append(finding(Code.UNKNOWN_MODEL, name, f"model {model_name} is unknown: not checked"))
    except ModelResolutionError as error:
        out.findings.append(
            finding(
                Code.MODEL_LOOKUP_FAILED,
                name,
                f"model {model_name}: {error.message.splitlines()[0]} (not checked)",
            )
        )
    except PlannerInputError as error:
        out.findings.append(finding(Code.UNKNOWN_MODEL, name, f"model {model_name}: {error.message}"))
    return None


def _plan_limits(ctx: LimitContext, serving: ServingArgs, mutable: bool, out: ContainerOutcome) -> ContainerOutcome:
    """The release assumed, the shared-GPU share, target sequences and the limits to fill or clamp."""
    found, policy = ctx.found, ctx.policy
    container = found.container
    basis, spread = _version_basis(ctx, serving)
    if basis == "range" and spread is not None:
        ctx = ctx.model_copy(update={"version": spread.worst, "version_known": False})
    style_ok = container.style in ("argv", "image") and found.writable
    can_edit = mutable and style_ok
    shared = share_step(
        ctx,
        serving,
        fill=can_edit and policy.mutation in ("fill", "clamp"),
        clamp=can_edit and policy.mutation == "clamp",
    )
    out.findings += shared.findings
    if any(f.severity == Severity.cannot_start for f in shared.findings):
        can_edit = False
    targeted = target_step(ctx, shared.args, fill=can_edit and policy.mutation in ("fill", "clamp"))
    if targeted.changes:
        shared.changes.update(targeted.changes)
        shared.args = targeted.args
        out.findings += targeted.findings
    result = decide_limits(ctx, shared.args, can_edit)
    if basis == "range" and result.changes:
        ctx, result = _settle_release(ctx, shared.args, can_edit, result)
    result.changes = {**shared.changes, **result.changes}
    result.plan = with_report(ctx, shared.args if not result.changes else _applied(shared.args, result), result.plan)
    result.findings += host_memory_findings(ctx, result.plan, serving.data_parallel_size)
    result.findings += assumption_findings(container.name, basis, ctx.version, spread, container.image)
    if spread is not None and spread.mixed:
        result.findings = soften(result.findings)
    if (
        mutable
        and not style_ok
        and result.plan is not None
        and result.plan.fits
        and not any(f.severity == Severity.cannot_start for f in out.findings + result.findings)
    ):
        result.findings += _not_edited(ctx, serving)
    return result


_SETTLE_ROUNDS = 3


def _settle_release(
    ctx: LimitContext, args: ServingArgs, can_edit: bool, result: ContainerOutcome
) -> tuple[LimitContext, ContainerOutcome]:
    """With the release unknown, the limits are decided under the release leaving the least KV cache at the
    low end of its band; the limits filled in can change which release that is (another release's
    activation or graph terms weigh more at the new values: V0 profiles at the context). Decide again
    under the new worst case until it holds still, so the admitted object is safe on every release and a
    second review of it changes nothing. A context found to hold under one release caps the next
    decision: the next release may allow a longer one that the first does not (Qwen2.5-7B on an L4:
    0.7.0 holds 16,384 tokens at its low end, not 32,768; 0.33.0 holds 32,768)."""
    for _ in range(_SETTLE_ROUNDS):
        _, again = _version_basis(ctx, _applied(args, result))
        if again is None or again.worst == ctx.version:
            break
        cap = result.effective_args.get("max_model_len") if "max_model_len" in result.changes else None
        update: dict[str, Any] = {"version": again.worst}
        if isinstance(cap, int) and cap > 0:
            update["context_cap"] = min(cap, ctx.context_cap) if ctx.context_cap is not None else cap
        ctx = ctx.model_copy(update=update)
        result = decide_limits(ctx, args, can_edit)
    return ctx, result


def _not_edited(ctx: LimitContext, serving: ServingArgs) -> list[Finding]:
    """A shell script or platform field kv-planner does not edit (a word's position depends on the
    shell): what it would add."""
    found, policy = ctx.found, ctx.policy
    container = found.container
    wanted_share = share_step(ctx, serving, fill=policy.mutation != "off", clamp=policy.mutation == "clamp")
    wanted = {**wanted_share.changes, **decide_limits(ctx, wanted_share.args, True).changes}
    if not wanted:
        return []
    words = " ".join(format_args(wanted))
    fix = fix_args(format_args(wanted), f"add {words}")
    if container.style == "shell":
        return [finding(Code.SHELL_NOT_MUTATED, container.name, f"shell command not changed; add {words}", fix)]
    reason = found.no_write or "no field to write"
    return [finding(Code.PLATFORM_NOT_MUTATED, container.name, f"add {words} ({reason})", fix)]


def _version_basis(ctx: LimitContext, serving: ServingArgs) -> tuple[VersionBasis, ReleaseSpread | None]:
    """Where the release comes from; with no evidence and no policy assumption, the spread of plans
    over the candidate releases (DESIGN.md: with an unknown version nothing release-specific is filled)."""
    if ctx.found.container.vllm_version is not None:
        return "evidence", None
    if ctx.policy.vllm_version is not None:
        return "policy", None

    assert ctx.found.gpu.spec is not None
    memoized = getattr(ctx.backend, "release_spread", None)  # CoreBackend: light plans, memoized summary
    if memoized is not None:
        spread: ReleaseSpread | None = memoized(ctx.model, ctx.found.gpu.spec, serving, headroom=ctx.policy.headroom)
        return "range", spread

    def plan(version: str) -> Plan:
        return ctx.model_copy(update={"version": version}).plan(serving)

    return "range", release_spread(plan, serving)
