"""Input caps, the Hub allow-list and "no local files" in the shared decision code (docs/security.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import KvPlannerError, ModelResolutionError, RepoNotAllowedError
from planner.policy.caps import InputCaps, screen
from planner.policy.decide import decide
from planner.policy.model import parse_policy
from planner.policy.planning import CoreBackend, repo_matcher

pytestmark = pytest.mark.timeout(120)


def _deployment(model: str, **annotations: str) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "ml", "annotations": annotations},
        "spec": {
            "template": {
                "metadata": {},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.19.0",
                            "args": ["--model", model],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
        },
    }


def test_repo_patterns_match_within_one_part() -> None:
    allowed = repo_matcher(["meta-llama/*", "Qwen/Qwen2.5-7B-Instruct"])
    assert allowed("meta-llama/Llama-3.1-8B") and allowed("Qwen/Qwen2.5-7B-Instruct")
    assert not allowed("meta-llama/x/y") and not allowed("evil/meta-llama") and not allowed("Qwen/Qwen2.5-7B")
    assert not repo_matcher([])("any/repo")


def test_a_repo_outside_the_allow_list_is_not_looked_up() -> None:
    backend = CoreBackend()
    with pytest.raises(RepoNotAllowedError):
        backend.resolve_model("evil/model", timeout=0.5, offline=False, allow_local=False, allow_repos=["acme/*"])
    # The catalog still answers for models it knows (no lookup is needed).
    spec = backend.resolve_model(
        "Qwen/Qwen2.5-7B-Instruct", timeout=0.5, offline=True, allow_local=False, allow_repos=["acme/*"]
    )
    assert spec.num_layers > 0
    policy = parse_policy({"validationAction": "Enforce", "modelLookup": {"allowRepos": ["acme/*"]}})
    decision = decide(_deployment("evil/model"), policy=policy.for_namespace("ml"), backend=backend)
    assert decision.decision == "warn" and decision.codes == ["KVP077"]


@pytest.mark.parametrize("name", ["org/x", "logs", "etc/passwd"])
def test_model_names_are_never_read_from_the_local_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Before: with a model directory of that name next to the process, the webhook planned from it."""
    model_dir = tmp_path / name
    model_dir.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    (model_dir / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    backend = CoreBackend()
    with pytest.raises(KvPlannerError):
        backend.resolve_model(name, timeout=0.5, offline=True, allow_local=False)
    decision = decide(_deployment(name), policy=parse_policy(None).for_namespace("ml"), backend=backend)
    assert decision.entries[0].plan is None
    assert set(decision.codes) & {"KVP040", "KVP041"}, decision.codes


def test_screen_names_each_cap() -> None:
    caps = InputCaps(max_containers=2, max_args=3, max_value_chars=64, max_depth=8)
    deeper = {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {}}}}}}}}}
    obj = _deployment("Qwen/Qwen2.5-7B-Instruct", **{"kv-planner.io/gpu": "L4" * 200})
    spec = obj["spec"]["template"]["spec"]  # type: ignore[index]
    spec["containers"] *= 3
    spec["containers"][0] = {**spec["containers"][0], "args": ["x" * 100, "a", "b", "c"]}
    obj["status"] = deeper
    codes = {f.code for f in screen(obj, caps)}
    assert codes == {"KVP070", "KVP071", "KVP072", "KVP073", "KVP076"}
    assert screen(_deployment("Qwen/Qwen2.5-7B-Instruct")) == []


def test_a_lookup_failure_type_is_a_resolution_error() -> None:
    assert issubclass(RepoNotAllowedError, ModelResolutionError)
