"""The decision for one Kubernetes object: allow, warn, mutate (with a JSON patch) or deny.

Precedence deny > mutate > warn > allow; ``skip`` for objects kv-planner does not look at (no pod
template, opted out with ``kv-planner.io/skip``, Pods/ReplicaSets owned by a controller). The patch is
built from the received object, applied in-process and checked; if that ever fails, the object is
allowed unchanged with a warning (a kv-planner bug must never block a workload).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import InputCapError, KvPlannerError
from planner.k8s.configfiles import ConfigMaps
from planner.k8s.dra import ClaimIndex
from planner.k8s.inspect import ContainerFinding, WorkloadFinding, inspect_workload
from planner.k8s.nodes import NodeInfo
from planner.k8s.platforms.kserve import Runtimes
from planner.k8s.platforms.llmisvc import Presets
from planner.k8s.workloads import get_path, without_managed_fields
from planner.plan.margin import low_end_blocks
from planner.plan.models import Plan
from planner.policy.caps import cap_finding, screen
from planner.policy.codes import Code, Finding, Severity, finding, shorten
from planner.policy.container import evaluate
from planner.policy.model import EffectivePolicy
from planner.policy.outcome import ContainerOutcome
from planner.policy.patch import (
    Operation,
    PatchError,
    annotation_operations,
    apply_patch,
    arg_operations,
    check_result,
    pointer,
)
from planner.policy.planning import PlanningBackend
from planner.policy.platform_notes import PROVISIONAL, note_findings, skip_findings
from planner.policy.platform_patch import check_targets, platform_operations
from planner.policy.sharing import Tenant, cotenancy_findings, tenant
from planner.vllm.argv import flag_edits

Decision = Literal["allow", "warn", "mutate", "deny", "skip"]
PLAN_ANNOTATION = "kv-planner.io/plan"
BLOCKS_ANNOTATION = "kv-planner.io/planned-num-gpu-blocks"
_RANK: dict[str, int] = {"skip": 0, "allow": 1, "warn": 2, "mutate": 3, "deny": 4}


class GpuEntry(BaseModel):
    name: str | None = None
    label: str | None = None
    count: int | None = None
    group_size: int | None = None
    source: str | None = None


class KvCacheBand(BaseModel):
    """``KV cache 54.99 GiB +0.20/-0.40`` as data (planner/plan/margin.py); limits are filled at ``low_bytes``."""

    model_config = ConfigDict(extra="forbid")

    bytes: int
    low_bytes: int
    high_bytes: int
    text: str

    @classmethod
    def of(cls, plan: Plan | None) -> KvCacheBand | None:
        band = plan.margin if plan is not None else None
        if band is None or band.kv_cache_bytes <= 0:  # nothing to band: the weights do not fit
            return None
        return cls(
            bytes=band.kv_cache_bytes, low_bytes=band.low_bytes, high_bytes=band.high_bytes, text=band.describe()
        )


class WorkloadEntry(BaseModel):
    """One entry of ``planner check --output json``: document -> pod template -> vLLM container."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kind: str | None
    namespace: str | None
    name: str | None
    template: str | None = None
    container: str | None = None
    vllm: bool = False
    model: str | None = None
    vllm_version: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    effective_args: dict[str, Any] = Field(default_factory=dict)
    gpu: GpuEntry = Field(default_factory=GpuEntry)
    decision: Decision = "skip"
    codes: list[str] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)
    kv_cache: KvCacheBand | None = Field(
        default=None, description="the planned KV memory per GPU and the band of the planner's measured error"
    )
    patch: list[Operation] = Field(default_factory=list)
    findings: list[Finding] = Field(
        default_factory=list, description="codes, messages and structured fixes (fix.args) behind the decision"
    )
    plan: Plan | None = Field(default=None, exclude=True)
    tenancy: Tenant | None = Field(default=None, exclude=True, description="its claim on a known shared card")


class ObjectDecision(BaseModel):
    """The decision for one object, with the entries behind it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    decision: Decision
    entries: list[WorkloadEntry]
    patch: list[Operation] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """Admission warnings: every finding except info, deny reasons excluded when denying.

        Shortened to 120 characters: the API server asks for that and may truncate longer ones
        (everywhere else, JSON and tables, messages are whole).
        """
        out: list[str] = []
        for item in self.findings:
            if item.severity == Severity.info:
                continue
            if self.decision == "deny" and item.severity == Severity.cannot_start:
                continue
            short = shorten(item.message)
            if short not in out:
                out.append(short)
        return out

    @property
    def deny_reasons(self) -> list[str]:
        return [f.message for f in self.findings if f.severity == Severity.cannot_start]

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})


def _template_label(finding_: ContainerFinding) -> str | None:
    ref = finding_.template
    if ref.name:
        return ref.name
    return "/".join(ref.spec_path[:-1]) or None


def _entry_decision(
    findings: Sequence[Finding], patch: Sequence[Operation], policy: EffectivePolicy, *, provisional: bool = False
) -> Decision:
    """``provisional``: planned without part of the resource (KVP078): what cannot start is a warning."""
    severities = {f.severity for f in findings}
    if Severity.cannot_start in severities and policy.validation_action == "Enforce" and not provisional:
        return "deny"
    if patch:
        return "mutate"
    if severities & {Severity.cannot_start, Severity.warn, Severity.mutate}:
        return "warn"
    return "allow"


def plan_annotation(plan: Plan, model_id: str, outcome: ContainerOutcome, gpu_count: int | None) -> str:
    """Compact JSON of the plan for ``kv-planner.io/plan`` (sorted keys: byte-identical on every pass)."""
    kv = plan.kv_cache
    body = {
        "v": 1,
        "model": model_id,
        "gpu": plan.gpu.name,
        "gpuCount": gpu_count if gpu_count is not None else plan.gpu.count,
        "vllmVersion": plan.vllm_version,
        "numGpuBlocks": kv.num_gpu_blocks,
        # the low end of the KV band: what the retuner may count on before vLLM reports its own count
        "numGpuBlocksLow": low_end_blocks(plan),
        "blockSize": kv.block_size,
        "maxModelLen": kv.max_model_len,
        "maxNumSeqs": outcome.effective_args.get("max_num_seqs"),
        "kvCacheDtype": kv.kv_cache_dtype,
        "gpuMemoryUtilization": plan.memory.gpu_memory_utilization,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def decide(
    obj: Mapping[str, Any],
    *,
    policy: EffectivePolicy,
    backend: PlanningBackend,
    inventory: Sequence[NodeInfo] | None = None,
    configmaps: ConfigMaps | None = None,
    namespace: str | None = None,
    allow_local_models: bool = False,
    default_gpu: str | None = None,
    runtimes: Runtimes | None = None,
    claims: ClaimIndex | None = None,
    presets: Presets | None = None,
) -> ObjectDecision:
    """Decide for ``obj`` (a plain dict as received). Never raises for kv-planner's own failures.

    ``runtimes``: KServe ServingRuntimes by name (``planner check`` reads them from its input).
    ``presets``: KServe LLMInferenceServiceConfigs (``planner check``: those in its input; the webhook: none).
    ``claims``: the DRA ResourceClaims / ResourceClaimTemplates kv-planner can read (``planner check``:
    those in the same manifests).

    The object is first screened against the policy's input caps (planner.policy.caps): over a cap, no
    planning work is done and the decision is deny (Enforce) or warn (Audit) with the cap's reason code.
    ``metadata.managedFields`` is neither screened nor read (planner.k8s.workloads.without_managed_fields).
    """
    obj = without_managed_fields(obj)
    over = screen(obj, policy.limits)
    if over:
        return _capped(obj, namespace, over, policy)
    try:
        workload = inspect_workload(
            obj,
            catalog=backend.catalog,
            inventory=inventory,
            default_gpu=default_gpu or policy.default_gpu,
            default_version=policy.vllm_version,
            configmaps=configmaps,
            namespace=namespace,
            runtimes=runtimes,
            claims=claims,
            presets=presets,
        )
    except InputCapError as error:
        return _capped(obj, namespace, [cap_finding(error)], policy)
    except (KvPlannerError, ValueError, TypeError, KeyError, AttributeError) as error:
        item = finding(Code.INTERNAL_ERROR, None, f"could not read the object ({type(error).__name__}): allowed")
        entry = _header_entry(obj, namespace)
        entry.decision, entry.codes, entry.messages, entry.findings = (
            "warn",
            [item.code],
            [item.message],
            [item],
        )
        return ObjectDecision(decision="warn", entries=[entry], findings=[item])
    return _decide_workload(obj, workload, policy, backend, allow_local_models)


def _capped(
    obj: Mapping[str, Any], namespace: str | None, findings: list[Finding], policy: EffectivePolicy
) -> ObjectDecision:
    """The decision for an object over an input cap: nothing planned, nothing patched."""
    entry = _header_entry(obj, namespace)
    entry.decision = _entry_decision(findings, [], policy)
    entry.codes = _unique(f.code for f in findings)
    entry.messages = _unique(f.message for f in findings)
    entry.findings = list(findings)
    return ObjectDecision(decision=entry.decision, entries=[entry], findings=list(findings))


def _header_entry(obj: Mapping[str, Any], namespace: str | None) -> WorkloadEntry:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return WorkloadEntry(
        kind=obj.get("kind") if isinstance(obj.get("kind"), str) else None,
        namespace=meta.get("namespace") if isinstance(meta.get("namespace"), str) else namespace,
        name=meta.get("name") if isinstance(meta.get("name"), str) else None,
    )


def _decide_workload(
    obj: Mapping[str, Any],
    workload: WorkloadFinding,
    policy: EffectivePolicy,
    backend: PlanningBackend,
    allow_local_models: bool,
) -> ObjectDecision:
    """Steps: skip (with its reason), evaluate each vLLM container (its argv patch and the plan to
    record on its template), annotation patches, co-tenancy of shared GPUs, the patch's self-check,
    then each entry's decision and the object's (the strongest)."""
    header = {"kind": workload.kind, "namespace": workload.namespace, "name": workload.name}
    containers = workload.vllm_containers
    if workload.skip is not None or not containers:
        return _skip_decision(header, workload)
    notes = [finding(Code.NAMESPACE_OVERRIDE_IGNORED, None, note) for note in policy.notes]
    notes += note_findings(workload.notes)
    # Part of what the platform runs could not be read (a KServe preset the webhook does not see): the plan
    # is provisional, so it neither denies nor changes anything nor is recorded.
    provisional = any(note.reason in PROVISIONAL for note in workload.notes)
    entries: list[WorkloadEntry] = []
    recorded = _TemplatePlans(obj)
    for found in containers:
        outcome = _evaluate_safely(obj, found, policy, backend, allow_local_models)
        entry = _entry(header, found, outcome)
        cannot_start = any(f.severity == Severity.cannot_start for f in outcome.findings)
        if outcome.changes and not provisional and not (cannot_start and policy.validation_action == "Enforce"):
            entry.patch = _arg_ops(obj, found, outcome)
        if (
            outcome.plan is not None
            and outcome.plan.fits
            and policy.mutation != "off"
            and not cannot_start  # no plan to record for a pod that cannot start
            and not provisional
        ):
            if found.template.plan_not_recorded:
                blocks = outcome.plan.kv_cache.num_gpu_blocks
                text = f"plan not recorded ({blocks} KV blocks): {found.template.plan_not_recorded}"
                outcome.findings.append(finding(Code.PLAN_NOT_RECORDED, found.container.name, text))
            else:
                recorded.record(found, outcome, outcome.plan, patched=bool(entry.patch))
        entry.findings = outcome.findings
        entries.append(entry)
    _attach_annotations(obj, containers, entries, recorded.values)
    _check_cotenancy(entries, containers)
    patch, patch_findings = _validated_patch(obj, entries, containers)
    return _object_decision(entries, notes, patch_findings, patch, policy, provisional=provisional)


def _skip_decision(header: Mapping[str, Any], workload: WorkloadFinding) -> ObjectDecision:
    # skip always carries a reason code; an LLM server kv-planner cannot read says why (a warning).
    reasons = skip_findings(workload)
    entry = WorkloadEntry(**header, decision="skip")
    entry.findings = reasons
    entry.codes = _unique(f.code.value for f in reasons)
    entry.messages = _unique(f.message for f in reasons)
    return ObjectDecision(decision="skip", entries=[entry], findings=reasons)


def _evaluate_safely(
    obj: Mapping[str, Any],
    found: ContainerFinding,
    policy: EffectivePolicy,
    backend: PlanningBackend,
    allow_local_models: bool,
) -> ContainerOutcome:
    """:func:`evaluate` with the workload's and the template's annotations; a kv-planner bug becomes a
    finding (it must not block a workload)."""
    workload_annotations = get_path(obj, ("metadata", "annotations"))
    template_meta = get_path(obj, found.template.metadata_path)
    template_annotations = template_meta.get("annotations") if isinstance(template_meta, Mapping) else None
    annotations = [
        workload_annotations if isinstance(workload_annotations, Mapping) else None,
        template_annotations if isinstance(template_annotations, Mapping) else None,
    ]
    try:
        return evaluate(
            found,
            policy=policy,
            backend=backend,
            annotations=annotations,
            allow_local_models=allow_local_models,
        )
    except Exception as error:  # the boundary: kv-planner's bug must not block a workload
        return ContainerOutcome(
            findings=[
                finding(
                    Code.INTERNAL_ERROR,
                    found.container.name,
                    f"internal error ({type(error).__name__}): allowed unchecked",
                )
            ]
        )


@dataclass
class _TemplatePlans:
    """The annotations to write per pod template: one vLLM container per template describes it (the first)."""

    obj: Mapping[str, Any]
    values: dict[tuple[str, ...], dict[str, str]] = field(default_factory=dict)

    def record(self, found: ContainerFinding, outcome: ContainerOutcome, plan: Plan, *, patched: bool) -> None:
        key = found.template.metadata_path
        if key in self.values:
            outcome.findings.append(
                finding(
                    Code.SEVERAL_VLLM_CONTAINERS,
                    found.container.name,
                    "several vLLM containers: the annotations describe the first",
                )
            )
            return
        values = {BLOCKS_ANNOTATION: str(plan.kv_cache.num_gpu_blocks)}
        if patched and outcome.model_id:
            values[PLAN_ANNOTATION] = plan_annotation(plan, outcome.model_id, outcome, found.gpu.count)
        elif found.container.vllm_version is None and _has_annotation(self.obj, key, BLOCKS_ANNOTATION):
            # Release unknown: the plan is the worst case over the release range, and which release is worst
            # can move with the flags a previous review filled in. Nothing is changed now, so the blocks
            # recorded then stay: a second review of our own output produces no patch (idempotence).
            del values[BLOCKS_ANNOTATION]
        self.values[key] = values


def _has_annotation(obj: Mapping[str, Any], metadata_path: tuple[str, ...], key: str) -> bool:
    metadata = get_path(obj, metadata_path)
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return isinstance(annotations, Mapping) and key in annotations


def _attach_annotations(
    obj: Mapping[str, Any],
    containers: Sequence[ContainerFinding],
    entries: list[WorkloadEntry],
    template_values: Mapping[tuple[str, ...], dict[str, str]],
) -> None:
    """Annotation operations per template, attached to that template's first entry."""
    for key, values in template_values.items():
        ops = annotation_operations(obj, key, values)
        if not ops:
            continue
        for entry_index, found in enumerate(containers):
            if found.template.metadata_path == key:
                entries[entry_index].patch = entries[entry_index].patch + ops
                if entries[entry_index].plan is not None and not any(
                    f.severity == Severity.mutate for f in entries[entry_index].findings
                ):
                    blocks = values[BLOCKS_ANNOTATION]
                    entries[entry_index].findings.append(
                        finding(Code.RECORDED_PLAN, found.container.name, f"recorded the plan: {blocks} KV blocks")
                    )
                break


def _check_cotenancy(entries: list[WorkloadEntry], containers: Sequence[ContainerFinding]) -> None:
    """Pods known to share one card (replicas on a shared ResourceClaim, or pinned to a one-GPU node)."""
    for entry, found in zip(entries, containers, strict=True):
        entry.tenancy = tenant(
            found.share, entry.plan, entry.effective_args, found.replicas, found.container.name, entry
        )
    for item, overcommitted in cotenancy_findings([e.tenancy for e in entries if e.tenancy is not None]):
        item.entry.findings = [*item.entry.findings, overcommitted]


def _validated_patch(
    obj: Mapping[str, Any], entries: list[WorkloadEntry], containers: Sequence[ContainerFinding]
) -> tuple[list[Operation], list[Finding]]:
    """The object's patch, applied to a copy and checked; dropped (with a finding) when the check fails."""
    patch = [op for entry in entries for op in entry.patch]
    if not patch:
        return patch, []
    try:
        _validate(obj, patch, containers)
    except PatchError as error:
        for entry in entries:
            entry.patch = []
        return [], [finding(Code.PATCH_DROPPED, None, f"no change made: {error.message}")]
    return patch, []


def _object_decision(
    entries: list[WorkloadEntry],
    notes: list[Finding],
    patch_findings: list[Finding],
    patch: list[Operation],
    policy: EffectivePolicy,
    *,
    provisional: bool = False,
) -> ObjectDecision:
    """Each entry's decision from its findings and patch; the object's is the strongest (deny > mutate >
    warn > allow), and a denied object gets no patch."""
    for entry in entries:
        entry.findings = notes + entry.findings + patch_findings
        entry.decision = _entry_decision(entry.findings, entry.patch, policy, provisional=provisional)
        entry.codes = _unique(f.code.value for f in entry.findings)
        entry.messages = _unique(f.message for f in entry.findings)
    decision: Decision = max((e.decision for e in entries), key=lambda d: _RANK[d])
    if decision == "deny":
        patch = []
    findings = [f for e in entries for f in e.findings]
    return ObjectDecision(decision=decision, entries=entries, patch=patch, findings=_unique_findings(findings))


def _unique(items: Any) -> list[str]:
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _unique_findings(findings: Sequence[Finding]) -> list[Finding]:
    seen: set[str] = set()
    out: list[Finding] = []
    for item in findings:
        if item.message not in seen:
            seen.add(item.message)
            out.append(item)
    return out


def _entry(header: Mapping[str, Any], found: ContainerFinding, outcome: ContainerOutcome) -> WorkloadEntry:
    gpu = found.gpu
    return WorkloadEntry(
        **header,
        template=_template_label(found),
        container=found.container.name,
        vllm=True,
        model=outcome.model_id or (found.container.command.model if found.container.command else None),
        vllm_version=found.container.vllm_version,
        args=outcome.args,
        effective_args=outcome.effective_args,
        gpu=GpuEntry(
            name=gpu.name,
            label=gpu.label,
            count=gpu.count,
            group_size=gpu.group_size,
            source=gpu.source,
        ),
        plan=outcome.plan,
        kv_cache=KvCacheBand.of(outcome.plan),
    )


def _arg_ops(obj: Mapping[str, Any], found: ContainerFinding, outcome: ContainerOutcome) -> list[Operation]:
    command = found.container.command
    if command is None or not found.writable:
        return []
    if found.target is not None:
        return platform_operations(found, outcome.changes)
    raw = get_path(obj, (*found.template.spec_path, "containers", str(found.container.index)))
    if not isinstance(raw, Mapping):
        return []
    edits = flag_edits(found.container.words, command, outcome.changes)
    return arg_operations(found.template.spec_path, found.container, raw, edits)


def _annotation_parents(containers: Sequence[ContainerFinding]) -> set[str]:
    """Where annotations are written and their ``annotations`` maps: may be created when missing, never
    otherwise changed (only the keys kv-planner writes may change under them)."""
    parents: set[str] = set()
    for found in containers:
        meta = found.template.metadata_path
        if meta:
            parents |= {pointer(meta), pointer((*meta, "annotations"))}
    return parents


def allowed_prefixes(containers: Sequence[ContainerFinding]) -> list[str]:
    """The only places a kv-planner patch may touch."""
    prefixes: list[str] = []
    for found in containers:
        if found.target is not None:
            prefixes.append(pointer(found.target.path))
        elif not found.rebuilt:
            base = (*found.template.spec_path, "containers", str(found.container.index))
            prefixes += [pointer((*base, "args")), pointer((*base, "command"))]
        meta = found.template.metadata_path
        prefixes += [
            pointer((*meta, "annotations", PLAN_ANNOTATION)),
            pointer((*meta, "annotations", BLOCKS_ANNOTATION)),
        ]
        # Creating a missing parent adds the whole (new) object at its path.
        if meta:
            prefixes += [pointer(meta), pointer((*meta, "annotations"))]
    return prefixes


def _validate(obj: Mapping[str, Any], patch: Sequence[Operation], containers: Sequence[ContainerFinding]) -> None:
    """Apply the patch to a copy and check the result (raises PatchError)."""
    result = apply_patch(obj, patch)
    # Parents that existed before may only gain our keys: check paths under metadata precisely.
    check_result(obj, result, _tighten(obj, allowed_prefixes(containers), _annotation_parents(containers)))
    check_targets(result, containers)


def _tighten(obj: Mapping[str, Any], prefixes: Sequence[str], parents: set[str]) -> list[str]:
    """Drop whole-parent prefixes for parents that already existed (then only our keys may change): a
    platform's annotations may sit in its spec (``/spec/annotations`` of an LLMInferenceService), whose
    parent ``/spec`` must not become writable as a whole."""
    tightened: list[str] = []
    for prefix in prefixes:
        tokens = tuple(t.replace("~1", "/").replace("~0", "~") for t in prefix.split("/")[1:])
        if prefix in parents and get_path(obj, tokens) is not None:
            continue
        tightened.append(prefix)
    return tightened
