"""Shared and fractional GPUs: the memory one vLLM pod can count on, and whether co-tenants are isolated.

vLLM sizes its budget as ``ceil(total x --gpu-memory-utilization)`` where ``total`` is what
``cudaMemGetInfo`` reports inside the container, and refuses to start when the free memory is below
that (``vllm/v1/worker/utils.py: request_memory``, 0.14+; ``gpu_worker.py: Worker.init_device`` before).
How each sharing mechanism changes ``total`` and ``free`` decides what a pod can count on:

======================  =====================================  ==================  =========  =====================
mechanism               how a cluster expresses it             vLLM's ``total``    budget     co-tenants isolated
======================  =====================================  ==================  =========  =====================
GFD time-slicing        product ``...-SHARED``,                the whole card      card / N   no: any pod may take
                        ``nvidia.com/gpu.replicas: N``,                                       all of it
                        ``nvidia.com/gpu.sharing-strategy``
device-plugin MPS       the same labels, strategy ``mps``      the whole card      card / N   yes: the MPS daemon
                                                                                              caps each client
MPS pinned limit        env ``CUDA_MPS_PINNED_DEVICE_MEM_      the whole card      the limit  yes
                        LIMIT=0=20G``
HAMi                    ``nvidia.com/gpumem`` (MiB),           the limit (HAMi-    the limit  yes: allocations past
                        ``nvidia.com/gpumem-percentage``,      core reports it)               it fail
                        ``nvidia.com/gpucores``
Run:ai fractions        pod annotations ``gpu-fraction``,      the fraction        the        yes
                        ``gpu-memory``                                             fraction
DRA                     ResourceClaim(Template) of class       the whole card      limit or   MPS: yes;
                        ``gpu.nvidia.com`` with the driver's                       card / N   time-slicing: no
                        ``GpuConfig.sharing``; one claim
                        shared by N pods
GKE time-sharing        selectors (or node labels) ``cloud.    the whole card      card / N   no
                        google.com/gke-gpu-sharing-strategy:
                        time-sharing``, ``cloud.google.com/
                        gke-max-shared-clients-per-gpu: N``
GKE MPS                 the same, strategy ``mps``             the whole card      card / N   yes: pinned limit
Volcano vGPU            ``volcano.sh/vgpu-memory`` (MiB),      the limit (HAMi-    the limit  yes, as HAMi
                        ``volcano.sh/vgpu-memory-percentage``, core reports it)
                        ``volcano.sh/vgpu-cores``,
                        ``volcano.sh/vgpu-number`` (count)
Volcano gpu-share       ``volcano.sh/gpu-memory`` (MiB)        the whole card      the value  no
ACK (Alibaba)           ``aliyun.com/gpu-mem`` (GiB, over pod  ``cgpu``/``core_    the value  ``cgpu``/``core_mem``:
                        label ``aliyun.com/gpu-count`` cards), mem``: the value;   (unknown   yes; ``share``: no;
                        node label ``ack.node.gpu.schedule``   else the card       without    ``mps``: taken as no
                                                                                   the label)
======================  =====================================  ==================  =========  =====================

Sources: NVIDIA k8s-device-plugin README ("Shared Access to GPUs": time-slicing does nothing to isolate
workloads; under MPS "the amount of memory allowed per client ... is limited to an equal fraction of the
total device memory"); HAMi-core ``src/cuda/memory.c: cuMemGetInfo_v2`` (total = min(limit, physical));
with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` ``cudaMemGetInfo`` keeps the physical total and reports the
limit as free; Run:ai docs "Allocation of GPU Fractions" (over the allotted memory: out-of-memory);
kubernetes-sigs/dra-driver-nvidia-gpu ``api/nvidia.com/resource/v1beta1/sharing.go`` (``MpsConfig.
defaultPinnedDeviceMemoryLimit``). GKE: the docs "Share GPUs with multiple workloads using NVIDIA MPS"
(the max shared clients per GPU decides each container's pinned device memory limit and active thread
percentage) and "... using GPU time-sharing"; GKE's device plugin
(GoogleCloudPlatform/container-engine-accelerators@992db812 ``pkg/gpu/nvidia/manager.go: Envs`` and its
test) sets ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<requested x total / max-shared-clients>M`` under MPS and
nothing under time-sharing. Volcano vGPU: Project-HAMi/volcano-vgpu-device-plugin@4fb76ba1
``pkg/plugin/server.go`` (``CUDA_DEVICE_MEMORY_LIMIT_<i>`` = vgpu-memory x gpuMemoryFactor MiB, HAMi-core's
``libvgpu.so``; factor 1 by default, ``doc/config.md``: ``defaultMemory`` 0 is the whole card);
volcano-sh/devices@95b591b6 README ("GPU Sharing Jobs (Without memory isolation)", ``volcano.sh/gpu-memory``
in MiB blocks). ACK: AliyunContainerService/gpushare-scheduler-extender@c0b61411 ``docs/userguide.md``
(``aliyun.com/gpu-mem`` in GiB, the scheduler "cannot in any measure enforce" it) and
gpushare-device-plugin (``--memory-unit`` GiB, or MiB); Alibaba Cloud ACK docs "Enable scheduling
features" (``ack.node.gpu.schedule``: ``cgpu`` isolated memory, ``core_mem`` isolated compute and memory,
``share`` no isolation, ``mps`` MPS with cGPU), "Configure GPU sharing without GPU memory isolation" (the
pod sees the whole card), cGPU's ``ALIYUN_COM_GPU_MEM_CONTAINER`` ("the GPU memory visible in the
container") and "multi-GPU sharing" (N GiB over M cards: N/M on each). MIG slices are GPUs of their own
(:mod:`planner.k8s.gpus`, including GKE's ``cloud.google.com/gke-gpu-partition-size``); sharing on top of
a slice divides the slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import re2

from planner.gpus.share import GpuShare, Mechanism
from planner.k8s.dra import MIG_CLASS, ClaimUse
from planner.k8s.gpus import (
    ACK_CORES,
    ACK_MEMORY,
    HAMI_CORES,
    HAMI_MEMORY,
    HAMI_PERCENT,
    PRODUCT_LABEL,
    VOLCANO_GPU_MEMORY,
    VOLCANO_VGPU_CORES,
    VOLCANO_VGPU_MEMORY,
    VOLCANO_VGPU_PERCENT,
    GpuResolution,
    _label_values,
)
from planner.k8s.nodes import NodeInfo, could_schedule
from planner.k8s.quantity import parse_quantity, quantity_bytes
from planner.k8s.workloads import as_list, is_mapping

REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
COUNT_LABEL = "nvidia.com/gpu.count"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GKE_STRATEGY_LABEL = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"
ACK_SCHEDULE_LABEL = "ack.node.gpu.schedule"
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
RUNAI_FRACTION = "gpu-fraction"
RUNAI_MEMORY = "gpu-memory"
BUDGET_ANNOTATION = "kv-planner.io/gpu-memory"
_MIB = 1 << 20
_GIB = 1 << 30
_SHARED_SUFFIX = "-shared"
# The container fields that carry a pod's share of its GPUs (per GPU), for platform readers that
# rebuild a container from another one (Ray Serve LLM engines on a worker group's pods).
SHARE_RESOURCES = (
    HAMI_MEMORY,
    HAMI_PERCENT,
    HAMI_CORES,
    VOLCANO_VGPU_MEMORY,
    VOLCANO_VGPU_PERCENT,
    VOLCANO_VGPU_CORES,
    VOLCANO_GPU_MEMORY,
    ACK_MEMORY,
    ACK_CORES,
)
SHARE_ENV = (MPS_LIMIT_ENV,)
# Sharing strategies as GPU feature discovery (nvidia.com/gpu.sharing-strategy) and GKE
# (cloud.google.com/gke-gpu-sharing-strategy) spell them; "none" and unknown values are kept as given.
_STRATEGY_NAMES = {"time-sharing": "time-slicing"}
# ACK's ack.node.gpu.schedule values that share a card: how vLLM sees it, whether the share is enforced
# (mechanism, visible is the share, isolated).
_ACK_MODES: dict[str, tuple[Mechanism, bool, bool]] = {
    "cgpu": ("fraction", True, True),
    "core_mem": ("fraction", True, True),
    "share": ("time-slicing", False, False),
    # ACK: "shared computing power with isolated GPU memory, based on NVIDIA MPS ... combined with cGPU":
    # whether vLLM then sees its share or the card is not documented. Planned on the card and not taken
    # as enforced: the fill (utilization of the card, a fixed KV size) stays within the share either way,
    # and no deny rests on a guess.
    "mps": ("mps", False, False),
}
_MPS_UNITS = {"": 1, "K": 1 << 10, "KB": 1 << 10, "M": _MIB, "MB": _MIB, "G": 1 << 30, "GB": 1 << 30}
_MPS_ITEM = re2.compile(r"(?i)^\s*(?:(\w[\w-]*)\s*=\s*)?(\d+(?:\.\d+)?)\s*([KMG]B?)?\s*$")


def _limits(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources")
    values: dict[str, Any] = {}
    if isinstance(resources, Mapping):
        for section in ("requests", "limits"):  # limits win
            part = resources.get(section)
            if isinstance(part, Mapping):
                values.update({str(k): v for k, v in part.items()})
    return values


def mps_limit_bytes(value: str) -> int | None:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` ("0=20G", "20480M", "0=8G,1=8G"): the smallest limit in bytes.

    MPS reads sizes with binary units ("1G" is 2^30 bytes) and a device ordinal or UUID before ``=``."""
    limits: list[int] = []
    for item in value.split(","):
        match = _MPS_ITEM.match(item)
        if match is None:
            return None
        unit = (match.group(3) or "").upper()
        limits.append(int(float(match.group(2)) * _MPS_UNITS[unit]))
    return min(limits) if limits else None


def _hami(container: Mapping[str, Any], card: int) -> GpuShare | None:
    limits = _limits(container)
    if not any(k in limits for k in (HAMI_MEMORY, HAMI_PERCENT, HAMI_CORES)):
        return None
    if HAMI_MEMORY in limits and (mib := parse_quantity(limits[HAMI_MEMORY])) is not None:
        budget = min(card, int(mib) * _MIB)
        source = f"{HAMI_MEMORY}={limits[HAMI_MEMORY]} MiB"
    elif HAMI_PERCENT in limits and (pct := parse_quantity(limits[HAMI_PERCENT])) is not None:
        budget = min(card, int(card * min(100, float(pct)) / 100))
        source = f"{HAMI_PERCENT}={limits[HAMI_PERCENT]}"
    else:
        # Only gpucores: HAMi's default device memory (defaultMemory 0) is the whole card, so co-tenants
        # placed on the same card are not kept apart by memory limits.
        return GpuShare(
            mechanism="hami",
            source=f"{HAMI_CORES} only (HAMi's default memory: the whole card)",
            card_bytes=card,
            visible_bytes=card,
            budget_bytes=None,
            isolated=False,
        )
    return GpuShare(
        mechanism="hami", source=source, card_bytes=card, visible_bytes=budget, budget_bytes=budget, isolated=True
    )


def _volcano(container: Mapping[str, Any], card: int) -> GpuShare | None:
    """Volcano vGPU (Project-HAMi/volcano-vgpu-device-plugin): HAMi-core enforces the memory, so vLLM
    sees the limit as the total (``CUDA_DEVICE_MEMORY_LIMIT_<i>`` = vgpu-memory x gpuMemoryFactor MiB,
    ``pkg/plugin/server.go``; gpuMemoryFactor 1 unless the cluster raised it). Volcano's older
    gpu-share (volcano-sh/devices, ``volcano.sh/gpu-memory``) only schedules: "without memory isolation"."""
    limits = _limits(container)
    if VOLCANO_VGPU_MEMORY in limits and (mib := parse_quantity(limits[VOLCANO_VGPU_MEMORY])):
        budget = min(card, int(mib) * _MIB)
        source = f"{VOLCANO_VGPU_MEMORY}={limits[VOLCANO_VGPU_MEMORY]} MiB"
    elif VOLCANO_VGPU_PERCENT in limits and (pct := parse_quantity(limits[VOLCANO_VGPU_PERCENT])):
        budget = min(card, int(card * min(100, float(pct)) / 100))
        source = f"{VOLCANO_VGPU_PERCENT}={limits[VOLCANO_VGPU_PERCENT]}"
    elif VOLCANO_VGPU_CORES in limits:
        # defaultMemory 0: the whole card's memory, as HAMi (co-tenants not kept apart by memory).
        return GpuShare(
            mechanism="hami",
            source=f"{VOLCANO_VGPU_CORES} only (Volcano vGPU's default memory: the whole card)",
            card_bytes=card,
            visible_bytes=card,
            budget_bytes=None,
            isolated=False,
        )
    elif VOLCANO_GPU_MEMORY in limits and (mib := parse_quantity(limits[VOLCANO_GPU_MEMORY])):
        budget = min(card, int(mib) * _MIB)
        return GpuShare(
            mechanism="time-slicing",
            source=f"{VOLCANO_GPU_MEMORY}={limits[VOLCANO_GPU_MEMORY]} MiB (Volcano gpu-share, not enforced)",
            card_bytes=card,
            visible_bytes=card,
            budget_bytes=budget,
            isolated=False,
        )
    else:
        return None
    return GpuShare(
        mechanism="hami", source=source, card_bytes=card, visible_bytes=budget, budget_bytes=budget, isolated=True
    )


def _ack(
    container: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    gpu: GpuResolution,
    inventory: Sequence[NodeInfo] | None,
    card: int,
) -> GpuShare | None:
    """Alibaba ACK GPU sharing: ``aliyun.com/gpu-mem`` (GiB; spread evenly over ``aliyun.com/gpu-count``
    cards). Whether it is enforced is the node pool's ``ack.node.gpu.schedule``: ``cgpu`` / ``core_mem``
    isolate memory with cGPU, which shows the container its share as the card's memory; ``share`` does
    not ("does not enforce it as a hard memory cap", the pod sees the whole card); ``mps`` caps it with
    MPS. Without that label (pod selectors, else the nodes the pod may land on) the share is known but not
    how vLLM sees it: the budget is left unknown (KVP014), never guessed."""
    limits = _limits(container)
    if ACK_MEMORY not in limits and ACK_CORES not in limits:
        return None
    modes = {v for v, _ in _label_values(pod_spec, ACK_SCHEDULE_LABEL)} or {
        n.labels[ACK_SCHEDULE_LABEL] for n in _nodes(pod_spec, gpu, inventory) if ACK_SCHEDULE_LABEL in n.labels
    }
    size = parse_quantity(limits.get(ACK_MEMORY)) if ACK_MEMORY in limits else None
    if not size:
        return GpuShare(
            mechanism="fraction",
            source=f"{ACK_CORES} only (no {ACK_MEMORY}: memory share unknown)",
            card_bytes=card,
            visible_bytes=card,
            budget_bytes=None,
            isolated=False,
        )
    cards = gpu.count if gpu.resource == ACK_MEMORY and gpu.count and gpu.count > 1 else 1
    total, unit = int(size * _GIB), "GiB"
    if total > card * cards:  # more than the cards hold in GiB: the device plugin counts MiB (--memory-unit)
        total, unit = int(size * _MIB), "MiB"
    budget = min(card, total // cards)
    spread = f" over {cards} GPUs" if cards > 1 else ""
    source = f"{ACK_MEMORY}={limits[ACK_MEMORY]} {unit}{spread}"
    mode = next(iter(modes)) if len(modes) == 1 else None
    if mode not in _ACK_MODES:
        why = "several" if len(modes) > 1 else (f"unknown ({mode})" if mode else "not given")
        return GpuShare(
            mechanism="fraction",
            source=f"{source}; {ACK_SCHEDULE_LABEL} {why}: whether ACK enforces it is unknown",
            card_bytes=card,
            visible_bytes=card,
            budget_bytes=None,
            isolated=False,
        )
    assert mode is not None
    mechanism, sees_share, isolated = _ACK_MODES[mode]
    return GpuShare(
        mechanism=mechanism,
        source=f"{source}; {ACK_SCHEDULE_LABEL}={mode}",
        card_bytes=card,
        visible_bytes=budget if sees_share else card,
        budget_bytes=budget,
        isolated=isolated,
    )


def _runai(annotations: Sequence[Mapping[str, Any] | None], card: int) -> GpuShare | None:
    for meta in annotations:
        if not meta:
            continue
        fraction = meta.get(RUNAI_FRACTION)
        if fraction is not None and (number := parse_quantity(fraction)) is not None and 0 < number <= 1:
            budget = int(card * float(number))
            return GpuShare(
                mechanism="fraction",
                source=f"{RUNAI_FRACTION}={fraction}",
                card_bytes=card,
                visible_bytes=budget,
                budget_bytes=budget,
                isolated=True,
            )
        memory = meta.get(RUNAI_MEMORY)
        if memory is not None:
            text = str(memory).strip()
            size = int(text) * _MIB if text.isdigit() else quantity_bytes(text)  # a bare number is MiB
            if size:
                budget = min(card, size)
                return GpuShare(
                    mechanism="fraction",
                    source=f"{RUNAI_MEMORY}={memory}",
                    card_bytes=card,
                    visible_bytes=budget,
                    budget_bytes=budget,
                    isolated=True,
                )
    return None


def _mps_env(container: Mapping[str, Any], card: int) -> GpuShare | None:
    for item in as_list(container.get("env")):
        if not is_mapping(item):
            continue
        value = item.get("value")
        if item.get("name") == MPS_LIMIT_ENV and isinstance(value, str):
            limit = mps_limit_bytes(value)
            if limit:
                return GpuShare(
                    mechanism="mps",
                    source=f"{MPS_LIMIT_ENV}={value}",
                    card_bytes=card,
                    visible_bytes=card,
                    budget_bytes=min(card, limit),
                    isolated=True,
                )
    return None


def _dra(claims: Sequence[ClaimUse], card: int, replicas: int | None, namespace: str | None) -> GpuShare | None:
    for use in claims:
        if use.claim is None:
            continue
        for request in use.claim.gpu_requests:
            tenants = replicas if use.shared_by_replicas and replicas and replicas > 1 else None
            placement = f"claim:{namespace or ''}/{use.object_name}" if use.shared_by_replicas else None
            where = f"{use.kind} {use.object_name}"
            if request.sharing == "MPS" and request.mps_memory_limit_bytes:
                budget = min(card, request.mps_memory_limit_bytes)
                return GpuShare(
                    mechanism="mps",
                    source=f"{where}: MPS defaultPinnedDeviceMemoryLimit",
                    card_bytes=card,
                    visible_bytes=card,
                    budget_bytes=budget,
                    isolated=True,
                    replicas=tenants,
                    placement=placement,
                )
            if request.sharing is not None or tenants:
                mechanism: Mechanism = "mps" if request.sharing == "MPS" else "time-slicing"
                how = request.sharing or "one claim"
                return GpuShare(
                    mechanism=mechanism,
                    source=f"{where}: {how} shared by {tenants or '?'} pods",
                    card_bytes=card,
                    visible_bytes=card,
                    budget_bytes=card // tenants if tenants else None,
                    isolated=False,
                    replicas=tenants,
                    placement=placement,
                )
    return None


def _pinned_node(pod_spec: Mapping[str, Any]) -> str | None:
    """The node a pod must run on, when the manifest says (spec.nodeName or a hostname selector)."""
    name = pod_spec.get("nodeName")
    if isinstance(name, str) and name:
        return name
    values = _label_values(pod_spec, HOSTNAME_LABEL)
    return values[0][0] if len(values) == 1 else None


def _nodes(pod_spec: Mapping[str, Any], gpu: GpuResolution, inventory: Sequence[NodeInfo] | None) -> list[NodeInfo]:
    """The inventory's nodes this pod may land on (the node it is pinned to, when it is)."""
    pinned = _pinned_node(pod_spec)
    nodes: list[NodeInfo] = []
    for node in inventory or []:
        if pinned is not None and node.name != pinned and node.labels.get(HOSTNAME_LABEL) != pinned:
            continue
        if pinned is not None or could_schedule(node, pod_spec, gpu.resource, gpu.count or 0):
            nodes.append(node)
    return nodes


def _strategy(value: str | None) -> str | None:
    return _STRATEGY_NAMES.get(value, value) if value is not None else None


def _node_replicas(node: NodeInfo) -> tuple[int, str] | None:
    for key in (REPLICAS_LABEL, GKE_CLIENTS_LABEL):
        if _int(node.labels.get(key)) > 0:
            return _int(node.labels.get(key)), key
    return None


def _node_strategy(node: NodeInfo) -> str:
    return _strategy(node.labels.get(STRATEGY_LABEL) or node.labels.get(GKE_STRATEGY_LABEL)) or "none"


def _gfd(
    pod_spec: Mapping[str, Any],
    gpu: GpuResolution,
    inventory: Sequence[NodeInfo] | None,
    card: int,
) -> GpuShare | None:
    """Time-slicing / MPS as node labels show it (the pod's selectors, else the nodes): GPU feature
    discovery's (``nvidia.com/gpu.replicas``, ``nvidia.com/gpu.sharing-strategy``, ``...-SHARED``) and
    GKE's (``cloud.google.com/gke-max-shared-clients-per-gpu``, ``cloud.google.com/gke-gpu-sharing-strategy:
    time-sharing | mps``), read alike."""
    label_replicas = [(v, key) for key in (REPLICAS_LABEL, GKE_CLIENTS_LABEL) for v, _ in _label_values(pod_spec, key)]
    strategies = [
        _strategy(v) or "none" for key in (STRATEGY_LABEL, GKE_STRATEGY_LABEL) for v, _ in _label_values(pod_spec, key)
    ]
    products = [v for v, _ in _label_values(pod_spec, PRODUCT_LABEL)]
    shared_product = any(p.lower().endswith(_SHARED_SUFFIX) for p in products) or (
        (gpu.label or "").lower().endswith(_SHARED_SUFFIX)
    )
    pinned = _pinned_node(pod_spec)
    nodes = _nodes(pod_spec, gpu, inventory)
    shared_nodes = [
        n
        for n in nodes
        if _node_strategy(n) in ("time-slicing", "mps")
        or (_node_replicas(n) or (0, ""))[0] > 1
        or n.labels.get(PRODUCT_LABEL, "").lower().endswith(_SHARED_SUFFIX)
    ]
    if not (label_replicas or shared_product or shared_nodes or any(s != "none" for s in strategies)):
        return None
    where = "node-selector" if label_replicas or strategies or products else "inventory"
    replicas_known = [(_int(v), key) for v, key in label_replicas if _int(v) > 0] or [
        found for n in shared_nodes if (found := _node_replicas(n)) is not None
    ]
    # the most pods per card: the smallest share
    replicas, replicas_key = max(replicas_known) if replicas_known else (None, REPLICAS_LABEL)
    strategy = next((s for s in strategies if s != "none"), None) or next(
        (_node_strategy(n) for n in shared_nodes if _node_strategy(n) == "mps"), None
    )
    if replicas is not None and replicas <= 1 and strategy is None and not shared_product:
        return None
    mechanism: Mechanism = "mps" if strategy == "mps" else "time-slicing"
    placement = None
    if pinned is not None and nodes and all(_int(n.labels.get(COUNT_LABEL)) == 1 for n in nodes):
        placement = f"node:{pinned}"  # one physical GPU on the node: every pod there shares it
    source = f"{replicas_key}={replicas} ({where})" if replicas else f"shared GPU ({where}), replicas unknown"
    return GpuShare(
        mechanism=mechanism,
        source=source,
        card_bytes=card,
        visible_bytes=card,
        budget_bytes=card // replicas if replicas else None,
        # MPS caps each client at card / replicas (NVIDIA's device plugin; GKE's sets
        # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<total / max-shared-clients>M); time-slicing caps nothing.
        isolated=mechanism == "mps" and replicas is not None,
        replicas=replicas,
        placement=placement,
    )


def _int(value: str | None) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _declared(annotations: Sequence[Mapping[str, Any] | None], card: int) -> int | None:
    for meta in annotations:
        value = (meta or {}).get(BUDGET_ANNOTATION)
        if value is not None and (size := quantity_bytes(value)) is not None and size > 0:
            return min(card, size)
    return None


def resolve_share(
    *,
    container: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    annotations: Sequence[Mapping[str, Any] | None],
    gpu: GpuResolution,
    inventory: Sequence[NodeInfo] | None = None,
    claims: Sequence[ClaimUse] = (),
    replicas: int | None = None,
    namespace: str | None = None,
) -> GpuShare | None:
    """The share of a GPU this container's pod gets, or None for a whole (or MIG) GPU of its own.

    Order: HAMi, Volcano vGPU and ACK resources, Run:ai annotations, an MPS limit in the container's
    env, a DRA claim's sharing settings, then GFD's or GKE's labels (selectors, else the inventory).
    ``replicas`` (pods of the workload) is the tenant count of a ResourceClaim all replicas share. The
    ``kv-planner.io/gpu-memory`` annotation states the budget where the cluster does not say it (e.g.
    time-slicing with unknown replicas)."""
    if gpu.spec is None:
        return None
    card = gpu.spec.memory_bytes
    share = (
        _hami(container, card)
        or _volcano(container, card)
        or _ack(container, pod_spec, gpu, inventory, card)
        or _runai(annotations, card)
        or _mps_env(container, card)
        or _dra(claims, card, replicas, namespace)
        or _gfd(pod_spec, gpu, inventory, card)
    )
    declared = _declared(annotations, card)
    if declared is not None:
        if share is None:
            return GpuShare(
                mechanism="declared",
                source=f"{BUDGET_ANNOTATION}",
                card_bytes=card,
                visible_bytes=card,
                budget_bytes=declared,
                isolated=False,
            )
        if share.budget_bytes is None or declared < share.budget_bytes:
            return share.model_copy(update={"budget_bytes": declared, "source": f"{share.source}; {BUDGET_ANNOTATION}"})
    return share


def is_mig_claim(claims: Sequence[ClaimUse]) -> bool:
    return any(r.device_class == MIG_CLASS for use in claims if use.claim for r in use.claim.gpu_requests)
