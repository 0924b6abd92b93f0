"""Unknown vLLM release: planned over the release range, nothing release-specific filled, the
assumption said; the policy may pin an assumed release per namespace (DESIGN.md, Trust boundaries)."""

from __future__ import annotations

from typing import Any

from planner.policy.check import check_policy, run_check
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend

BACKEND = CoreBackend()


def _deployment(image: str, *, namespace: str = "team", annotations: dict[str, str] | None = None) -> str:
    meta: dict[str, Any] = {"name": "chat", "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    import json

    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "template": {
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                        "containers": [
                            {
                                "name": "vllm",
                                "image": image,
                                "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    }
                }
            },
        }
    )


def _check(text: str, policy: dict[str, Any] | None = None) -> Any:
    data = {"modelLookup": {"offline": True}, **(policy or {})}
    report = run_check(read_documents(text, "t"), policy=check_policy(data), backend=BACKEND)
    assert len(report.workloads) == 1
    return report.workloads[0]


def _added(entry: Any) -> list[str]:
    return [op["value"] for op in entry.patch if "/containers/" in op["path"]]


def test_misread_tags_are_unknown_and_no_release_default_is_filled() -> None:
    for image in ("lmcache/vllm-openai:v0.3.7", "registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.1"):
        entry = _check(_deployment(image))
        assert entry.vllm_version is None
        assert "--gpu-memory-utilization" not in _added(entry)  # not the newest release's 0.92
        assert "KVP035" in entry.codes
        assert any("release unknown: KV" in m and "no release default added" in m for m in entry.messages)


def test_known_release_fills_its_default() -> None:
    entry = _check(_deployment("vllm/vllm-openai:v0.19.0"))
    assert entry.vllm_version == "0.19.0"
    assert _added(entry) == ["--gpu-memory-utilization", "0.9"] and "KVP035" not in entry.codes


def test_policy_pins_an_assumed_release_per_namespace() -> None:
    policy = {"namespaces": {"team": {"vllmVersion": "0.19.0"}}}
    entry = _check(_deployment("lmcache/vllm-openai:v0.3.7"), policy)
    assert entry.vllm_version is None  # still no evidence: the report says so
    assert _added(entry) == ["--gpu-memory-utilization", "0.9"]
    assert any("assumed 0.19.0 (policy)" in m for m in entry.messages)
    other = _check(_deployment("lmcache/vllm-openai:v0.3.7", namespace="elsewhere"), policy)
    assert "--gpu-memory-utilization" not in _added(other)


def test_annotation_is_evidence_and_a_bad_one_is_reported() -> None:
    entry = _check(_deployment("lmcache/vllm-openai:v0.3.7", annotations={"kv-planner.io/vllm-version": "0.10.1"}))
    assert entry.vllm_version == "0.10.1" and "KVP035" not in entry.codes
    bad = _check(_deployment("lmcache/vllm-openai:v0.3.7", annotations={"kv-planner.io/vllm-version": "newest"}))
    assert bad.vllm_version is None and "KVP068" in bad.codes


def test_a_setting_that_only_some_releases_refuse_is_not_denied() -> None:
    """Llama-3.1-8B on an L4 at 24,576 tokens: the 0.6/0.7 rows leave 19,344 KV tokens (cannot start),
    0.8 and later 30,000+ (fits). With the release unknown that is a warning naming the releases
    (KVP036), never a deny, even under Enforce; with the release known, the deny stands."""
    text = (
        _deployment("lmcache/vllm-openai:v0.3.7")
        .replace("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")
        .replace('"8192"', '"24576"')
    )
    entry = _check(text, {"validationAction": "Enforce", "mutation": "off"})
    assert "KVP036" in entry.codes and "KVP002" in entry.codes
    assert entry.decision == "warn"
    known = _check(text.replace("lmcache/vllm-openai:v0.3.7", "vllm/vllm-openai:v0.7.1"), {"mutation": "off"})
    assert known.decision == "deny" and "KVP036" not in known.codes
