"""A vLLM image with a GPU whose command kv-planner cannot read is a warning (KVP037), never "no vLLM
container": production-stack's Ray head runs a script copied from a ConfigMap, and a check that said
KVP060 there told the user the opposite of the truth."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()
GPU = {"limits": {"nvidia.com/gpu": "1"}}


def deployment(*containers: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "server", "namespace": "llm", "annotations": {"kv-planner.io/gpu": "L4"}},
            "spec": {
                "selector": {"matchLabels": {"app": "s"}},
                "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": list(containers)}},
            },
        }
    )


def entries(text: str) -> list[WorkloadEntry]:
    return run_check(read_documents(text, "test.yaml"), policy=POLICY, backend=BACKEND).workloads


SCRIPT_FILE = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.10.1.1",
    "command": ["/bin/bash", "/scripts/start.sh"],
    "resources": GPU,
}
# production-stack helm/ (values-15 RayCluster head): copies the script, runs it in the background.
COPIED_SCRIPT = {
    "name": "vllm-ray-head",
    "image": "lmcache/vllm-openai:latest",
    "command": [
        '/bin/bash -c "\ncp /entrypoint/vllm-entrypoint.sh $HOME/vllm-entrypoint.sh &&\n'
        'chmod +x $HOME/vllm-entrypoint.sh &&\n$HOME/vllm-entrypoint.sh &\necho "Running vllm in the background.""'
    ],
    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
}
DRA_CLAIM = {**SCRIPT_FILE, "resources": {"claims": [{"name": "gpu"}]}}


@pytest.mark.parametrize("container", [SCRIPT_FILE, COPIED_SCRIPT, DRA_CLAIM], ids=["file", "copied", "dra"])
def test_a_vllm_image_with_a_gpu_and_an_unreadable_command_warns(container: dict[str, Any]) -> None:
    (entry,) = entries(deployment(container))
    assert entry.decision == "skip" and entry.codes == ["KVP037"]
    (finding,) = entry.findings
    assert finding.severity == "warn" and finding.fix is not None
    assert container["name"] in finding.message and "cannot read" in finding.message
    assert "\n" not in finding.message and len(finding.message) < 220  # the command, shown on one line, cut


@pytest.mark.parametrize(
    "container",
    [
        # LMCache's cache server runs in the vLLM image, without a GPU: a helper, not a server to plan.
        {"name": "cache", "image": "lmcache/vllm-openai:latest", "command": ["lmcache_server", "0.0.0.0", "81"]},
        # Not a vLLM image: nothing says it is vLLM.
        {"name": "app", "image": "example.com/llm-server:1", "command": ["/start.sh"], "resources": GPU},
        # A multi-node group's Ray worker (LeaderWorkerSet, KubeRay): its GPUs serve the leader's vLLM.
        {
            "name": "worker",
            "image": "vllm/vllm-openai:v0.19.0",
            "command": ["sh", "-c"],
            "args": ["ray start --block --address=$(LWS_LEADER_ADDRESS):6379"],
            "resources": GPU,
        },
        {
            "name": "worker",
            "image": "vllm/vllm-openai:v0.19.0",
            "command": ["ray", "start", "--block"],
            "resources": GPU,
        },
        {
            "name": "worker",
            "image": "aibrix/vllm-openai:v0.7.3.self.post1",
            "command": ["/bin/bash", "-lc", "--"],
            "args": ["ulimit -n 65536; echo head; $KUBERAY_GEN_RAY_START_CMD;"],
            "resources": GPU,
        },
        {
            "name": "worker",
            "image": "vllm/vllm-openai:v0.19.0",
            "command": ["sh", "-c"],
            "args": [
                "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker "
                "--ray_address=$(LWS_LEADER_ADDRESS)"
            ],
            "resources": GPU,
        },
    ],
    ids=["no-gpu", "other-image", "ray-worker", "ray-worker-argv", "kuberay-worker", "lws-example-worker"],
)
def test_other_containers_stay_no_vllm_container(container: dict[str, Any]) -> None:
    (entry,) = entries(deployment(container))
    assert entry.decision == "skip" and entry.codes == ["KVP060"]


@pytest.mark.parametrize(
    "container",
    [
        # A TPU build running a script: not planned (the planner models GPUs), but named, not KVP060.
        {
            "name": "tpu",
            "image": "vllm/vllm-tpu:latest",
            "command": ["/start.sh"],
            "resources": {"limits": {"google.com/tpu": "4"}},
        },
        # An image without "vllm" in its name handed vLLM's own flags, on an Intel GPU (llm-d-modelservice's
        # examples/output-xpu.yaml shape with another registry's image).
        {
            "name": "vllm",
            "image": "registry.example.com/xpu-serving:1",
            "args": ["--model", "Qwen/Qwen3-0.6B", "--max-model-len", "4096"],
            "resources": {"limits": {"gpu.intel.com/xe": "1"}},
        },
    ],
    ids=["tpu-script", "xpu-flags"],
)
def test_a_server_on_a_non_gpu_accelerator_is_named(container: dict[str, Any]) -> None:
    (entry,) = entries(deployment(container))
    assert entry.decision == "skip" and entry.codes == ["KVP064"]


CPU_SERVER = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.10.1",  # (KServe's huggingface runtime on CPU names no CPU image either)
    "args": ["--model", "Qwen/Qwen2-0.5B-Instruct", "--max-model-len", "2048"],
    "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "4"}, {"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "auto"}],
    "resources": {"limits": {"cpu": "8", "memory": "16Gi"}},
}


def test_vllm_on_the_cpu_backend_is_named_not_planned_as_a_gpu() -> None:
    """The env only vLLM's CPU backend reads, on a container without a GPU (KServe's docs: qwen-cpu): KVP064,
    not "no GPU request" and "GPU type unknown: set kv-planner.io/gpu" (before: KVP005, KVP042)."""
    (entry,) = entries(deployment(CPU_SERVER))
    assert entry.decision == "skip" and entry.codes == ["KVP064"], entry.messages
    assert "VLLM_CPU_KVCACHE_SPACE" in entry.messages[0]
    (gpu,) = entries(deployment({**CPU_SERVER, "resources": GPU}))  # with a GPU the variable means nothing
    assert gpu.vllm and "KVP064" not in gpu.codes


def test_vllm_flags_for_another_images_entrypoint_on_a_gpu_warn() -> None:
    """No "vllm" in the image's name, no command, vLLM's own flags in args: what the entrypoint runs is
    not known, so it is a warning (KVP037), not "no vLLM container"."""
    container = {
        "name": "server",
        "image": "registry.example.com/serving:1",
        "args": ["--model", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.9"],
        "resources": GPU,
    }
    (entry,) = entries(deployment(container))
    assert entry.decision == "skip" and entry.codes == ["KVP037"]


def test_beside_a_vllm_container_it_is_named_and_the_server_still_planned() -> None:
    server = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.10.1.1",
        "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
        "resources": GPU,
    }
    found = entries(deployment(server, {**SCRIPT_FILE, "name": "second"}))
    assert [e.container for e in found] == ["vllm"]
    assert found[0].decision != "skip" and "KVP037" in found[0].codes
    assert any("second" in message for message in found[0].messages)


def pod_with_sidecar(sidecar: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": "llm"},
            "spec": {"initContainers": [sidecar], "containers": [{"name": "app", "image": "example.com/app:1"}]},
        }
    )


@pytest.mark.parametrize(
    "sidecar",
    [
        {
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.19.0",
            "restartPolicy": "Always",
            "args": ["meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "32768"],
            "resources": GPU,
        },
        {
            "name": "vllm",
            "image": "example.com/runtime:2",
            "restartPolicy": "Always",
            "command": ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"],
        },
    ],
    ids=["vllm-image", "vllm-command"],
)
def test_vllm_in_a_native_sidecar_is_a_warning(sidecar: dict[str, Any]) -> None:
    # A native sidecar (Kubernetes 1.29+) runs for the pod's whole life: a server, not a setup step.
    (entry,) = entries(pod_with_sidecar(sidecar))
    assert entry.decision == "skip" and entry.codes == ["KVP038"]
    assert entry.findings[0].severity == "warn"


def test_an_init_container_that_ends_is_not_a_server() -> None:
    init = {"name": "fetch", "image": "vllm/vllm-openai:v0.19.0", "command": ["vllm", "serve", "x"]}
    (entry,) = entries(pod_with_sidecar(init))
    assert entry.codes == ["KVP060"]


# -- shell scripts with subshells and brace groups ---------------------------------------------------------------

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def a100_server(script: str, image: str = "vllm/vllm-openai:v0.11.0") -> str:
    pod = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
        "containers": [{"name": "vllm", "image": image, "command": ["bash", "-c", script], "resources": GPU}],
    }
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "server", "namespace": "llm"},
            "spec": {
                "selector": {"matchLabels": {"app": "s"}},
                "template": {"metadata": {"labels": {"app": "s"}}, "spec": pod},
            },
        }
    )


def enforced(text: str) -> WorkloadEntry:
    policy = check_policy({"validationAction": "Enforce", "modelLookup": {"offline": True, "timeoutSeconds": 1}})
    (entry,) = run_check(read_documents(text, "test.yaml"), policy=policy, backend=BACKEND).workloads
    return entry


@pytest.mark.parametrize(
    ("script", "context"),
    [
        (f"(exec vllm serve {LLAMA} --max-model-len 131072)", 131072),  # was KVP037: `(exec` read as the program
        (f"( exec vllm serve {LLAMA} --max-model-len 131072 )", 131072),  # was KVP043: `)` read as vLLM's argument
        (f"{{ vllm serve {LLAMA} --max-model-len 8192; }}", 8192),
        (f"cd /x && (vllm serve {LLAMA} --max-model-len 8192)", 8192),  # was KVP037
        (f"(cd /x; exec vllm serve {LLAMA} --max-model-len 8192) &", 8192),  # was KVP043: invalid value '8192)'
        (f"( vllm serve {LLAMA} --max-model-len 8192 ) | tee log", 8192),  # was KVP043
    ],
)
def test_a_server_in_a_subshell_or_brace_group_is_checked(script: str, context: int) -> None:
    entry = enforced(a100_server(script))
    assert entry.decision in ("mutate", "warn") and entry.model == LLAMA
    assert not {"KVP037", "KVP043", "KVP039"} & set(entry.codes), entry.messages
    assert entry.args.get("max_model_len") == context


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (f"(exec vllm serve {LLAMA} --max-model-len 131072", "`(` is never closed"),
        (f"exec vllm serve {LLAMA} )", "`)` without its `(`"),
        ("( " * 40 + f"exec vllm serve {LLAMA}" + " )" * 40, "nested deeper than 32"),
    ],
    ids=["unclosed", "unopened", "too-deep"],
)
def test_a_script_bash_would_refuse_or_nested_past_the_bound_is_cannot_read(script: str, why: str) -> None:
    for image in ("vllm/vllm-openai:v0.11.0", "example.com/serving:1"):  # (any image: the script names vLLM)
        entry = enforced(a100_server(script, image))
        assert entry.decision == "skip" and entry.codes == ["KVP037"], image
        (finding,) = entry.findings
        assert finding.severity == "warn" and why in finding.message and len(finding.message) < 300
