"""Which kind of attention each decoder layer has (the ``layer_pattern`` of a ModelSpec).

Mirrors how vLLM's model classes decide per layer (0.33): ``layer_types`` when the config has it
(``sliding_attention`` / ``full_attention`` / ``chunked_attention`` / ``linear_attention`` /
``mamba``), otherwise the family's own rule — Gemma-2 alternates starting with a sliding layer,
Gemma-3 and Cohere2 make every ``sliding_window_pattern``-th layer global, Llama-4 uses chunked local
attention on RoPE layers and full attention on NoPE layers, Jamba puts attention at
``i % attn_layer_period == attn_layer_offset``, Qwen3-Next makes every ``full_attention_interval``-th
layer full attention. A single ``sliding_window`` with no per-layer list applies to every layer
(Mistral-7B-v0.1, Phi-3, StarCoder2), except where the config switches it off
(``use_sliding_window: false`` in Qwen2/Qwen3, or ``sliding_window: 0``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.errors import InvalidModelConfigError, UnsupportedArchitectureError

_TYPE_LETTERS = {
    "full_attention": "F",
    "attention": "F",
    "global": "F",
    "global_attention": "F",
    "sliding_attention": "S",
    "sliding_window": "S",
    "local": "S",
    "local_attention": "S",
    "chunked_attention": "C",
    "linear_attention": "M",
    "mamba": "M",
    "mamba2": "M",
    "ssm": "M",
}


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _period(text: Mapping[str, Any], key: str, model_id: str, *, minimum: int, default: int | None = None) -> int:
    """An integer layer period / offset of the config (the size bounds are checked before: planner/models/bounds.py)."""
    value = text.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise InvalidModelConfigError(
            f"{model_id}: config.json field {key} must be an integer >= {minimum}, got {value!r}", field=key
        )
    return int(value)


def layer_pattern(
    text: Mapping[str, Any], num_layers: int, model_type: str, model_id: str
) -> tuple[str, int | None, int | None]:
    """Return ``(pattern, sliding_window, attention_chunk_size)`` for the text config."""
    window = _int_or_none(text.get("sliding_window"))
    if model_type == "gemma3_text" and window is None:
        window = 4096
    if model_type == "gemma4_text":
        return _gemma4(text, num_layers, model_id, window)
    if model_type == "gemma2" and window is None:
        window = 4096
    if window == 0:
        window = None  # vLLM: sliding_window 0 means disabled
    if text.get("use_sliding_window") is False:
        window = None  # transformers drops the window when use_sliding_window is false (Qwen2/Qwen3)
    chunk = _int_or_none(text.get("attention_chunk_size"))

    if model_type == "deepseek_v4":
        ratios = deepseek_v4_compress_ratios(text, num_layers, model_id)
        # Every DeepSeek-V4 layer keeps a sliding-window cache (DeepseekV4Config: sliding_window 128 by default).
        return "".join("S" if r == 0 else "F" for r in ratios), window or 128, None
    if isinstance(text.get("linear_attn_config"), Mapping):
        return _kimi_linear(text["linear_attn_config"], num_layers, model_id), None, None
    hybrid = nemotron_pattern(text, model_type)
    if hybrid:
        return _from_nemotron(hybrid, num_layers, model_id), window, chunk
    explicit = text.get("layer_types") or text.get("layers_block_type") or text.get("attn_type_list")
    if isinstance(explicit, Sequence) and not isinstance(explicit, str) and explicit:
        return _from_list(explicit, num_layers, model_id, window, chunk), window, chunk

    if model_type in ("llama4", "llama4_text") and chunk:
        return _llama4(text, num_layers, model_id), window, chunk
    if text.get("attn_layer_period") is not None:  # Jamba
        period = _period(text, "attn_layer_period", model_id, minimum=1)
        offset = _period(text, "attn_layer_offset", model_id, minimum=0, default=0)
        return "".join("F" if i % period == offset else "M" for i in range(num_layers)), None, None
    if text.get("full_attention_interval") is not None and text.get("linear_num_value_heads"):
        interval = _period(text, "full_attention_interval", model_id, minimum=1)
        return "".join("F" if (i + 1) % interval == 0 else "M" for i in range(num_layers)), None, None
    if window is None:
        return "F" * num_layers, None, chunk
    if model_type == "gemma2":
        return "".join("S" if (i + 1) % 2 else "F" for i in range(num_layers)), window, None
    pattern_every = _int_or_none(text.get("sliding_window_pattern"))
    if model_type in ("gemma3_text", "gemma3") and pattern_every is None:
        pattern_every = 6
    if model_type in ("cohere2",) and pattern_every is None:
        pattern_every = 4
    if pattern_every and pattern_every > 1:
        return "".join("S" if (i + 1) % pattern_every else "F" for i in range(num_layers)), window, None
    max_window_layers = _int_or_none(text.get("max_window_layers"))
    if model_type in ("qwen2", "qwen2_moe") and max_window_layers is not None and max_window_layers < num_layers:
        # transformers: layers from max_window_layers on use the window; vLLM refuses this layout.
        raise UnsupportedArchitectureError(
            f"{model_id}: sliding window on only some layers (max_window_layers={max_window_layers} < "
            f"num_hidden_layers={num_layers}) is not supported by vLLM's Qwen2 model",
            field="max_window_layers",
        )
    return "S" * num_layers, window, None


# transformers 5 DeepseekV4Config: the compress rate each layer type gets by default, and the type a legacy
# per-layer compress_ratios entry stands for (models/deepseek_v4/configuration_deepseek_v4.py).
_DSV4_DEFAULT_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
_DSV4_RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def deepseek_v4_compress_ratios(text: Mapping[str, Any], num_layers: int, model_id: str) -> list[int]:
    """Each decoder layer's compress ratio (0: sliding window only), as vLLM 0.33 reads a DeepSeek-V4 config.

    vLLM takes the config through transformers' ``DeepseekV4Config.__post_init__``: ``layer_types`` when given,
    else the legacy per-layer ``compress_ratios`` (the released checkpoints' spelling, with the MTP layer's entry
    last, cut to ``num_hidden_layers``), else two HCA layers then CSA/HCA alternating; ``compress_rates`` maps
    a type to its ratio (``compress_rate_csa`` / ``compress_rate_hca`` override it). ``models/deepseek_v4/
    attention.py`` then uses ``max(1, compress_rates[layer_type])``, so a sliding layer has ratio 0 here."""
    rates = dict(_DSV4_DEFAULT_RATES)
    given = text.get("compress_rates")
    if isinstance(given, Mapping):
        rates = {str(k): v for k, v in given.items()}
    for key, name in (
        ("compress_rate_csa", "compressed_sparse_attention"),
        ("compress_rate_hca", "heavily_compressed_attention"),
    ):
        if text.get(key) is not None:
            rates[name] = text[key]
    types = text.get("layer_types")
    legacy = text.get("compress_ratios")
    if not (isinstance(types, Sequence) and not isinstance(types, str) and types):
        if isinstance(legacy, Sequence) and not isinstance(legacy, str) and legacy:
            if any(r not in _DSV4_RATIO_TYPES for r in legacy):
                raise InvalidModelConfigError(
                    f"{model_id}: compress_ratios entries must be 0, 4 or 128, got {sorted(set(legacy))}",
                    field="compress_ratios",
                )
            types = [_DSV4_RATIO_TYPES[r] for r in legacy]
        else:
            types = ["heavily_compressed_attention"] * min(num_layers, 2) + [
                "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
                for i in range(max(num_layers - 2, 0))
            ]
    types = list(types)[:num_layers]
    if len(types) != num_layers:
        raise InvalidModelConfigError(
            f"{model_id}: DeepSeek-V4 needs a layer type for each of the {num_layers} layers, got {len(types)}",
            field="layer_types",
        )
    ratios = []
    for layer_type in types:
        if layer_type not in _DSV4_RATIO_TYPES.values():
            raise InvalidModelConfigError(
                f"{model_id}: unknown DeepSeek-V4 layer type {layer_type!r}", field="layer_types"
            )
        ratio = rates.get(str(layer_type), 0) or 0
        if ratio not in (0, 1, 4, 128):
            # models/deepseek_v4/compressor.py: CompressorStateCache asserts compress_ratio in [4, 128].
            raise UnsupportedArchitectureError(
                f"{model_id}: DeepSeek-V4 compress rate {ratio} for {layer_type}: vLLM's compressor supports 4 and 128",
                field="compress_rates",
            )
        ratios.append(0 if ratio == 1 else int(ratio))
    return ratios


def _kimi_linear(config: Mapping[str, Any], num_layers: int, model_id: str) -> str:
    """Kimi-Linear: a layer is Kimi delta attention when its 1-based number is in ``linear_attn_config.kda_layers``
    (``KimiLinearConfig.is_kda_layer``), MLA otherwise (vLLM 0.33 ``models/kimi_k3/nvidia/model.py:
    KimiDecoderLayer`` does not read ``full_attn_layers``)."""
    kda = config.get("kda_layers")
    if (
        not isinstance(kda, Sequence)
        or isinstance(kda, str)
        or any(isinstance(i, bool) or not isinstance(i, int) for i in kda)
    ):
        raise InvalidModelConfigError(
            f"{model_id}: linear_attn_config.kda_layers must list 1-based layer numbers", field="linear_attn_config"
        )
    numbers = set(kda)
    if any(not 1 <= i <= num_layers for i in numbers):
        raise InvalidModelConfigError(
            f"{model_id}: linear_attn_config.kda_layers must lie in 1..{num_layers}", field="linear_attn_config"
        )
    return "".join("M" if i + 1 in numbers else "F" for i in range(num_layers))


def _from_list(types: Sequence[Any], num_layers: int, model_id: str, window: int | None, chunk: int | None) -> str:
    if len(types) != num_layers:
        raise InvalidModelConfigError(
            f"{model_id}: layer_types has {len(types)} entries but num_hidden_layers is {num_layers}",
            field="layer_types",
        )
    letters = []
    for value in types:
        letter = _TYPE_LETTERS.get(str(value).lower())
        if letter is None:
            raise UnsupportedArchitectureError(
                f"{model_id}: unknown layer type {value!r} in layer_types", field="layer_types"
            )
        if letter == "S" and window is None:
            letter = "F"  # sliding layers with the window switched off attend to everything
        if letter == "C" and chunk is None:
            raise InvalidModelConfigError(
                f"{model_id}: chunked_attention layers need attention_chunk_size", field="attention_chunk_size"
            )
        letters.append(letter)
    return "".join(letters)


def _gemma4(
    text: Mapping[str, Any], num_layers: int, model_id: str, window: int | None
) -> tuple[str, int | None, int | None]:
    """Gemma-4 as transformers 5's ``Gemma4TextConfig.__post_init__`` and vLLM 0.33's ``gemma4.py`` read it.

    * ``sliding_window`` defaults to 512; ``use_bidirectional_attention: "all"`` halves it (``w // 2 + 1``);
    * no ``layer_types``: every 6th layer is full attention (the config's ``sliding_window_pattern`` is not
      read); the last layer is forced to full attention;
    * the last ``num_kv_shared_layers`` layers reuse the cache of the last earlier layer of their type
      (``Gemma4Attention``: ``kv_sharing_target_layer_name``), so vLLM gives them no KV spec
      (``GPUModelRunner.get_kv_cache_spec`` skips them): letter ``N``.
    """
    if window is None:
        window = 512
    if text.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1
    explicit = text.get("layer_types")
    if isinstance(explicit, Sequence) and not isinstance(explicit, str) and explicit:
        letters = list(_from_list(explicit, num_layers, model_id, window, None))
    else:
        letters = ["S" if (i + 1) % 6 else "F" for i in range(num_layers)]
    letters[-1] = "F"
    shared = _int_or_none(text.get("num_kv_shared_layers")) or 0
    if shared < 0 or shared > num_layers:
        raise InvalidModelConfigError(
            f"{model_id}: num_kv_shared_layers {shared} is not between 0 and {num_layers}",
            field="num_kv_shared_layers",
        )
    first_shared = num_layers - shared
    if shared:
        owners = set(letters[:first_shared])
        for letter in set(letters[first_shared:]):
            if letter not in owners:
                raise InvalidModelConfigError(
                    f"{model_id}: a KV-shared layer has no earlier {'full' if letter == 'F' else 'sliding'} "
                    "layer to read the cache of (num_kv_shared_layers too large)",
                    field="num_kv_shared_layers",
                )
        letters[first_shared:] = ["N"] * shared
    pattern = "".join(letters)
    return pattern, window if "S" in pattern else None, None


# transformers 5 NemotronHConfig: layers_block_type (alias layer_types) entries, legacy names included, and
# the hybrid_override_pattern letter each stands for (_pattern_to_list / _list_to_pattern).
_NEMOTRON_BLOCKS = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "moe": "E",
    "mlp": "-",
}


def nemotron_pattern(text: Mapping[str, Any], model_type: str) -> str | None:
    """NemotronH's one-block-per-layer pattern (``M`` Mamba, ``*`` attention, ``-`` MLP, ``E`` MoE), from
    ``hybrid_override_pattern`` or, in the transformers 5 spelling, the ``layers_block_type`` list that vLLM
    0.33 reads back through the config's ``hybrid_override_pattern`` property (``nemotron_h.py``)."""
    hybrid = text.get("hybrid_override_pattern")
    if isinstance(hybrid, str) and hybrid:
        return hybrid
    if model_type != "nemotron_h":
        return None
    blocks = text.get("layers_block_type") or text.get("layer_types")
    if not isinstance(blocks, Sequence) or isinstance(blocks, str) or not blocks:
        return None
    letters = [_NEMOTRON_BLOCKS.get(str(block).lower()) for block in blocks]
    if any(letter is None for letter in letters):
        raise InvalidModelConfigError(
            f"NemotronH layers_block_type must use {', '.join(sorted(_NEMOTRON_BLOCKS))}", field="layers_block_type"
        )
    return "".join(letter for letter in letters if letter is not None)


def _from_nemotron(pattern: str, num_layers: int, model_id: str) -> str:
    # NemotronH: M = mamba2, * = attention, - = MLP only (no cache), E = MoE (no cache)
    mapping = {"M": "M", "*": "F", "-": "N", "E": "N"}
    if len(pattern) != num_layers or any(c not in mapping for c in pattern):
        raise InvalidModelConfigError(
            f"{model_id}: hybrid_override_pattern must have {num_layers} of M * - E", field="hybrid_override_pattern"
        )
    return "".join(mapping[c] for c in pattern)


def _llama4(text: Mapping[str, Any], num_layers: int, model_id: str) -> str:
    no_rope = text.get("no_rope_layers")
    if not isinstance(no_rope, Sequence) or not no_rope:
        interval = _int_or_none(text.get("no_rope_layer_interval")) or 4
        # transformers Llama4TextConfig: 1 = uses RoPE, 0 = NoPE (every interval-th layer)
        no_rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if isinstance(no_rope, str) or len(no_rope) < num_layers or not all(v in (0, 1) for v in no_rope[:num_layers]):
        raise InvalidModelConfigError(
            f"{model_id}: no_rope_layers must list 0 or 1 for each of the {num_layers} layers", field="no_rope_layers"
        )
    return "".join("C" if int(no_rope[i]) else "F" for i in range(num_layers))
