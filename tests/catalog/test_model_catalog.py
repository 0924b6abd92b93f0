"""The embedded model catalog: coverage, sources, lookup, and agreement with real config.json files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from planner.calibration.dataset import dataset_records
from planner.errors import CatalogDataError, UnknownModelError
from planner.models import weights
from planner.models.catalog import DATA_DIR, all_models, build_index, lookup_model
from planner.models.config import parse_config
from planner.models.spec import ModelSpec
from tests.conftest import load_shared_config

REQUIRED = [
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct",
    "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-3.2-3B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "Qwen/Qwen2-7B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
    "Qwen/Qwen2.5-32B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen2.5-Coder-7B-Instruct",
    "Qwen/Qwen2.5-Coder-32B-Instruct",
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "mistralai/Mistral-7B-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-v0.1",
    "mistralai/Mistral-Small-24B-Instruct-2501",
    "google/gemma-7b",
    "google/gemma-2-2b-it",
    "google/gemma-2-9b-it",
    "google/gemma-2-27b-it",
    "google/gemma-3-1b-it",
    "google/gemma-3-4b-it",
    "google/gemma-3-12b-it",
    "google/gemma-3-27b-it",
    "microsoft/phi-2",
    "microsoft/Phi-3-mini-4k-instruct",
    "microsoft/Phi-3-medium-4k-instruct",
    "microsoft/phi-4",
    "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
    "ibm-granite/granite-3.3-8b-instruct",
    "codellama/CodeLlama-34b-Instruct-hf",
    "moonshotai/Kimi-K2-Instruct",
    "tiiuae/falcon-7b",
    "bigcode/starcoder2-7b",
    "THUDM/glm-4-9b-chat",
    "01-ai/Yi-34B",
    "ai21labs/Jamba-v0.1",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
    "Qwen/Qwen2.5-7B-Instruct-AWQ",
    "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
    "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4",
    # Models vLLM's docs, issues and deployments use often (second catalog round).
    "facebook/opt-125m",
    "openai-community/gpt2",
    "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-8B-Instruct",
    "meta-llama/Meta-Llama-3-70B-Instruct",
    "meta-llama/Llama-2-7b-chat-hf",
    "meta-llama/Llama-2-13b-chat-hf",
    "meta-llama/Llama-2-70b-chat-hf",
    "mistralai/Mistral-7B-Instruct-v0.1",
    "mistralai/Mistral-7B-Instruct-v0.2",
    "Qwen/Qwen2-0.5B-Instruct",
    "Qwen/Qwen2-72B-Instruct",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-VL-8B-Instruct",
    "google/gemma-2b",
    "deepseek-ai/DeepSeek-V3.1",
    "THUDM/chatglm3-6b",
    "tiiuae/falcon-40b",
    "TheBloke/Mistral-7B-Instruct-v0.2-AWQ",
]

# Fields that describe a catalog entry rather than the model's architecture.
CATALOG_ONLY = {"id", "source", "aliases", "parameters", "checkpoint_bytes", "popular_rank", "notes"}

# ../shared/model-configs file -> catalog entries whose architecture facts must equal parse_config's reading
# of it (the same model, or one the catalog documents as sharing that architecture).
SAME_ARCHITECTURE = {
    "Qwen--Qwen2.5-7B-Instruct": ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-Coder-7B-Instruct"],
    "Qwen--Qwen2.5-7B": ["Qwen/Qwen2.5-7B"],
    "Qwen--Qwen3-8B": ["Qwen/Qwen3-8B"],
    "Qwen--Qwen3-32B": ["Qwen/Qwen3-32B"],
    "Qwen--Qwen3-30B-A3B": ["Qwen/Qwen3-30B-A3B"],
    "Qwen--Qwen3-Next-80B-A3B-Instruct": ["Qwen/Qwen3-Next-80B-A3B-Instruct"],
    "meta-llama--Llama-3.1-8B": [
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-Guard-3-8B",
        "NousResearch/Hermes-3-Llama-3.1-8B",
    ],
    "meta-llama--Llama-3.1-70B": ["meta-llama/Llama-3.1-70B"],
    "meta-llama--Llama-3.1-70B-Instruct": [
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF",
    ],
    "meta-llama--Llama-3.1-405B": ["meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.1-405B-Instruct"],
    "meta-llama--Llama-3.2-1B": ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-1B-Instruct"],
    "meta-llama--Llama-3.2-3B": ["meta-llama/Llama-3.2-3B"],
    "meta-llama--Llama-3.2-3B-Instruct": ["meta-llama/Llama-3.2-3B-Instruct"],
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": ["meta-llama/Llama-4-Scout-17B-16E-Instruct"],
    "mistralai--Mistral-7B-Instruct-v0.3": ["mistralai/Mistral-7B-Instruct-v0.3"],
    "mistralai--Mixtral-8x7B-v0.1": ["mistralai/Mixtral-8x7B-v0.1"],
    "mistralai--Mixtral-8x7B-Instruct-v0.1": ["mistralai/Mixtral-8x7B-Instruct-v0.1"],
    "mistralai--Magistral-Small-2509": [
        "mistralai/Magistral-Small-2509",
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
    ],
    "google--gemma-2-9b-it": ["google/gemma-2-9b-it", "google/gemma-2-9b"],
    "google--gemma-2-27b-it": ["google/gemma-2-27b-it"],
    "google--gemma-3-1b-it": ["google/gemma-3-1b-it"],
    "btly--hewo": ["google/gemma-3-27b-it"],
    "deepseek-ai--DeepSeek-V3": [
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3-0324",
        "deepseek-ai/DeepSeek-V3.1",
    ],
    "deepseek-ai--DeepSeek-R1": ["deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"],
    "deepseek-ai--DeepSeek-V2-Lite": ["deepseek-ai/DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V2-Lite-Chat"],
    "openai--gpt-oss-20b": ["openai/gpt-oss-20b"],
    "openai--gpt-oss-120b": ["openai/gpt-oss-120b"],
    "microsoft--Phi-3-mini-4k-instruct": ["microsoft/Phi-3-mini-4k-instruct"],
    "ybelkada--falcon-7b-sharded-bf16": ["tiiuae/falcon-7b"],
    "bigcode--starcoder2-7b": ["bigcode/starcoder2-7b"],
    "ai21labs--Jamba-v0.1": ["ai21labs/Jamba-v0.1"],
    "ibm-granite--granite-3.3-8b-instruct": ["ibm-granite/granite-3.3-8b-instruct"],
    "THUDM--glm-4-9b-chat": ["THUDM/glm-4-9b-chat"],
    "01-ai--Yi-34B": ["01-ai/Yi-34B"],
    "TinyLlama--TinyLlama-1.1B-Chat-v1.0": ["TinyLlama/TinyLlama-1.1B-Chat-v1.0"],
    "HuggingFaceTB--SmolLM2-135M-Instruct": ["HuggingFaceTB/SmolLM2-135M-Instruct"],
}

# Quantized (or otherwise re-packaged) checkpoints of a shared config's model: same architecture, except
# for the listed fields.
DERIVED = [
    ("meta-llama--Llama-3.1-8B", "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", {"quantization"}),
    ("meta-llama--Llama-3.1-8B", "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", {"quantization"}),
    ("meta-llama--Llama-3.1-8B", "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", {"quantization"}),
    ("meta-llama--Llama-3.1-8B", "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", {"quantization"}),
    (
        "meta-llama--Llama-3.1-8B",
        "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
        {"quantization", "dtype"},
    ),
    (
        "meta-llama--Llama-3.1-70B-Instruct",
        "RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w4a16",
        {"quantization"},
    ),
    ("meta-llama--Llama-3.1-70B-Instruct", "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", {"quantization"}),
    (
        "meta-llama--Llama-3.1-70B-Instruct",
        "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
        {"quantization", "dtype"},
    ),
    ("meta-llama--Llama-3.1-70B-Instruct", "nvidia/Llama-3.1-70B-Instruct-FP8", {"quantization"}),
    ("Qwen--Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct-AWQ", {"quantization", "dtype"}),
    ("Qwen--Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", {"quantization", "dtype"}),
    ("Qwen--Qwen3-8B", "Qwen/Qwen3-8B-FP8", {"quantization"}),
    (
        "meta-llama--Llama-4-Scout-17B-16E-Instruct",
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        {"quantization"},
    ),
    ("ibm-granite--granite-3.3-8b-instruct", "ibm-granite/granite-3.1-8b-instruct", {"vocab_size"}),
    ("Qwen--Qwen2.5-7B-Instruct", "RedHatAI/Qwen2.5-7B-Instruct-FP8-dynamic", {"quantization"}),
    # Mistral-7B-Instruct-v0.2 is v0.3 with the 32000-token vocabulary.
    ("mistralai--Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-Instruct-v0.2", {"vocab_size"}),
    (
        "mistralai--Mistral-7B-Instruct-v0.3",
        "TheBloke/Mistral-7B-Instruct-v0.2-AWQ",
        {"vocab_size", "quantization", "dtype"},
    ),
    # The 2507 updates keep the architecture and raise max_position_embeddings to 262144.
    (
        "Qwen--Qwen3-30B-A3B",
        "Qwen/Qwen3-30B-A3B-Instruct-2507",
        {"max_position_embeddings", "derived_max_model_len", "context"},
    ),
]


def _parse(shared: str, model_id: str) -> ModelSpec:
    config = load_shared_config(shared)
    spec: ModelSpec = parse_config(config, model_id=model_id)
    return spec


def _facts(spec: ModelSpec, exclude: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    return spec.model_dump(exclude=CATALOG_ONLY | exclude)


def test_catalog_loads_with_enough_models() -> None:
    models = all_models()
    assert len(models) >= 50
    assert len({m.id for m in models}) == len(models)
    missing = [m for m in REQUIRED if m not in {x.id for x in models}]
    assert not missing


def test_every_entry_has_a_source() -> None:
    for model in all_models():
        assert model.source is not None
        assert model.source.url == f"https://huggingface.co/{model.id}"
        if model.source.revision is not None:
            assert re.fullmatch(r"[0-9a-f]{40}", model.source.revision), model.id
        if model.checkpoint_bytes is not None:
            assert model.source.checkpoint_bytes_source, model.id
        assert any(note.startswith("facts: ") for note in model.notes), model.id
        if model.parameters is not None and model.checkpoint_bytes is None:
            assert any(note.startswith("parameters: ") for note in model.notes), model.id


def test_checkpoint_bytes_agree_with_parameters() -> None:
    for model in all_models():
        if model.checkpoint_bytes is None or model.parameters is None or model.quantization is not None:
            continue
        assert model.checkpoint_bytes == 2 * model.parameters, model.id  # every such entry is a 16-bit checkpoint


def test_parameter_counts_match_the_architecture() -> None:
    """Exact HF parameter counts check the hand-written facts: the weight estimator, fed the catalog's
    architecture, must land on them (MTP modules, vision towers and stored copies of tied heads aside)."""
    checked = 0
    for model in all_models():
        if (
            model.parameters is None
            or model.quantization is not None
            or model.mtp_layers
            or model.vision
            or any("lm_head" in note or "MTP" in note for note in model.notes)
        ):
            continue
        estimate = weights.estimate_weights(model, dtype=model.dtype).parameters
        assert estimate == pytest.approx(model.parameters, rel=0.01), model.id
        checked += 1
    assert checked >= 30


@pytest.mark.parametrize("shared", sorted(SAME_ARCHITECTURE))
def test_catalog_agrees_with_real_configs(shared: str) -> None:
    for model_id in SAME_ARCHITECTURE[shared]:
        assert _facts(lookup_model(model_id)) == _facts(_parse(shared, model_id)), model_id


@pytest.mark.parametrize(("shared", "model_id", "differs"), DERIVED, ids=[d[1] for d in DERIVED])
def test_quantized_variants_keep_the_architecture(shared: str, model_id: str, differs: set[str]) -> None:
    entry = lookup_model(model_id)
    assert _facts(entry, differs) == _facts(_parse(shared, model_id), differs)
    if "quantization" in differs:
        assert entry.quantization is not None


def test_every_shared_config_with_a_catalog_entry_is_cross_checked(model_configs_dir: Path) -> None:
    covered = set(SAME_ARCHITECTURE)
    for path in model_configs_dir.glob("*.json"):
        model_id = path.stem.replace("--", "/")
        try:
            lookup_model(model_id)
        except UnknownModelError:
            continue
        assert path.stem in covered, f"{path.name} has a catalog entry but is not cross-checked"


def test_calibration_models_are_in_the_catalog() -> None:
    for record in dataset_records():
        names = [record.model] + ([record.base_model] if record.base_model else [])
        assert any(_known(name) for name in names), record.id


def _known(name: str) -> bool:
    try:
        lookup_model(name)
    except UnknownModelError:
        return False
    return True


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("META-LLAMA/llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        (
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
            "meta-llama/Llama-3.1-8B-Instruct",
        ),  # the repo's first name
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
        ("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),  # bare repository name, unique in the catalog
        ("https://huggingface.co/Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
        ("hf.co/Qwen/Qwen3-8B/tree/main", "Qwen/Qwen3-8B"),
        ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"),
        ("zai-org/glm-4-9b-chat", "THUDM/glm-4-9b-chat"),
        ("  deepseek-r1  ", "deepseek-ai/DeepSeek-R1"),
        ("llama3-8b-instruct", "meta-llama/Meta-Llama-3-8B-Instruct"),
        ("neuralmagic/Meta-Llama-3-8B-Instruct-FP8", "RedHatAI/Meta-Llama-3-8B-Instruct-FP8"),
        ("zai-org/chatglm3-6b", "THUDM/chatglm3-6b"),
        ("opt-125m", "facebook/opt-125m"),  # vLLM's quickstart model, by its bare name
    ],
)
def test_lookup(name: str, expected: str) -> None:
    assert lookup_model(name).id == expected


def test_tied_heads_that_config_files_leave_to_the_class_default() -> None:
    """OPT and GPT-2 files omit tie_word_embeddings; transformers (and so vLLM) ties their LM heads."""
    for model_id in ("facebook/opt-125m", "facebook/opt-1.3b", "openai-community/gpt2"):
        assert lookup_model(model_id).tie_word_embeddings, model_id


def test_every_id_and_alias_resolves_to_its_entry() -> None:
    for model in all_models():
        for spelling in (model.id, model.id.upper(), *model.aliases):
            assert lookup_model(spelling).id == model.id


def test_unknown_model_suggests_close_ids() -> None:
    with pytest.raises(UnknownModelError) as info:
        lookup_model("meta-llama/Llama-3.1-9B-Instruct")
    assert "meta-llama/Llama-3.1-8B-Instruct" in info.value.suggestions
    assert "Did you mean" in str(info.value)
    with pytest.raises(UnknownModelError) as info:
        lookup_model("nobody/nothing-at-all")
    assert info.value.suggestions == []


def test_the_yaml_files_are_packaged() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    pyproject = tomllib.loads((DATA_DIR.parents[2] / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    assert "data/*.yaml" in package_data["planner.models"]
    assert "data/*.yaml" in package_data["planner.gpus"]


# -------------------------------------------------------------------------------- broken catalogs

_ENTRY = """
  - id: {id}
    aliases: [{alias}]
    {source}
    architecture: LlamaForCausalLM
    model_type: llama
    num_layers: 2
    hidden_size: 64
    num_attention_heads: 4
    num_kv_heads: 2
    head_dim: 16
    vocab_size: 100
    intermediate_size: 128
    derived_max_model_len: 2048
    layer_pattern: FF
"""
_SOURCE = "source: {url: 'https://huggingface.co/x/y', verified: false}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "models:"
            + _ENTRY.format(id="a/one", alias="same", source=_SOURCE)
            + _ENTRY.format(id="a/two", alias="SAME", source=_SOURCE),
            "names both a/one and a/two",
        ),
        ("models:" + _ENTRY.format(id="a/one", alias="x", source=""), "has no source"),
        ("models:" + _ENTRY.format(id="noslash", alias="x", source=_SOURCE), "not a Hugging Face id"),
        (
            "models:"
            + _ENTRY.format(id="a/one", alias="x", source=_SOURCE).replace("layer_pattern: FF", "layer_pattern: F"),
            "does not validate",
        ),
        ("models: [", "cannot be read"),
        ("models: []", "non-empty `models:` list"),
        ("models:" + _ENTRY.format(id="a/one", alias="[x]", source=_SOURCE), "list of string `aliases`"),
        ("models:" + _ENTRY.format(id="123", alias="x", source=_SOURCE), "needs a string `id`"),
    ],
)
def test_a_broken_catalog_fails_loudly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(CatalogDataError, match=re.escape(message)):
        build_index([path])


def test_an_entry_is_validated_when_first_used(tmp_path: Path) -> None:
    """The lookup index (validate=False) checks ids, aliases and sources up front and each entry's spec on
    first use: a broken entry fails loudly when it is asked for, and the others still answer."""
    path = tmp_path / "mixed.yaml"
    good = _ENTRY.format(id="a/good", alias="g", source=_SOURCE)
    broken = _ENTRY.format(id="a/broken", alias="b", source=_SOURCE).replace("layer_pattern: FF", "layer_pattern: F")
    path.write_text("models:" + good + broken)
    index = build_index([path], validate=False)
    spec = index.by_key["g"].validated()
    assert spec.id == "a/good" and index.by_key["a/good"].validated() is spec  # one object per entry
    with pytest.raises(CatalogDataError, match=re.escape("mixed.yaml: a/broken does not validate")):
        index.by_key["b"].validated()
    with pytest.raises(CatalogDataError, match="does not validate"):
        index.all_specs()
    with pytest.raises(CatalogDataError, match="does not validate"):
        build_index([path])


def test_lookups_and_the_listing_share_one_spec_per_entry() -> None:
    """The per-model memos key on the spec's identity (planner/models/memo.py)."""
    listed = {model.id: model for model in all_models()}
    assert lookup_model("llama-3.1-8b-instruct") is listed["meta-llama/Llama-3.1-8B-Instruct"]
