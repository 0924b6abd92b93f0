"""A second review of kv-planner's own output changes nothing, also when the vLLM release is unknown.

With no release evidence the plan is the worst case over the release range, and which release is worst
can move with the flags the first review filled in; the recorded KV blocks must not flip-flop then
(the webhook fuzz campaign found this: benchmarks/webhook_fuzz.py, "non-idempotent").
"""

from __future__ import annotations

import itertools
from typing import Any

import jsonpatch
import pytest

from planner.policy.decide import decide
from planner.policy.model import Policy
from planner.policy.planning import CoreBackend

BACKEND = CoreBackend()


def _deployment(model: str, gpu: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": gpu},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": image,
                            "args": [model],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


@pytest.mark.parametrize(
    ("model", "gpu", "image", "mutation"),
    list(
        itertools.product(
            ["Qwen/Qwen2.5-7B-Instruct", "google/gemma-2-9b-it", "meta-llama/Llama-3.1-8B-Instruct"],
            ["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB"],
            ["vllm/vllm-openai:latest", "lmcache/vllm-openai:v0.3.7"],
            ["fill", "clamp"],
        )
    ),
)
def test_mutation_on_an_unknown_release_is_idempotent(model: str, gpu: str, image: str, mutation: str) -> None:
    policy = Policy(validation_action="Enforce", mutation=mutation).for_namespace("ml")
    obj = _deployment(model, gpu, image)
    first = decide(obj, policy=policy, backend=BACKEND)
    patched = jsonpatch.apply_patch(obj, first.patch)
    assert decide(patched, policy=policy, backend=BACKEND).patch == []
