"""llm-d dual pods: the vLLM server of a server-requesting pod is the pod its server-patch annotation makes
(planner/k8s/platforms/dualpods.py). Shapes from llm-d-incubation/llm-d-modelservice@3051935e
examples/output-requester.yaml (a ReplicaSet of requesters, the server in ``dual-pod.llm-d.ai/server-patch``)
and llm-d-incubation/llm-d-fast-model-actuation ``pkg/api`` (``dual-pods.llm-d.ai/server-patch`` patches the
container ``inference-server``); written here, trimmed, with an L4 node selector."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

POLICY = check_policy({"validationAction": "Enforce", "modelLookup": {"offline": True, "timeoutSeconds": 1}})
BACKEND = CoreBackend()
BIG = "meta-llama/Llama-3.1-70B-Instruct"  # never fits one L4 (KVP001)


def requester(
    patch: str | None, key: str = "dual-pods.llm-d.ai/server-patch", extra: dict[str, str] | None = None
) -> str:
    annotations = {"dual-pods.llm-d.ai/admin-port": "8081", **(extra or {})}
    if patch is not None:
        annotations[key] = patch
    stub = {
        "name": "inference-server",
        "image": "ghcr.io/llm-d-incubation/llm-d-fast-model-actuation/requester:latest",
        "command": ["/app/requester"],
        "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "250Mi"}},
    }
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "my-request", "namespace": "llm"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "dp"}},
                "template": {
                    "metadata": {"labels": {"app": "dp"}, "annotations": annotations},
                    "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "containers": [stub]},
                },
            },
        }
    )


def checked(text: str) -> WorkloadEntry:
    (entry,) = run_check(read_documents(text, "rs.yaml"), policy=POLICY, backend=BACKEND).workloads
    return entry


SAME_CONTAINER = f"""
spec:
  containers:
  - name: inference-server
    image: vllm/vllm-openai:v0.11.0
    command: [vllm, serve]
    args: [{BIG}, --port, "8000", --max-model-len, "8192"]
"""
# (the chart's earlier form: a container of its own beside the stub, the key in the singular)
OWN_CONTAINER = f"""
metadata:
  labels: {{"model-reg": "llama", "app": null}}
spec:
  containers:
    - name: vllm
      image: ghcr.io/llm-d/llm-d-cuda:latest
      command: ["vllm", "serve"]
      args:
        - "{BIG}"
        - --max-model-len
        - "8192"
      resources:
        limits: {{nvidia.com/gpu: "1"}}
"""


@pytest.mark.parametrize(
    ("patch", "key", "container"),
    [
        (SAME_CONTAINER, "dual-pods.llm-d.ai/server-patch", "inference-server"),
        (OWN_CONTAINER, "dual-pod.llm-d.ai/server-patch", "vllm"),
    ],
    ids=["patches-inference-server", "chart-own-container"],
)
def test_the_server_the_patch_makes_is_planned(patch: str, key: str, container: str) -> None:
    """Before: the requester's stub was all kv-planner saw ("no vLLM container", KVP060)."""
    entry = checked(requester(patch, key))
    assert entry.vllm and entry.container == container and entry.model == BIG
    assert (entry.gpu.name, entry.gpu.count) == ("L4", 1) and entry.args["max_model_len"] == 8192
    assert entry.decision == "deny" and "KVP001" in entry.codes, entry.messages
    assert entry.patch == []  # the server is a YAML string in an annotation; its pod keeps no annotation
    fits = checked(requester(patch.replace(BIG, "Qwen/Qwen2.5-0.5B-Instruct"), key))
    assert "KVP079" in fits.codes and fits.patch == []


@pytest.mark.parametrize(
    ("patch", "extra", "why"),
    [
        (SAME_CONTAINER.replace('"8000"', '"{{ .NodeName }}"'), None, "Go template"),
        (None, {"dual-pods.llm-d.ai/inference-server-config": "llama-8b"}, "InferenceServerConfig"),
        ("spec: [unclosed", None, "dual-pods.llm-d.ai/server-patch"),
    ],
    ids=["template", "launcher-config", "broken-yaml"],
)
def test_a_server_definition_that_cannot_be_read_is_named_not_skipped_silently(
    patch: str | None, extra: dict[str, Any] | None, why: str
) -> None:
    entry = checked(requester(patch, extra=extra))
    assert entry.codes == ["KVP067"] and why in entry.messages[0], entry.messages
