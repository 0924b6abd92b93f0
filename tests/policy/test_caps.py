"""Input caps, the Hub allow-list and "no local files" in the shared decision code (docs/security.md)."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from pathlib import Path

import pytest
import yaml

from planner.errors import KvPlannerError, ModelResolutionError, RepoNotAllowedError
from planner.policy.caps import InputCaps, _walk, screen
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


def _objects() -> list[object]:
    """Every sample manifest and golden review object (the shapes kv-planner sees)."""
    root = Path(__file__).resolve().parents[1]
    found: list[object] = []
    for path in sorted((root / "k8s" / "manifests").glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for path in sorted((root / "webhook" / "golden").glob("*.in.json")):
        review = json.loads(path.read_text())["review"]["request"]
        if isinstance(review.get("object"), dict):
            found.append(review["object"])
    return found


def _nest(levels: int) -> object:
    """A value ``levels`` deep (counting itself), mappings and lists in turn."""
    value: object = {}
    for level in range(levels - 1):
        value = [value] if level % 2 else {"x": value}
    return value


@pytest.mark.parametrize("over", ["none", "depth-at", "depth-over", "containers", "args", "value", "gpu", "selector"])
def test_the_quick_pass_agrees_with_the_full_walk(over: str) -> None:
    """screen() answers "within every bound" from a quicker pass; whatever the object, its findings (codes,
    messages, order) are those of the full walk."""
    caps = InputCaps(max_containers=3, max_args=8, max_value_chars=64, max_selector_chars=63, max_depth=12)
    objects = _objects()
    assert len(objects) > 20
    for original in objects:
        assert isinstance(original, dict)
        obj = copy.deepcopy(original)
        spec = obj.get("spec", {}).get("template", {}).get("spec") if isinstance(obj.get("spec"), dict) else None
        if over.startswith("depth"):
            obj["extra"] = _nest(caps.max_depth - (1 if over == "depth-at" else 0))
        elif isinstance(spec, dict) and isinstance(spec.get("containers"), list) and spec["containers"]:
            first = spec["containers"][0]
            if over == "containers":
                spec["containers"] = spec["containers"] * 4
            elif over == "args":
                first["args"] = [*(first.get("args") or []), *["--x"] * 9]
            elif over == "value":
                first["image"] = "v" * 65
            elif over == "gpu":
                obj.setdefault("metadata", {}).setdefault("annotations", {})["kv-planner.io/gpu"] = "L4" * 40
            elif over == "selector":
                spec["nodeSelector"] = {"nvidia.com/gpu.product": "A" * 64}
        assert screen(obj, caps) == _walk(obj, caps)
    assert screen({"a": _nest(caps.max_depth - 1)}, caps) == []
    assert [f.code for f in screen({"a": _nest(caps.max_depth)}, caps)] == ["KVP076"]
    # Values that are not plain decoded JSON (a dict subclass here) are screened by the full walk.
    assert [f.code for f in screen({"a": OrderedDict(x=_nest(caps.max_depth - 1))}, caps)] == ["KVP076"]


def test_managed_fields_are_neither_screened_nor_read() -> None:
    """The API server's field records are no pod spec: a record past every cap (nesting, containers, long
    values) decides nothing, and the object decides as it does without them."""
    policy = parse_policy(None).for_namespace("ml")
    backend = CoreBackend()
    plain = _deployment("Qwen/Qwen2.5-7B-Instruct")
    recorded = copy.deepcopy(plain)
    pod = {"metadata": {}, "spec": {"containers": [{"name": f"c{i}", "args": ["x" * 100_000]} for i in range(100)]}}
    recorded["metadata"]["managedFields"] = [  # type: ignore[index]
        {"manager": "kubectl", "operation": "Update", "fieldsV1": _nest(200)},
        {"manager": "crafted", "operation": "Apply", "fieldsV1": {"spec": {"template": pod}, "containers": [pod] * 3}},
    ]
    assert screen(recorded) != []  # the whole object is over caps...
    want = decide(plain, policy=policy, backend=backend)
    got = decide(recorded, policy=policy, backend=backend)  # ...but what decisions read is not
    assert got.decision == want.decision and got.codes == want.codes and got.patch == want.patch
    assert "managedFields" in recorded["metadata"]  # type: ignore[operator]
