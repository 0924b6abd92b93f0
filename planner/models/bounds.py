"""Plausible bounds on every size and count kv-planner reads from a model's config.json.

A config.json is untrusted input: the Hub serves whatever a repository's author uploaded, and a manifest
can name any repository. The planner's arithmetic is exact integer arithmetic, and some of it is linear
in a count (one letter per layer in ``layer_pattern``, the per-layer weight tensors of
``planner/models/allocation.py``), so a 1 KB file that says ``num_hidden_layers: 1000000000`` would cost
gigabytes and minutes, and ``1e308`` / ``NaN`` / ``Infinity`` would end in ``OverflowError`` or
``ValueError`` deep inside the planner. :func:`check_config_bounds` runs before the config is read and
refuses, with :class:`~planner.errors.InvalidModelConfigError` naming the file, the field and the bound:

* a non-finite number (``NaN``, ``Infinity``, ``-Infinity``: Python's json accepts them) anywhere in the file;
* a size or count field (by its JSON key, in any section: ``text_config``, ``vision_config``,
  ``quantization_config``, ``rope_scaling``, ``linear_attn_config``, ...) whose value is not a number (or a
  list of numbers), or whose magnitude is above the field's bound.

The bounds are far above any released model (docs/security.md, "Hugging Face Hub"): a real config never
comes near them, a hostile one cannot make the planner's work grow past a few milliseconds. Lower bounds
(0 or negative counts) stay with the parser, whose messages name the minimum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import InvalidModelConfigError


@dataclass(frozen=True)
class Bound:
    """The largest magnitude a class of config fields may have, and why."""

    name: str
    limit: float
    why: str
    floor: float | None = None  # smallest positive magnitude, for ratios the planner divides by
    integral: bool = True  # sizes and counts are whole numbers (2.0 is accepted, 2.5 is not)


# The largest released decoders have ~200 layers (GPT-3: 96, Llama-3.1-405B: 126, PaLM: 118).
MAX_LAYERS = Bound("layers", 4096, "20x the deepest released model (~200 layers)")
# Widest released models: hidden ~25-30k (Megatron 1T: 25,600), MLP ~74k (Nemotron-4-340B: 73,728).
MAX_WIDTH = Bound("width", 1 << 20, "over 14x the widest released hidden / MLP size (~74k)")
# At most 128 query heads (Llama-3.1-405B, DeepSeek-V3); GQA/MQA have fewer KV heads.
MAX_HEADS = Bound("heads", 1 << 16, "512x the most attention heads of a released model (128)")
# Head sizes are 64-512 (Gemma-4's global layers, DeepSeek-V4: 512); SSM state sizes up to 256.
MAX_HEAD_DIM = Bound("head size", 1 << 16, "128x the largest released head size (512)")
# Gemma-3/4 have the largest vocabularies (~262k tokens).
MAX_VOCAB = Bound("vocabulary", 1 << 24, "64x the largest released vocabulary (~262k)")
# Up to 512 routed experts (Qwen3-Next), 384 (Kimi-K2), top-k at most a few dozen.
MAX_EXPERTS = Bound("experts", 1 << 16, "128x the most experts of a released model (512)")
# The longest context of a released model is Llama-4 Scout's 10M tokens; windows and chunks are shorter.
MAX_POSITIONS = Bound("positions", 1 << 30, "100x the longest released context (Llama-4 Scout: ~10M tokens)")
# Vision towers take 224-1540 pixel images in 14-16 pixel patches (pinpoints up to a few thousand pixels).
MAX_PIXELS = Bound("pixels", 1 << 16, "over 40x the largest released vision input side (~1.5k pixels)")
# Convolution kernels (4), SSM expand (2), spatial merges (2), channels (3), MLP ratios (4).
MAX_SMALL = Bound("small factor", 1 << 10, "over 100x any released kernel / expand / merge / channel count")
# RoPE scaling factors are at most a few dozen (YaRN 4-40, Llama-3 8, LongRoPE ~40).
MAX_ROPE_FACTOR = Bound(
    "RoPE factor", 1 << 16, "over 1000x the largest released RoPE scaling factor (~64)", integral=False
)
# A vision MLP's width as a multiple of the tower's (ViT: 4, some towers 2.67-5.33).
MAX_RATIO = Bound("ratio", 1 << 10, "over 100x any released MLP ratio (~5)", integral=False)
# Fractions of a whole (partial_rotary_factor, pixel_shuffle_ratio): the planner divides by the latter.
FRACTION = Bound(
    "fraction", 1 << 10, "a fraction of a whole (released models: 0.25-1)", floor=1 / (1 << 10), integral=False
)
# Quantized weights have 1-16 bits (kv-planner's QuantSpec takes up to 32).
MAX_BITS = Bound("bits", 32, "the widest element kv-planner sizes (fp32)", integral=False)
# Quantization groups are 32-128 weights (-1: one group per channel).
MAX_GROUP = Bound("quantization group", 1 << 20, "over 8000x the largest released group size (128)")

# JSON key -> its bound, for every spelling the parser and vLLM read (planner/models/config.py _ALIASES,
# _MAX_LEN_KEYS, layers.py, vision.py, quantization.py).
_FIELDS: dict[str, Bound] = {}
for _bound, _keys in (
    (
        MAX_LAYERS,
        "num_hidden_layers n_layer num_layers n_layers depth mtp_num_hidden_layers num_nextn_predict_layers "
        "first_k_dense_replace max_window_layers num_kv_shared_layers attn_layer_period attn_layer_offset "
        "expert_layer_period expert_layer_offset decoder_sparse_step interleave_moe_layer_step moe_layer_freq "
        "full_attention_interval no_rope_layer_interval sliding_window_pattern kda_layers "
        "deepstack_visual_indexes vision_feature_layer index_topk_freq",
    ),
    (
        MAX_WIDTH,
        "hidden_size n_embd n_embed d_model model_dim embed_dim width intermediate_size ffn_hidden_size "
        "ff_intermediate_size n_inner ffn_dim moe_intermediate_size shared_expert_intermediate_size "
        "moe_shared_expert_intermediate_size intermediate_size_mlp intermediate_size_mamba mamba_d_inner "
        "kv_lora_rank q_lora_rank o_lora_rank out_hidden_size mlp_dim",
    ),
    (
        MAX_HEADS,
        "num_attention_heads n_head n_heads num_heads n_head_kv num_kv_heads num_key_value_heads "
        "multi_query_group_num num_attention_groups num_global_key_value_heads linear_num_key_heads "
        "linear_num_value_heads mamba_n_heads mamba_num_heads index_n_heads mamba_n_groups n_groups o_groups "
        "hc_mult",
    ),
    (
        MAX_HEAD_DIM,
        "head_dim global_head_dim hidden_size_per_head kv_channels attention_head_dim qk_rope_head_dim "
        "qk_nope_head_dim v_head_dim index_head_dim linear_key_head_dim linear_value_head_dim mamba_d_head "
        "mamba_head_dim mamba_d_state ssm_state_size state_size",
    ),
    (MAX_VOCAB, "vocab_size padded_vocab_size"),
    (
        MAX_EXPERTS,
        "num_experts moe_num_experts n_routed_experts num_local_experts num_experts_per_tok "
        "num_experts_per_token top_k_experts moe_topk moe_top_k moe_k top_k n_shared_experts "
        "moe_num_shared_experts num_shared_experts",
    ),
    (
        MAX_POSITIONS,
        "max_position_embeddings n_positions max_seq_len seq_length model_max_length max_target_positions "
        "max_sequence_length max_seq_length seq_len original_max_position_embeddings sliding_window "
        "attention_chunk_size index_topk mm_tokens_per_image image_seq_length vision_soft_tokens_per_image "
        "num_position_embeddings",
    ),
    (MAX_PIXELS, "image_size patch_size image_grid_pinpoints"),
    (
        MAX_SMALL,
        "conv_kernel linear_conv_kernel_dim mamba_d_conv mamba_conv_kernel short_conv_kernel_size expand "
        "mamba_expand spatial_merge_size temporal_patch_size in_channels in_chans num_channels "
        "pooling_kernel_size",
    ),
    (MAX_RATIO, "mlp_ratio"),
    (MAX_ROPE_FACTOR, "factor"),
    (FRACTION, "partial_rotary_factor pixel_shuffle_ratio"),
    (MAX_BITS, "bits w_bit weight_bits num_bits"),
    (MAX_GROUP, "group_size q_group_size"),
):
    for _key in _keys.split():
        _FIELDS[_key] = _bound

# Sections nested deeper than this are not read by the parser (real configs nest 3-4 levels).
_MAX_WALK_DEPTH = 32
# Nested lists inside a bounded field (image_grid_pinpoints is a list of pairs).
_MAX_LIST_DEPTH = 4


def field_bound(key: str) -> Bound | None:
    """The bound of a config.json key, or None for keys that are not sizes or counts."""
    return _FIELDS.get(key)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(document: str, path: str, message: str) -> InvalidModelConfigError:
    field = path.rsplit(".", 1)[-1].split("[", 1)[0]
    return InvalidModelConfigError(f"{document} field {path} {message}", field=field)


def _check_number(value: Any, bound: Bound, model_id: str, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(model_id, path, f"must be a finite number, got {value!r}")
    magnitude = abs(value)
    if magnitude > bound.limit:
        raise _fail(
            model_id,
            path,
            f"is {_shown(value)}, above the plausible bound for a {bound.name} field "
            f"({int(bound.limit):,}: {bound.why})",
        )
    if bound.integral and int(value) != value:
        raise _fail(model_id, path, f"must be a whole number, got {_shown(value)}")
    if bound.floor is not None and 0 < magnitude < bound.floor:
        raise _fail(model_id, path, f"is {_shown(value)}, below the plausible bound {bound.floor:g} ({bound.why})")


def _check_field(value: Any, bound: Bound, model_id: str, path: str, depth: int = 0) -> None:
    if value is None or isinstance(value, bool):
        return  # absent / switched off: the parser decides what that means
    if isinstance(value, (int, float)):
        _check_number(value, bound, model_id, path)
        return
    if isinstance(value, list) and depth < _MAX_LIST_DEPTH:
        for index, item in enumerate(value):
            _check_field(item, bound, model_id, f"{path}[{index}]", depth + 1)
        return
    raise _fail(model_id, path, f"must be a number, got {_shown(value)}")


def check_config_bounds(config: Mapping[str, Any], *, model_id: str, document: str | None = None) -> None:
    """Refuse a config whose numbers are not finite or whose sizes and counts exceed their bounds.

    Walks every section of the document (iteratively: its depth is the author's choice) and raises
    :class:`InvalidModelConfigError` naming the field's path, its value and the bound. ``document`` names
    what is checked in the messages (default ``"<model_id>: config.json"``; ``--hf-overrides`` for overrides).
    """
    model_id = document if document is not None else f"{model_id}: config.json"
    stack: list[tuple[Any, str, int]] = [(config, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, Mapping):
            items: list[tuple[str, Any]] = [(str(k), v) for k, v in node.items()]
            for key, value in items:
                where = f"{path}.{key}" if path else key
                bound = _FIELDS.get(key)
                if bound is not None:
                    _check_field(value, bound, model_id, where)
                elif depth < _MAX_WALK_DEPTH and isinstance(value, (Mapping, list, float)):
                    stack.append((value, where, depth + 1))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if depth < _MAX_WALK_DEPTH and isinstance(value, (Mapping, list, float)):
                    stack.append((value, f"{path}[{index}]", depth + 1))
        elif isinstance(node, float) and not math.isfinite(node):
            raise _fail(model_id, path, f"must be a finite number, got {node!r}")
