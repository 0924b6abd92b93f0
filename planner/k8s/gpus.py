"""Which GPU, and how many, a vLLM container gets.

Count: the container's ``nvidia.com/gpu`` / ``amd.com/gpu`` / MIG (``nvidia.com/mig-3g.40gb``) / Volcano
vGPU (``volcano.sh/vgpu-number``) limit (or request). A container that asks only for a share of a GPU
counts one: HAMi's and Volcano vGPU's webhooks add their GPU count (``defaultGPUNum``, 1) when only
memory or cores are given (Project-HAMi/volcano-vgpu-device-plugin ``doc/config.md``), Alibaba ACK
shares one card per pod unless the pod label ``aliyun.com/gpu-count`` spreads the request over several
(ACK "multi-GPU sharing"), and Volcano's older gpu-share (``volcano.sh/gpu-memory``) places a pod on one
card. Type, first match wins:

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

GKE's multi-instance GPUs: a pod selects the partition with ``cloud.google.com/gke-gpu-partition-size:
2g.10gb`` and asks for ``nvidia.com/gpu: 1``; it gets one slice (GoogleCloudPlatform/container-engine-
accelerators ``pkg/gpu/nvidia/mig``: each MIG partition is one device). Like the ``nvidia.com/mig-*``
resources, the slice of the card found above is planned (without a card: the smallest one offering it);
a node of the inventory with that label holds slices too.
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
GKE_PARTITION_LABEL = "cloud.google.com/gke-gpu-partition-size"
# Shared-GPU resources (planner.k8s.sharing reads their budgets; here they only give the GPU count).
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
VOLCANO_VGPU_NUMBER = "volcano.sh/vgpu-number"
VOLCANO_VGPU_MEMORY = "volcano.sh/vgpu-memory"
VOLCANO_VGPU_PERCENT = "volcano.sh/vgpu-memory-percentage"
VOLCANO_VGPU_CORES = "volcano.sh/vgpu-cores"
VOLCANO_GPU_MEMORY = "volcano.sh/gpu-memory"
ACK_MEMORY = "aliyun.com/gpu-mem"
ACK_CORES = "aliyun.com/gpu-core.percentage"
ACK_COUNT_LABEL = "aliyun.com/gpu-count"
# resource a share implies -> the GPU resource and count it stands for (one card, see the module doc)
_SHARE_IMPLIES: tuple[tuple[tuple[str, ...], str], ...] = (
    ((HAMI_MEMORY, HAMI_PERCENT, HAMI_CORES), "nvidia.com/gpu"),
    ((VOLCANO_VGPU_MEMORY, VOLCANO_VGPU_PERCENT, VOLCANO_VGPU_CORES), VOLCANO_VGPU_NUMBER),
    ((ACK_MEMORY, ACK_CORES), ACK_MEMORY),
    ((VOLCANO_GPU_MEMORY,), VOLCANO_GPU_MEMORY),
)
_MIG_RESOURCE = re2.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)$")


def _mig_resource(name: str) -> Any:
    """``_MIG_RESOURCE.match(name)``, asked only of names with its literal prefix (re2's Python wrapper costs
    microseconds a call, and every GPU container names ``nvidia.com/gpu`` or ``memory``)."""
    return _MIG_RESOURCE.match(name) if name.startswith("nvidia.com/mig-") else None


_MIG_PROFILE = re2.compile(r"^\d+g\.\d+gb$")
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
    """(resource, count) of the GPU resource a container asks for (limits first, then requests); a
    container asking only for a share of a GPU gets one (see the module doc)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None, None
    asked: set[str] = set()
    for section in ("limits", "requests"):
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        asked.update(str(k) for k in values)
        for key in sorted(values):
            name = str(key)
            if name in ("nvidia.com/gpu", "amd.com/gpu", VOLCANO_VGPU_NUMBER) or _mig_resource(name):
                try:
                    count = int(str(values[key]))
                except ValueError:
                    continue
                return name, count
    for keys, resource in _SHARE_IMPLIES:
        if asked.intersection(keys):
            return resource, 1
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
    """The GPU of a node, read from its labels in the same order as a pod's selectors (a GKE node
    partitioned into MIG slices: the slice)."""
    labels = node.labels
    hint = _label_memory(labels.get(MEMORY_LABEL)) or _label_memory(labels.get(KARPENTER_MEMORY_LABEL))
    partition = labels.get(GKE_PARTITION_LABEL)
    for key, _ in _LABEL_ORDER:
        value = node.labels.get(key)
        if value:
            spec = lookup_label(value, key, catalog, hint)
            if spec is not None:
                if partition and "-MIG-" not in spec.name:
                    spec = catalog.mig(partition, spec.name) or spec
                return spec, value
    if partition and _MIG_PROFILE.match(partition):
        spec = catalog.mig(partition, None)
        if spec is not None:
            return spec, partition
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
    labels: Mapping[str, Any] | None = None,
) -> GpuResolution:
    """Resolve the GPU type and count of one container (see the module docstring for the order);
    ``labels``: the pod's labels (ACK's ``aliyun.com/gpu-count``)."""
    resource, count = gpu_request(container)
    if resource == ACK_MEMORY and isinstance(labels, Mapping):
        spread = _positive(labels.get(ACK_COUNT_LABEL))
        count = spread or count
    mig = _mig_resource(resource or "")
    profiles = [mig.group(1)] if mig else [v for v, _ in _label_values(pod_spec, GKE_PARTITION_LABEL)]
    profiles = [p for p in profiles if _MIG_PROFILE.match(p)]
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
                profiles,
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
            GpuResolution(name=spec.name, label=value, source=source, spec=spec, **base), profiles, catalog
        )

    if profiles:  # a MIG resource or a GKE partition without a card: the smallest card offering it
        slices = [(s, p) for p in profiles if (s := catalog.mig(p, None)) is not None]
        found_slice = min(slices, key=lambda item: (item[0].memory_bytes, item[0].name)) if slices else None
        return GpuResolution(
            name=found_slice[0].name if found_slice else None,
            label=found_slice[1] if found_slice else profiles[0],
            source="mig",
            spec=found_slice[0] if found_slice else None,
            unknown_label=found_slice is None,
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
            return _with_mig(found_gpu, profiles, catalog)

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
            profiles,
            catalog,
        )
    return GpuResolution(**base)


def _with_mig(resolution: GpuResolution, profiles: Sequence[str], catalog: GpuCatalog) -> GpuResolution:
    """A full-GPU type combined with a MIG resource or GKE partition: plan for the slice of that GPU
    (several partitions allowed: the smallest)."""
    if not profiles or resolution.spec is None or "-MIG-" in resolution.spec.name:
        return resolution
    parent = resolution.spec.name
    slices = [s for p in profiles if (s := catalog.mig(p, parent)) is not None]
    if not slices:
        return resolution
    spec = min(slices, key=lambda s: (s.memory_bytes, s.name))
    return resolution.model_copy(update={"spec": spec, "name": spec.name})


def _positive(value: Any) -> int | None:
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if number > 0 else None


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
