"""``--hf-overrides`` rewrites the model's config before vLLM derives its context or sizes anything; kv-planner
plans the config as published, so such a container is a warning (KVP047), never a denial or a fill made
for a different model: a lowered max_position_embeddings was denied though it fit, and a fill then wrote a
context vLLM refuses."""

from __future__ import annotations

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend
from tests.policy.conftest import deployment


def _entry(args: list[str], mutation: str = "fill") -> WorkloadEntry:
    policy = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}, "mutation": mutation})
    text = yaml.safe_dump(deployment(args, gpu_product=None, annotations={"kv-planner.io/gpu": "L4"}))
    (entry,) = run_check(read_documents(text, "t.yaml"), policy=policy, backend=CoreBackend()).workloads
    return entry


@pytest.mark.parametrize(
    ("args", "mutation"),
    [
        (
            [
                "Qwen/Qwen2.5-7B-Instruct",
                "--hf-overrides",
                '{"max_position_embeddings": 131072}',
                "--max-model-len",
                "131072",
            ],
            "fill",
        ),
        (["meta-llama/Llama-3.1-8B-Instruct", "--hf-overrides", '{"max_position_embeddings": 8192}'], "off"),
        (["meta-llama/Llama-3.1-8B-Instruct", "--hf-overrides", '{"max_position_embeddings": 8192}'], "fill"),
        (["meta-llama/Llama-3.1-8B-Instruct", "--hf-overrides.max_position_embeddings", "8192"], "fill"),
    ],
    ids=["raised", "lowered-off", "lowered-fill", "dotted"],
)
def test_an_overridden_config_is_a_warning_not_a_decision(args: list[str], mutation: str) -> None:
    entry = _entry(args, mutation)
    assert entry.decision == "warn" and entry.codes == ["KVP047"], entry.codes
    assert not entry.patch and "max_position_embeddings" in entry.messages[0]


def test_an_empty_override_is_planned_as_usual() -> None:
    entry = _entry(["meta-llama/Llama-3.1-8B-Instruct", "--hf-overrides", "{}", "--max-model-len", "8192"])
    assert "KVP047" not in entry.codes and entry.model == "meta-llama/Llama-3.1-8B-Instruct"
