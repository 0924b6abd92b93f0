"""Serving platforms' own resources (tests/k8s/platforms/*.yaml, written from each project's published
examples; sources in each file's header): what kv-planner reads, decides and patches.

Patches are applied and the result validated against the JSON Schema derived from the project's
published CRD (tests/k8s/crd_schemas, scripts/derive_crd_schema.py); a second review of the patched
object must change nothing.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import kubernetes_validate
import pytest

from planner.k8s.platforms import llmisvc
from planner.policy import decide as decide_module
from planner.policy.check import CheckReport, check_policy, run_check
from planner.policy.decide import WorkloadEntry, decide
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

HERE = Path(__file__).parent
FIXTURES = HERE / "platforms"
SCHEMAS = HERE / "crd_schemas"
POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()


@cache
def report(name: str) -> CheckReport:
    documents = read_documents((FIXTURES / name).read_text(), name)
    return run_check(documents, policy=POLICY, backend=BACKEND)


def entry(name: str, workload: str, template: str | None = None) -> WorkloadEntry:
    kind, _, wanted = workload.partition("/")
    found = [
        e
        for e in report(name).workloads
        if e.kind == kind and e.name == wanted and (template is None or e.template == template)
    ]
    assert found, f"{workload} {template} not in {[(e.kind, e.name, e.template) for e in report(name).workloads]}"
    return found[0]


# (file, workload, template, model, vLLM version, GPU name, GPUs per pod, GPU source, args as written)
READS: list[tuple[Any, ...]] = [
    (
        "kubeai-models.yaml",
        "Model/qwen2.5-7b-instruct-l4",
        "model",
        "Qwen/Qwen2.5-7B-Instruct",
        None,
        "L4",
        1,
        "platform",
        {"max_model_len": 8192, "max_num_seqs": 256, "gpu_memory_utilization": 0.95, "kv_cache_dtype": "fp8"},
    ),
    (
        "kubeai-models.yaml",
        "Model/llama-3.1-70b-instruct-h100",
        "model",
        "meta-llama/Llama-3.1-70B-Instruct",
        None,
        "H100-80GB",
        2,
        "platform",
        {"tensor_parallel_size": 2, "max_model_len": 65536},
    ),
    (
        "kubeai-models.yaml",
        "Model/llama-3.1-8b-instruct-l4",
        "model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "0.19.0",
        "L4",
        1,
        "platform",
        {"max_model_len": None},
    ),
    (
        "kubeai-cluster-config.yaml",
        "Model/llama-3.1-70b-gke-h100",
        "model",
        "meta-llama/Llama-3.1-70B-Instruct",
        "0.11.2",
        "H100-80GB",
        2,
        "cloud-label",
        {"tensor_parallel_size": 2, "max_model_len": 32768},
    ),
    (
        "kserve-inferenceservices.yaml",
        "InferenceService/qwen-chat",
        "predictor",
        "Qwen/Qwen2.5-7B-Instruct",
        None,
        "L4",
        1,
        "node-selector",
        {"max_model_len": 16384},
    ),
    (
        "kserve-inferenceservices.yaml",
        "InferenceService/llama-hf",
        "predictor",
        "meta-llama/Llama-3.1-8B-Instruct",
        None,
        "A100-80GB",
        1,
        "annotation",
        {"max_model_len": None},
    ),
    (
        "kserve-inferenceservices.yaml",
        "InferenceService/qwen-runtime",
        "predictor",
        "Qwen/Qwen2.5-7B-Instruct",
        "0.19.0",
        "H100-80GB",
        1,
        "node-selector",
        {"max_model_len": 32768, "gpu_memory_utilization": 0.9},
    ),
    (
        "kserve-llminferenceservices.yaml",
        "LLMInferenceService/qwen2-7b-instruct-pd",
        "main",
        "Qwen/Qwen2.5-7B-Instruct",
        None,
        "A100-80GB",
        1,
        "node-selector",
        {"max_model_len": None},
    ),
    (
        "kserve-llminferenceservices.yaml",
        "LLMInferenceService/qwen2-7b-instruct-pd",
        "prefill",
        "Qwen/Qwen2.5-7B-Instruct",
        None,
        "A100-80GB",
        1,
        "node-selector",
        {},
    ),
    (
        "kserve-llminferenceservices.yaml",
        "LLMInferenceService/llama8b-l40s",
        "main",
        "meta-llama/Llama-3.1-8B-Instruct",
        None,
        None,
        1,
        None,
        {"max_model_len": 4096, "gpu_memory_utilization": 0.92},
    ),
    (
        "kserve-llmisvc-presets.yaml",
        "LLMInferenceService/qwen-sh",
        "main",
        "Qwen/Qwen2.5-7B-Instruct",
        None,
        "L4",
        1,
        "node-selector",
        {"max_model_len": 8192, "max_num_seqs": 64},  # the preset's command, the service's VLLM_ADDITIONAL_ARGS
    ),
    (
        "kserve-llmisvc-presets.yaml",
        "LLMInferenceService/llama70b-own-tp",
        "main",
        "meta-llama/Llama-3.1-70B-Instruct",
        None,
        "A100-80GB",
        4,
        "node-selector",
        {"tensor_parallel_size": 4, "max_model_len": 16384},
    ),
    (
        "kserve-llmisvc-presets.yaml",
        "LLMInferenceService/llama70b-inline",
        "main",
        "meta-llama/Llama-3.1-70B-Instruct",
        None,
        "A100-80GB",
        2,
        "node-selector",
        {"tensor_parallel_size": 2, "max_model_len": 8192},
    ),
    (
        "kserve-llmisvc-presets.yaml",
        "LLMInferenceService/deepseek-r1-dp-ep",
        "main",
        "deepseek-ai/DeepSeek-R1-0528",
        None,
        "H200-141GB",
        8,
        "node-selector",
        {"tensor_parallel_size": 1, "data_parallel_size": 32, "max_model_len": 8192},
    ),
    (
        "ray.yaml",
        "RayService/ray-serve-llm",
        "llms/llm_configs/0",
        "Qwen/Qwen2.5-7B-Instruct",
        None,
        "L4",
        1,
        "platform",
        {"max_model_len": 1024, "gpu_memory_utilization": 0.75},
    ),
    (
        "ray.yaml",
        "RayClusterFleet/qwen-coder-7b-instruct",
        "head",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
        "0.7.1",
        "A10G",
        1,
        "node-selector",
        {"tensor_parallel_size": 2},
    ),
    (
        "ray.yaml",
        "RayCluster/vllm-ray",
        "head",
        "Qwen/Qwen2.5-7B-Instruct",
        "0.19.0",
        "L40S",
        1,
        "node-selector",
        {"tensor_parallel_size": 2},
    ),
    (
        "aibrix-stormservice.yaml",
        "StormService/vllm-1p1d",
        "prefill",
        "Qwen/Qwen3-8B",
        "0.7.3",
        "H100-80GB",
        1,
        "node-selector",
        {},
    ),
    (
        "aibrix-stormservice.yaml",
        "StormService/vllm-1p1d",
        "decode",
        "Qwen/Qwen3-8B",
        "0.10.0",
        "H100-80GB",
        1,
        "node-selector",
        {},
    ),
    (
        "dynamo.yaml",
        "DynamoGraphDeployment/vllm-disagg",
        "VllmDecodeWorker",
        "Qwen/Qwen3-0.6B",
        None,
        "H100-80GB",
        1,
        "annotation",
        {"max_model_len": None},
    ),
    (
        "dynamo.yaml",
        "DynamoGraphDeployment/vllm-disagg",
        "VllmPrefillWorker",
        "Qwen/Qwen3-0.6B",
        None,
        "H100-80GB",
        1,
        "annotation",
        {"max_model_len": 16384},
    ),
    (
        "dynamo.yaml",
        "DynamoGraphDeployment/vllm-disagg-shell",
        "VllmDecodeWorker",
        "Qwen/Qwen3-0.6B",
        None,
        "L40S",
        1,
        "node-selector",
        {},
    ),
]


@pytest.mark.parametrize(
    ("name", "workload", "template", "model", "version", "gpu", "count", "source", "args"),
    READS,
    ids=[f"{r[1]}:{r[2]}" for r in READS],
)
def test_reads_each_platform_like_its_controller(
    name: str,
    workload: str,
    template: str,
    model: str,
    version: str | None,
    gpu: str | None,
    count: int,
    source: str | None,
    args: dict[str, Any],
) -> None:
    found = entry(name, workload, template)
    assert found.vllm
    assert found.model == model
    assert found.vllm_version == version
    assert (found.gpu.name, found.gpu.count, found.gpu.source) == (gpu, count, source)
    for key, value in args.items():
        assert found.args[key] == value, key
    assert found.decision != "skip"


# (file, workload, code, decision): resources seen but not planned, each with its reason code.
NOT_PLANNED = [
    ("kubeai-models.yaml", "Model/gemma-2b-it-tpu", "KVP064", "skip"),
    ("kubeai-models.yaml", "Model/llama-3.3-70b-ollama-l4", "KVP066", "skip"),
    ("kserve-inferenceservices.yaml", "ServingRuntime/vllm-openai-runtime", "KVP069", "skip"),
    ("kserve-inferenceservices.yaml", "InferenceService/sklearn-iris", "KVP060", "skip"),
    ("kserve-inferenceservices.yaml", "InferenceService/llama-transformers", "KVP066", "skip"),
    ("images.yaml", "Deployment/vllm-tpu", "KVP064", "skip"),
]


@pytest.mark.parametrize(("name", "workload", "code", "decision"), NOT_PLANNED)
def test_never_silent(name: str, workload: str, code: str, decision: str) -> None:
    found = entry(name, workload)
    assert found.decision == decision and code in found.codes and found.messages


# (file, workload, template, the patch's paths, the words added)
PATCHES: list[tuple[Any, ...]] = [
    (
        "kubeai-models.yaml",
        "Model/llama-3.1-8b-instruct-l4",
        "model",
        "kubeai-model.json",
        [("add", "/spec/args", ["--max-model-len={max_model_len}", "--gpu-memory-utilization=0.9"])],
    ),
    (
        "kserve-inferenceservices.yaml",
        "InferenceService/llama-hf",
        "predictor",
        "kserve-inferenceservice.json",
        [("add", "/spec/predictor/model/args", ["--max-model-len", "{max_model_len}"])],
    ),
    (
        "dynamo.yaml",
        "DynamoGraphDeployment/vllm-disagg",
        "VllmDecodeWorker",
        None,  # no registry or small published schema; checked as a core/v1 Container below
        [
            ("add", "/spec/services/VllmDecodeWorker/extraPodSpec/mainContainer/args/-", "--max-model-len"),
            ("add", "/spec/services/VllmDecodeWorker/extraPodSpec/mainContainer/args/-", "{max_model_len}"),
        ],
    ),
    (
        "ray.yaml",
        "RayCluster/vllm-ray",
        "head",
        "ray-raycluster.json",
        [
            ("add", "/spec/headGroupSpec/template/spec/containers/0/command/-", "--max-model-len"),
            ("add", "/spec/headGroupSpec/template/spec/containers/0/command/-", "{max_model_len}"),
            ("add", "/spec/headGroupSpec/template/spec/containers/0/command/-", "--gpu-memory-utilization"),
            ("add", "/spec/headGroupSpec/template/spec/containers/0/command/-", "0.9"),
        ],
    ),
    (
        "aibrix-stormservice.yaml",
        "StormService/vllm-1p1d",
        "decode",
        "aibrix-stormservice.json",
        [
            ("add", "/spec/template/spec/roles/1/template/spec/containers/0/args/-", "--max-model-len"),
            ("add", "/spec/template/spec/roles/1/template/spec/containers/0/args/-", "{max_model_len}"),
            ("add", "/spec/template/spec/roles/1/template/spec/containers/0/args/-", "--gpu-memory-utilization"),
            ("add", "/spec/template/spec/roles/1/template/spec/containers/0/args/-", "0.9"),
        ],
    ),
]


def _document(name: str, workload: str) -> dict[str, Any]:
    kind, _, wanted = workload.partition("/")
    for document in read_documents((FIXTURES / name).read_text(), name):
        content = document.content
        if isinstance(content, dict) and content.get("kind") == kind and content["metadata"]["name"] == wanted:
            return content
    raise AssertionError(workload)


@pytest.mark.parametrize(("name", "workload", "template", "schema", "expected"), PATCHES, ids=[p[1] for p in PATCHES])
def test_patch_writes_the_field_the_platform_reads(
    name: str, workload: str, template: str, schema: str | None, expected: list[tuple[str, str, Any]]
) -> None:
    found = entry(name, workload, template)
    arg_ops = [(op["op"], op["path"], op["value"]) for op in found.patch if "kv-planner.io" not in json.dumps(op)]
    # The value added is the context the plan proved (the model's default, or the longest that fits).
    fill = {"max_model_len": found.effective_args["max_model_len"]}

    def filled(value: Any) -> Any:
        return [filled(v) for v in value] if isinstance(value, list) else value.format(**fill)

    assert arg_ops == [(op, path, filled(value)) for op, path, value in expected]
    patched = jsonpatch.apply_patch(_document(name, workload), found.patch)
    if schema is not None:
        jsonschema.validate(patched, json.loads((SCHEMAS / schema).read_text()))
    # Reinvocation: reviewing the patched object changes nothing more.
    again = run_check(read_documents(json.dumps(patched), "patched"), policy=POLICY, backend=BACKEND)
    assert [e.patch for e in again.workloads if e.template == template] == [[]]


def test_dynamo_main_container_patch_is_a_valid_container() -> None:
    """DynamoGraphDeployment's ``extraPodSpec.mainContainer`` is a core/v1 Container (dynamo
    deploy/cloud/operator api/v1alpha1 ExtraPodSpec.MainContainer *corev1.Container): the patched
    container validates against Kubernetes' own Container schema."""
    found = entry("dynamo.yaml", "DynamoGraphDeployment/vllm-disagg", "VllmDecodeWorker")
    patched = jsonpatch.apply_patch(_document("dynamo.yaml", "DynamoGraphDeployment/vllm-disagg"), found.patch)
    container = patched["spec"]["services"]["VllmDecodeWorker"]["extraPodSpec"]["mainContainer"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": [container]}}
    container.setdefault("name", "main")
    kubernetes_validate.validate(pod, kubernetes_validate.utils.latest_version(), strict=True)


def test_no_safe_field_becomes_a_warning_naming_the_flags() -> None:
    llmisvc = entry("kserve-llminferenceservices.yaml", "LLMInferenceService/qwen2-7b-instruct-pd", "main")
    assert "KVP034" in llmisvc.codes
    assert not [op for op in llmisvc.patch if "kv-planner.io" not in json.dumps(op)]
    shell = entry("dynamo.yaml", "DynamoGraphDeployment/vllm-disagg-shell", "VllmDecodeWorker")
    assert "KVP034" in shell.codes and any("shell string" in m for m in shell.messages)
    serve = entry("ray.yaml", "RayService/ray-serve-llm", "llms/llm_configs/0")
    assert not [op for op in serve.patch if "kv-planner.io" not in json.dumps(op)]


def test_ray_cluster_gpus_count_for_tensor_parallelism() -> None:
    """vLLM's Ray executor spreads TP over the cluster: TP 2 on a 1-GPU head + 1-GPU worker fits."""
    head = entry("ray.yaml", "RayCluster/vllm-ray", "head")
    assert "KVP003" not in head.codes and head.decision != "deny"
    # The worker runs `ray start` (KubeRay's command), not the image's vLLM entrypoint.
    assert [e.template for e in report("ray.yaml").workloads if e.name == "vllm-ray"] == ["head"]


SCHEMA_OF = {
    "Model": "kubeai-model.json",
    "LLMInferenceService": "kserve-llminferenceservice-{version}.json",
    "InferenceService": "kserve-inferenceservice.json",
    "RayCluster": "ray-raycluster.json",
    "RayService": "ray-rayservice.json",
    "StormService": "aibrix-stormservice.json",
    "RayClusterFleet": "aibrix-rayclusterfleet.json",
    "Workspace": "kaito-workspace.json",
    "InferenceSet": "kaito-inferenceset.json",
}


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.yaml")))
def test_every_patched_object_validates_against_its_crd(name: str) -> None:
    """Each fixture as received and as patched (clamp: the most changes) against its CRD schema."""
    clamp = check_policy({"mutation": "clamp", "validationAction": "Audit", "modelLookup": {"offline": True}})
    documents = read_documents((FIXTURES / name).read_text(), name)
    result = run_check(documents, policy=clamp, backend=BACKEND)
    checked = 0
    for document, patched in zip(documents, result.patched, strict=True):
        schema = SCHEMA_OF.get(document.content.get("kind")) if isinstance(document.content, dict) else None
        if schema is None:
            continue
        version = str(document.content.get("apiVersion", "")).rpartition("/")[2]
        validator = json.loads((SCHEMAS / schema.format(version=version)).read_text())
        jsonschema.validate(document.content, validator)
        jsonschema.validate(patched, validator)
        checked += 1
    assert checked or name in ("images.yaml", "dynamo.yaml")


def test_kubeai_without_the_cluster_config_knows_only_the_count() -> None:
    """Without the ConfigMap the profile `gke-h100` is not one of KubeAI's defaults: 2 GPUs, type and
    release unknown (what the webhook sees: it reads no ConfigMaps)."""
    text = (FIXTURES / "kubeai-cluster-config.yaml").read_text().split("\n---\n", 1)[1]
    alone = run_check(read_documents(text, "model"), policy=POLICY, backend=BACKEND).workloads[0]
    assert (alone.gpu.name, alone.gpu.count, alone.vllm_version) == (None, 2, None)
    assert "KVP042" in alone.codes


def _one(text: str) -> WorkloadEntry:
    report = run_check(read_documents(text, "inline"), policy=POLICY, backend=BACKEND)
    assert len(report.workloads) == 1
    return report.workloads[0]


def test_ray_serve_llm_single_llm_config() -> None:
    """``ray.serve.llm:build_llm_deployment`` takes one ``llm_config`` instead of a list."""
    found = _one(
        """
apiVersion: ray.io/v1
kind: RayService
metadata: {name: one-llm, namespace: ray}
spec:
  serveConfigV2: |
    applications:
    - name: llm
      import_path: ray.serve.llm:build_llm_deployment
      args:
        llm_config:
          model_loading_config: {model_id: qwen, model_source: Qwen/Qwen2.5-7B-Instruct}
          engine_kwargs: {tensor_parallel_size: 2, max_model_len: 8192}
          accelerator_type: A10G
"""
    )
    assert (found.model, found.gpu.name, found.gpu.count) == ("Qwen/Qwen2.5-7B-Instruct", "A10G", 2)
    assert found.args["tensor_parallel_size"] == 2 and found.args["max_model_len"] == 8192


@pytest.mark.parametrize("written", [["--max_length=8192"], ["--max_length", "8192"]], ids=["inline", "split"])
def test_kserve_huggingface_max_length_is_vllms_max_model_len(written: list[str]) -> None:
    """huggingfaceserver's ``--max_length`` has ``dest="max_model_len"`` (python/huggingfaceserver __main__.py):
    it sets vLLM's context. Before, it was set aside as the server's own flag, the model's whole 131072 tokens
    were planned and ``--max-model-len 30720`` was added after it, overriding the user's 8192."""
    args = ["--model_name=llama", "--model_id=meta-llama/Llama-3.1-8B-Instruct", *written]
    text = f"""
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {{name: llama, namespace: kserve, annotations: {{kv-planner.io/vllm-version: "0.10.1"}}}}
spec:
  predictor:
    nodeSelector: {{nvidia.com/gpu.product: NVIDIA-L4}}
    model:
      modelFormat: {{name: huggingface}}
      args: {json.dumps(args)}
      resources: {{limits: {{nvidia.com/gpu: "1"}}}}
"""
    found = _one(text)
    assert found.args["max_model_len"] == 8192 and "KVP020" not in found.codes, found.messages
    assert not any("max-model-len" in str(op.get("value")) for op in found.patch)
    # Clamped where the user wrote it: the value after --max_length (or the inline word) is replaced.
    clamp = check_policy({"validationAction": "Audit", "mutation": "clamp", "modelLookup": {"offline": True}})
    big = text.replace("8192", "131072")
    (lowered,) = run_check(read_documents(big, "isvc"), policy=clamp, backend=BACKEND).workloads
    edits = [
        op for op in lowered.patch if op["path"].startswith("/spec/predictor/model/args/") and op["op"] == "replace"
    ]
    assert "KVP024" in lowered.codes and [op["path"][-1] for op in edits] == [str(len(args) - 1)]


def test_kserve_runtime_missing_from_the_input_is_named() -> None:
    found = _one(
        """
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: custom, namespace: kserve}
spec:
  predictor:
    model:
      runtime: my-vllm-runtime
      modelFormat: {name: pytorch}
      storageUri: hf://Qwen/Qwen2.5-7B-Instruct
"""
    )
    assert found.decision == "skip" and "KVP067" in found.codes
    assert any("my-vllm-runtime is not in the input" in m for m in found.messages)


KUBEAI_HAMI = """
# KubeAI's system config (kubeai-project/kubeai@f442a2cd charts/kubeai/templates/configmap.yaml) with a
# resource profile asking for a HAMi slice (nvidia.com/gpumem MiB, HAMi README) of an L4, and
# manifests/models/qwen2.5-7b-instruct-l4.yaml (same commit, trimmed) pointed at it.
apiVersion: v1
kind: ConfigMap
metadata: {name: kubeai-config, namespace: kubeai}
data:
  system.yaml: |
    resourceProfiles:
      nvidia-l4-hami-10g:
        imageName: nvidia-gpu
        limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "10000"}
        nodeSelector: {cloud.google.com/gke-accelerator: nvidia-l4}
    modelServers:
      VLLM:
        images: {default: vllm/vllm-openai:v0.11.2, nvidia-gpu: vllm/vllm-openai:v0.11.2}
---
apiVersion: kubeai.org/v1
kind: Model
metadata: {name: qwen2.5-7b-instruct-l4, namespace: kubeai}
spec:
  features: [TextGeneration]
  url: hf://Qwen/Qwen2.5-7B-Instruct
  engine: VLLM
  args: [--max-model-len=8192, --max-num-seqs=256]
  resourceProfile: nvidia-l4-hami-10g:1
"""


def _kubeai_hami(profile: str) -> WorkloadEntry:
    text = KUBEAI_HAMI.replace("nvidia-l4-hami-10g:1", profile)
    workloads = run_check(read_documents(text, "kubeai-hami"), policy=POLICY, backend=BACKEND).workloads
    (found,) = [e for e in workloads if e.kind == "Model"]
    return found


def test_kubeai_profile_with_a_hami_slice_is_planned_on_the_slice() -> None:
    """The profile's nvidia.com/gpumem reaches the pod (KubeAI copies every request and limit): 9.8 GiB,
    not the whole L4, so the 7B (14.25 GiB of weights) cannot load. Before: planned on 22 GiB, 0.9 filled."""
    found = _kubeai_hami("nvidia-l4-hami-10g:1")
    assert (found.gpu.name, found.gpu.count) == ("L4", 1)
    assert found.plan is not None and found.plan.sharing is not None
    assert found.plan.sharing.mechanism == "hami" and found.plan.sharing.budget_bytes == 10000 << 20
    # Planned on the slice: the image says no release, so the release leaving the least KV at the low end of
    # its band decides (0.33.0): its startup request fits the slice, the weights do not (KVP001, "exceed 0.92 x
    # 9.8 GiB"); under a V0 release the request itself would not (KVP006).
    assert found.decision == "deny" and {"KVP001", "KVP006"} & set(found.codes)
    assert any("9.8 GiB" in m for m in found.messages if m.startswith(("KVP001", "KVP006")))


def test_kubeai_scales_the_share_with_the_profile_count() -> None:
    """`<profile>:2` multiplies every quantity (model_config.go getModelConfig, q.Mul): 2 GPUs and
    nvidia.com/gpumem 20000, which HAMi reads per GPU (capped at the card)."""
    found = _kubeai_hami("nvidia-l4-hami-10g:2")
    assert found.gpu.count == 2
    assert found.plan is not None and found.plan.sharing is not None
    assert found.plan.sharing.budget_bytes == min(20000 << 20, found.plan.sharing.card_bytes)


def _ray_service(app: str, worker: str = "", workers: int = 2, gpus: int = 4) -> str:
    """A RayService in the shape of ray-project/kuberay@feeaf72f ray-operator/config/samples/
    ray-service.llm-serve.yaml (trimmed): one Serve application, a CPU head, one GPU worker group."""
    indented = "\n".join("    " + line for line in app.strip().splitlines())
    return f"""
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: llm, namespace: ray}}
spec:
  serveConfigV2: |
    applications:
{indented}
  rayClusterConfig:
    headGroupSpec:
      rayStartParams: {{}}
      template:
        spec:
          containers:
          - {{name: ray-head, image: rayproject/ray-llm:2.46.0-py311-cu124, resources: {{limits: {{cpu: "4"}}}}}}
    workerGroupSpecs:
    - groupName: gpu-group
      replicas: {workers}
      rayStartParams: {{}}
      template:
{
        worker
        or '''        spec:
          nodeSelector: {cloud.google.com/gke-accelerator: nvidia-l4}
          containers:
          - name: llm
            image: rayproject/ray-llm:2.46.0-py311-cu124
            resources: {limits: {nvidia.com/gpu: "GPUS"}}'''.replace("GPUS", str(gpus))
    }
"""


def _ray(text: str) -> list[WorkloadEntry]:
    return [e for e in run_check(read_documents(text, "ray"), policy=POLICY, backend=BACKEND).workloads if e.vllm]


DP_APP = """
- name: llm
  import_path: ray.serve.llm:build_dp_openai_app
  args:
    llm_config:
      model_loading_config: {model_id: qwen, model_source: Qwen/Qwen2.5-7B-Instruct}
      accelerator_type: L4
      engine_kwargs: {tensor_parallel_size: 1, data_parallel_size: DP, max_model_len: 8192}
"""


def test_ray_serve_data_parallel_ranks_run_on_the_clusters_gpus() -> None:
    """build_dp_openai_app: data_parallel_size Serve replicas, one engine (DP rank) of TP x PP GPUs each
    (ray python/ray/llm/_internal/serve data_parallel/dp_server.py build_dp_deployment: num_replicas =
    dp_size). TP 1 x DP 2 on 2 workers x 4 L4: no KVP003 (before: "the pod gets 1"), no idle-GPU warning."""
    (found,) = _ray(_ray_service(DP_APP.replace("DP", "2")))
    assert found.args["data_parallel_size"] == 2 and found.gpu.count == 1
    assert "KVP003" not in found.codes and "KVP004" not in found.codes and found.decision != "deny"
    assert "KVP206" in found.codes
    (too_many,) = _ray(_ray_service(DP_APP.replace("DP", "16")))
    assert "KVP003" in too_many.codes and any("gets 8" in m for m in too_many.messages)


def test_ray_serve_first_dp_builder_takes_dp_size_beside_llm_config() -> None:
    """The first build_dp_openai_app (DPServingArgs: llm_config, dp_size): the engine runs with that DP."""
    app = DP_APP.replace(", data_parallel_size: DP", "").replace("    llm_config:", "    dp_size: 2\n    llm_config:")
    (found,) = _ray(_ray_service(app))
    assert found.args["data_parallel_size"] == 2 and "KVP003" not in found.codes


def test_ray_serve_prefill_decode_plans_both_engines() -> None:
    """build_pd_openai_app: prefill_config and decode_config are two LLMConfigs, each its own deployment.
    A 70B on one L4 in each: both denied (before: KVP065, "names no model")."""
    engine = """
      model_loading_config: {model_id: llama, model_source: meta-llama/Llama-3.1-70B-Instruct}
      accelerator_type: L4
      engine_kwargs:
        tensor_parallel_size: 1
        kv_transfer_config: {kv_connector: NixlConnector, kv_role: kv_both}"""
    app = f"""
- name: pd
  import_path: ray.serve.llm:build_pd_openai_app
  args:
    prefill_config:{engine}
    decode_config:{engine}
"""
    found = _ray(_ray_service(app))
    assert [e.template for e in found] == ["pd/prefill_config", "pd/decode_config"]
    for item in found:
        assert item.model == "meta-llama/Llama-3.1-70B-Instruct" and item.decision == "deny"
        assert "KVP001" in item.codes and "KVP202" in item.codes


SERVE_APP = """
- name: llms
  import_path: ray.serve.llm:build_openai_app
  args:
    llm_configs:
    - model_loading_config: {model_id: qwen, model_source: Qwen/Qwen2.5-7B-Instruct}
      accelerator_type: L4
      engine_kwargs: {tensor_parallel_size: 1, max_model_len: 8192}
"""


def test_ray_serve_engine_on_a_hami_worker_gets_the_slice() -> None:
    """The worker pods ask for a 10000 MiB HAMi slice of an L4 (HAMi README): the Serve engine runs there,
    so it is planned on the slice (KVP006), not on the whole card (before: 3953 blocks, allowed)."""
    worker = """        spec:
          schedulerName: hami-scheduler
          nodeSelector: {cloud.google.com/gke-accelerator: nvidia-l4}
          containers:
          - name: llm
            image: rayproject/ray-llm:2.46.0-py311-cu124
            resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "10000"}}"""
    (found,) = _ray(_ray_service(SERVE_APP, worker=worker))
    assert found.plan is not None and found.plan.sharing is not None
    assert found.plan.sharing.mechanism == "hami" and found.plan.sharing.budget_bytes == 10000 << 20
    # Planned on the slice: the image says no release, so the release leaving the least KV at the low end of
    # its band decides (0.33.0): its startup request fits the slice, the weights do not (KVP001, "exceed 0.92 x
    # 9.8 GiB"); under a V0 release the request itself would not (KVP006).
    assert found.decision == "deny" and {"KVP001", "KVP006"} & set(found.codes)
    assert any("9.8 GiB" in m for m in found.messages if m.startswith(("KVP001", "KVP006")))


def test_ray_serve_engine_on_a_tpu_worker_group_is_named_not_planned_on_a_gpu() -> None:
    """A Serve app whose only accelerator group asks for TPU chips (GKE's RayService samples for vLLM on
    TPU: a CPU head, one ``google.com/tpu`` worker group, ``MODEL_ID`` in the app's env): its engine runs
    on the TPU slice, so it is KVP064, not one NVIDIA GPU of unknown type (before: vllm, KVP042)."""
    app = """
- name: llm
  import_path: serve_tpu:model
  runtime_env:
    env_vars: {MODEL_ID: Qwen/Qwen2.5-7B-Instruct, TPU_CHIPS: "8"}
"""
    tpu = """        spec:
          nodeSelector: {cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice}
          containers:
          - name: ray-worker
            image: example.com/vllm-tpu-ray:1
            resources: {limits: {google.com/tpu: "8"}, requests: {google.com/tpu: "8"}}"""
    report = run_check(read_documents(_ray_service(app, worker=tpu), "ray"), policy=POLICY, backend=BACKEND)
    (found,) = report.workloads
    assert not found.vllm and found.decision == "skip" and found.codes == ["KVP064"]
    assert any("google.com/tpu" in m for m in found.messages)
    # The same app on a GPU group beside the TPU one is still planned on the GPU group.
    both = _ray_service(app).replace("    workerGroupSpecs:\n", "    workerGroupSpecs:\n" + _TPU_GROUP)
    (planned,) = _ray(both)
    assert planned.gpu.name == "L4" and "KVP064" not in planned.codes


_TPU_GROUP = """    - groupName: tpu-group
      replicas: 1
      rayStartParams: {}
      template:
        spec:
          containers:
          - {name: tpu, image: example.com/vllm-tpu-ray:1, resources: {limits: {google.com/tpu: "4"}}}
"""


def test_ray_serve_engine_on_shared_workers_reads_their_env_and_annotations() -> None:
    """An MPS limit in the worker's env and a Run:ai fraction on the worker pods reach the Serve engine."""
    mps = """        spec:
          nodeSelector: {cloud.google.com/gke-accelerator: nvidia-l4}
          containers:
          - name: llm
            image: rayproject/ray-llm:2.46.0-py311-cu124
            env: [{name: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, value: 0=8G}]
            resources: {limits: {nvidia.com/gpu: "1"}}"""
    (found,) = _ray(_ray_service(SERVE_APP, worker=mps))
    assert found.plan is not None and found.plan.sharing is not None
    assert found.plan.sharing.mechanism == "mps" and found.plan.sharing.budget_bytes == 8 << 30
    fraction = """        metadata:
          annotations: {gpu-fraction: "0.5"}
        spec:
          nodeSelector: {cloud.google.com/gke-accelerator: nvidia-l4}
          containers:
          - name: llm
            image: rayproject/ray-llm:2.46.0-py311-cu124
            resources: {limits: {nvidia.com/gpu: "1"}}"""
    (runai,) = _ray(_ray_service(SERVE_APP, worker=fraction))
    assert runai.plan is not None and runai.plan.sharing is not None
    assert runai.plan.sharing.mechanism == "fraction"
    assert runai.plan.sharing.budget_bytes == runai.plan.sharing.card_bytes // 2


def test_llmisvc_preset_parallelism_sizes_the_pods_but_is_not_passed_to_vllm() -> None:
    """KServe renders the preset templates from the service's own spec (config_merge.go ReplaceVariables): a
    preset's ``parallelism.tensor: 4`` gives the pods 4 GPUs but vLLM runs TP 1. Its env is merged."""
    found = entry("kserve-llmisvc-presets.yaml", "LLMInferenceService/llama70b-preset-tp", "main")
    assert found.args["max_model_len"] == 16384  # the preset's VLLM_ADDITIONAL_ARGS
    assert found.args["tensor_parallel_size"] is None
    assert {"KVP078", "KVP004", "KVP001"} <= set(found.codes) and found.decision == "deny"
    assert any("not passed to vLLM" in m and "llama70b-tp4" in m for m in found.messages)
    own = entry("kserve-llmisvc-presets.yaml", "LLMInferenceService/llama70b-own-tp", "main")
    assert own.decision != "deny" and "KVP078" not in own.codes


def test_llmisvc_preset_not_read_is_named_and_never_denies() -> None:
    """A preset the reviewer cannot see may set anything: a warning (KVP078), never a deny from a plan made
    without it. The webhook reads no presets: the same service there, with its preset in the cluster."""
    found = entry("kserve-llmisvc-presets.yaml", "LLMInferenceService/llama70b-unread-preset", "main")
    assert found.decision == "warn" and "KVP078" in found.codes and "KVP001" in found.codes
    assert any("tp4-elsewhere" in m and "nothing is denied" in m for m in found.messages)
    assert found.patch == []
    service = _document("kserve-llmisvc-presets.yaml", "LLMInferenceService/llama70b-preset-tp")
    webhook = decide(service, policy=POLICY.for_namespace("llm"), backend=BACKEND)
    assert webhook.decision == "warn" and webhook.patch == []
    assert any("reads no LLMInferenceServiceConfig" in f.message for f in webhook.findings)


def test_llmisvc_preset_is_read_with_its_services() -> None:
    preset = entry("kserve-llmisvc-presets.yaml", "LLMInferenceServiceConfig/vllm-sh")
    assert preset.decision == "skip" and preset.codes == ["KVP069"]
    assert "planner check reads it with each LLMInferenceService" in preset.messages[0]
    assert "webhook reads no presets" in preset.messages[0]


def test_llmisvc_inline_command_replaces_the_presets() -> None:
    """``spec.template.containers[main].command/args`` replace the preset's (strategic merge replaces lists
    without a merge key): the user's TP 2 is planned, and the 70B fits on two A100-80GB."""
    found = entry("kserve-llmisvc-presets.yaml", "LLMInferenceService/llama70b-inline", "main")
    assert found.decision not in ("deny", "skip")
    assert "KVP001" not in found.codes and "KVP004" not in found.codes


def test_llmisvc_expert_parallelism_as_the_data_parallel_preset_renders_it() -> None:
    """config-llm-worker-data-parallel.yaml: ``{{- if .Spec.Parallelism.Expert }}--enable-expert-parallel``,
    ``--data-parallel-size``, ``--data-parallel-size-local``; the LeaderWorkerSet has data / dataLocal pods."""
    document = _document("kserve-llmisvc-presets.yaml", "LLMInferenceService/deepseek-r1-dp-ep")
    view = llmisvc.read(document).views[0]
    assert view.pod_spec is not None
    container = view.pod_spec["containers"][0]
    words = [*container["command"], *container["args"]]
    assert words[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-R1-0528"]
    assert "--enable-expert-parallel" in words
    assert words[words.index("--data-parallel-size") + 1] == "32"
    assert words[words.index("--data-parallel-size-local") + 1] == "8"
    assert (view.template.group_size, view.group_gpus) == (4, 32)
    found = entry("kserve-llmisvc-presets.yaml", "LLMInferenceService/deepseek-r1-dp-ep", "main")
    assert found.decision != "deny" and "KVP003" not in found.codes and "KVP001" not in found.codes
    # Without expert parallelism each GPU would hold every expert: 671B does not fit on an H200.
    document["spec"]["parallelism"]["expert"] = False
    dense = run_check(read_documents(json.dumps(document), "dense"), policy=POLICY, backend=BACKEND).workloads[0]
    assert dense.decision == "deny" and "KVP001" in dense.codes


def test_llmisvc_merge_is_kserves_strategic_merge() -> None:
    base = {
        "parallelism": {"tensor": 2, "expert": True},
        "template": {
            "nodeSelector": {"a": "1"},
            "containers": [
                {"name": "main", "command": ["bash", "-c", "x"], "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "s"},
            ],
        },
    }
    override = {
        "parallelism": {"expert": False, "data": 4},  # false is omitted from KServe's patch: expert stays
        "template": {
            "nodeSelector": {"b": "2"},
            "containers": [{"name": "main", "command": ["sh"], "args": [], "env": [{"name": "B", "value": "2"}]}],
        },
    }
    merged = llmisvc.merge(base, override)
    assert merged["parallelism"] == {"tensor": 2, "expert": True, "data": 4}
    assert merged["template"]["nodeSelector"] == {"a": "1", "b": "2"}
    main, sidecar = merged["template"]["containers"]
    assert main["command"] == ["sh"] and "args" not in main  # replaced; an empty list is unset
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert sidecar == {"name": "sidecar", "image": "s"}


# (file, workload, template, where the plan annotations are written: None = nowhere, KVP079)
PLAN_RECORDS: list[tuple[str, str, str, str | None]] = [
    # KServe copies spec.annotations / spec.prefill.annotations to each role's pods (utils.PropagateMap)
    ("kserve-llminferenceservices.yaml", "LLMInferenceService/qwen2-7b-instruct-pd", "main", "/spec/annotations"),
    (
        "kserve-llminferenceservices.yaml",
        "LLMInferenceService/qwen2-7b-instruct-pd",
        "prefill",
        "/spec/prefill/annotations",
    ),
    # spec.predictor.annotations reach the predictor's pods only (the InferenceService's reach every component)
    ("kserve-inferenceservices.yaml", "InferenceService/qwen-chat", "predictor", "/spec/predictor/annotations"),
    # Dynamo adds a service's extraPodMetadata.annotations to its pods: each worker records its own plan
    ("dynamo.yaml", "DynamoGraphDeployment/vllm-disagg", "VllmDecodeWorker", "/spec/services/VllmDecodeWorker/"),
    ("dynamo.yaml", "DynamoGraphDeployment/vllm-disagg", "VllmPrefillWorker", "/spec/services/VllmPrefillWorker/"),
    # KubeAI copies no Model annotation to its pods (annotationsForModel): nowhere to write, said with KVP079
    # (Ray Serve LLM: test_several_ray_serve_engines_are_not_recorded_as_the_first)
    ("kubeai-models.yaml", "Model/qwen2.5-7b-instruct-l4", "model", None),
]


@pytest.mark.parametrize(
    ("name", "workload", "template", "where"), PLAN_RECORDS, ids=[f"{r[1]}:{r[2]}" for r in PLAN_RECORDS]
)
def test_plan_is_recorded_where_the_platform_copies_it_to_pods(
    name: str, workload: str, template: str, where: str | None
) -> None:
    found = entry(name, workload, template)
    ops = [op for op in found.patch if "kv-planner.io" in json.dumps(op)]
    if where is None:
        assert ops == [] and "KVP079" in found.codes and "KVP025" not in found.codes
        assert any("plan not recorded" in m for m in found.messages)
    else:
        assert ops and all(op["path"].startswith(where) for op in ops), ops
        assert "KVP033" not in found.codes and "KVP079" not in found.codes
        assert not any(op["path"].startswith("/metadata") for op in ops)


def test_several_ray_serve_engines_are_not_recorded_as_the_first() -> None:
    """Two engines in one RayService: before, the RayService's own annotations got the first engine's
    blocks (KVP033 for the second), where no pod reads them."""
    report = run_check(
        read_documents(
            """
apiVersion: ray.io/v1
kind: RayService
metadata: {name: two-llms, namespace: ray}
spec:
  serveConfigV2: |
    applications:
    - name: llms
      import_path: ray.serve.llm:build_openai_app
      args:
        llm_configs:
        - model_loading_config: {model_id: qwen, model_source: Qwen/Qwen2.5-7B-Instruct}
          engine_kwargs: {tensor_parallel_size: 1, max_model_len: 8192}
          accelerator_type: L4
        - model_loading_config: {model_id: llama, model_source: meta-llama/Llama-3.1-8B-Instruct}
          engine_kwargs: {tensor_parallel_size: 2, max_model_len: 16384}
          accelerator_type: L4
""",
            "two",
        ),
        policy=POLICY,
        backend=BACKEND,
    )
    assert len(report.workloads) == 2
    for found in report.workloads:
        assert "KVP079" in found.codes and "KVP033" not in found.codes
        assert not [op for op in found.patch if "kv-planner.io" in json.dumps(op)]


def test_annotation_parents_in_a_spec_do_not_open_the_spec() -> None:
    """The patch check lets kv-planner create a missing annotations map, but a parent that exists (the
    LLMInferenceService's /spec) is not a prefix under which anything may change."""
    obj = {"spec": {"model": {}}}
    parents = {"/spec", "/spec/annotations"}
    prefixes = ["/spec", "/spec/annotations", "/spec/annotations/kv-planner.io~1planned-num-gpu-blocks"]
    assert decide_module._tighten(obj, prefixes, parents) == prefixes[1:]


def test_llmisvc_own_command_that_is_not_vllm_is_not_planned() -> None:
    """kserve/kserve@aaac4e29 docs/samples/llmisvc/precise-prefix-kv-cache-routing/
    llm-inference-service-opt-125m-cpu-kv-cache-routing-simulator.yaml (minimal shape): main runs llm-d's
    inference simulator; it was planned as ``vllm serve facebook/opt-125m``."""
    found = _one(
        """
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata: {name: precise-prefix-test}
spec:
  model: {uri: hf://facebook/opt-125m, name: opt-125m}
  template:
    containers:
      - name: main
        image: ghcr.io/llm-d/llm-d-inference-sim:v0.10.0
        command: ["/app/llm-d-inference-sim"]
        args: [--port, "8000", --model, "{{ .Spec.Model.Name }}", --zmq-endpoint,
               "tcp://{{ ChildName .ObjectMeta.Name `-epp-service` }}:5557"]
"""
    )
    assert (found.decision, found.codes) == ("skip", ["KVP060"])


def test_llmisvc_model_name_from_a_preset_wins() -> None:
    """combineBaseRefsConfig: a preset's spec.model.name replaces the service's (the model in a pvc://)."""
    report = run_check(
        read_documents(
            """
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceServiceConfig
metadata: {name: qwen-name, namespace: llm}
spec:
  model: {name: Qwen/Qwen2.5-7B-Instruct}
---
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata: {name: chat, namespace: llm}
spec:
  model: {uri: "pvc://models/qwen", name: chat-model}
  baseRefs: [{name: qwen-name}]
  template:
    containers:
      - name: main
        resources: {limits: {nvidia.com/gpu: "1"}}
""",
            "pvc",
        ),
        policy=POLICY,
        backend=BACKEND,
    )
    service = next(e for e in report.workloads if e.kind == "LLMInferenceService")
    assert service.model == "Qwen/Qwen2.5-7B-Instruct" and "KVP078" not in service.codes


def _ray_serve(kwargs: str, image: str) -> str:
    return f"""
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: llm, namespace: ray}}
spec:
  serveConfigV2: |
    applications:
    - name: llm
      import_path: ray.serve.llm:build_openai_app
      args:
        llm_configs:
        - model_loading_config: {{model_id: qwen, model_source: Qwen/Qwen2.5-7B-Instruct}}
          engine_kwargs: {{tensor_parallel_size: 1, max_model_len: 16384{kwargs}}}
          accelerator_type: L4
  rayClusterConfig:
    headGroupSpec:
      rayStartParams: {{}}
      template: {{spec: {{containers: [{{name: head, image: "{image}"}}]}}}}
    workerGroupSpecs:
    - groupName: gpu
      replicas: 1
      rayStartParams: {{}}
      template:
        spec:
          containers:
          - {{name: worker, image: "{image}", resources: {{limits: {{nvidia.com/gpu: "1"}}}}}}
"""


def _planned_blocks(found: WorkloadEntry) -> int:
    import re

    (blocks,) = re.findall(r"\((\d+) KV blocks\)", " ".join(found.messages))
    return int(blocks)


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.20.2", "example.com/ray-llm:2.49"], ids=str)
def test_ray_serve_false_engine_kwarg_is_dest_false(image: str) -> None:
    """Ray gives engine_kwargs to ``AsyncEngineArgs(**kwargs)``, not to vLLM's parser: ``enable_chunked_prefill:
    false`` turns chunked prefill off in every release that keeps an explicit False (0.11.1+), so V1 profiles a
    max_model_len batch at startup and the KV cache is smaller. Before, a ``false`` was dropped as a default word:
    planned with chunked prefill on (0.20.2 on an L4: 4651 blocks where vLLM would have 2842), an over-estimate.
    The release is known (0.20.2; no one word spells False in 0.8.5, 0.10.x and 0.20) or unknown (planned over
    every release): no "vLLM would reject" finding either way."""
    on = _one(_ray_serve("", image))
    off = _one(_ray_serve(", enable_chunked_prefill: false", image))
    assert off.effective_args["max_num_batched_tokens"] == 16384, off.messages
    assert _planned_blocks(off) < _planned_blocks(on)
    assert "KVP043" not in off.codes and off.vllm_version == on.vllm_version


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.8.5", "vllm/vllm-openai:v0.10.1", "vllm/vllm-openai:v0.11.0"])
def test_v1_up_to_0_11_0_keeps_chunked_prefill_on_whatever_was_asked(image: str) -> None:
    """Up to 0.11.0, V1 sets ``enable_chunked_prefill = True`` for every non-pooling model ("V1 always uses chunked
    prefills", engine/arg_utils.py ``_set_default_args(_v1)``): a ``false`` changes nothing there, and planning it
    as a max_model_len batch under-stated the KV cache (0.8.5 on an L4: 2571 blocks planned, 4953 with chunked
    prefill on, as vLLM runs it)."""
    on = _one(_ray_serve("", image))
    off = _one(_ray_serve(", enable_chunked_prefill: false", image))
    assert off.effective_args["max_num_batched_tokens"] == on.effective_args["max_num_batched_tokens"] == 2048
    assert _planned_blocks(off) == _planned_blocks(on)
    assert "KVP043" not in off.codes


def test_ray_serve_true_engine_kwarg_is_dest_true_in_every_release() -> None:
    """``enable_chunked_prefill: true`` is dest = True; 0.10.1's ``--enable-chunked-prefill`` takes a value, so
    the bare word it was written as before read as a command line vLLM 0.10.1 would reject (KVP043)."""
    found = _one(_ray_serve(", enable_chunked_prefill: true", "vllm/vllm-openai:v0.10.1"))
    plain = _one(_ray_serve("", "vllm/vllm-openai:v0.10.1"))
    assert "KVP043" not in found.codes, found.messages
    assert _planned_blocks(found) == _planned_blocks(plain)
