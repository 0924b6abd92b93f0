"""The AdmissionReviews of the golden tests (``golden/<case>.in.json``), built here once.

Run ``python3 tests/webhook/golden_cases.py`` to (re)write the inputs; the expected responses
(``golden/<case>.out.json``) are written by ``pytest tests/webhook --regen-golden`` and
reviewed by hand. Each input also names the policy and namespace metadata the webhook runs with.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
IMAGE = "vllm/vllm-openai:v0.19.0"
GPU = {"limits": {"nvidia.com/gpu": "1"}}
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def _pad(metadata: dict[str, Any]) -> dict[str, Any]:
    """Objects as the API server sends them carry managedFields; a few keep reviews realistic."""
    metadata = copy.deepcopy(metadata)
    metadata.setdefault("uid", "8f0c7a4e-1b2d-4c3e-9f10-aa11bb22cc33")
    metadata.setdefault("creationTimestamp", None)
    metadata["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": "2026-01-05T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:replicas": {}}},
        }
    ]
    return metadata


def container(
    name: str = "vllm",
    *,
    args: list[str] | None = None,
    command: list[str] | None = None,
    image: str = IMAGE,
    resources: dict[str, Any] | None = GPU,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        out["command"] = command
    if args is not None:
        out["args"] = args
    if resources is not None:
        out["resources"] = resources
    out["ports"] = [{"containerPort": 8000, "name": "http"}]
    return out


def pod_spec(*containers: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if selector is not None:
        spec["nodeSelector"] = selector
    return spec


def workload(
    kind: str,
    spec: dict[str, Any],
    *,
    api: str = "apps/v1",
    name: str = "llm",
    template_metadata: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    owner: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": "llm"}}
    if annotations:
        metadata["annotations"] = annotations
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "llm",
                "uid": "0b1c",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    template = {
        "metadata": template_metadata if template_metadata is not None else {"labels": {"app": "llm"}},
        "spec": spec,
    }
    body: dict[str, Any]
    if kind == "Pod":
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    elif kind == "Job":
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {"template": {**template, "spec": {**spec, "restartPolicy": "Never"}}},
        }
    else:
        body = {
            "apiVersion": api,
            "kind": kind,
            "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}}, "template": template},
        }
    body["metadata"] = _pad(body["metadata"])
    return body


def review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    uid: str,
    dry_run: bool = False,
    old: dict[str, Any] | None = None,
    sub_resource: str | None = None,
) -> dict[str, Any]:
    kind = (obj or old or {}).get("kind", "Deployment")
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "apps", "version": "v1", "kind": kind},
        "resource": {"group": "apps", "version": "v1", "resource": kind.lower() + "s"},
        "requestKind": {"group": "apps", "version": "v1", "kind": kind},
        "requestResource": {"group": "apps", "version": "v1", "resource": kind.lower() + "s"},
        "name": "llm",
        "namespace": "ml",
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.capitalize()}Options"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def cases() -> dict[str, dict[str, Any]]:
    serve = workload(
        "Deployment", pod_spec(container(command=["vllm", "serve", QWEN], args=["--max_num_seqs=64"]), selector=L4)
    )
    image_args = workload("Deployment", pod_spec(container(args=[QWEN, "--tensor-parallel-size", "1"]), selector=L4))
    api_server = workload(
        "Deployment",
        pod_spec(
            container(
                command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
                args=["--model", LLAMA, "--max-model-len", "16384"],
            ),
            selector=A100,
        ),
    )
    shell = workload(
        "Deployment",
        pod_spec(
            container(command=["/bin/sh", "-c"], args=[f"exec vllm serve {QWEN} \\\n  --enable-prefix-caching"]),
            selector=L4,
        ),
    )
    too_long = workload("Deployment", pod_spec(container(args=[LLAMA, "--max-model-len", "131072"]), selector=L4))
    sidecar_first = workload(
        "Deployment",
        pod_spec(
            container("istio-proxy", image="docker.io/istio/proxyv2:1.24.0", args=["proxy", "sidecar"], resources=None),
            container(args=[QWEN]),
            selector=L4,
        ),
    )
    no_metadata = workload("Deployment", pod_spec(container(args=[QWEN]), selector=L4), template_metadata={})
    no_metadata["spec"]["template"].pop("metadata")
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _pad({"name": "llm", "namespace": "ml"}),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {
                    "spec": pod_spec(
                        container(
                            command=["sh", "-c"],
                            args=[
                                "ray start --head --port=6379 && python3 -m vllm.entrypoints.openai.api_server --model "
                                f"{LLAMA} --tensor-parallel-size 1 --pipeline-parallel-size 2"
                            ],
                        ),
                        selector=L4,
                    )
                },
                "workerTemplate": {
                    "spec": pod_spec(
                        container(
                            command=["sh", "-c"], args=["ray start --block --address=$(LWS_LEADER_ADDRESS):6379"]
                        ),
                        selector=L4,
                    )
                },
            },
        },
    }
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": _pad({"name": "llm", "namespace": "ml"}),
        "spec": {
            "predictor": pod_spec(container("kserve-container", args=["--model", QWEN, "--port", "8080"]), selector=L4)
        },
    }
    out: dict[str, dict[str, Any]] = {
        "deployment-vllm-serve": {"review": review(serve, uid="u-serve")},
        "deployment-image-args": {"review": review(image_args, uid="u-image")},
        "deployment-api-server": {"review": review(api_server, uid="u-api")},
        "deployment-shell-script": {"review": review(shell, uid="u-shell")},
        "deployment-sidecar-first": {"review": review(sidecar_first, uid="u-sidecar")},
        "deployment-missing-template-metadata": {"review": review(no_metadata, uid="u-nometa")},
        "deployment-update": {"review": review(image_args, uid="u-update", operation="UPDATE", old=image_args)},
        "deployment-dry-run": {"review": review(image_args, uid="u-dry", dry_run=True)},
        "deployment-delete": {"review": review(None, uid="u-delete", operation="DELETE", old=image_args)},
        "deployment-scale-subresource": {
            "review": review(
                {
                    "apiVersion": "autoscaling/v1",
                    "kind": "Scale",
                    "metadata": {"name": "llm", "namespace": "ml"},
                    "spec": {"replicas": 3},
                },
                uid="u-scale",
                operation="UPDATE",
                sub_resource="scale",
            )
        },
        "deployment-opted-out": {
            "review": review(
                workload(
                    "Deployment",
                    pod_spec(container(args=[QWEN]), selector=L4),
                    annotations={"kv-planner.io/skip": "true"},
                ),
                uid="u-skip",
            )
        },
        "deployment-context-too-long-enforce": {
            "review": review(too_long, uid="u-deny"),
            "policy": {"validationAction": "Enforce", "mutation": "fill"},
        },
        "deployment-context-too-long-audit": {"review": review(too_long, uid="u-audit")},
        "deployment-context-too-long-clamp": {
            "review": review(too_long, uid="u-clamp"),
            "namespace": {
                "annotations": {"kv-planner.io/mutation": "clamp", "kv-planner.io/validation-action": "Enforce"}
            },
        },
        "deployment-workload-profile": {
            "review": review(
                workload(
                    "Deployment",
                    pod_spec(container(args=[QWEN, "--max-num-seqs", "512"]), selector=L4),
                    annotations={
                        "kv-planner.io/workload": "{prompt_tokens: {p50: 800, p99: 12000}, "
                        "output_tokens: {p50: 200, p99: 2000}}"
                    },
                ),
                uid="u-profile",
            ),
            "policy": {"mutation": "clamp"},
        },
        "statefulset": {
            "review": review(workload("StatefulSet", pod_spec(container(args=[QWEN]), selector=L4)), uid="u-sts")
        },
        "daemonset": {
            "review": review(workload("DaemonSet", pod_spec(container(args=[QWEN]), selector=L4)), uid="u-ds")
        },
        "job": {"review": review(workload("Job", pod_spec(container(args=[QWEN]), selector=L4)), uid="u-job")},
        "pod": {"review": review(workload("Pod", pod_spec(container(args=[QWEN]), selector=L4)), uid="u-pod")},
        "pod-owned-by-replicaset": {
            "review": review(workload("Pod", pod_spec(container(args=[QWEN]), selector=L4), owner=True), uid="u-owned")
        },
        "replicaset-owned": {
            "review": review(
                workload("ReplicaSet", pod_spec(container(args=[QWEN]), selector=L4), owner=True), uid="u-rs"
            )
        },
        "leaderworkerset-shell-leader": {"review": review(lws, uid="u-lws")},
        "inferenceservice": {"review": review(isvc, uid="u-isvc")},
        "not-vllm": {
            "review": review(
                workload(
                    "Deployment",
                    pod_spec(container("web", image="nginx:1.27", args=["nginx", "-g", "daemon off;"], resources=None)),
                ),
                uid="u-nginx",
            )
        },
    }
    return out


def write_inputs() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name, case in cases().items():
        (GOLDEN / f"{name}.in.json").write_text(json.dumps(case, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_inputs()
