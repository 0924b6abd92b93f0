"""``--hf-overrides`` applied to a model's config the way each vLLM release applies it (planner/vllm/hf_overrides.py).

The releases' own code, read in their wheels: 0.8.5 ``config.py`` (``hf_config.update`` after the rope patching),
0.10.1.1-0.11.0 ``transformers_utils/config.py: get_config`` (``config.update`` then ``patch_rope_scaling``),
0.11.1-0.33.0 ``config/model.py`` (objects applied after ``get_config`` by ``_apply_dict_overrides`` /
``_update_nested``), ``patch_rope_parameters`` from 0.12.0 (transformers 4 branch: ``rope_parameters`` is the
published ``rope_scaling`` dict itself), transformers 5's ``rope_scaling`` property over ``rope_parameters``.
The configs below are written for these tests (the fields a Qwen2.5-7B-like and a LLaVA-like file have).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from planner.errors import HfOverridesError
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.models.spec import ModelSpec
from planner.vllm.checks import derived_length
from planner.vllm.hf_overrides import (
    MAX_OVERRIDE_CHARS,
    MAX_OVERRIDE_KEYS,
    apply_hf_overrides,
    parse_hf_overrides,
    rules_for,
    with_rope_flags,
)
from planner.vllm.releases import Version

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def _qwen(**fields: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 131072,
        "max_window_layers": 28,
    }
    config.update(fields)
    return config


def _llava(**text_fields: Any) -> dict[str, Any]:
    text = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        **text_fields,
    }
    return {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "torch_dtype": "bfloat16",
        "text_config": text,
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "num_hidden_layers": 24},
    }


def _spec(config: dict[str, Any]) -> ModelSpec:
    return parse_config(config, model_id="test/model")


def _apply(config: dict[str, Any], overrides: dict[str, Any], version: str | None) -> Any:
    return apply_hf_overrides(_spec(config), config, overrides, version=version)


def _context(result: Any, version: str) -> int:
    return derived_length(result.spec, Version.parse(version))


# --- reading the flag -------------------------------------------------------------------------------------


def test_the_flag_is_read_as_vllm_reads_it() -> None:
    assert parse_hf_overrides('{"max_position_embeddings": 4096}') == {"max_position_embeddings": 4096}
    assert parse_hf_overrides({"text_config": {"max_position_embeddings": 4096}}) == {
        "text_config": {"max_position_embeddings": 4096}
    }  # the dotted form, merged into an object by the argv reader
    assert parse_hf_overrides(None) == {} and parse_hf_overrides("  ") == {} and parse_hf_overrides("{}") == {}
    # json.loads keeps the last of duplicate keys, as vLLM's argparse type does
    assert parse_hf_overrides('{"max_position_embeddings": 1, "max_position_embeddings": 2}') == {
        "max_position_embeddings": 2
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1, 2]", "a JSON array, not an object"),
        ('"yarn"', "a JSON string, not an object"),
        ("4096", "a JSON number, not an object"),
        ("null", "a JSON null, not an object"),
        ("{max_position_embeddings: 4096}", "is not JSON"),
        ("[" * 10_000, "is not JSON"),  # RecursionError inside json, not out of it
        ("{" + "1" * 5000 + "}", "is not JSON"),
        ('{"a": ' * 7 + "1" + "}" * 7, "deeper than kv-planner applies"),
        (json.dumps({f"k{i}": i for i in range(MAX_OVERRIDE_KEYS + 1)}), "more keys than kv-planner applies"),
        (json.dumps({"k": "x" * MAX_OVERRIDE_CHARS}), "characters, more than kv-planner applies"),
        (json.dumps({"k" * 200: 1}), "is not a config field name"),
    ],
)
def test_bad_flag_values_are_clear_errors(text: str, says: str) -> None:
    with pytest.raises(HfOverridesError) as caught:
        parse_hf_overrides(text)
    assert says in caught.value.message and len(caught.value.message) < 300


def test_the_dotted_form_is_bounded_like_the_text() -> None:
    """The dotted form is built from many arguments, each up to the manifest's value cap (64 KiB)."""
    many = {f"k{i}": "x" * 1000 for i in range(20)}
    with pytest.raises(HfOverridesError, match="characters of text"):
        parse_hf_overrides(many)


def test_rope_flags_are_folded_in_after_the_overrides() -> None:
    """``--rope-scaling`` (up to 0.11.0): ``hf_overrides_kw.update({"rope_scaling": ...})`` after the object."""
    merged = with_rope_flags({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, json.dumps(YARN), "1e6")
    assert merged == {"rope_scaling": YARN, "rope_theta": 1e6}
    assert with_rope_flags({}, "{}", None) == {}  # an empty --rope-scaling is not applied (``if self.rope_scaling``)


def test_release_ranges() -> None:
    assert [r.label for r in rules_for("0.8.5")] == ["<= 0.9"]
    assert [r.label for r in rules_for("0.10.1.1")] == ["0.10.0-0.11.0"]
    assert [r.label for r in rules_for("0.11.1")] == ["0.11.1-0.11.x"]
    assert [r.label for r in rules_for("0.19.0")] == ["0.12.0-0.19.x"]
    assert [r.transformers for r in rules_for("0.20.2")] == [4, 5]  # 0.20-0.23 accept transformers 4 and 5
    assert [r.label for r in rules_for("0.33.0")] == [">= 0.24.0"]
    assert len(rules_for(None)) == 7


# --- what vLLM does with them -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.8.5", "0.11.0", "0.11.1", "0.19.0", "0.20.2", "0.33.0", None])
def test_a_lowered_context_is_planned_on_every_release(version: str | None) -> None:
    result = _apply(_qwen(), {"max_position_embeddings": 4096}, version)
    assert result.spec.derived_max_model_len == 4096 and result.spec.max_position_embeddings == 4096
    assert result.planned == ("max_position_embeddings=4096",) and result.unapplied == ()
    # nothing else changes: the same weights, shapes and layers
    published = _spec(_qwen())
    assert result.spec.model_copy(update={"context": published.context}) == published.model_copy(
        update={"derived_max_model_len": 4096, "max_position_embeddings": 4096}
    )


def test_a_rope_scaling_object_depends_on_the_release() -> None:
    """0.10-0.11.0: config.update before patch_rope_scaling, and the context comes from rope_scaling (YaRN:
    original x factor). 0.12-0.19 (transformers 4): the object replaces rope_scaling after patch_rope_parameters
    made rope_parameters the published dict, which is what the context comes from: no effect. 0.24+
    (transformers 5): rope_scaling is rope_parameters; YaRN keeps max_position_embeddings (0.33 rules)."""
    config = _qwen()
    old = _apply(config, {"rope_scaling": YARN}, "0.11.0")
    assert _context(old, "0.11.0") == 131072 and old.unapplied == ()
    middle = _apply(config, {"rope_scaling": YARN}, "0.19.0")
    assert _context(middle, "0.19.0") == 32768 and middle.spec == _spec(config)
    assert "rope_scaling" in middle.unapplied[0] and "rope_parameters" in middle.unapplied[0]
    new = _apply(config, {"rope_scaling": YARN}, "0.33.0")
    assert new.unapplied == () and new.spec.context is not None and new.spec.context.rope_type == "yarn"
    assert _context(new, "0.33.0") == 32768
    with pytest.raises(HfOverridesError, match="differently across vLLM releases"):
        _apply(config, {"rope_scaling": YARN}, None)
    with pytest.raises(HfOverridesError, match="differently across vLLM releases"):
        _apply(config, {"rope_scaling": YARN}, "0.20.2")  # transformers 4 and 5 disagree


def test_rope_parameters_is_what_0_12_reads() -> None:
    config = _qwen()
    assert _context(_apply(config, {"rope_parameters": YARN}, "0.19.0"), "0.19.0") == 131072
    ignored = _apply(config, {"rope_parameters": YARN}, "0.11.0")  # <= 0.11 reads rope_scaling only
    assert ignored.spec == _spec(config) and ignored.unapplied


def test_the_legacy_type_key_works_only_where_vllm_normalises_it() -> None:
    legacy = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert _context(_apply(_qwen(), {"rope_scaling": legacy}, "0.11.0"), "0.11.0") == 131072
    for version in ("0.8.5", "0.11.1", "0.33.0"):  # applied after the patching: rp["rope_type"] fails
        with pytest.raises(HfOverridesError, match="KeyError"):
            _apply(_qwen(), {"rope_scaling": legacy}, version)
    conflicting = {"rope_type": "yarn", "type": "linear", "factor": 4.0, "original_max_position_embeddings": 1}
    with pytest.raises(HfOverridesError, match="would fail to start"):
        _apply(_qwen(), {"rope_scaling": conflicting}, "0.11.0")


def test_yarn_without_its_original_length_fails_where_vllm_reads_it() -> None:
    with pytest.raises(HfOverridesError, match="original_max_position_embeddings"):
        _apply(_qwen(), {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "0.19.0")


def test_nested_objects_merge_into_the_text_config_from_0_11_1() -> None:
    config = _llava()
    result = _apply(config, {"text_config": {"max_position_embeddings": 4096}}, "0.19.0")
    assert result.spec.derived_max_model_len == 4096 and result.planned == ("text_config.max_position_embeddings=4096",)
    # the merge keeps the rest of the published rope object (rope_type llama3: the context is not scaled)
    merged = _apply(config, {"text_config": {"rope_scaling": {"rope_type": "linear"}}}, "0.19.0")
    assert merged.spec.context is not None and merged.spec.context.rope_type == "linear"
    assert merged.spec.context.rope_factor == 8.0 and _context(merged, "0.19.0") == 131072 * 8
    with pytest.raises(HfOverridesError, match="replaces the whole text_config section"):
        _apply(config, {"text_config": {"max_position_embeddings": 4096}}, "0.11.0")
    with pytest.raises(HfOverridesError, match=re.escape('write {"text_config"')):
        _apply(config, {"max_position_embeddings": 4096}, "0.19.0")  # vLLM reads the text config's own
    with pytest.raises(HfOverridesError, match="does not have"):
        _apply(_qwen(), {"text_config": {"max_position_embeddings": 4096}}, "0.19.0")
    with pytest.raises(HfOverridesError, match="vision_config"):
        _apply(config, {"vision_config": {"num_hidden_layers": 12}}, "0.19.0")


def test_shapes_are_planned_with_estimated_weights() -> None:
    config = _qwen()
    result = _apply(config, {"num_hidden_layers": 4}, "0.19.0")
    assert result.spec.num_layers == 4 and result.spec.layer_pattern == "FFFF"
    assert result.spec.checkpoint_bytes is None and result.spec.parameters is None
    assert "weights estimated" in result.summary()
    widened = _apply(config, {"num_key_value_heads": 8}, "0.19.0")
    assert widened.spec.num_kv_heads == 8


def test_shapes_the_config_class_derives_are_not_planned() -> None:
    """LlamaConfig sets head_dim = hidden_size // heads and num_key_value_heads = heads when it is built,
    before vLLM applies the override; other classes compute them when vLLM asks."""
    config = _qwen()
    with pytest.raises(HfOverridesError, match="set head_dim too"):
        _apply(config, {"hidden_size": 4096}, "0.19.0")
    assert _apply(config, {"hidden_size": 4096, "head_dim": 128}, "0.19.0").spec.head_dim == 128
    sparse = _qwen()
    del sparse["num_key_value_heads"]
    with pytest.raises(HfOverridesError, match="KV head count"):
        _apply(sparse, {"num_attention_heads": 16, "head_dim": 128}, "0.19.0")
    gemma_like = _qwen(layer_types=["sliding_attention", "full_attention"] * 14, use_sliding_window=True)
    with pytest.raises(HfOverridesError, match="not all alike"):
        _apply(gemma_like, {"num_hidden_layers": 4}, "0.19.0")


def test_a_field_spelled_otherwise_by_the_config_is_not_planned() -> None:
    gpt2_like = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_embd": 768,
        "n_head": 12,
        "n_layer": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
    }
    with pytest.raises(HfOverridesError, match="spells the field n_positions"):
        _apply(gpt2_like, {"max_position_embeddings": 4096}, "0.19.0")
    assert _apply(gpt2_like, {"n_positions": 512}, "0.19.0").spec.derived_max_model_len == 512


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"architectures": ["Qwen2ForSequenceClassification"]}, "another model class"),
        ({"model_type": "llama"}, "another model class"),
        ({"quantization_config": {"quant_method": "fp8"}}, "how the checkpoint is loaded"),
        ({"torch_dtype": "float32"}, "how the checkpoint is loaded"),
        ({"sliding_window": 4096}, "derives each layer's attention kind"),
        ({"use_sliding_window": True}, "derives each layer's attention kind"),
        ({"some_new_field": 3}, "does not know whether vLLM sizes anything from it"),
        ({"max_position_embeddings": "4096"}, "must be a number"),
        ({"max_position_embeddings": 1e300}, "above the plausible bound"),
        ({"max_position_embeddings": float("nan")}, "finite"),
        ({"num_hidden_layers": 10**9}, "above the plausible bound"),
        ({"num_hidden_layers": 0}, "must be >= 1"),
        ({"rope_scaling": "yarn"}, "must be an object or null"),
        ({"rope_scaling": {"full_attention": YARN, "sliding_attention": YARN}}, "per-layer-type"),
    ],
)
def test_what_is_not_planned_says_why(overrides: dict[str, Any], says: str) -> None:
    with pytest.raises(HfOverridesError) as caught:
        _apply(_qwen(), overrides, "0.19.0")
    assert says in caught.value.message


def test_keys_that_change_no_memory_are_listed_as_ignored() -> None:
    result = _apply(_qwen(), {"eos_token_id": 2, "rms_norm_eps": 1e-5, "rope_theta": 2e6}, "0.19.0")
    assert result.spec == _spec(_qwen()) and result.planned == ()
    assert [item.split(" ")[0] for item in result.ignored] == ["eos_token_id", "rms_norm_eps", "rope_theta"]


def test_a_catalog_entry_takes_context_keys_only() -> None:
    """No config.json for a catalog model: its recorded context facts stand for it."""
    llama = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    result = apply_hf_overrides(llama, None, {"max_position_embeddings": 8192}, version=None)
    assert result.spec.derived_max_model_len == 8192 and result.spec.num_layers == llama.num_layers
    assert result.spec.checkpoint_bytes == llama.checkpoint_bytes  # the weights are the published ones
    with pytest.raises(HfOverridesError, match="catalog facts"):
        apply_hf_overrides(llama, None, {"num_hidden_layers": 8}, version="0.19.0")


def test_the_published_config_is_not_changed() -> None:
    config = _llava()
    before = copy.deepcopy(config)
    _apply(config, {"text_config": {"rope_scaling": {"factor": 2.0}, "max_position_embeddings": 4096}}, "0.33.0")
    assert config == before
