"""config.json -> ModelSpec for every attention design, on real configs from ../shared."""

from __future__ import annotations

import pytest

from planner.errors import InvalidModelConfigError, UnsupportedArchitectureError
from planner.models.config import parse_config


@pytest.mark.parametrize(
    ("name", "layers", "kv_heads", "head_dim", "design"),
    [
        ("meta-llama--Llama-3.1-8B", 32, 8, 128, "gqa"),
        ("Qwen--Qwen2.5-7B-Instruct", 28, 4, 128, "gqa"),
        ("microsoft--Phi-3-mini-4k-instruct", 32, 32, 96, "mha+sliding"),
        ("ybelkada--falcon-7b-sharded-bf16", 32, 1, 64, "mqa"),  # n_layer / n_head / multi_query
        ("THUDM--glm-4-9b-chat", 40, 2, 128, "gqa"),  # multi_query_group_num, kv_channels
        ("google--gemma-3-1b-it", 26, 1, 256, "mqa+sliding"),  # explicit head_dim
        ("deepseek-ai--DeepSeek-V3", 61, 128, 192, "mla"),
        ("openai--gpt-oss-20b", 24, 8, 64, "gqa+sliding"),
        ("ai21labs--Jamba-v0.1", 32, 8, 128, "gqa+mamba"),
        ("Qwen--Qwen3-Next-80B-A3B-Instruct", 48, 2, 256, "gqa+mamba"),
        ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 48, 8, 128, "gqa+chunked"),
    ],
)
def test_attention_facts(shared_model, name, layers, kv_heads, head_dim, design) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model(name)
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.attention_design) == (
        layers,
        kv_heads,
        head_dim,
        design,
    )


def test_mla_latent_is_kv_lora_rank_plus_rope(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("deepseek-ai--DeepSeek-V3")
    assert spec.mla is not None and spec.mla.latent_size == 576
    assert spec.quantization is not None and spec.quantization.method == "fp8"
    assert spec.mtp_layers == 1


@pytest.mark.parametrize(
    ("name", "pattern_start", "sliding", "full"),
    [
        ("google--gemma-2-9b-it", "SFSF", 21, 21),  # alternating, first layer sliding
        ("google--gemma-3-1b-it", "SSSSSF", 22, 4),  # every 6th layer global
        ("btly--hewo", "SSSSSF", 52, 10),  # sparse Gemma-3 27B text_config: class defaults fill in
        ("openai--gpt-oss-120b", "SFSF", 18, 18),  # explicit layer_types
        ("mistralai--Mistral-7B-Instruct-v0.3", "FFFF", 0, 32),  # sliding_window null
        ("bigcode--starcoder2-7b", "SSSS", 32, 0),  # one window on every layer
    ],
)
def test_sliding_window_layouts(shared_model, name, pattern_start, sliding, full) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model(name)
    assert spec.layer_pattern.startswith(pattern_start)
    assert (spec.count("S"), spec.count("F")) == (sliding, full)


def test_qwen25_sliding_window_is_off_when_use_sliding_window_false(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("Qwen--Qwen2.5-7B-Instruct")
    assert spec.sliding_window is None and set(spec.layer_pattern) == {"F"}


def test_llama4_chunked_on_rope_layers_full_on_every_fourth(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    assert spec.layer_pattern[:8] == "CCCFCCCF"
    assert (spec.count("C"), spec.count("F"), spec.attention_chunk_size) == (36, 12, 8192)
    assert spec.vision is not None and spec.vision.parameters > 0  # vision tower counted in weights


def test_hybrid_state_space_layers(shared_model) -> None:  # type: ignore[no-untyped-def]
    jamba = shared_model("ai21labs--Jamba-v0.1")
    assert jamba.layer_pattern[:8] == "MMMMFMMM" and jamba.count("F") == 4
    assert jamba.mamba is not None and jamba.mamba.kind == "mamba1" and jamba.mamba.d_inner == 8192
    qwen_next = shared_model("Qwen--Qwen3-Next-80B-A3B-Instruct")
    assert qwen_next.layer_pattern[:4] == "MMMF" and qwen_next.count("F") == 12
    assert qwen_next.mamba is not None and qwen_next.mamba.kind == "gated_delta_net"


def test_derived_context_follows_vllm(shared_model) -> None:  # type: ignore[no-untyped-def]
    assert shared_model("meta-llama--Llama-3.1-8B").derived_max_model_len == 131072  # llama3 rope: no factor
    assert shared_model("Qwen--Qwen2.5-7B-Instruct").derived_max_model_len == 32768
    assert shared_model("THUDM--glm-4-9b-chat").derived_max_model_len == 131072  # seq_length
    assert shared_model("ybelkada--falcon-7b-sharded-bf16").derived_max_model_len == 2048  # class default
    assert shared_model("deepseek-ai--DeepSeek-V3").derived_max_model_len == 163840  # yarn


def test_missing_architectures_names_the_field() -> None:
    with pytest.raises(InvalidModelConfigError) as caught:
        parse_config({"num_hidden_layers": 2}, model_id="x")
    assert caught.value.field == "architectures"


def test_missing_layer_count_names_the_field() -> None:
    with pytest.raises(InvalidModelConfigError, match="num_hidden_layers") as caught:
        parse_config(
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "hidden_size": 8,
                "num_attention_heads": 2,
                "vocab_size": 10,
            },
            model_id="x",
        )
    assert caught.value.field == "num_hidden_layers"


def test_sparse_text_config_takes_the_class_defaults() -> None:
    # LLaVA-1.5's text_config only says it is Llama with 32064 tokens; LlamaConfig fills in the rest.
    spec = parse_config(
        {
            "architectures": ["LlavaForConditionalGeneration"],
            "model_type": "llava",
            "text_config": {"model_type": "llama", "vocab_size": 32064},
            "vision_config": {
                "hidden_size": 1024,
                "num_hidden_layers": 24,
                "intermediate_size": 4096,
                "patch_size": 14,
                "image_size": 336,
            },
        },
        model_id="llava",
    )
    assert (spec.num_layers, spec.hidden_size, spec.num_kv_heads, spec.vocab_size) == (32, 4096, 32, 32064)
    assert spec.vision is not None


def test_an_omitted_tie_word_embeddings_follows_the_transformers_class() -> None:
    base = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 128}
    gpt2 = parse_config({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **base}, model_id="g")
    llama = parse_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "vocab_size": 100,
        },
        model_id="l",
    )
    assert gpt2.tie_word_embeddings is True and llama.tie_word_embeddings is False


def test_per_layer_moe_list_and_state_dtype() -> None:
    spec = parse_config(
        {
            "architectures": ["X"],
            "model_type": "x",
            "num_hidden_layers": 4,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "vocab_size": 100,
            "intermediate_size": 128,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "moe_layer_freq": [0, 1, 1, 0],
        },
        model_id="x",
    )
    assert spec.moe is not None and [spec.moe.is_moe_layer(i) for i in range(4)] == [False, True, True, False]
    with pytest.raises(InvalidModelConfigError, match="moe_layer_freq"):
        parse_config(
            {
                "architectures": ["X"],
                "model_type": "x",
                "num_hidden_layers": 4,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "n_routed_experts": 8,
                "num_experts_per_tok": 2,
                "moe_layer_freq": [0, 1],
            },
            model_id="x",
        )


def test_malformed_field_is_named() -> None:
    with pytest.raises(InvalidModelConfigError, match="hidden_size"):
        parse_config(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": "big",
                "num_attention_heads": 2,
                "vocab_size": 10,
            },
            model_id="x",
        )


def test_encoder_decoder_models_are_refused_with_the_field() -> None:
    with pytest.raises(UnsupportedArchitectureError) as caught:
        parse_config(
            {
                "architectures": ["T5ForConditionalGeneration"],
                "model_type": "t5",
                "num_layers": 6,
                "d_model": 512,
                "num_heads": 8,
                "vocab_size": 32128,
                "is_encoder_decoder": True,
            },
            model_id="t5-small",
        )
    assert caught.value.field == "is_encoder_decoder"


def test_layer_types_length_mismatch_is_reported() -> None:
    with pytest.raises(InvalidModelConfigError, match="layer_types"):
        parse_config(
            {
                "architectures": ["X"],
                "model_type": "x",
                "num_hidden_layers": 3,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "vocab_size": 10,
                "sliding_window": 16,
                "layer_types": ["full_attention", "sliding_attention"],
            },
            model_id="x",
        )


def test_quantized_checkpoint_declaring_fp8_kv_changes_auto() -> None:
    spec = parse_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 100,
            "intermediate_size": 128,
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
                "kv_cache_scheme": {"num_bits": 8, "type": "float"},
            },
        },
        model_id="x",
    )
    assert spec.quantization is not None and spec.quantization.kv_cache_dtype == "fp8"
