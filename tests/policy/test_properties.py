"""Property tests over generated Deployments and vLLM argument lists, with the real planner core.

For every generated object: the patch applies, the result is still a valid Deployment (the Kubernetes
1.37 schema, strict), a second pass yields an empty patch, the same input gives the same output, only
kv-planner's paths change, and the user's own flags are never removed or reordered.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.policy.decide import decide
from planner.policy.model import Policy
from planner.policy.patch import changed_paths
from planner.policy.planning import CoreBackend

BACKEND = CoreBackend()
K8S_VERSION = kubernetes_validate.latest_version()
MODELS = [
    "Qwen/Qwen2.5-7B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "google/gemma-3-12b-it",
]
GPUS = ["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4", "NVIDIA-L40S", None]
PROFILE = "{prompt_tokens: {p50: 800, p99: 12000}, output_tokens: {p50: 200, p99: 2000}}"

_FLAG_VALUES: dict[str, st.SearchStrategy[str]] = {
    "max-model-len": st.sampled_from(["2048", "8k", "32K", "32768", "131072", "auto"]),
    "max-num-seqs": st.sampled_from(["1", "16", "256", "1024"]),
    "gpu-memory-utilization": st.sampled_from(["0.8", "0.9", "0.95"]),
    "tensor-parallel-size": st.sampled_from(["1", "2"]),
    "kv-cache-dtype": st.sampled_from(["auto", "fp8"]),
    "dtype": st.sampled_from(["auto", "bfloat16"]),
}


@st.composite
def vllm_args(draw: st.DrawFn) -> list[str]:
    words = [draw(st.sampled_from(MODELS))]
    for flag in draw(st.lists(st.sampled_from(sorted(_FLAG_VALUES)), max_size=5)):
        value = draw(_FLAG_VALUES[flag])
        name = flag.replace("-", "_") if draw(st.booleans()) else flag
        if draw(st.booleans()):
            words.append(f"--{name}={value}")
        else:
            words += [f"--{name}", value]
    if draw(st.booleans()):
        words.append("--enable-prefix-caching")
    return words


@st.composite
def deployments(draw: st.DrawFn) -> dict[str, Any]:
    args = draw(vllm_args())
    style = draw(st.sampled_from(["image", "serve", "api_server"]))
    container: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.19.0"}
    if style == "image":
        container["args"] = args
    elif style == "serve":
        container["command"] = ["vllm", "serve"]
        if draw(st.booleans()):
            container["args"] = args
        else:
            container["command"] += args
    else:
        container["command"] = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        container["args"] = ["--model", *args]
    gpus = draw(st.sampled_from([None, 1, 2]))
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    containers = [container]
    if draw(st.booleans()):
        sidecar = {"name": "proxy", "image": "envoyproxy/envoy:v1.31", "args": ["-c", "/etc/envoy.yaml"]}
        containers.insert(draw(st.integers(0, 1)), sidecar)
    spec: dict[str, Any] = {"containers": containers}
    gpu = draw(st.sampled_from(GPUS))
    if gpu:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": gpu}
    template: dict[str, Any] = {"spec": spec}
    metadata_shape = draw(st.sampled_from(["labels-only", "annotations", "none"]))
    if metadata_shape != "none":
        template["metadata"] = {"labels": {"app": "llm"}}
        if metadata_shape == "annotations":
            template["metadata"]["annotations"] = {"team/owner": "ml", "odd~key/x": "1"}
    else:
        template["metadata"] = {}  # (a Deployment needs labels; an empty template metadata still validates)
    annotations = {"kv-planner.io/workload": PROFILE} if draw(st.booleans()) else None
    metadata: dict[str, Any] = {"name": "llm", "namespace": "ml"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"selector": {"matchLabels": {"app": "llm"}}, "template": template},
    }


policies = st.builds(
    lambda action, mutation: Policy(validation_action=action, mutation=mutation).for_namespace("ml"),
    st.sampled_from(["Enforce", "Audit"]),
    st.sampled_from(["off", "fill", "clamp"]),
)


def _allowed(path: str, obj: dict[str, Any]) -> bool:
    containers = obj["spec"]["template"]["spec"]["containers"]
    vllm_indices = [i for i, c in enumerate(containers) if c["image"].startswith("vllm/")]
    for i in vllm_indices:
        for field in ("args", "command"):
            if path == f"/spec/template/spec/containers/{i}/{field}" or path.startswith(
                f"/spec/template/spec/containers/{i}/{field}/"
            ):
                return True
    meta = obj["spec"]["template"].get("metadata") or {}
    if path.startswith("/spec/template/metadata/annotations/kv-planner.io~1"):
        return True
    return path == "/spec/template/metadata/annotations" and "annotations" not in meta


def _words(obj: dict[str, Any]) -> list[str]:
    container = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    return [*container.get("command", []), *container.get("args", [])]


@pytest.mark.slow
@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(deployments(), policies)
def test_patches_apply_validate_and_are_idempotent(obj: dict[str, Any], policy: Any) -> None:
    original = copy.deepcopy(obj)
    result = decide(obj, policy=policy, backend=BACKEND)
    assert obj == original  # the received object is never modified
    assert decide(obj, policy=policy, backend=BACKEND).model_dump() == result.model_dump()  # deterministic
    patched = jsonpatch.apply_patch(obj, result.patch)
    kubernetes_validate.validate(patched, K8S_VERSION, strict=True)
    for path in changed_paths(obj, patched):
        assert _allowed(path, obj), path
    before, after = _words(obj), _words(patched)
    assert len(after) >= len(before)
    for old, new in zip(before, after[: len(before)], strict=True):
        if old.startswith("-"):
            assert new.split("=", 1)[0] == old.split("=", 1)[0]  # flags stay in place, spelled as written
    if result.decision == "deny":
        assert result.patch == []
    second = decide(patched, policy=policy, backend=BACKEND)
    assert second.patch == []
    assert all(len(w) <= 120 for w in result.warnings)


@pytest.mark.parametrize("policy_mutation", ["fill", "clamp"])
def test_dry_run_and_real_answers_are_identical(policy_mutation: str) -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.19.0",
                            "args": [MODELS[0]],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }
    policy = Policy(mutation=policy_mutation).for_namespace("ml")
    first = decide(obj, policy=policy, backend=BACKEND)
    assert first.patch and decide(obj, policy=policy, backend=BACKEND).patch == first.patch
