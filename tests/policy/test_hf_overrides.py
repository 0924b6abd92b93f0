"""``--hf-overrides`` rewrites the model's config before vLLM derives its context or sizes anything; decisions
plan the overridden model, as the release in force applies the overrides (planner/vllm/hf_overrides.py), and say
so (KVP047, a note). Overrides kv-planner cannot apply as vLLM does stay a warning (KVP047, not checked), never a
denial or a fill made for a different model.

Before: every container with --hf-overrides was "not checked" (KVP047): a lowered max_position_embeddings left
a --max-model-len vLLM refuses unreported, and a raised one that cannot start was not denied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.policy.check import check_policy, run_check
from planner.policy.decide import WorkloadEntry
from planner.policy.manifests import read_documents
from planner.policy.planning import CoreBackend
from tests.policy.conftest import deployment

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # catalog: 131072 tokens (llama3 RoPE), 128 KiB a token
QWEN = "Qwen/Qwen2.5-7B-Instruct"  # catalog: 32768 tokens, no RoPE scaling
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
_BACKEND = CoreBackend()


def _entry(
    args: list[str], mutation: str = "fill", *, image: str = "vllm/vllm-openai:v0.19.0", gpu: str = "L4"
) -> WorkloadEntry:
    policy = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}, "mutation": mutation})
    manifest = deployment(args, gpu_product=None, image=image, annotations={"kv-planner.io/gpu": gpu})
    (entry,) = run_check(read_documents(yaml.safe_dump(manifest), "t.yaml"), policy=policy, backend=_BACKEND).workloads
    return entry


def _added(entry: WorkloadEntry) -> dict[str, str]:
    """The flags the patch appends (--flag value pairs)."""
    words = [op["value"] for op in entry.patch if op["path"].endswith("/args/-")]
    return dict(zip(words[::2], words[1::2], strict=True))


def _message(entry: WorkloadEntry, code: str) -> str:
    return next(m for m in entry.messages if m.startswith(code))


def _severity(entry: WorkloadEntry, code: str) -> str:
    return next(f.severity.value for f in entry.findings if f.code.value == code)


def test_a_lowered_context_is_planned_and_the_fill_stays_within_it() -> None:
    published = _entry([LLAMA])
    assert int(_added(published)["--max-model-len"]) > 4096  # 131072 does not fit an L4: the longest that does
    lowered = _entry([LLAMA, "--hf-overrides", json.dumps({"max_position_embeddings": 4096})])
    assert lowered.decision == "mutate" and "KVP047" in lowered.codes
    assert _added(lowered)["--max-model-len"] == "4096"  # the overridden default, which fits
    assert _severity(lowered, "KVP047") == "info"
    assert "planned with max_position_embeddings=4096" in _message(lowered, "KVP047")
    assert lowered.effective_args["max_model_len"] == 4096


def test_the_dotted_form_is_the_same_override() -> None:
    dotted = _entry([LLAMA, "--hf-overrides.max_position_embeddings", "4096"])
    whole = _entry([LLAMA, "--hf-overrides", '{"max_position_embeddings": 4096}'])
    assert (dotted.decision, dotted.codes, dotted.patch) == (whole.decision, whole.codes, whole.patch)


def test_a_context_past_the_overridden_limit_is_what_vllm_refuses() -> None:
    entry = _entry([LLAMA, "--hf-overrides", '{"max_position_embeddings": 4096}', "--max-model-len", "8192"])
    assert entry.decision == "warn" and entry.codes == ["KVP047", "KVP044"] and entry.patch == []
    assert "max_model_len (8192) is greater than the derived max_model_len" in _message(entry, "KVP044")


def test_a_raised_context_that_cannot_start_is_denied() -> None:
    args = [QWEN, "--hf-overrides", '{"max_position_embeddings": 131072}', "--max-model-len", "131072"]
    entry = _entry(args, "off")
    assert entry.decision == "deny" and entry.codes == ["KVP047", "KVP002"], entry.codes


def test_a_rope_override_is_planned_as_the_release_applies_it() -> None:
    """0.11.0 applies a rope_scaling object (YaRN: 4 x 32768); 0.12-0.19 replace an attribute they no longer
    read (rope_parameters was set from the published rope_scaling): the context stays 32768, a warning."""
    args = [QWEN, "--hf-overrides", json.dumps({"rope_scaling": YARN}), "--max-model-len", "65536"]
    old = _entry(args, image="vllm/vllm-openai:v0.11.0", gpu="H100-80GB")
    assert old.decision == "mutate" and "KVP044" not in old.codes and _severity(old, "KVP047") == "info"
    assert old.effective_args["max_model_len"] == 65536
    new = _entry(args, image="vllm/vllm-openai:v0.19.0", gpu="H100-80GB")
    assert new.decision == "warn" and new.codes == ["KVP047", "KVP044"] and _severity(new, "KVP047") == "warn"
    assert "not applied by vLLM: rope_scaling" in _message(new, "KVP047")
    parameters = [QWEN, "--hf-overrides", json.dumps({"rope_parameters": YARN}), "--max-model-len", "65536"]
    assert "KVP044" not in _entry(parameters, gpu="H100-80GB").codes


def test_the_rope_scaling_flag_of_old_releases_is_an_override_too() -> None:
    args = [QWEN, "--rope-scaling", json.dumps(YARN), "--max-model-len", "65536"]
    entry = _entry(args, image="vllm/vllm-openai:v0.11.0", gpu="H100-80GB")
    assert "KVP044" not in entry.codes and entry.effective_args["max_model_len"] == 65536
    assert "rope_scaling" in _message(entry, "KVP047")


def test_an_unknown_release_where_releases_disagree_is_not_checked() -> None:
    args = [QWEN, "--hf-overrides", json.dumps({"rope_scaling": YARN})]
    entry = _entry(args, image="registry.example.com/team/vllm:custom")
    assert entry.decision == "warn" and entry.codes == ["KVP047"] and entry.patch == []
    assert "kv-planner.io/vllm-version" in entry.messages[0] and entry.messages[0].endswith("not checked")
    # where every release agrees, the release need not be known
    agreed = _entry([LLAMA, "--hf-overrides", '{"max_position_embeddings": 4096}'], "off", image="x/vllm:custom")
    assert "planned with max_position_embeddings=4096" in _message(agreed, "KVP047")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("[1]", "a JSON array, not an object"),
        ("{max_position_embeddings: 4096}", "is not JSON"),
        ('{"architectures": ["Qwen2ForSequenceClassification"]}', "another model class"),
        ('{"sliding_window": 4096}', "derives each layer's attention kind"),
        ('{"num_hidden_layers": 8}', "catalog facts"),
        ('{"max_position_embeddings": "4096"}', "must be a number"),
        ('{"max_position_embeddings": 1e300}', "above the plausible bound"),
        ('{"a": {"b": {"c": {"d": {"e": {"f": {"g": 1}}}}}}}', "deeper than kv-planner applies"),
    ],
)
def test_what_kv_planner_cannot_apply_is_a_warning_not_a_decision(value: str, says: str) -> None:
    for mutation in ("off", "fill"):
        entry = _entry([LLAMA, "--hf-overrides", value, "--max-model-len", "131072"], mutation)
        assert entry.decision == "warn" and entry.codes == ["KVP047"] and entry.patch == [], entry.codes
        assert says in entry.messages[0] and entry.messages[0].endswith("not checked")


def test_keys_that_change_no_memory_are_planned_as_published() -> None:
    ignored = _entry([QWEN, "--hf-overrides", '{"eos_token_id": 2}'])
    plain = _entry([QWEN])
    assert _added(ignored) == _added(plain) and _severity(ignored, "KVP047") == "info"
    assert "ignored: eos_token_id (changes no memory)" in _message(ignored, "KVP047")


def test_an_empty_override_is_planned_as_usual() -> None:
    entry = _entry([LLAMA, "--hf-overrides", "{}", "--max-model-len", "8192"])
    assert "KVP047" not in entry.codes and entry.model == LLAMA


def test_an_override_from_an_unset_variable_is_not_checked() -> None:
    manifest: dict[str, Any] = deployment(
        [QWEN, "--hf-overrides", "$(OVERRIDES)"], gpu_product=None, annotations={"kv-planner.io/gpu": "L4"}
    )
    policy = check_policy({"modelLookup": {"offline": True, "timeoutSeconds": 1}})
    (entry,) = run_check(read_documents(yaml.safe_dump(manifest), "t.yaml"), policy=policy, backend=_BACKEND).workloads
    assert entry.decision == "warn" and entry.patch == [] and "KVP047" not in entry.codes


def test_a_model_read_from_its_config_json_takes_shape_overrides_too(tmp_path: Path) -> None:
    """A local path (``planner check``) or a Hub repo is read from its config.json, which the overrides are
    applied to: a layer count too (the weights are then estimated from the overridden architecture)."""
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = str(tmp_path)
    published = _entry([model, "--max-model-len", "32768"], "off")
    shallow = _entry([model, "--hf-overrides", '{"num_hidden_layers": 4}', "--max-model-len", "32768"], "off")
    assert "planned with num_hidden_layers=4" in _message(shallow, "KVP047")
    assert "weights estimated" in _message(shallow, "KVP047")
    assert published.kv_cache is not None and shallow.kv_cache is not None
    assert shallow.kv_cache.bytes > published.kv_cache.bytes  # 4 layers of weights leave more room
    with_head = {"hidden_size": 4096, "head_dim": 128}
    assert "head_dim" in _message(_entry([model, "--hf-overrides", json.dumps(with_head)], "off"), "KVP047")
    no_head = _entry([model, "--hf-overrides", '{"hidden_size": 4096}'], "off")
    assert no_head.codes == ["KVP047"] and "set head_dim too" in no_head.messages[0]
