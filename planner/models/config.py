"""config.json -> ModelSpec, reading the fields the way vLLM (through transformers) reads them.

vLLM never sees the raw JSON: it sees a transformers config object, whose ``attribute_map`` lets
``num_hidden_layers`` find Falcon's ``n_layer`` and whose class defaults fill fields a sparse file
leaves out. This module reproduces the parts of that reading that decide KV-cache size and weight
bytes: field aliases (``vllm/transformers_utils/config.py: CONFIG_FIELD_ALIASES``), per-layer
attention kinds, MLA, Mamba/linear-attention state, MoE, quantization and the derived context
length (``vllm/config/model.py: _get_and_verify_max_len``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from planner.errors import InvalidModelConfigError, UnsupportedArchitectureError
from planner.models import layers as layer_kinds
from planner.models.bounds import check_config_bounds
from planner.models.quantization import parse_quantization
from planner.models.spec import (
    CompressedAttentionSpec,
    ContextSpec,
    MambaSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
    VisionSpec,
)
from planner.models.vision import estimate_vision_parameters

Config = Mapping[str, Any]

# Class defaults of transformers config classes whose published config.json files are often sparse
# (the file leaves out what the class fills in). Only fields that change sizing are listed.
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262_208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131_072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
    "gemma2": {"sliding_window": 4096, "tie_word_embeddings": True, "head_dim": 256},
    # transformers 5 Gemma4TextConfig class defaults (models/gemma4/configuration_gemma4.py).
    "gemma4_text": {
        "vocab_size": 262_144,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 30,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131_072,
        "tie_word_embeddings": True,
    },
    "gemma": {"tie_word_embeddings": True},
    "falcon": {"max_position_embeddings": 2048, "vocab_size": 65_024, "tie_word_embeddings": True},
    "starcoder2": {"tie_word_embeddings": True},
    "phi3": {"tie_word_embeddings": False},
    # LlamaConfig's defaults, which sparse multimodal text_config sections (LLaVA) rely on.
    "llama": {
        "max_position_embeddings": 2048,
        "vocab_size": 32_000,
        "hidden_size": 4096,
        "intermediate_size": 11_008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
    },
    "mistral": {"max_position_embeddings": 4096 * 32},
    "gpt2": {"n_positions": 1024},
}

# Aliases as transformers' attribute_map and vLLM's CONFIG_FIELD_ALIASES resolve them (first wins).
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model", "model_dim"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "num_kv_heads": (
        "n_head_kv",
        "num_kv_heads",
        "num_key_value_heads",
        "multi_query_group_num",
        "num_attention_groups",
    ),
    "vocab_size": ("padded_vocab_size", "vocab_size"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "ff_intermediate_size", "n_inner", "ffn_dim"),
    "num_experts": ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts"),
    "num_experts_per_token": (
        "num_experts_per_tok",
        "num_experts_per_token",
        "top_k_experts",
        "moe_topk",
        "moe_top_k",
        "moe_k",
        "top_k",
    ),
    "num_shared_experts": ("n_shared_experts", "moe_num_shared_experts", "num_shared_experts"),
}
_ALIASES = FIELD_ALIASES

# vLLM's possible max-length keys, in its order (model_arch_config_convertor.derive_max_model_len_and_key).
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_MAX_LEN_KEYS = MAX_LEN_KEYS

# Architectures whose MLP is up+down (GELU), not gate+up+down.
_UNGATED_MLP_TYPES = {
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "falcon",
    "starcoder2",
    "phi",
    "opt",
    "bloom",
    "mpt",
    "gptj",
    "codegen",
    "stablelm_epoch",
    "nemotron",
    "nemotron_h",
}

_ENCODER_DECODER_TYPES = {"t5", "mt5", "bart", "mbart", "whisper", "pegasus", "marian", "m2m_100"}
_ENCODER_ONLY_TYPES = {"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "electra"}


class _Reader:
    """Field access with aliases, class defaults and errors that name the field."""

    def __init__(self, text: Config, top: Config, model_id: str) -> None:
        self.text = text
        self.top = top
        self.model_id = model_id
        model_type = text.get("model_type") or top.get("model_type")
        self.defaults = _MODEL_TYPE_DEFAULTS.get(str(model_type), {})

    def get(self, name: str, default: Any = None) -> Any:
        for key in _ALIASES.get(name, (name,)):
            value = self.text.get(key)
            if value is not None:
                return value
        for key in _ALIASES.get(name, (name,)):
            if key in self.defaults:
                return self.defaults[key]
        return default

    def integer(self, name: str, default: int | None = None, *, minimum: int = 0) -> int:
        value = self.get(name, default)
        if value is None:
            names = " / ".join(_ALIASES.get(name, (name,)))
            raise InvalidModelConfigError(
                f"{self.model_id}: config.json has no {names}", field=_ALIASES.get(name, (name,))[0]
            )
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            value = max(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise InvalidModelConfigError(
                f"{self.model_id}: config.json field {name} must be an integer, got {value!r}", field=name
            )
        if int(value) < minimum:
            raise InvalidModelConfigError(
                f"{self.model_id}: config.json field {name} must be >= {minimum}, got {value}", field=name
            )
        return int(value)

    def opt_int(self, name: str) -> int | None:
        return self.integer(name) if self.get(name) is not None else None


TEXT_SECTIONS = ("text_config", "llm_config", "language_config")


def text_section(config: Config) -> str | None:
    """The key of the section :func:`text_config_of` reads the language model from, None for a flat config."""
    for key in TEXT_SECTIONS:
        if isinstance(config.get(key), Mapping):
            return key
    return None


def text_config_of(config: Config) -> Config:
    """The language-model part of a (possibly multimodal) config: ``text_config`` when present."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        merged = dict(text)
        # Fields some multimodal files keep only at the top level.
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key not in merged and key in config:
                merged[key] = config[key]
        return merged
    for key in ("llm_config", "language_config"):
        if isinstance(config.get(key), Mapping):
            return dict(config[key])
    return config


def parse_config(config: Config, *, model_id: str) -> ModelSpec:
    """Turn a Hugging Face ``config.json`` (as a dict) into a :class:`ModelSpec`.

    Raises :class:`InvalidModelConfigError` naming the field when a needed field is missing or
    malformed, and :class:`UnsupportedArchitectureError` for designs vLLM cannot serve as a decoder.
    """
    if not isinstance(config, Mapping):
        raise InvalidModelConfigError(f"{model_id}: config.json must be a JSON object")
    check_config_bounds(config, model_id=model_id)
    try:
        return _parse(config, model_id)
    except ValidationError as error:
        # The bounds above keep sizes finite and plausible; a value the spec still refuses (a negative size the
        # parser does not check itself) is the file's fault too, never an internal error.
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise InvalidModelConfigError(
            f"{model_id}: config.json gives an impossible {where}: {first['msg']} (got {first.get('input')!r:.40})",
            field=where,
        ) from None


def _parse(config: Config, model_id: str) -> ModelSpec:
    text = text_config_of(config)
    reader = _Reader(text, config, model_id)
    architectures = config.get("architectures") or text.get("architectures")
    if not architectures or not isinstance(architectures, list) or not isinstance(architectures[0], str):
        raise InvalidModelConfigError(
            f"{model_id}: config.json has no 'architectures' list; vLLM needs it to pick the model class",
            field="architectures",
        )
    architecture = architectures[0]
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    _reject_unservable(config, text, model_id, model_type)

    num_layers = reader.integer("num_hidden_layers", minimum=1)
    hidden = reader.integer("hidden_size", minimum=1)
    heads = reader.integer("num_attention_heads", minimum=1)
    mla = _mla(reader)
    compressed = _compressed_attention(reader, text, num_layers, model_type)
    kv_heads = _kv_heads(reader, heads, model_type)
    head_dim = _head_dim(reader, hidden, heads, mla)
    head_dim_v = mla.v_head_dim if mla is not None else _opt_head_dim_v(reader, head_dim)
    pattern, sliding_window, chunk = layer_kinds.layer_pattern(text, num_layers, model_type, model_id)
    mamba = _mamba(reader, hidden, model_type) if "M" in pattern else None
    if "M" in pattern and mamba is None:
        raise UnsupportedArchitectureError(
            f"{model_id}: hybrid layers without a recognisable state-space config (mamba_* / linear_*)",
            field="layer_types",
        )
    if not any(letter in pattern for letter in "FSC") and "M" in pattern:
        kv_heads = 0  # pure state-space model: no attention KV cache at all
    moe = _moe(reader, model_type, num_layers)
    quant, quant_notes = parse_quantization(
        config.get("quantization_config") or text.get("quantization_config"), model_id=model_id
    )
    if quant is not None and compressed is not None and str(text.get("expert_dtype") or "").lower() == "fp4":
        # DeepSeek-V4: fp8 linears, routed experts stored as fp4 (e2m1, two a byte) + one E8M0 scale per 32.
        quant = quant.model_copy(update={"expert_weight_bits": 4 + 8 / 32})
    context = _context(reader, text)
    derived, key = derived_max_model_len(context, model_type, rules="newest")
    vision = _vision(config)
    intermediate = _intermediate(reader, hidden, model_type, moe)
    notes = list(quant_notes)
    full_head_dim, full_kv_heads = _full_attention_shape(reader, model_type, head_dim, kv_heads)
    if sliding_window is not None and "S" not in pattern and compressed is None:
        notes.append("sliding_window is set but no layer uses it (e.g. use_sliding_window=false)")
    return ModelSpec(
        id=model_id,
        architecture=architecture,
        model_type=model_type or "unknown",
        dtype=_dtype(config, text),
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        head_dim_v=head_dim_v if head_dim_v != head_dim else None,
        full_attention_head_dim=full_head_dim,
        full_attention_kv_heads=full_kv_heads,
        kv_shared_layers=len(pattern) - len(pattern.rstrip("N")) if model_type == "gemma4_text" else 0,
        vocab_size=reader.integer("vocab_size", minimum=1),
        intermediate_size=intermediate,
        mlp_gated=model_type not in _UNGATED_MLP_TYPES,
        attention_bias=bool(
            text.get("attention_bias")
            or text.get("add_qkv_bias")
            or text.get("qkv_bias")
            or text.get("use_bias")
            or model_type in ("qwen2", "qwen2_moe")
        ),
        tie_word_embeddings=_tied(reader, model_type),
        max_position_embeddings=reader.opt_int("max_position_embeddings"),
        derived_max_model_len=derived,
        derived_max_model_len_key=key,
        context=context,
        layer_pattern=pattern,
        sliding_window=sliding_window if "S" in pattern or compressed is not None else None,
        attention_chunk_size=chunk if "C" in pattern else None,
        mla=mla,
        compressed_attention=compressed,
        moe=moe,
        mamba=mamba,
        quantization=quant,
        vision=vision,
        mtp_layers=reader.integer("num_nextn_predict_layers", 0) or reader.integer("mtp_num_hidden_layers", 0),
        single_block_layers=layer_kinds.nemotron_pattern(text, model_type) is not None,
        rotary_dim=compressed.rope_head_dim if compressed is not None else _rotary_dim(text, head_dim, mla),
        mrope=_mrope(text),
        notes=notes,
    )


def _full_attention_shape(
    reader: _Reader, model_type: str, head_dim: int, kv_heads: int
) -> tuple[int | None, int | None]:
    """(head size, KV heads) of the full-attention layers where they differ from the sliding ones.

    Gemma-4 (transformers 5 ``Gemma4TextConfig.__post_init__``, read by vLLM 0.33 through
    ``config.per_layer_config[i]`` in ``gemma4.py: Gemma4DecoderLayer``): full layers take
    ``global_head_dim`` (512 when absent) and, only when ``attention_k_eq_v`` is true,
    ``num_global_key_value_heads``. K and V are both cached at that size (k_eq_v loads K into both slots).
    """
    if model_type != "gemma4_text":
        return None, None
    full_head = reader.integer("global_head_dim", 512, minimum=1)
    full_kv = kv_heads
    if reader.get("attention_k_eq_v", False) and reader.get("num_global_key_value_heads") is not None:
        full_kv = reader.integer("num_global_key_value_heads", minimum=1)
    return (full_head if full_head != head_dim else None), (full_kv if full_kv != kv_heads else None)


def _reject_unservable(config: Config, text: Config, model_id: str, model_type: str) -> None:
    if text.get("swa_num_key_value_heads") is not None or text.get("block_configs") is not None:
        field = "swa_num_key_value_heads" if text.get("swa_num_key_value_heads") is not None else "block_configs"
        raise UnsupportedArchitectureError(
            f"{model_id}: layers with different attention shapes ({field}) are not modelled by kv-planner",
            field=field,
        )
    if config.get("is_encoder_decoder") or model_type in _ENCODER_DECODER_TYPES:
        raise UnsupportedArchitectureError(
            f"{model_id}: encoder-decoder model (is_encoder_decoder / model_type={model_type!r}); "
            "kv-planner sizes decoder-only KV caches (cross-attention caches are not modelled)",
            field="is_encoder_decoder",
        )
    if model_type in _ENCODER_ONLY_TYPES:
        raise UnsupportedArchitectureError(
            f"{model_id}: encoder-only model (model_type={model_type!r}) keeps no KV cache in vLLM",
            field="model_type",
        )


# transformers classes whose __init__ defaults tie_word_embeddings to False; every other class inherits
# PretrainedConfig's True (OPT, GPT-2, BLOOM, Phi-3-small...), which a config.json that omits the field gets.
_UNTIED_BY_DEFAULT = {
    "llama",
    "llama4",
    "llama4_text",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe_text",
    "phi3",
    "phimoe",
    "deepseek_v2",
    "deepseek_v3",
    "granite",
    "granitemoe",
    "jamba",
    "gpt_neox",
    "gptj",
    "olmo",
    "olmo2",
    "internlm2",
    "chatglm",
    "glm4",
    "glm4_moe",
    "kimi_k2",
    "mllama",
    "nemotron",
    "nemotron_h",
    "exaone",
    "minimax",
    "minimax_m2",
    "ernie4_5_moe",
    "starcoder",
    "mimo",
    "kimi_linear",
    "deepseek_v4",
}


def _tied(reader: _Reader, model_type: str) -> bool:
    value = reader.get("tie_word_embeddings")
    if value is not None:
        return bool(value)
    return model_type not in _UNTIED_BY_DEFAULT


def _kv_heads(reader: _Reader, heads: int, model_type: str) -> int:
    # Falcon: multi_query without new_decoder_architecture means one KV head (vLLM's Falcon convertor).
    if (
        model_type == "falcon"
        and not reader.get("new_decoder_architecture", False)
        and reader.get("multi_query", False)
    ):
        return 1
    # ChatGLM: multi_query_group_num applies only when multi_query_attention is on.
    if model_type == "chatglm" and not reader.get("multi_query_attention", False):
        return heads
    value = reader.get("num_kv_heads")
    if value is None:
        return heads
    return reader.integer("num_kv_heads", minimum=1)


def _head_dim(reader: _Reader, hidden: int, heads: int, mla: MlaSpec | None) -> int:
    if mla is not None:
        # The attention (Q/K) head size; the cached size is mla.latent_size.
        return mla.qk_nope_head_dim + mla.qk_rope_head_dim
    explicit = reader.get("head_dim")
    if isinstance(explicit, int) and explicit > 0:
        return explicit
    for key in ("hidden_size_per_head", "kv_channels", "attention_head_dim"):
        value = reader.get(key)
        if isinstance(value, int) and value > 0:
            return value
    if hidden % heads:
        raise InvalidModelConfigError(
            f"{reader.model_id}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
            "and config.json gives no head_dim",
            field="head_dim",
        )
    return hidden // heads


def _opt_head_dim_v(reader: _Reader, head_dim: int) -> int:
    value = reader.get("v_head_dim")
    return value if isinstance(value, int) and value > 0 else head_dim


def _mla(reader: _Reader) -> MlaSpec | None:
    if reader.get("kv_lora_rank") is None:
        return None
    return MlaSpec(
        kv_lora_rank=reader.integer("kv_lora_rank", minimum=1),
        qk_rope_head_dim=reader.integer("qk_rope_head_dim", 0),
        qk_nope_head_dim=reader.integer("qk_nope_head_dim", 0),
        v_head_dim=reader.integer("v_head_dim", minimum=1),
        q_lora_rank=reader.opt_int("q_lora_rank"),
        indexer_head_dim=_indexer_head_dim(reader),
    )


def _indexer_head_dim(reader: _Reader) -> int | None:
    """DeepSeek-V3.2's sparse-attention indexer: vLLM builds one whenever the config has ``index_topk``
    (``deepseek_v2.py``: ``is_v32 = hasattr(config, "index_topk")``), on every layer unless
    ``index_topk_freq`` / ``index_topk_pattern`` skip some (``models/deepseek_v32/attention.py``)."""
    if reader.get("index_topk") is None:
        return None
    if (reader.get("index_topk_freq") or 1) != 1 or reader.get("index_topk_pattern") is not None:
        raise UnsupportedArchitectureError(
            f"{reader.model_id}: an indexer on only some layers (index_topk_freq / index_topk_pattern) is not "
            "modelled by kv-planner",
            field="index_topk_freq",
        )
    return reader.integer("index_head_dim", 128, minimum=1)


def _mamba(reader: _Reader, hidden: int, model_type: str) -> MambaSpec | None:
    kda = reader.get("linear_attn_config")
    if isinstance(kda, Mapping):  # Kimi delta attention (Kimi-Linear)
        return _kda(kda, reader.model_id)
    ssm_dtype = _dtype_name(reader.get("mamba_ssm_dtype") or reader.get("mamba_ssm_cache_dtype"))
    if reader.get("linear_num_value_heads") is not None:  # gated delta net (Qwen3-Next, Qwen3.5)
        return MambaSpec(
            kind="gated_delta_net",
            ssm_dtype=ssm_dtype,
            conv_kernel=reader.integer("linear_conv_kernel_dim", 4),
            num_k_heads=reader.integer("linear_num_key_heads", minimum=1),
            num_v_heads=reader.integer("linear_num_value_heads", minimum=1),
            k_head_dim=reader.integer("linear_key_head_dim", minimum=1),
            v_head_dim=reader.integer("linear_value_head_dim", minimum=1),
        )
    num_heads = reader.get("mamba_n_heads") or reader.get("mamba_num_heads")
    d_state = reader.get("mamba_d_state") or reader.get("ssm_state_size") or reader.get("state_size")
    conv = reader.get("mamba_d_conv") or reader.get("conv_kernel") or reader.get("mamba_conv_kernel") or 4
    expand = reader.get("mamba_expand") or reader.get("expand") or 2
    if num_heads:  # mamba2 (NemotronH, Zamba2, Falcon-H1, Granite-4.0-H, Bamba)
        head_dim = reader.get("mamba_d_head") or reader.get("mamba_head_dim")
        head_dim = int(head_dim) if head_dim else int(expand) * hidden // int(num_heads)
        return MambaSpec(
            kind="mamba2",
            ssm_dtype=ssm_dtype,
            conv_kernel=int(conv),
            d_inner=int(num_heads) * head_dim,
            d_state=int(d_state or 128),
            n_groups=int(reader.get("mamba_n_groups") or reader.get("n_groups") or 1),
            num_heads=int(num_heads),
            head_dim=head_dim,
        )
    if d_state is not None:  # mamba1 (Jamba, Mamba)
        d_inner = reader.get("mamba_d_inner") or reader.get("intermediate_size_mamba")
        return MambaSpec(
            kind="mamba1",
            ssm_dtype=ssm_dtype,
            conv_kernel=int(conv),
            d_inner=int(d_inner) if d_inner else int(expand) * hidden,
            d_state=int(d_state),
        )
    return None


def _kda(config: Mapping[str, Any], model_id: str) -> MambaSpec:
    """Kimi delta attention's state, as ``MambaStateShapeCalculator.kda_state_shape`` sizes it from
    ``linear_attn_config``: ``num_heads`` heads of ``head_dim``, a ``short_conv_kernel_size`` convolution.
    The recurrent state is float32 (``MambaStateDtypeCalculator.kda_state_dtype``: "auto" means float32)."""

    def positive(key: str) -> int:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidModelConfigError(
                f"{model_id}: linear_attn_config.{key} must be a positive integer, got {value!r}",
                field="linear_attn_config",
            )
        return value

    return MambaSpec(
        kind="kda",
        conv_kernel=positive("short_conv_kernel_size"),
        num_heads=positive("num_heads"),
        head_dim=positive("head_dim"),
        ssm_dtype="float32",
    )


def _compressed_attention(
    reader: _Reader, text: Config, num_layers: int, model_type: str
) -> CompressedAttentionSpec | None:
    """DeepSeek-V4 (``model_type`` deepseek_v4) as transformers 5's ``DeepseekV4Config`` fills it in: head 512,
    64 RoPE dims (``qk_rope_head_dim``, else ``partial_rotary_factor x head_dim``), indexer 64 heads of 128,
    q/o LoRA ranks 1024, 8 output groups, mHC width 4 when the file leaves them out."""
    if model_type != "deepseek_v4":
        return None
    head = reader.integer("head_dim", 512, minimum=1)
    rope = reader.get("qk_rope_head_dim")
    if rope is None:
        factor = reader.get("partial_rotary_factor")
        rope = int(head * factor) if isinstance(factor, (int, float)) else 64
    return CompressedAttentionSpec(
        head_dim=head,
        rope_head_dim=int(rope),
        compress_ratios=layer_kinds.deepseek_v4_compress_ratios(text, num_layers, reader.model_id),
        index_head_dim=reader.integer("index_head_dim", 128, minimum=1),
        index_n_heads=reader.integer("index_n_heads", 64, minimum=1),
        q_lora_rank=reader.integer("q_lora_rank", 1024, minimum=1),
        o_lora_rank=reader.integer("o_lora_rank", 1024, minimum=1),
        o_groups=reader.integer("o_groups", 8, minimum=1),
        hc_mult=reader.integer("hc_mult", 4, minimum=1),
    )


def _moe(reader: _Reader, model_type: str, num_layers: int) -> MoeSpec | None:
    experts = reader.get("num_experts")
    if isinstance(experts, list):
        experts = experts[0]
    if not experts or int(experts) <= 1:
        return None
    top_k = reader.get("num_experts_per_token")
    if top_k is None:
        raise InvalidModelConfigError(
            f"{reader.model_id}: MoE config without num_experts_per_tok", field="num_experts_per_tok"
        )
    moe_inter = reader.get("moe_intermediate_size") or reader.get("intermediate_size")
    if model_type in ("mixtral", "gpt_oss", "jamba", "llama4_text", "llama4") and not reader.get(
        "moe_intermediate_size"
    ):
        moe_inter = reader.get("intermediate_size")
    shared = reader.integer("num_shared_experts", 0)
    shared_inter = reader.opt_int("shared_expert_intermediate_size") or reader.opt_int(
        "moe_shared_expert_intermediate_size"
    )
    if shared_inter and not shared:
        shared = 1
    if model_type in ("llama4_text", "llama4") and not shared:
        shared, shared_inter = 1, int(moe_inter)
    first_dense = reader.integer("first_k_dense_replace", 0)
    freq = reader.get("moe_layer_freq")
    mask = _moe_mask(freq, num_layers, reader)
    period = (
        reader.get("expert_layer_period")
        or reader.get("decoder_sparse_step")
        or reader.get("interleave_moe_layer_step")
        or (freq if isinstance(freq, int) else None)
        or 1
    )
    offset = reader.get("expert_layer_offset") or 0
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next") and int(period) > 1:
        offset = int(period) - 1  # Qwen: layer i is sparse when (i + 1) % decoder_sparse_step == 0
    return MoeSpec(
        num_experts=int(experts),
        experts_per_token=int(top_k),
        moe_intermediate_size=int(moe_inter or 1),
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared_inter,
        first_dense_layers=min(first_dense, num_layers),
        moe_layer_period=int(period),
        moe_layer_offset=int(offset),
        layer_mask=mask,
    )


def _moe_mask(freq: Any, num_layers: int, reader: _Reader) -> str | None:
    """A per-layer MoE mask from a list-valued ``moe_layer_freq`` or NemotronH's ``hybrid_override_pattern``."""
    pattern = layer_kinds.nemotron_pattern(reader.text, str(reader.text.get("model_type") or ""))
    if isinstance(pattern, str) and len(pattern) == num_layers:
        return "".join("1" if c == "E" else "0" for c in pattern)
    if isinstance(freq, list):
        if len(freq) != num_layers or not all(isinstance(v, (int, bool)) for v in freq):
            raise InvalidModelConfigError(
                f"{reader.model_id}: moe_layer_freq must list 0/1 for each of the {num_layers} layers",
                field="moe_layer_freq",
            )
        return "".join("1" if v else "0" for v in freq)
    return None


def _intermediate(reader: _Reader, hidden: int, model_type: str, moe: MoeSpec | None) -> int:
    if model_type in ("llama4_text", "llama4"):
        return int(reader.get("intermediate_size_mlp") or reader.get("intermediate_size") or 0)
    value = reader.get("intermediate_size")
    if value is None and moe is None:
        return 4 * hidden  # GPT-2 style default: n_inner = 4 * hidden
    if moe is not None and value == moe.moe_intermediate_size and moe.first_dense_layers == 0:
        return int(value)
    return int(value or 0)


def _dtype_name(value: Any) -> Literal["float32", "bfloat16", "float16"] | None:
    names: dict[str, Literal["float32", "bfloat16", "float16"]] = {
        "float32": "float32",
        "fp32": "float32",
        "bfloat16": "bfloat16",
        "bf16": "bfloat16",
        "float16": "float16",
        "fp16": "float16",
        "half": "float16",
    }
    return names.get(str(value).replace("torch.", "").lower()) if value else None


def _dtype(config: Config, text: Config) -> str:
    for source in (text, config):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if isinstance(value, str):
                normalized = value.replace("torch.", "")
                if normalized in ("bfloat16", "float16", "float32"):
                    return normalized
                if normalized in ("half", "fp16"):
                    return "float16"
    # No dtype in the file: transformers defaults to float32, which vLLM's "auto" downcasts to bf16.
    return "bfloat16"


def _rope_parameters(text: Config) -> Mapping[str, Any]:
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    return rope if isinstance(rope, Mapping) else {}


def _rotary_dim(text: Config, head_dim: int, mla: MlaSpec | None) -> int | None:
    if mla is not None:
        return mla.qk_rope_head_dim
    # transformers 5 moves partial_rotary_factor into rope_parameters (Qwen3.5's config.json has it only there);
    # vLLM's get_rope reads it from rope_parameters, where its config patching puts the top-level one too.
    factor = text.get("partial_rotary_factor", _rope_parameters(text).get("partial_rotary_factor"))
    if isinstance(factor, (int, float)) and 0 < factor < 1:
        return int(head_dim * factor)
    return None


def _mrope(text: Config) -> bool:
    """get_rope builds MRotaryEmbedding when the rope parameters have an mrope_section (Qwen2.5-VL's
    ``"type": "mrope"`` is normalised to that by vLLM's config patching)."""
    rope = _rope_parameters(text)
    return "mrope_section" in rope or rope.get("type") == "mrope" or rope.get("rope_type") == "mrope"


def _context(reader: _Reader, text: Config) -> ContextSpec:
    base: int | None = None
    base_key: str | None = None
    for key in _MAX_LEN_KEYS:
        value = text.get(key, reader.defaults.get(key))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (base is None or value < base):
            base, base_key = int(value), key
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    rope_type = rope_factor = rope_original = None
    if isinstance(rope, Mapping):
        if rope and all(isinstance(v, Mapping) for v in rope.values()):  # per-layer-type parameters
            rope = next(iter(rope.values()))
        rope_type = rope.get("rope_type") or rope.get("type")
        factor = rope.get("factor")
        rope_factor = float(factor) if isinstance(factor, (int, float)) else None
        original = rope.get("original_max_position_embeddings", text.get("original_max_position_embeddings"))
        rope_original = int(original) if isinstance(original, (int, float)) else None
    model_max = text.get("model_max_length")
    return ContextSpec(
        base_max_len=base,
        base_key=base_key,
        model_max_length=int(model_max) if isinstance(model_max, (int, float)) else None,
        rope_type=str(rope_type) if rope_type else None,
        rope_factor=rope_factor,
        rope_original_max_position=rope_original,
    )


def context_of(config: Config, *, model_id: str) -> tuple[ContextSpec, int, str | None, int | None]:
    """The context facts of a config alone: (context, derived max_model_len with the newest rules, its key,
    max_position_embeddings). For configs whose other fields are not known (a catalog entry's context, with
    ``--hf-overrides`` applied); the sizes are bounds-checked first, as :func:`parse_config` does."""
    check_config_bounds(config, model_id=model_id)
    text = text_config_of(config)
    reader = _Reader(text, config, model_id)
    context = _context(reader, text)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    derived, key = derived_max_model_len(context, model_type, rules="newest")
    return context, derived, key, reader.opt_int("max_position_embeddings")


def derived_max_model_len(context: ContextSpec, model_type: str, *, rules: str) -> tuple[int, str | None]:
    """vLLM's derived max_model_len from the config (before the user's --max-model-len).

    ``rules`` is ``"newest"`` (0.20+: YaRN leaves max_position_embeddings as the scaled length) or
    ``"yarn-original"`` (<= 0.19: YaRN uses original_max_position_embeddings x factor).
    """
    length: float = float(context.base_max_len) if context.base_max_len is not None else float("inf")
    key = context.base_key
    if context.model_max_length is not None:
        length, key = float(context.model_max_length), "model_max_length"
    if length == float("inf"):
        return 2048, None  # vLLM assumes 2048 and warns when no key is present
    if context.rope_type and "gemma3" not in model_type:
        factor = context.rope_factor if context.rope_factor is not None else 1.0
        if rules == "newest":
            if context.rope_type not in ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"):
                length *= factor
        elif context.rope_type not in ("su", "longrope", "llama3"):
            if context.rope_type == "yarn" and context.rope_original_max_position is not None:
                length = float(context.rope_original_max_position)
            length *= factor
    return int(length), key


# Top-level model_type -> the vision tower family planner/memory/encoder.py derives the profile of.
_VISION_FAMILIES = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen3_vl": "qwen3_vl",
    "qwen3_vl_moe": "qwen3_vl",
    "qwen3_5": "qwen3_vl",
    "qwen3_5_moe": "qwen3_vl",
    "gemma3": "siglip",
    "llava_next": "clip_anyres",
    "mistral3": "pixtral",
    "llama4": "llama4",
}


def _positive(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _vision(config: Config) -> VisionSpec | None:
    """The vision tower: its parameter estimate and the encoder-profile facts of the families vLLM's profile is
    derived for (field names as each family's transformers config spells them)."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    parameters = estimate_vision_parameters(vision, config)
    family = _VISION_FAMILIES.get(str(config.get("model_type") or ""))
    if family is None:
        return VisionSpec(parameters=parameters, **_generic_vision_facts(vision, config))
    text = text_config_of(config)
    facts: dict[str, Any] = {"encoder": family}
    if family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        # Qwen2-VL names the ViT width embed_dim (its hidden_size is the merger's output) and sizes the MLP by
        # mlp_ratio; Qwen2.5-VL / Qwen3-VL give hidden_size, intermediate_size and out_hidden_size.
        width = _positive(vision.get("embed_dim")) if family == "qwen2_vl" else _positive(vision.get("hidden_size"))
        ratio = vision.get("mlp_ratio")
        inter = (
            int(width * ratio)
            if family == "qwen2_vl" and width and isinstance(ratio, (int, float))
            else _positive(vision.get("intermediate_size"))
        )
        out = _positive(vision.get("hidden_size")) if family == "qwen2_vl" else _positive(vision.get("out_hidden_size"))
        deepstack = vision.get("deepstack_visual_indexes")
        facts.update(
            depth=_positive(vision.get("depth")),
            hidden_size=width,
            num_heads=_positive(vision.get("num_heads")),
            intermediate_size=inter,
            patch_size=_positive(vision.get("patch_size")) or (16 if family == "qwen3_vl" else 14),
            in_channels=_positive(vision.get("in_channels") or vision.get("in_chans")) or 3,
            temporal_patch_size=_positive(vision.get("temporal_patch_size")) or 2,
            spatial_merge_size=_positive(vision.get("spatial_merge_size")) or 2,
            out_hidden_size=out,
            deepstack_layers=len(deepstack) if isinstance(deepstack, list) else 0,
        )
        return VisionSpec(parameters=parameters, **facts)
    facts.update(
        depth=_positive(vision.get("num_hidden_layers")),
        hidden_size=_positive(vision.get("hidden_size")),
        num_heads=_positive(vision.get("num_attention_heads")),
        intermediate_size=_positive(vision.get("intermediate_size")),
        patch_size=_positive(vision.get("patch_size")),
        in_channels=_positive(vision.get("num_channels")) or 3,
        image_size=_positive(vision.get("image_size")),
        out_hidden_size=_positive(text.get("hidden_size")),
    )
    if family == "siglip":
        facts["tokens_per_image"] = _positive(config.get("mm_tokens_per_image")) or 256
    elif family == "pixtral":
        facts["spatial_merge_size"] = _positive(config.get("spatial_merge_size")) or 1
    elif family == "clip_anyres":
        layer = config.get("vision_feature_layer", -2)
        if isinstance(layer, int) and layer < 0 and facts["depth"]:
            # vLLM builds the CLIP tower only up to the feature layer (num_hidden_layers_override).
            facts["depth"] = facts["depth"] + layer + 1
        tiles_tokens = _llava_next_largest(config.get("image_grid_pinpoints"), facts["image_size"], facts["patch_size"])
        if tiles_tokens is not None:
            facts["max_tiles"], facts["tokens_per_image"] = tiles_tokens
    elif family == "llama4":
        ratio = vision.get("pixel_shuffle_ratio", 0.5)
        side = (facts["image_size"] or 336) // (facts["patch_size"] or 14)
        if isinstance(ratio, (int, float)) and ratio > 0:
            # Llama4ImageProcessor max_patches (16) chunks plus the global tile, each pixel-shuffled
            # (mllama4.py get_patch_per_chunk, get_image_size_with_most_features: a 16:1 image).
            per_tile = side * side // round(1.0 / ratio**2)
            facts["max_tiles"] = 17
            facts["tokens_per_image"] = 17 * per_tile
    return VisionSpec(parameters=parameters, **facts)


def _generic_vision_facts(vision: Config, top: Config) -> dict[str, Any]:
    """Fields of an unrecognised vision_config for the generic ViT estimate (planner/memory/encoder.py): its width
    and depth, and either a fixed image size or a fixed token count per image with the patches pooled into one
    token (Gemma-4: image_seq_length / vision_soft_tokens_per_image, pooling_kernel_size)."""
    tokens = _positive(vision.get("image_seq_length") or top.get("vision_soft_tokens_per_image"))
    return {
        "depth": _positive(vision.get("num_hidden_layers") or vision.get("depth")),
        "hidden_size": _positive(vision.get("hidden_size") or vision.get("embed_dim") or vision.get("width")),
        "num_heads": _positive(vision.get("num_attention_heads") or vision.get("num_heads")),
        "intermediate_size": _positive(vision.get("intermediate_size")),
        "patch_size": _positive(vision.get("patch_size")),
        "image_size": _positive(vision.get("image_size")),
        "tokens_per_image": tokens,
        "spatial_merge_size": _positive(vision.get("spatial_merge_size") or vision.get("pooling_kernel_size")) or 1,
    }


def _llava_next_largest(pinpoints: Any, image_size: int | None, patch: int | None) -> tuple[int, int] | None:
    """(tiles, tokens) of LLaVA-NeXT's largest item: vLLM's get_image_size_with_most_features tries every
    pinpoint; one of h x w pixels gives (h/s x w/s) tiles plus the base tile, and features of the unpadded grid
    (h/s x n by w/s x n), one newline per row and the base tile's n x n (llava_next.py get_num_image_tokens)."""
    if not (isinstance(pinpoints, list) and image_size and patch):
        return None
    n = image_size // patch
    best: tuple[int, int] | None = None
    for point in pinpoints:
        if not (isinstance(point, list) and len(point) == 2 and all(isinstance(v, int) and v > 0 for v in point)):
            continue
        rows, cols = point[0] // image_size, point[1] // image_size
        tokens = rows * n * cols * n + rows * n + n * n
        if best is None or tokens > best[1]:
            best = (rows * cols + 1, tokens)
    return best
