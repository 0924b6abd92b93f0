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
======================  =====================================  ==================  =========  =====================

Sources: NVIDIA k8s-device-plugin README ("Shared Access to GPUs": time-slicing does nothing to isolate
workloads; under MPS "the amount of memory allowed per client ... is limited to an equal fraction of the
total device memory"); HAMi-core ``src/cuda/memory.c: cuMemGetInfo_v2`` (total = min(limit, physical));
with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` ``cudaMemGetInfo`` keeps the physical total and reports the
limit as free; Run:ai docs "Allocation of GPU Fractions" (over the allotted memory: out-of-memory);
kubernetes-sigs/dra-driver-nvidia-gpu ``api/nvidia.com/resource/v1beta1/sharing.go`` (``MpsConfig.
defaultPinnedDeviceMemoryLimit``). MIG slices are GPUs of their own (:mod:`planner.k8s.gpus`); sharing
on top of a slice divides the slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import re2

from planner.gpus.share import GpuShare, Mechanism
from planner.k8s.dra import MIG_CLASS, ClaimUse
from planner.k8s.gpus import PRODUCT_LABEL, GpuResolution, _label_values
from planner.k8s.nodes import NodeInfo, could_schedule
from planner.k8s.quantity import parse_quantity, quantity_bytes
from planner.k8s.workloads import as_list, is_mapping

REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
COUNT_LABEL = "nvidia.com/gpu.count"
HOSTNAME_LABEL = "kubernetes.io/hostname"
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
RUNAI_FRACTION = "gpu-fraction"
RUNAI_MEMORY = "gpu-memory"
BUDGET_ANNOTATION = "kv-planner.io/gpu-memory"
_MIB = 1 << 20
_SHARED_SUFFIX = "-shared"
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


def _gfd(
    pod_spec: Mapping[str, Any],
    gpu: GpuResolution,
    inventory: Sequence[NodeInfo] | None,
    card: int,
) -> GpuShare | None:
    """Time-slicing / MPS as GPU feature discovery labels show it (the pod's selectors, else the nodes)."""
    label_replicas = [v for v, _ in _label_values(pod_spec, REPLICAS_LABEL)]
    strategies = [v for v, _ in _label_values(pod_spec, STRATEGY_LABEL)]
    products = [v for v, _ in _label_values(pod_spec, PRODUCT_LABEL)]
    shared_product = any(p.lower().endswith(_SHARED_SUFFIX) for p in products) or (
        (gpu.label or "").lower().endswith(_SHARED_SUFFIX)
    )
    pinned = _pinned_node(pod_spec)
    nodes: list[NodeInfo] = []
    for node in inventory or []:
        if pinned is not None and node.name != pinned and node.labels.get(HOSTNAME_LABEL) != pinned:
            continue
        if pinned is not None or could_schedule(node, pod_spec, gpu.resource, gpu.count or 0):
            nodes.append(node)
    shared_nodes = [
        n
        for n in nodes
        if n.labels.get(STRATEGY_LABEL, "none") in ("time-slicing", "mps")
        or _int(n.labels.get(REPLICAS_LABEL)) > 1
        or n.labels.get(PRODUCT_LABEL, "").lower().endswith(_SHARED_SUFFIX)
    ]
    if not (label_replicas or shared_product or shared_nodes or any(s != "none" for s in strategies)):
        return None
    where = "node-selector" if label_replicas or strategies or products else "inventory"
    replicas_known = [_int(v) for v in label_replicas if _int(v) > 0] or [
        _int(n.labels.get(REPLICAS_LABEL)) for n in shared_nodes if _int(n.labels.get(REPLICAS_LABEL)) > 0
    ]
    replicas = max(replicas_known) if replicas_known else None  # the most pods per card: the smallest share
    strategy = next((s for s in strategies if s != "none"), None) or next(
        (n.labels.get(STRATEGY_LABEL) for n in shared_nodes if n.labels.get(STRATEGY_LABEL) in ("mps",)), None
    )
    if replicas is not None and replicas <= 1 and strategy is None and not shared_product:
        return None
    mechanism: Mechanism = "mps" if strategy == "mps" else "time-slicing"
    placement = None
    if pinned is not None and nodes and all(_int(n.labels.get(COUNT_LABEL)) == 1 for n in nodes):
        placement = f"node:{pinned}"  # one physical GPU on the node: every pod there shares it
    source = f"{REPLICAS_LABEL}={replicas} ({where})" if replicas else f"shared GPU ({where}), replicas unknown"
    return GpuShare(
        mechanism=mechanism,
        source=source,
        card_bytes=card,
        visible_bytes=card,
        budget_bytes=card // replicas if replicas else None,
        # The device plugin's MPS daemon caps each client at card / replicas; time-slicing caps nothing.
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

    Order: HAMi resources, Run:ai annotations, an MPS limit in the container's env, a DRA claim's sharing
    settings, then GFD labels (selectors, else the inventory). ``replicas`` (pods of the workload) is
    the tenant count of a ResourceClaim all replicas share. The ``kv-planner.io/gpu-memory`` annotation
    states the budget where the cluster does not say it (e.g. time-slicing with unknown replicas)."""
    if gpu.spec is None:
        return None
    card = gpu.spec.memory_bytes
    share = (
        _hami(container, card)
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
