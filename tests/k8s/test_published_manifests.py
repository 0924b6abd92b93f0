"""Manifests in the shapes people publish: what kv-planner reads must match what a person reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.k8s.configfiles import configmaps_from_documents
from planner.k8s.gpus import GpuCatalog
from planner.k8s.inspect import WorkloadFinding, inspect_workload
from planner.policy.manifests import read_documents

HERE = Path(__file__).parent / "manifests"


def _workloads(name: str, catalog: GpuCatalog) -> dict[str, WorkloadFinding]:
    documents = [d.content for d in read_documents((HERE / name).read_text(), name)]
    configmaps = configmaps_from_documents(documents)
    found = {}
    for doc in documents:
        finding = inspect_workload(doc, catalog=catalog, configmaps=configmaps)
        found[f"{finding.kind}/{finding.name}"] = finding
    return found


# (file, workload, template, container, style, model, sizing values as written, vLLM version,
#  GPU name, GPU count, GPU source, group GPUs)
EXPECTED: list[tuple[Any, ...]] = [
    (
        "helm-chart-deployment.yaml",
        "Deployment/release-name-llm-serving",
        None,
        "vllm",
        "argv",
        "Qwen/Qwen2.5-7B-Instruct",
        {"tensor_parallel_size": 2, "max_model_len": 32768, "enable_prefix_caching": True},
        "0.19.0",
        "L40S",
        2,
        "node-selector",
        2,
    ),
    (
        "kustomize-output.yaml",
        "Deployment/prod-chat",
        None,
        "vllm",
        "image",
        "meta-llama/Llama-3.1-8B-Instruct",
        {"max_model_len": 16384, "max_num_seqs": 512, "gpu_memory_utilization": 0.92, "enable_prefix_caching": True},
        "0.19.0",
        "L4",
        1,
        "cloud-label",
        1,
    ),
    (
        "leaderworkerset-multinode.yaml",
        "LeaderWorkerSet/vllm-405b",
        "leader",
        "vllm-leader",
        "shell",
        "meta-llama/Meta-Llama-3.1-405B-Instruct",
        {"tensor_parallel_size": 8, "pipeline_parallel_size": 2},
        "0.10.1",
        "H100-80GB",
        8,
        "cloud-label",
        16,
    ),
    (
        "env-var-model.yaml",
        "StatefulSet/mistral",
        None,
        "server",
        "image",
        "mistralai/Mistral-7B-Instruct-v0.3",
        {"max_model_len": 16000, "gpu_memory_utilization": 0.9},
        "0.33.0",
        "L40S",
        1,
        "instance-type",
        1,
    ),
    (
        "job-and-pod.yaml",
        "Job/eval-phi",
        None,
        "engine",
        "argv",
        "microsoft/Phi-3-mini-4k-instruct",
        {"max_num_seqs": 32, "dtype": "half"},
        "0.10.1",
        "A10G",
        1,
        "node-selector",
        1,
    ),
    (
        "job-and-pod.yaml",
        "Pod/vllm-debug",
        None,
        "vllm",
        "shell",
        "Qwen/Qwen2.5-7B-Instruct",
        {"max_model_len": 65536, "kv_cache_dtype": "fp8", "enforce_eager": True},
        None,
        "H100-80GB",
        1,
        "annotation",
        1,
    ),
    (
        "kserve-inferenceservice.yaml",
        "InferenceService/llama-chat",
        "predictor",
        "kserve-container",
        "argv",
        "meta-llama/Llama-3.1-8B-Instruct",
        {"max_model_len": 65536},
        "0.19.0",
        "A100-80GB",
        1,
        "node-selector",
        1,
    ),
]


@pytest.mark.parametrize("case", EXPECTED, ids=[f"{c[0]}:{c[1]}" for c in EXPECTED])
def test_published_manifest(case: tuple[Any, ...], catalog: GpuCatalog) -> None:
    (file, workload, template, container, style, model, sizing, version, gpu_name, gpu_count, source, group_gpus) = case
    finding = _workloads(file, catalog)[workload]
    containers = finding.vllm_containers
    assert [c.container.name for c in containers] == [container]  # sidecars and init containers are not vLLM
    found = containers[0]
    assert found.template.name == template
    assert found.container.style == style
    assert found.container.vllm_version == version
    command = found.container.command
    assert command is not None and command.errors == []
    assert command.model == model
    args = command.serving_args(env=found.container.env)
    for key, value in sizing.items():
        assert getattr(args, key) == value, key
    gpu = found.gpu
    assert (gpu.name, gpu.count, gpu.source, gpu.group_gpus) == (gpu_name, gpu_count, source, group_gpus)


def test_non_vllm_documents_have_no_vllm_containers(catalog: GpuCatalog) -> None:
    found = _workloads("kustomize-output.yaml", catalog)
    assert found["Service/prod-chat"].skip == "no-pod-template"
    assert found["HorizontalPodAutoscaler/prod-chat"].skip == "no-pod-template"
    assert found["ConfigMap/prod-vllm-config-7g2t8k5h4c"].skip == "no-pod-template"


def test_lws_worker_template_runs_ray_not_vllm(catalog: GpuCatalog) -> None:
    lws = _workloads("leaderworkerset-multinode.yaml", catalog)["LeaderWorkerSet/vllm-405b"]
    assert [t.template.name for t in lws.templates] == ["leader", "worker"]
    assert lws.templates[1].containers == []


def test_config_file_without_its_configmap_is_reported(catalog: GpuCatalog) -> None:
    documents = [d.content for d in read_documents((HERE / "kustomize-output.yaml").read_text(), "k")]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    finding = inspect_workload(deployment, catalog=catalog)  # no ConfigMaps known (the webhook's view)
    command = finding.vllm_containers[0].container.command
    assert command is not None and command.config_file == "/etc/vllm/config.yaml" and not command.config_loaded


def test_typed_lists_are_expanded_into_their_items(catalog: GpuCatalog) -> None:
    """A ``DeploymentList`` / ``StatefulSetList`` (what the API server returns for a collection) is its
    items, each given the list's apiVersion and item kind where the API server left them out: before, the
    whole list was one object without a pod template (KVP060, nothing checked)."""
    documents = read_documents((HERE / "typed-lists.yaml").read_text(), "typed-lists.yaml")
    assert [(d.content["apiVersion"], d.content["kind"], d.index) for d in documents] == [
        ("apps/v1", "Deployment", 0),
        ("apps/v1", "StatefulSet", 1),
    ]
    found = _workloads("typed-lists.yaml", catalog)
    assert sorted(found) == ["Deployment/vllm-qwen", "StatefulSet/vllm-phi"]
    models = [c.container.command.model for f in found.values() for c in f.vllm_containers if c.container.command]
    assert models == ["Qwen/Qwen2.5-7B-Instruct", "microsoft/Phi-3-mini-4k-instruct"]


@pytest.mark.parametrize(
    "document",
    [
        # an object whose own kind ends in "List" (it has a name): not a collection
        {"apiVersion": "example.com/v1", "kind": "AllowList", "metadata": {"name": "a"}, "items": [{"x": 1}]},
        {"apiVersion": "v1", "kind": "List", "items": []},
    ],
)
def test_only_collections_are_expanded(document: dict[str, Any]) -> None:
    documents = read_documents(json.dumps(document), "x")
    expected = [document] if document["kind"] != "List" else []
    assert [d.content for d in documents] == expected
