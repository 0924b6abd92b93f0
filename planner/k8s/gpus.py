"""Which GPU, and how many, a vLLM container gets.

Count: the container's ``nvidia.com/gpu`` / ``amd.com/gpu`` / MIG (``nvidia.com/mig-3g.40gb``) limit (or
request). Type, first match wins:

1. annotation ``kv-planner.io/gpu`` (workload metadata, then the pod template's);
2. GPU feature discovery labels required by ``nodeSelector`` or required node affinity
   (``nvidia.com/gpu.product``, then ``nvidia.com/gpu.memory`` in MiB);
3. cloud labels: ``cloud.google.com/gke-accelerator``, ``karpenter.k8s.aws/instance-gpu-name``;
4. ``node.kubernetes.io/instance-type``;
5. the MIG profile of the resource name;
6. the GPU inventory: the nodes the pod could land on (plan for the smallest GPU among them);
7. an operator default (``planner check --gpu``, policy ``defaultGpu``).

When a selector or affinity allows several GPUs (``In: [L4, A100]``), kv-planner plans for the one with
the least memory: a limit that fits the smallest card fits every card the pod may get.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.gpus.spec import GpuSpec
from planner.k8s.nodes import NodeInfo, could_schedule, required_terms
from planner.k8s.workloads import as_list

GpuSource = Literal[
    "annotation",
    "node-selector",
    "node-affinity",
    "cloud-label",
    "instance-type",
    "mig",
    "dra",
    "inventory",
    "cli",
    "platform",
]
GPU_ANNOTATION = "kv-planner.io/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
GKE_LABEL = "cloud.google.com/gke-accelerator"
KARPENTER_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_MIG_RESOURCE = re2.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)$")
_MIB = 1 << 20


class GpuCatalog(Protocol):
    """The GPU catalog operations GPU resolution needs (planner.gpus.catalog provides them)."""

    def lookup(self, name: str, memory_bytes: int | None = None) -> GpuSpec | None:
        """Any alias (GFD product, GKE accelerator, karpenter name, instance type, ``...-MIG-3g.40gb``);
        ``memory_bytes`` settles names that mean several cards (``a100``)."""
        ...

    def for_memory(self, memory_bytes: int) -> GpuSpec | None:
        """The GPU for a memory size (``nvidia.com/gpu.memory``)."""
        ...

    def mig(self, profile: str, parent: str | None) -> GpuSpec | None:
        """A MIG slice as a GPU of its own (parent None: the smallest card offering the profile)."""
        ...


class GpuResolution(BaseModel):
    """The ``gpu`` object of ``planner check --output json``, plus the spec to plan with."""

    model_config = ConfigDict(frozen=True)

    name: str | None = Field(default=None, description="canonical catalog name")
    label: str | None = Field(default=None, description="the raw value it came from")
    count: int | None = Field(default=None, description="GPUs per pod")
    group_size: int | None = Field(default=1, description="pods per group (LeaderWorkerSet), else 1")
    source: GpuSource | None = None
    resource: str | None = Field(default=None, exclude=True, description="nvidia.com/gpu, amd.com/gpu, ...")
    group_gpus: int | None = Field(default=None, exclude=True, description="GPUs across the whole group")
    spec: GpuSpec | None = Field(default=None, exclude=True, description="what to plan with (MIG: the slice)")
    unknown_label: bool = Field(default=False, exclude=True, description="a label named a GPU not in the catalog")


def gpu_request(container: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """(resource, count) of the GPU resource a container asks for (limits first, then requests)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None, None
    for section in ("limits", "requests"):
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for key in sorted(values):
            name = str(key)
            if name in ("nvidia.com/gpu", "amd.com/gpu") or _MIG_RESOURCE.match(name):
                try:
                    count = int(str(values[key]))
                except ValueError:
                    continue
                return name, count
    return None, None


def lookup_label(value: str, key: str, catalog: GpuCatalog, memory_hint: int | None = None) -> GpuSpec | None:
    """The GPU a node label value names (product, GKE accelerator, instance type, memory in MiB)."""
    if key in (MEMORY_LABEL, KARPENTER_MEMORY_LABEL):
        try:
            return catalog.for_memory(int(value) * _MIB)
        except ValueError:
            return None
    return catalog.lookup(value, memory_hint)


def _label_values(pod_spec: Mapping[str, Any], key: str) -> list[tuple[str, str]]:
    """(value, where) pairs a pod spec requires for label ``key``: nodeSelector, then affinity ``In``."""
    found: list[tuple[str, str]] = []
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, Mapping) and key in selector:
        found.append((str(selector[key]), "node-selector"))
        return found
    for term in required_terms(pod_spec):
        for expression in term:
            if expression.get("key") == key and expression.get("operator") == "In":
                found += [(str(v), "node-affinity") for v in as_list(expression.get("values"))]
    return found


def _label_memory(value: str | None) -> int | None:
    try:
        return int(value) * _MIB if value else None
    except ValueError:
        return None


def _memory_hint(pod_spec: Mapping[str, Any]) -> int | None:
    """Per-GPU memory the pod's selectors require (settles names like ``a100``)."""
    for key in (MEMORY_LABEL, KARPENTER_MEMORY_LABEL):
        values = _label_values(pod_spec, key)
        if values:
            return _label_memory(values[0][0])
    return None


_LABEL_ORDER: tuple[tuple[str, GpuSource | None], ...] = (
    (PRODUCT_LABEL, None),
    (MEMORY_LABEL, None),
    (GKE_LABEL, "cloud-label"),
    (KARPENTER_NAME_LABEL, "cloud-label"),
    (KARPENTER_MEMORY_LABEL, "cloud-label"),
    (INSTANCE_TYPE_LABELS[0], "instance-type"),
    (INSTANCE_TYPE_LABELS[1], "instance-type"),
)


def node_gpu(node: NodeInfo, catalog: GpuCatalog) -> tuple[GpuSpec, str] | None:
    """The GPU of a node, read from its labels in the same order as a pod's selectors."""
    labels = node.labels
    hint = _label_memory(labels.get(MEMORY_LABEL)) or _label_memory(labels.get(KARPENTER_MEMORY_LABEL))
    for key, _ in _LABEL_ORDER:
        value = node.labels.get(key)
        if value:
            spec = lookup_label(value, key, catalog, hint)
            if spec is not None:
                return spec, value
    return None


def resolve_gpu(
    *,
    container: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    annotations: Sequence[Mapping[str, Any] | None],
    catalog: GpuCatalog,
    group_size: int = 1,
    peer_spec: Mapping[str, Any] | None = None,
    inventory: Sequence[NodeInfo] | None = None,
    default_gpu: str | None = None,
) -> GpuResolution:
    """Resolve the GPU type and count of one container (see the module docstring for the order)."""
    resource, count = gpu_request(container)
    group_gpus = _group_gpus(count, group_size, peer_spec, resource)
    base: dict[str, Any] = {
        "count": count,
        "group_size": group_size,
        "resource": resource,
        "group_gpus": group_gpus,
    }

    for meta in annotations:
        value = meta.get(GPU_ANNOTATION) if isinstance(meta, Mapping) else None
        if isinstance(value, str) and value.strip():
            spec = catalog.lookup(value.strip())
            return _with_mig(
                GpuResolution(
                    name=spec.name if spec else None,
                    label=value,
                    source="annotation",
                    spec=spec,
                    unknown_label=spec is None,
                    **base,
                ),
                resource,
                catalog,
            )

    hint = _memory_hint(pod_spec)
    unknown: tuple[str, GpuSource] | None = None
    for key, fixed_source in _LABEL_ORDER:
        pairs = _label_values(pod_spec, key)
        if not pairs:
            continue
        specs = [(lookup_label(value, key, catalog, hint), value, where) for value, where in pairs]
        known = [(s, v, w) for s, v, w in specs if s is not None]
        where_first: GpuSource = "node-selector" if pairs[0][1] == "node-selector" else "node-affinity"
        source: GpuSource = fixed_source or where_first
        if not known:
            unknown = unknown or (pairs[0][0], source)
            continue
        spec, value, _ = min(known, key=lambda item: (item[0].memory_bytes, item[0].name))
        assert spec is not None
        return _with_mig(
            GpuResolution(name=spec.name, label=value, source=source, spec=spec, **base), resource, catalog
        )

    mig = _MIG_RESOURCE.match(resource or "")
    if mig:
        spec = catalog.mig(mig.group(1), None)
        return GpuResolution(
            name=spec.name if spec else None,
            label=mig.group(1),
            source="mig",
            spec=spec,
            unknown_label=spec is None,
            **base,
        )

    if inventory:
        candidates = []
        for node in inventory:
            if could_schedule(node, pod_spec, resource, count or 0):
                found = node_gpu(node, catalog)
                if found is not None:
                    candidates.append(found)
        if candidates:
            spec, value = min(candidates, key=lambda item: (item[0].memory_bytes, item[0].name))
            found_gpu = GpuResolution(name=spec.name, label=value, source="inventory", spec=spec, **base)
            return _with_mig(found_gpu, resource, catalog)

    if unknown is not None:
        return GpuResolution(label=unknown[0], source=unknown[1], unknown_label=True, **base)
    if default_gpu:
        spec = catalog.lookup(default_gpu)
        return _with_mig(
            GpuResolution(
                name=spec.name if spec else None,
                label=default_gpu,
                source="cli",
                spec=spec,
                unknown_label=spec is None,
                **base,
            ),
            resource,
            catalog,
        )
    return GpuResolution(**base)


def _with_mig(resolution: GpuResolution, resource: str | None, catalog: GpuCatalog) -> GpuResolution:
    """A full-GPU type combined with a MIG resource: plan for the slice of that GPU."""
    mig = _MIG_RESOURCE.match(resource or "")
    if not mig or resolution.spec is None or "-MIG-" in resolution.spec.name:
        return resolution
    spec = catalog.mig(mig.group(1), resolution.spec.name)
    if spec is None:
        return resolution
    return resolution.model_copy(update={"spec": spec, "name": spec.name})


def _group_gpus(
    count: int | None, group_size: int, peer_spec: Mapping[str, Any] | None, resource: str | None
) -> int | None:
    """GPUs across a LeaderWorkerSet group: this pod's plus (size - 1) of the peer template's pods.

    vLLM's multi-node engines (Ray) span the group, so TP x PP is checked against this total.
    """
    if count is None:
        return None
    if group_size <= 1:
        return count
    per_peer = count
    if peer_spec is not None:
        per_peer = 0
        for container in peer_spec.get("containers") or []:
            if isinstance(container, Mapping):
                peer_resource, peer_count = gpu_request(container)
                if peer_count and (resource is None or peer_resource == resource):
                    per_peer += peer_count
    return count + per_peer * (group_size - 1)
