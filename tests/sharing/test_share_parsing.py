"""How each mechanism's manifest fields become a per-pod budget (planner/k8s/sharing.py, planner/k8s/dra.py)."""

from __future__ import annotations

from typing import Any

import pytest

from planner.k8s.dra import claims_from_documents, container_claims
from planner.k8s.gpus import GpuResolution
from planner.k8s.nodes import node_info
from planner.k8s.quantity import quantity_bytes
from planner.k8s.sharing import mps_limit_bytes, resolve_share
from planner.policy.planning import CoreGpuCatalog

GiB, MiB = 1 << 30, 1 << 20
AT_LEAST_80GI = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
CATALOG = CoreGpuCatalog()
A100 = CATALOG.lookup("A100-80GB")
assert A100 is not None
CARD = A100.memory_bytes


def _gpu(label: str = "NVIDIA-A100-SXM4-80GB") -> GpuResolution:
    return GpuResolution(
        name=A100.name, label=label, count=1, source="node-selector", spec=A100, resource="nvidia.com/gpu"
    )


def _share(
    container: dict[str, Any] | None = None, pod: dict[str, Any] | None = None, annotations: Any = (), **kw: Any
):
    return resolve_share(
        container=container or {"name": "vllm"},
        pod_spec=pod or {"containers": [container or {"name": "vllm"}]},
        annotations=list(annotations),
        gpu=kw.pop("gpu", _gpu()),
        **kw,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0=20G", 20 * GiB),
        ("20480M", 20 * GiB),
        ("0=8G,1=4G", 4 * GiB),
        ("GPU-1234=512MB", 512 * MiB),
        ("1.5G", int(1.5 * GiB)),
    ],
)
def test_mps_pinned_limit_syntax(value: str, expected: int) -> None:
    assert mps_limit_bytes(value) == expected


def test_mps_limit_garbage_is_not_a_limit() -> None:
    assert mps_limit_bytes("twenty gigs") is None


@pytest.mark.parametrize(
    ("text", "expected"), [("20Gi", 20 * GiB), ("40G", 40 * 10**9), ("81920Mi", 80 * GiB), ("1e3", 1000)]
)
def test_quantities(text: str, expected: int) -> None:
    assert quantity_bytes(text) == expected


def test_quantity_rejects_junk_and_absurd_values() -> None:
    for text in ("abc", "-1Gi", "1e400", "9" * 40):
        assert quantity_bytes(text) is None


def test_a_whole_gpu_is_not_shared() -> None:
    assert _share() is None


def test_hami_percentage_and_cores_only() -> None:
    share = _share({"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25}}})
    assert share is not None and share.budget_bytes == share.visible_bytes == CARD // 4 and share.isolated
    cores = _share({"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}}})
    assert cores is not None and cores.budget_bytes is None and not cores.isolated


def test_runai_fraction_and_memory_annotations() -> None:
    fraction = _share(annotations=[{"gpu-fraction": "0.5"}])
    assert fraction is not None and fraction.mechanism == "fraction" and fraction.budget_bytes == CARD // 2
    memory = _share(annotations=[None, {"gpu-memory": "20480"}])  # a bare number is MiB
    assert memory is not None and memory.budget_bytes == 20 * GiB


def test_time_slicing_replicas_from_the_inventory() -> None:
    node = node_info(
        {
            "metadata": {
                "name": "n1",
                "labels": {
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED",
                    "nvidia.com/gpu.replicas": "8",
                    "nvidia.com/gpu.sharing-strategy": "time-slicing",
                },
            },
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
    )
    share = _share(inventory=[node], gpu=_gpu("NVIDIA-A100-SXM4-80GB-SHARED"))
    assert share is not None and share.replicas == 8 and share.budget_bytes == CARD // 8 and not share.isolated


def test_shared_product_with_unknown_replicas_has_no_budget_unless_declared() -> None:
    pod = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED"}, "containers": [{}]}
    unknown = _share(pod=pod, gpu=_gpu("NVIDIA-A100-SXM4-80GB-SHARED"))
    assert unknown is not None and unknown.budget_bytes is None
    declared = _share(
        pod=pod, gpu=_gpu("NVIDIA-A100-SXM4-80GB-SHARED"), annotations=[{"kv-planner.io/gpu-memory": "30Gi"}]
    )
    assert declared is not None and declared.budget_bytes == 30 * GiB


def test_device_plugin_mps_is_isolated_at_card_over_replicas() -> None:
    pod = {
        "nodeSelector": {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "mps"},
        "containers": [{}],
    }
    share = _share(pod=pod)
    assert share is not None and share.mechanism == "mps" and share.isolated and share.budget_bytes == CARD // 4


def test_dra_v1beta1_claim_template_with_memory_selector() -> None:
    """resource.k8s.io/v1beta1 keeps deviceClassName and selectors on the request itself."""
    template = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "big-gpu", "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 2,
                            "selectors": [{"cel": {"expression": AT_LEAST_80GI}}],
                        }
                    ]
                }
            }
        },
    }
    claims = claims_from_documents([template])
    pod = {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "big-gpu"}], "containers": []}
    container = {"name": "vllm", "resources": {"claims": [{"name": "g"}]}}
    (use,) = container_claims(pod, container, "ml", claims)
    assert use.claim is not None and not use.shared_by_replicas
    (request,) = use.claim.gpu_requests
    assert request.count == 2 and request.min_memory_bytes == 80 * GiB and request.products == ()


def test_dra_claim_shared_by_replicas_without_sharing_config_is_time_sliced() -> None:
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "one-gpu", "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    claims = claims_from_documents([claim])
    pod = {"resourceClaims": [{"name": "g", "resourceClaimName": "one-gpu"}], "containers": []}
    container = {"name": "vllm", "resources": {"claims": [{"name": "g"}]}}
    uses = container_claims(pod, container, "ml", claims)
    share = _share(container, pod, claims=uses, replicas=3, namespace="ml")
    assert share is not None and share.mechanism == "time-slicing" and share.replicas == 3
    assert share.budget_bytes == CARD // 3 and share.placement == "claim:ml/one-gpu"
