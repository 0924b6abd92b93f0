"""``planner check``: the webhook's decision, offline, over manifest files (for CI and GitOps).

Same policy, same code path as the webhook (:func:`planner.policy.decide.decide`). The manifests
themselves supply what the webhook would get from the cluster when they hold it: Namespaces (their
``kv-planner.io/*`` overrides) and ConfigMaps (files passed to ``vllm serve --config``); and what the
webhook never reads: KServe ServingRuntimes and LLMInferenceServiceConfig presets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
from pydantic import BaseModel, ConfigDict, Field

from planner.k8s.configfiles import configmaps_from_documents
from planner.k8s.dra import claims_from_documents
from planner.k8s.nodes import NodeInfo
from planner.k8s.platforms.kserve import runtimes_from_documents
from planner.k8s.platforms.llmisvc import presets_from_documents
from planner.policy.decide import Decision, ObjectDecision, WorkloadEntry, decide
from planner.policy.manifests import Document
from planner.policy.model import ModelLookup, Policy, parse_policy
from planner.policy.planning import PlanningBackend
from planner.policy.sharing import cotenancy_findings

# Offline there is no admission deadline; the Hub gets a CLI-sized budget.
CHECK_MODEL_LOOKUP = ModelLookup(timeout_seconds=10.0, offline=False)


class CheckError(BaseModel):
    document: int
    message: str


class CheckReport(BaseModel):
    """The JSON of ``planner check --output json``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    workloads: list[WorkloadEntry] = Field(default_factory=list)
    errors: list[CheckError] = Field(default_factory=list)
    patched: list[Any] = Field(default_factory=list, exclude=True, description="documents after patches")

    @property
    def denied(self) -> bool:
        return any(w.decision == "deny" for w in self.workloads)

    def exit_code(self) -> int:
        """2 when input was unreadable, else 1 when something would be denied, else 0."""
        if self.errors:
            return 2
        return 1 if self.denied else 0


def check_policy(data: Any, *, source: str = "policy") -> Policy:
    """A policy for ``planner check``: the file's schema, with ``Enforce`` when it names no action."""
    if isinstance(data, Mapping) and "validationAction" not in data:
        data = {**data, "validationAction": "Enforce"}
    elif data is None:
        data = {"validationAction": "Enforce"}
    policy = parse_policy(data, source=source)
    if isinstance(data, Mapping) and "modelLookup" not in data:
        policy = policy.model_copy(update={"model_lookup": CHECK_MODEL_LOOKUP})
    return policy


def run_check(
    documents: Sequence[Document],
    *,
    policy: Policy,
    backend: PlanningBackend,
    inventory: Sequence[NodeInfo] | None = None,
    default_gpu: str | None = None,
) -> CheckReport:
    """Decide every document; entries in document -> template -> container order."""
    report = CheckReport()
    contents = [d.content for d in documents if d.error is None]
    configmaps = configmaps_from_documents(contents)
    runtimes = runtimes_from_documents(contents)
    presets = presets_from_documents(contents)
    claims = claims_from_documents(contents)
    namespaces = {
        str(c["metadata"]["name"]): c["metadata"]
        for c in contents
        if isinstance(c, Mapping)
        and c.get("kind") == "Namespace"
        and isinstance(c.get("metadata"), Mapping)
        and isinstance(c["metadata"].get("name"), str)
    }
    for document in documents:
        if document.error is not None:
            report.errors.append(CheckError(document=document.index, message=document.error))
            report.patched.append(None)
            continue
        obj = document.content
        assert isinstance(obj, Mapping)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
        effective = policy.for_namespace(namespace, namespaces.get(namespace or ""))
        result: ObjectDecision = decide(
            obj,
            policy=effective,
            backend=backend,
            inventory=inventory,
            configmaps=configmaps,
            namespace=namespace,
            allow_local_models=True,
            default_gpu=default_gpu,
            runtimes=runtimes,
            claims=claims,
            presets=presets,
        )
        report.workloads += result.entries
        report.patched.append(jsonpatch.apply_patch(obj, result.patch) if result.patch else obj)
    _cross_document_cotenancy(report, policy)
    return report


def _cross_document_cotenancy(report: CheckReport, policy: Policy) -> None:
    """Pods of different documents placed on one shared card (e.g. two Pods pinned to the same one-GPU
    node): KVP007 when together they need more than the card has. Pairs inside one object were already
    checked by :func:`decide`."""
    tenants = [e.tenancy for e in report.workloads if e.tenancy is not None]
    by_card: dict[str, set[int]] = {}
    for item in tenants:
        by_card.setdefault(item.placement, set()).add(id(item.entry))
    crossing = [t for t in tenants if len(by_card[t.placement]) > 1]
    for item, overcommitted in cotenancy_findings(crossing):
        entry: WorkloadEntry = item.entry
        if any(f.message == overcommitted.message for f in entry.findings):
            continue
        entry.findings = [*entry.findings, overcommitted]
        entry.codes = list(dict.fromkeys([*entry.codes, overcommitted.code]))
        entry.messages = list(dict.fromkeys([*entry.messages, overcommitted.message]))
        effective = policy.for_namespace(entry.namespace)
        if effective.validation_action == "Enforce":
            entry.decision, entry.patch = "deny", []
        elif entry.decision in ("allow", "skip"):
            entry.decision = "warn"


def summary(report: CheckReport) -> dict[Decision, int]:
    counts: dict[Decision, int] = {}
    for entry in report.workloads:
        counts[entry.decision] = counts.get(entry.decision, 0) + 1
    return counts
