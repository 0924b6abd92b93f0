"""YAML a manifest carries inside a string (the workload annotation, a RayService's serveConfigV2, a --config
file from a ConfigMap) is untrusted too: deep nesting, huge integers and alias bombs are that feature's own
finding, never a crash that the webhook answers "allowed unchecked" (KVP049)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.policy.check import check_policy
from planner.policy.decide import decide
from planner.policy.planning import CoreBackend
from planner.untrusted import EMBEDDED_MAX_NODES

BACKEND = CoreBackend()
POLICY = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}}).for_namespace("team-a", None)
DEEP = "[" * 600 + "]" * 600
BIG_INT = "1" * 5000
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)  # 10^9 values once expanded

SEVENTY_B_ON_L4: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "server", "namespace": "team-a", "annotations": {}},
    "spec": {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:v0.19.0",
                        "command": ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    },
}


@pytest.mark.parametrize(
    "profile", [DEEP, f"prompt_tokens: {{p50: {BIG_INT}}}", ALIAS_BOMB], ids=["deep", "bigint", "aliases"]
)
def test_a_hostile_workload_annotation_is_ignored_and_the_workload_still_denied(profile: str) -> None:
    obj = copy.deepcopy(SEVENTY_B_ON_L4)
    obj["metadata"]["annotations"]["kv-planner.io/workload"] = profile
    decision = decide(obj, policy=POLICY, backend=BACKEND, namespace="team-a")
    codes = [str(getattr(code, "value", code)) for code in decision.codes]
    assert decision.decision == "deny" and "KVP001" in codes and "KVP045" in codes, codes
    assert "KVP049" not in codes


def _ray_service(serve_config: str) -> dict[str, Any]:
    group = {
        "groupName": "gpu",
        "replicas": 1,
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": "rayproject/ray-llm:2.52.0",
                        "resources": {"limits": {"nvidia.com/gpu": "4"}},
                    }
                ]
            }
        },
    }
    head = {
        "rayStartParams": {},
        "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray-llm:2.52.0"}]}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "llm", "namespace": "team-a"},
        "spec": {
            "serveConfigV2": serve_config,
            "rayClusterConfig": {"headGroupSpec": head, "workerGroupSpecs": [group]},
        },
    }


@pytest.mark.parametrize(
    "serve_config",
    [
        "applications: " + DEEP,
        f"applications:\n- name: a\n  args: {{llm_configs: [{{engine_kwargs: {{max_model_len: {BIG_INT}}}}}]}}\n",
        ALIAS_BOMB + "applications: [*i]\n",
    ],
    ids=["deep", "bigint", "aliases"],
)
def test_a_hostile_serve_config_is_named_unreadable(serve_config: str) -> None:
    decision = decide(_ray_service(serve_config), policy=POLICY, backend=BACKEND, namespace="team-a")
    codes = [str(getattr(code, "value", code)) for code in decision.codes]
    assert "KVP067" in codes and "KVP049" not in codes, codes


def test_the_embedded_bound_is_far_above_a_real_serve_config() -> None:
    # (a real serveConfigV2 with several LLM configs holds a few hundred values)
    assert EMBEDDED_MAX_NODES >= 10_000
