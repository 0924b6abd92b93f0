"""Nodes as plain dicts: labels, taints, GPU allocatable, and whether a pod spec could land there.

Used for the GPU inventory (``planner check --nodes FILE``, the webhook's node cache): the pod's GPU
type is the one of the nodes it could be scheduled on, and when those differ kv-planner plans for the
smallest. Scheduling is judged on what decides GPU placement: ``nodeSelector``, required node affinity,
taints vs tolerations and the GPU resource the pod asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ManifestError
from planner.k8s.workloads import as_list, get_path

# GPU resources a node offers (with the shared-GPU ones a pod may ask for instead: Volcano vGPU and
# gpu-share, Alibaba ACK; planner.k8s.gpus.gpu_request)
GPU_RESOURCE_PREFIXES = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "nvidia.com/mig-",
    "volcano.sh/vgpu-number",
    "volcano.sh/gpu-memory",
    "aliyun.com/gpu-mem",
)


class Taint(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    value: str | None = None
    effect: str


class NodeInfo(BaseModel):
    """What the inventory needs to know about one node."""

    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    gpus: dict[str, int] = Field(default_factory=dict, description="allocatable GPU resources")
    unschedulable: bool = False


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    if not isinstance(node, Mapping):
        raise ManifestError("a Node must be a mapping")
    labels = get_path(node, ("metadata", "labels")) or {}
    taints_raw = get_path(node, ("spec", "taints")) or []
    allocatable = get_path(node, ("status", "allocatable")) or get_path(node, ("status", "capacity")) or {}
    taints = [
        Taint(key=str(t.get("key", "")), value=t.get("value"), effect=str(t.get("effect", "")))
        for t in taints_raw
        if isinstance(t, Mapping)
    ]
    gpus = {
        str(k): _quantity(v)
        for k, v in (allocatable.items() if isinstance(allocatable, Mapping) else [])
        if str(k).startswith(GPU_RESOURCE_PREFIXES)
    }
    return NodeInfo(
        name=str(get_path(node, ("metadata", "name")) or "?"),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
        taints=taints,
        gpus=gpus,
        unschedulable=bool(get_path(node, ("spec", "unschedulable"))),
    )


def nodes_from_documents(documents: Iterable[Any]) -> list[NodeInfo]:
    """Nodes from parsed YAML/JSON documents: Node objects, NodeList/List items (``kubectl get nodes -o
    yaml``), or plain lists of Nodes."""
    nodes: list[NodeInfo] = []
    for doc in documents:
        if doc is None:
            continue
        items: Sequence[Any]
        if isinstance(doc, list):
            items = doc
        elif isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
            items = doc["items"]
        else:
            items = [doc]
        for item in items:
            if isinstance(item, Mapping) and item.get("kind", "Node") == "Node":
                nodes.append(node_info(item))
            else:
                raise ManifestError("the node inventory must hold Node objects (kubectl get nodes -o yaml)")
    return nodes


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expression.get("key")
    operator = expression.get("operator")
    values = [str(v) for v in as_list(expression.get("values"))]
    present = key in labels
    value = labels.get(str(key))
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            left, right = int(str(value)), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def required_terms(pod_spec: Mapping[str, Any]) -> list[list[Mapping[str, Any]]]:
    """The required node-affinity terms (ORed), each a list of matchExpressions (ANDed)."""
    terms = get_path(
        pod_spec,
        ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"),
    )
    if not isinstance(terms, list):
        return []
    result = []
    for term in terms:
        if isinstance(term, Mapping):
            expressions = as_list(term.get("matchExpressions"))
            result.append([e for e in expressions if isinstance(e, Mapping)])
    return result


def _tolerated(taint: Taint, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.effect:
            continue
        operator = toleration.get("operator", "Equal")
        key = toleration.get("key")
        if operator == "Exists" and (key in (None, "") or key == taint.key):
            return True
        if operator == "Equal" and key == taint.key and (toleration.get("value") or None) == taint.value:
            return True
    return False


def could_schedule(node: NodeInfo, pod_spec: Mapping[str, Any], gpu_resource: str | None, count: int) -> bool:
    """Whether a pod with ``pod_spec`` asking for ``count`` of ``gpu_resource`` could land on ``node``."""
    if node.unschedulable:
        return False
    selector = pod_spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping) and any(node.labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    terms = required_terms(pod_spec)
    if terms and not any(all(_expression_matches(e, node.labels) for e in term) for term in terms):
        return False
    tolerations = [t for t in pod_spec.get("tolerations") or [] if isinstance(t, Mapping)]
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            return False
    if gpu_resource is not None:
        return node.gpus.get(gpu_resource, 0) >= max(count, 1)
    return True
