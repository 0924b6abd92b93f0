"""Accelerators the planner does not model are named (KVP064), never planned as an NVIDIA GPU nor skipped
silently; vLLM images without "vllm" in their names; pod templates inside lists (JobSet, Volcano Job).

Shapes from the projects' own manifests: llm-d-incubation/llm-d-modelservice@3051935e examples/output-xpu.yaml
and output-rebellions-atom.yaml (vLLM flags in args, image ghcr.io/llm-d/llm-d-xpu or vllm-rbln,
gpu.intel.com/xe or rebellions.ai/ATOM), ai-dynamo/dynamo@53ed79b7 examples/backends/vllm/deploy/
resourceclaimtemplate_intel_gpu.yaml (DRA class gpu.intel.com), kubernetes-sigs/jobset (replicatedJobs[].
template.spec.template) and Volcano's batch.volcano.sh/v1alpha1 Job (tasks[].template).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from planner.k8s.platforms.base import non_gpu_resource
from planner.k8s.workloads import MAX_SEARCH_TEMPLATES, SEARCH_NODES, pod_templates
from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

BACKEND = CoreBackend()
# As the review ran it: Enforce, mutation fill, a default GPU for pods that name none.
FILL = check_policy({"mutation": "fill", "defaultGpu": "L4", "modelLookup": {"offline": True, "timeoutSeconds": 1}})
VLLM_ARGS = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000"]


def entries(*objects: dict[str, Any], policy: Any = FILL) -> list[WorkloadEntry]:
    text = yaml.safe_dump_all(objects)
    return run_check(read_documents(text, "test.yaml"), policy=policy, backend=BACKEND).workloads


def deployment(container: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": "llm"},
        "spec": {
            "selector": {"matchLabels": {"app": "s"}},
            "template": {"metadata": {"labels": {"app": "s"}}, "spec": {**(pod or {}), "containers": [container]}},
        },
    }


NON_GPU = [
    "gpu.intel.com/xe",
    "gpu.intel.com/i915",
    "rebellions.ai/ATOM",
    "huawei.com/Ascend910B3",
    "habana.ai/gaudi",
    "aws.amazon.com/neuroncore",
    "google.com/tpu",
    "furiosa.ai/rngd",
    "tenstorrent.com/n300",
    "cambricon.com/vmlu",
    "hygon.com/dcunum",
    "iluvatar.ai/vgpu",
    "metax-tech.com/sgpu",
    "mthreads.com/vgpu",
    "enflame.com/vgcu",
    "kunlunxin.com/xpu",
    "qualcomm.com/qaic",
    "example.com/npu",  # the class: an NPU, whoever publishes it
]


@pytest.mark.parametrize("resource", NON_GPU)
def test_non_gpu_accelerators_are_named_never_planned(resource: str) -> None:
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.10.0",
        "args": VLLM_ARGS,
        "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
    }
    (found,) = entries(deployment(container))
    assert (found.decision, found.codes, found.patch) == ("skip", ["KVP064"], [])
    assert resource in found.messages[0] and found.gpu.name is None


@pytest.mark.parametrize(
    "resource",
    [
        *("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/gpumem", "nvidia.com/mig-1g.10gb", "volcano.sh/vgpu-number"),
        *("aliyun.com/gpu-mem", "tencent.com/vcuda-core", "rdma/hca", "vpc.amazonaws.com/efa", "cpu", "memory"),
    ],
)
def test_gpus_their_shares_and_other_resources_are_not_accelerators_of_another_kind(resource: str) -> None:
    assert not non_gpu_resource(resource)


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/llm-d/llm-d-xpu:latest",
        "intel/vllm:0.10.2-xpu",
        "vllm/vllm-openai-xpu:v0.26.0",
        "repo.rebellions.ai/rebellions/vllm-rbln-rhel9:3.3",
        "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.9.1",
        "quay.io/ascend/vllm-ascend:v0.9.1",
        "ghcr.io/llm-d/llm-d-cpu:v0.4.0",
    ],
)
def test_non_gpu_builds_are_named_by_their_image(image: str) -> None:
    """An XPU / NPU / CPU build with no accelerator resource in the manifest (DRA, a node pool) is
    still not planned on the policy's default NVIDIA GPU."""
    (found,) = entries(deployment({"name": "vllm", "image": image, "args": VLLM_ARGS}))
    assert (found.decision, found.codes, found.patch) == ("skip", ["KVP064"], [])


def test_rebellions_atom_is_not_planned_as_the_default_l4() -> None:
    """llm-d-modelservice output-rebellions-atom.yaml: KVP005 + KVP042, and with the policy's defaultGpu
    L4 a plan annotation "gpu": "L4" and --max-model-len 40960 written into an NPU's pod."""
    container = {
        "name": "vllm",
        "image": "repo.rebellions.ai/rebellions/vllm-rbln-rhel9:3.3",
        "args": ["--model", "Qwen/Qwen3-1.7B", "--port", "8200", "--max-num-seqs", "4"],
        "resources": {"limits": {"rebellions.ai/ATOM": "1"}, "requests": {"rebellions.ai/ATOM": "1"}},
    }
    (found,) = entries(deployment(container))
    assert (found.decision, found.codes, found.patch) == ("skip", ["KVP064"], [])
    assert "L4" not in json.dumps(found.model_dump(mode="json"))


def test_llm_d_serving_images_run_vllm() -> None:
    """llm-d's serving images start vLLM's OpenAI server (llm-d/llm-d docker/Dockerfile.cuda ENTRYPOINT):
    args only, no "vllm" in the name."""
    container = {
        "name": "vllm",
        "image": "ghcr.io/llm-d/llm-d-cuda:v0.4.0",
        "args": VLLM_ARGS,
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    (found,) = entries(deployment(container, {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}))
    assert (found.vllm, found.model, found.gpu.name) == (True, "Qwen/Qwen2.5-7B-Instruct", "L4")
    assert found.decision == "mutate"
    # llm-d's scheduler and simulator images are not vLLM.
    for image in ("ghcr.io/llm-d/llm-d-inference-scheduler:v0.4.0", "ghcr.io/llm-d/llm-d-inference-sim:latest"):
        (other,) = entries(deployment({"name": "x", "image": image, "args": ["--port", "9002"]}))
        assert other.codes == ["KVP060"]


def test_vllm_serve_in_args_of_an_image_that_runs_its_arguments() -> None:
    """``args: [vllm, serve, ...]`` and no command: the image's entrypoint (``exec "$@"``) runs vLLM."""
    container = {
        "name": "server",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "args": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    (found,) = entries(deployment(container, {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}))
    assert (found.vllm, found.model, found.decision) == (True, "Qwen/Qwen2.5-7B-Instruct", "mutate")
    added = [op for op in found.patch if "/containers/0/args" in op["path"]]
    assert added and all(op["path"].endswith("/args/-") for op in added)


def test_dra_claim_of_a_non_gpu_device_class() -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-template", "namespace": "llm"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.intel.com"}}]}}},
    }
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.10.0",
        "args": VLLM_ARGS,
        "resources": {"claims": [{"name": "gpu"}]},
    }
    pod = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]}
    found = [e for e in entries(template, deployment(container, pod)) if e.kind == "Deployment"]
    assert [(e.decision, e.codes) for e in found] == [("skip", ["KVP064"])]


# --- pod templates inside lists ---------------------------------------------------------------------

SERVER = {
    "name": "inference-server",
    "image": "docker.io/vllm/vllm-openai:v0.10.0",
    "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    "args": ["--model=meta-llama/Llama-3.1-70B-Instruct", "--port=8000"],
    "resources": {"limits": {"nvidia.com/gpu": "1"}},
}
POD = {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}, "containers": [SERVER]}
JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "vllm-batch"},
    "spec": {
        "replicatedJobs": [
            {"name": "server", "replicas": 1, "template": {"spec": {"parallelism": 1, "template": {"spec": POD}}}}
        ]
    },
}
VOLCANO = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "vllm"},
    "spec": {"schedulerName": "volcano", "tasks": [{"name": "server", "replicas": 1, "template": {"spec": POD}}]},
}


@pytest.mark.parametrize(
    ("obj", "template"),
    [(JOBSET, "replicatedJobs/0/template/spec/template"), (VOLCANO, "tasks/0/template")],
    ids=["jobset", "volcano-job"],
)
def test_templates_inside_lists_are_planned(obj: dict[str, Any], template: str) -> None:
    """Before: KVP063 "mentions vLLM but kv-planner has no reader" (the Volcano Job was even taken for
    batch/v1's Job, whose template is at spec.template)."""
    (found,) = entries(obj)
    assert (found.template, found.model, found.gpu.name) == (template, "meta-llama/Llama-3.1-70B-Instruct", "L4")
    assert found.decision == "deny" and "KVP001" in found.codes


def test_a_template_in_a_list_is_patched_in_place() -> None:
    small = {**SERVER, "args": ["--model=Qwen/Qwen2.5-7B-Instruct", "--port=8000"]}
    obj = json.loads(json.dumps(JOBSET))
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"] = [small]
    (found,) = entries(obj)
    paths = {op["path"] for op in found.patch if "/containers/" in op["path"]}
    assert paths == {"/spec/replicatedJobs/0/template/spec/template/spec/containers/0/args/-"}


def _custom(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Batch", "metadata": {"name": "b"}, "spec": spec}


def test_list_search_is_bounded() -> None:
    """Untrusted lists: at most MAX_SEARCH_TEMPLATES templates (the rest named), SEARCH_NODES nodes
    visited, each once; a template past them is not found, and the search stays fast."""
    many = _custom(
        {"tasks": [{"template": {"spec": {"containers": [SERVER]}}} for _ in range(MAX_SEARCH_TEMPLATES + 5)]}
    )
    assert len(pod_templates(many)) == MAX_SEARCH_TEMPLATES + 1  # one past the bound: the caller says so
    found = entries(many)
    assert sum(e.vllm for e in found) == MAX_SEARCH_TEMPLATES
    assert any("KVP063" in e.codes and "more than" in " ".join(e.messages) for e in found)
    filler: list[Any] = [{"x": [{}]} for _ in range(SEARCH_NODES)]
    hidden = _custom({"a": filler, "z": [{"template": {"spec": {"containers": [SERVER]}}}]})
    started = time.perf_counter()
    assert pod_templates(hidden) == []
    assert time.perf_counter() - started < 2.0


def test_builtin_kinds_keep_their_place() -> None:
    """batch/v1 Job's template is at spec.template (a `tasks` list there is not read)."""
    job = {**VOLCANO, "apiVersion": "batch/v1"}
    assert pod_templates(job) == []
    job["spec"] = {"template": {"spec": POD}}
    assert [ref.spec_path for ref in pod_templates(job)] == [("spec", "template", "spec")]
