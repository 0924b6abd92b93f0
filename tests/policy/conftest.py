from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import settings

from tests.policy.fakes import FakeBackend

# Property tests run derandomized and without a deadline (DESIGN.md: deterministic CI on shared cores).
settings.register_profile("kv-planner", derandomize=True, deadline=None, max_examples=150)
settings.load_profile("kv-planner")


@pytest.fixture
def fake() -> FakeBackend:
    return FakeBackend()


def deployment(
    args: list[str] | None = None,
    *,
    command: list[str] | None = None,
    gpu_product: str | None = "NVIDIA-L4",
    gpus: int | None = 1,
    image: str = "vllm/vllm-openai:v0.19.0",
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
    extra_containers: list[dict[str, Any]] | None = None,
    env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": image}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env is not None:
        container["env"] = env
    spec: dict[str, Any] = {"containers": [container, *(extra_containers or [])]}
    if gpu_product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": gpu_product}
    template: dict[str, Any] = {"metadata": {"labels": {"app": "llm"}}, "spec": spec}
    if template_annotations is not None:
        template["metadata"]["annotations"] = template_annotations
    metadata: dict[str, Any] = {"name": "llm", "namespace": "ml"}
    if annotations:
        metadata["annotations"] = annotations
    return copy.deepcopy(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}}, "template": template},
        }
    )
