"""GPU type and count of a vLLM container, in the documented order of sources."""

from __future__ import annotations

from typing import Any

from planner.k8s.gpus import GpuCatalog, gpu_request, resolve_gpu
from planner.k8s.nodes import node_info

VLLM = {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}


def _resolve(catalog: GpuCatalog, spec: dict[str, Any], container: dict[str, Any] = VLLM, **kw: Any):  # type: ignore[no-untyped-def]
    return resolve_gpu(
        container=container,
        pod_spec={"containers": [container], **spec},
        annotations=kw.pop("annotations", [None, None]),
        catalog=catalog,
        **kw,
    )


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]
            }
        }
    }


def test_gpu_request_counts() -> None:
    assert gpu_request({"resources": {"limits": {"nvidia.com/gpu": 4}}}) == ("nvidia.com/gpu", 4)
    assert gpu_request({"resources": {"requests": {"amd.com/gpu": "1"}}}) == ("amd.com/gpu", 1)
    assert gpu_request({"resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}) == ("nvidia.com/mig-3g.40gb", 1)
    assert gpu_request({"resources": {"limits": {"cpu": "4"}}}) == (None, None)
    assert gpu_request({}) == (None, None)


def test_annotation_wins(catalog: GpuCatalog) -> None:
    gpu = _resolve(
        catalog,
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
        annotations=[{"kv-planner.io/gpu": "H100-80GB"}, None],
    )
    assert (gpu.name, gpu.source, gpu.label, gpu.count) == ("H100-80GB", "annotation", "H100-80GB", 2)


def test_gfd_product_in_node_selector(catalog: GpuCatalog) -> None:
    gpu = _resolve(catalog, {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}})
    assert (gpu.name, gpu.source, gpu.label) == ("A100-80GB", "node-selector", "NVIDIA-A100-SXM4-80GB")


def test_affinity_with_several_values_plans_for_the_smallest(catalog: GpuCatalog) -> None:
    spec = {
        "affinity": _affinity(
            [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"]}],
            [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}],
        )
    }
    gpu = _resolve(catalog, spec)
    assert (gpu.name, gpu.source) == ("L40S", "node-affinity")


def test_gfd_memory_label(catalog: GpuCatalog) -> None:
    gpu = _resolve(catalog, {"nodeSelector": {"nvidia.com/gpu.memory": "23034"}})
    assert gpu.source == "node-selector" and gpu.spec is not None
    assert abs(gpu.spec.memory_bytes - 23034 * 2**20) <= 0.05 * 23034 * 2**20


def test_cloud_labels(catalog: GpuCatalog) -> None:
    gke = _resolve(catalog, {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}})
    assert (gke.name, gke.source) == ("L4", "cloud-label")
    karpenter = _resolve(catalog, {"nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": "a10g"}})
    assert (karpenter.name, karpenter.source) == ("A10G", "cloud-label")
    # "a100" names two cards; the karpenter memory label settles it.
    both = _resolve(
        catalog,
        {
            "nodeSelector": {
                "karpenter.k8s.aws/instance-gpu-name": "a100",
                "karpenter.k8s.aws/instance-gpu-memory": "81920",
            }
        },
    )
    assert both.spec is not None and both.spec.memory_bytes > 70 * 2**30


def test_instance_type(catalog: GpuCatalog) -> None:
    gpu = _resolve(catalog, {"nodeSelector": {"node.kubernetes.io/instance-type": "g6.xlarge"}})
    assert (gpu.name, gpu.source, gpu.label) == ("L4", "instance-type", "g6.xlarge")


def test_product_label_outranks_instance_type(catalog: GpuCatalog) -> None:
    gpu = _resolve(
        catalog,
        {"nodeSelector": {"node.kubernetes.io/instance-type": "g6.xlarge", "nvidia.com/gpu.product": "NVIDIA-L40S"}},
    )
    assert gpu.name == "L40S"


def test_mig_resource_alone_and_with_product(catalog: GpuCatalog) -> None:
    mig = {"name": "vllm", "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}}}
    alone = _resolve(catalog, {}, container=mig)
    assert alone.source == "mig" and alone.label == "3g.40gb" and alone.spec is not None
    assert alone.spec.memory_bytes < 41 * 2**30 and alone.count == 1
    with_product = _resolve(
        catalog, {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}, container=mig
    )
    assert with_product.name == "A100-80GB-MIG-3g.40gb" and with_product.source == "node-selector"
    mig_label = _resolve(
        catalog, {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"}}, container=mig
    )
    assert mig_label.name == "A100-80GB-MIG-3g.40gb"


def _node(name: str, product: str | None, gpus: int, **extra: Any) -> Any:
    labels = {"kubernetes.io/hostname": name, **extra.pop("labels", {})}
    if product:
        labels["nvidia.com/gpu.product"] = product
    return node_info(
        {
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": extra.pop("spec", {}),
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32"}},
        }
    )


def test_inventory_smallest_schedulable_node(catalog: GpuCatalog) -> None:
    nodes = [
        _node("h100", "NVIDIA-H100-80GB-HBM3", 8),
        _node("l4", "NVIDIA-L4", 1),  # too few GPUs for a 2-GPU pod
        _node("l40s", "NVIDIA-L40S", 4, spec={"taints": [{"key": "team", "value": "b", "effect": "NoSchedule"}]}),
        _node("a100", "NVIDIA-A100-SXM4-80GB", 8, labels={"pool": "batch"}),
        _node("cpu", None, 0),
    ]
    gpu = _resolve(catalog, {}, inventory=nodes)
    assert (gpu.name, gpu.source) == ("A100-80GB", "inventory")
    tolerated = _resolve(catalog, {"tolerations": [{"key": "team", "operator": "Exists"}]}, inventory=nodes)
    assert tolerated.name == "L40S"
    selected = _resolve(catalog, {"nodeSelector": {"pool": "batch"}}, inventory=nodes)
    assert selected.name == "A100-80GB"


def test_unknown_label_and_default(catalog: GpuCatalog) -> None:
    unknown = _resolve(catalog, {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-Future-9000"}})
    assert unknown.spec is None and unknown.unknown_label and unknown.label == "NVIDIA-Future-9000"
    default = _resolve(catalog, {}, default_gpu="L40S")
    assert (default.name, default.source) == ("L40S", "cli")
    nothing = _resolve(catalog, {})
    assert nothing.name is None and nothing.source is None and nothing.count == 2


def test_group_gpus_for_leader_worker_sets(catalog: GpuCatalog) -> None:
    worker = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    leader = {"name": "l", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    gpu = _resolve(catalog, {}, container=leader, group_size=2, peer_spec=worker)
    assert (gpu.count, gpu.group_size, gpu.group_gpus) == (8, 2, 16)


def test_shared_gpu_requests_count_one_gpu() -> None:
    """Volcano vGPU counts vGPUs; a request of memory or cores alone is one GPU (HAMi's and Volcano's
    webhooks add defaultGPUNum 1; ACK and Volcano gpu-share place a pod on one card)."""
    assert gpu_request({"resources": {"limits": {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 3000}}}) == (
        "volcano.sh/vgpu-number",
        2,
    )
    assert gpu_request({"resources": {"limits": {"volcano.sh/vgpu-memory": 3000}}}) == ("volcano.sh/vgpu-number", 1)
    assert gpu_request({"resources": {"limits": {"nvidia.com/gpumem": 3000}}}) == ("nvidia.com/gpu", 1)
    assert gpu_request({"resources": {"limits": {"aliyun.com/gpu-mem": 8}}}) == ("aliyun.com/gpu-mem", 1)
    assert gpu_request({"resources": {"limits": {"volcano.sh/gpu-memory": 1024}}}) == ("volcano.sh/gpu-memory", 1)


def test_ack_gpu_count_label_spreads_the_request(catalog: GpuCatalog) -> None:
    ack = {"name": "vllm", "resources": {"limits": {"aliyun.com/gpu-mem": 16}}}
    assert _resolve(catalog, {}, container=ack).count == 1
    assert _resolve(catalog, {}, container=ack, labels={"aliyun.com/gpu-count": "2"}).count == 2


def test_gke_partition_size_plans_the_slice(catalog: GpuCatalog) -> None:
    """GKE MIG: nodeSelector gke-gpu-partition-size with nvidia.com/gpu: 1 is one slice of the card."""
    one = {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    selector = {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        "cloud.google.com/gke-gpu-partition-size": "2g.10gb",
    }
    gpu = _resolve(catalog, {"nodeSelector": selector}, container=one)
    assert (gpu.name, gpu.label, gpu.source, gpu.count) == (
        "A100-40GB-MIG-2g.10gb",
        "nvidia-tesla-a100",
        "cloud-label",
        1,
    )
    assert gpu.spec is not None and gpu.spec.memory_bytes < 10 * 2**30
    alone = _resolve(catalog, {"nodeSelector": {"cloud.google.com/gke-gpu-partition-size": "1g.10gb"}}, container=one)
    assert alone.source == "mig" and alone.spec is not None and "-MIG-1g.10gb" in alone.spec.name
    node = _node(
        "gke-mig",
        None,
        7,
        labels={
            "cloud.google.com/gke-accelerator": "nvidia-a100-80gb",
            "cloud.google.com/gke-gpu-partition-size": "3g.40gb",
        },
    )
    found = _resolve(catalog, {}, container=one, inventory=[node])
    assert (found.name, found.source) == ("A100-80GB-MIG-3g.40gb", "inventory")
