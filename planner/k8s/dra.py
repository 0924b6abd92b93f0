"""GPUs requested through Dynamic Resource Allocation (``resource.k8s.io``, GA in Kubernetes 1.34).

A pod lists ``spec.resourceClaims`` (each a ``resourceClaimName`` or a ``resourceClaimTemplateName``);
a container uses them through ``resources.claims[].name``. The claim (or the template's
``spec.spec``) holds ``devices.requests``: in ``resource.k8s.io/v1`` each request keeps its device
class, CEL selectors and count under ``exactly``; ``v1beta1`` keeps them on the request itself. What
kv-planner reads from a request:

* the device class: ``gpu.nvidia.com`` (a whole GPU) or ``mig.nvidia.com`` (a MIG slice), as NVIDIA's
  DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) names them;
* CEL selectors on the product name or the memory the driver publishes, in the forms people write:
  ``device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"`` (also ``in [...]``),
  ``device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0`` and
  ``device.attributes["gpu.nvidia.com"].profile == "3g.40gb"``; other expressions are not evaluated;
* ``count`` (default 1; ``allocationMode: All`` gives an unknown count);
* the driver's opaque ``GpuConfig`` / ``MigDeviceConfig`` sharing settings: ``strategy: TimeSlicing``
  or ``MPS`` with ``mpsConfig.defaultPinnedDeviceMemoryLimit`` (the per-client device memory limit).

A ResourceClaim (not a template) named by several pods is one allocation: every pod that references it
shares the same device(s) — the placement is known, which is what the co-tenancy check needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.gpus.spec import GpuSpec
from planner.k8s.gpus import GpuCatalog, GpuResolution
from planner.k8s.quantity import quantity_bytes
from planner.k8s.workloads import get_path

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
_PRODUCT = re2.compile(r"""\.productName\s*==\s*["']([^"']+)["']""")
_PRODUCT_IN = re2.compile(r"""\.productName\s+in\s*\[([^\]]*)\]""")
_PROFILE = re2.compile(r"""\.profile\s*==\s*["']([^"']+)["']""")
_MEMORY_CMP = re2.compile(r"""\.memory\.compareTo\(\s*quantity\(\s*["']([^"']+)["']\s*\)\s*\)\s*(>=|>|==)\s*0""")
_MEMORY_OP = re2.compile(r"""\.memory\s*(>=|>|==)\s*quantity\(\s*["']([^"']+)["']\s*\)""")
_STRINGS = re2.compile(r"""["']([^"']+)["']""")

ClaimKind = Literal["ResourceClaim", "ResourceClaimTemplate"]


class DeviceRequest(BaseModel):
    """One ``devices.requests`` entry, as far as sizing needs it."""

    model_config = ConfigDict(frozen=True)

    name: str
    device_class: str | None = None
    count: int | None = Field(default=1, description="None for allocationMode All")
    products: tuple[str, ...] = ()
    min_memory_bytes: int | None = None
    mig_profile: str | None = None
    sharing: Literal["TimeSlicing", "MPS"] | None = None
    mps_memory_limit_bytes: int | None = Field(default=None, description="defaultPinnedDeviceMemoryLimit")
    unread_selectors: int = Field(default=0, description="CEL expressions kv-planner did not evaluate")

    @property
    def is_gpu(self) -> bool:
        return self.device_class in (GPU_CLASS, MIG_CLASS) or bool(self.products or self.mig_profile)


class DeviceClaim(BaseModel):
    """A ResourceClaim or ResourceClaimTemplate."""

    model_config = ConfigDict(frozen=True)

    kind: ClaimKind
    name: str
    namespace: str | None = None
    requests: tuple[DeviceRequest, ...] = ()

    @property
    def gpu_requests(self) -> list[DeviceRequest]:
        return [r for r in self.requests if r.is_gpu]


ClaimIndex = Mapping[tuple[ClaimKind, str | None, str], DeviceClaim]


def _selectors(exactly: Mapping[str, Any]) -> tuple[list[str], int | None, str | None, int]:
    """(products, min memory, MIG profile, expressions not read) from a request's CEL selectors."""
    products: list[str] = []
    memory: int | None = None
    profile: str | None = None
    unread = 0
    for selector in exactly.get("selectors") or []:
        expression = get_path(selector, ("cel", "expression"))
        if not isinstance(expression, str):
            continue
        read = False
        for match in _PRODUCT.finditer(expression):
            products.append(match.group(1))
            read = True
        for match in _PRODUCT_IN.finditer(expression):
            products += _STRINGS.findall(match.group(1))
            read = True
        if (found := _PROFILE.search(expression)) is not None:
            profile, read = found.group(1), True
        for value in [m.group(1) for m in _MEMORY_CMP.finditer(expression)] + [
            m.group(2) for m in _MEMORY_OP.finditer(expression)
        ]:
            size = quantity_bytes(value)
            if size is not None:
                memory = max(memory or 0, size)
                read = True
        unread += 0 if read else 1
    return products, memory, profile, unread


def _sharing(configs: Sequence[Any], request: str) -> tuple[Literal["TimeSlicing", "MPS"] | None, int | None]:
    """The NVIDIA driver's sharing strategy and MPS memory limit configured for ``request``."""
    for config in configs:
        if not isinstance(config, Mapping):
            continue
        applies = config.get("requests")
        if isinstance(applies, list) and applies and request not in applies:
            continue
        sharing = get_path(config, ("opaque", "parameters", "sharing"))
        if not isinstance(sharing, Mapping):
            continue
        strategy = sharing.get("strategy")
        if strategy == "MPS":
            limit = get_path(sharing, ("mpsConfig", "defaultPinnedDeviceMemoryLimit"))
            return "MPS", quantity_bytes(limit) if limit is not None else None
        if strategy == "TimeSlicing":
            return "TimeSlicing", None
    return None, None


def _request(raw: Mapping[str, Any], configs: Sequence[Any]) -> DeviceRequest | None:
    name = raw.get("name")
    if not isinstance(name, str):
        return None
    # resource.k8s.io/v1 keeps the device selection under "exactly"; v1beta1 on the request itself.
    exactly = raw.get("exactly") if isinstance(raw.get("exactly"), Mapping) else raw
    assert isinstance(exactly, Mapping)
    if exactly.get("allocationMode") == "All":
        count: int | None = None
    else:
        try:
            count = max(1, int(str(exactly.get("count", 1))))
        except ValueError:
            count = 1
    products, memory, profile, unread = _selectors(exactly)
    strategy, limit = _sharing(configs, name)
    device_class = exactly.get("deviceClassName")
    return DeviceRequest(
        name=name,
        device_class=device_class if isinstance(device_class, str) else None,
        count=count,
        products=tuple(products),
        min_memory_bytes=memory,
        mig_profile=profile,
        sharing=strategy,
        mps_memory_limit_bytes=limit,
        unread_selectors=unread,
    )


def device_claim(obj: Mapping[str, Any]) -> DeviceClaim | None:
    """A DeviceClaim from a ResourceClaim or ResourceClaimTemplate object (None for other objects)."""
    kind = obj.get("kind")
    if kind not in ("ResourceClaim", "ResourceClaimTemplate"):
        return None
    name = get_path(obj, ("metadata", "name"))
    if not isinstance(name, str):
        return None
    spec_path = ("spec", "spec", "devices") if kind == "ResourceClaimTemplate" else ("spec", "devices")
    devices = get_path(obj, spec_path)
    requests: list[DeviceRequest] = []
    if isinstance(devices, Mapping):
        configs = devices.get("config") if isinstance(devices.get("config"), list) else []
        assert isinstance(configs, list)
        for raw in devices.get("requests") or []:
            if isinstance(raw, Mapping) and (parsed := _request(raw, configs)) is not None:
                requests.append(parsed)
    namespace = get_path(obj, ("metadata", "namespace"))
    return DeviceClaim(
        kind=kind,
        name=name,
        namespace=namespace if isinstance(namespace, str) else None,
        requests=tuple(requests),
    )


def claims_from_documents(documents: Iterable[Any]) -> dict[tuple[ClaimKind, str | None, str], DeviceClaim]:
    """ResourceClaims and ResourceClaimTemplates found among parsed manifest documents."""
    index: dict[tuple[ClaimKind, str | None, str], DeviceClaim] = {}
    for doc in documents:
        if isinstance(doc, Mapping) and (claim := device_claim(doc)) is not None:
            index[(claim.kind, claim.namespace, claim.name)] = claim
    return index


class ClaimUse(BaseModel):
    """A GPU claim one container uses."""

    model_config = ConfigDict(frozen=True)

    pod_claim: str = Field(description="the name in the pod's spec.resourceClaims")
    kind: ClaimKind
    object_name: str = Field(description="the ResourceClaim / ResourceClaimTemplate name")
    claim: DeviceClaim | None = Field(default=None, description="None when the object is not readable here")

    @property
    def shared_by_replicas(self) -> bool:
        """A ResourceClaim (not a template): every replica of the pod gets the same device(s)."""
        return self.kind == "ResourceClaim"


def container_claims(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], namespace: str | None, claims: ClaimIndex | None
) -> list[ClaimUse]:
    """The DRA claims ``container`` uses (``resources.claims``), resolved against ``claims``."""
    used = get_path(container, ("resources", "claims"))
    if not isinstance(used, list):
        return []
    wanted = {str(c.get("name")) for c in used if isinstance(c, Mapping) and c.get("name")}
    out: list[ClaimUse] = []
    for entry in pod_spec.get("resourceClaims") or []:
        if not isinstance(entry, Mapping) or entry.get("name") not in wanted:
            continue
        kind: ClaimKind
        if isinstance(entry.get("resourceClaimName"), str):
            kind, object_name = "ResourceClaim", str(entry["resourceClaimName"])
        elif isinstance(entry.get("resourceClaimTemplateName"), str):
            kind, object_name = "ResourceClaimTemplate", str(entry["resourceClaimTemplateName"])
        else:
            continue
        claim = None
        if claims is not None:
            claim = claims.get((kind, namespace, object_name)) or claims.get((kind, None, object_name))
        out.append(ClaimUse(pod_claim=str(entry["name"]), kind=kind, object_name=object_name, claim=claim))
    return out


def gpu_from_claims(uses: Sequence[ClaimUse], catalog: GpuCatalog, base: GpuResolution) -> GpuResolution | None:
    """The GPU type and count a container gets from its DRA claims (None when no GPU claim is readable).

    Product-name selectors name the card (the smallest when several are allowed); a memory selector
    ("at least 40Gi") plans for the smallest card with that memory; a MIG profile selector gives the
    slice. Without a selector the device class alone does not say which card: the type stays unknown
    (the GPU annotation or ``--gpu`` settles it) but the count is known."""
    count = 0
    specs: list[tuple[GpuSpec, str]] = []
    unknown_label: str | None = None
    found = False
    for use in uses:
        if use.claim is None:
            continue
        for request in use.claim.gpu_requests:
            found = True
            count += request.count or 0
            candidates = [(catalog.lookup(p), p) for p in request.products]
            known = [(s, p) for s, p in candidates if s is not None]
            if candidates and not known:
                unknown_label = request.products[0]
            if request.min_memory_bytes and not known:
                spec = catalog.for_memory(request.min_memory_bytes)
                if spec is not None:
                    known = [(spec, f"memory>={request.min_memory_bytes >> 20}Mi")]
            if request.mig_profile:
                parents: list[str | None] = [s.name for s, _ in known] or [None]
                known = [
                    (mig, request.mig_profile)
                    for parent in parents
                    if (mig := catalog.mig(request.mig_profile, parent)) is not None
                ]
            specs += known
    if not found:
        return None
    update: dict[str, Any] = {"count": count or None, "group_gpus": count or None, "resource": "dra"}
    if base.spec is not None:
        return base.model_copy(update=update)
    if specs:
        spec, label = min(specs, key=lambda item: (item[0].memory_bytes, item[0].name))
        update.update({"name": spec.name, "label": label, "source": "dra", "spec": spec})
    elif unknown_label is not None:
        update.update({"label": unknown_label, "source": "dra", "unknown_label": True})
    return base.model_copy(update=update)
