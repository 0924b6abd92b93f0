"""Parameter estimate for a multimodal model's vision tower (it takes GPU memory, not KV cache).

A ViT encoder layer has attention (4 h^2 + 4 h) and an MLP (2 h i + h + i) plus two norms (4 h);
the patch embedding is ``channels * patch^2 * h`` and the position embedding ``(image/patch)^2 * h``.
A projector maps the vision width to the text width. Exact counts come from the checkpoint when it
is resolved; this estimate is used only for catalog entries and configs without safetensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.models.spec import VisionSpec


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def qwen_vision_parameters(vision: Mapping[str, Any], family: str) -> int:
    """Parameters of the Qwen2.5-VL / Qwen3-VL (and Qwen3.5) vision towers as vLLM builds them
    (``Qwen2_5_VisionTransformer``, ``Qwen3_VisionTransformer``): per block two norms, fused QKV and output
    projection with biases and the MLP (gated SiLU for Qwen2.5-VL, fc1/fc2 for Qwen3-VL); the Conv3d patch
    embedding; Qwen3-VL's learned position table; the patch merger (norm, merged-width fc1, fc2 to
    ``out_hidden_size``) and Qwen3-VL's deepstack mergers (one per deepstack layer, same shape)."""
    d = _int(vision.get("hidden_size"), 1024)
    i = _int(vision.get("intermediate_size"), 4 * d)
    depth = _int(vision.get("depth"), 24)
    patch = _int(vision.get("patch_size"), 14)
    temporal = _int(vision.get("temporal_patch_size"), 2)
    channels = _int(vision.get("in_channels") or vision.get("in_chans"), 3)
    merge = _int(vision.get("spatial_merge_size"), 2)
    out = _int(vision.get("out_hidden_size"), d)
    merged = d * merge * merge
    attention = (d * 3 * d + 3 * d) + (d * d + d)
    if family == "qwen2_5_vl":  # RMSNorm (weight only), gated MLP with biases, no patch-embed bias
        block = 2 * d + attention + (d * 2 * i + 2 * i) + (i * d + d)
        embed = channels * temporal * patch * patch * d
        merger = d + (merged * merged + merged) + (merged * out + out)
        return depth * block + embed + merger
    block = 4 * d + attention + (d * i + i) + (i * d + d)  # two LayerNorms with bias
    embed = channels * temporal * patch * patch * d + d + _int(vision.get("num_position_embeddings"), 2304) * d
    merger = 2 * d + (merged * merged + merged) + (merged * out + out)
    deepstack = vision.get("deepstack_visual_indexes")
    extra = len(deepstack) if isinstance(deepstack, list) else 0
    return depth * block + embed + merger + extra * (2 * merged + (merged * merged + merged) + (merged * out + out))


def qwen_vision_tp_sharded(vision: VisionSpec) -> int | None:
    """Parameters of a Qwen2.5-VL / Qwen3-VL tower that tensor parallelism splits, as vLLM builds it
    (``qwen2_5_vl.py`` / ``qwen3_vl.py``, --mm-encoder-tp-mode weights): the fused QKV (weight and bias) and the
    MLP's up projections are column-parallel, the attention and MLP output projections and the mergers' second
    linear row-parallel (their weights split, their biases whole on every rank); the norms, the patch embedding,
    Qwen3-VL's position table and the rotary cache are replicated. None for other towers (the planner then
    splits the whole tower)."""
    if vision.encoder not in ("qwen2_5_vl", "qwen3_vl") or not (vision.hidden_size and vision.depth):
        return None
    d = vision.hidden_size
    i = vision.intermediate_size or 4 * d
    merged = d * vision.spatial_merge_size**2
    qkv_and_proj = 3 * d * d + 3 * d + d * d
    mlp = d * 2 * i + 2 * i + i * d if vision.encoder == "qwen2_5_vl" else d * i + i + i * d
    merger = merged * merged + merged + merged * (vision.out_hidden_size or d)
    mergers = 1 + (vision.deepstack_layers if vision.encoder == "qwen3_vl" else 0)
    return min(vision.parameters, vision.depth * (qkv_and_proj + mlp) + mergers * merger)


def estimate_vision_parameters(vision: Mapping[str, Any], top: Mapping[str, Any]) -> int:
    family = str(top.get("model_type") or "")
    if family == "qwen2_5_vl":
        return qwen_vision_parameters(vision, "qwen2_5_vl")
    if family in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        return qwen_vision_parameters(vision, "qwen3_vl")
    # Qwen2-VL's hidden_size is its merger's output; the ViT width is embed_dim there.
    hidden = _int(vision.get("embed_dim") or vision.get("hidden_size") or vision.get("width"), 1024)
    layers = _int(vision.get("num_hidden_layers") or vision.get("depth") or vision.get("num_layers"), 24)
    inter = _int(vision.get("intermediate_size") or vision.get("mlp_dim"), 4 * hidden)
    patch = _int(vision.get("patch_size"), 14)
    image = _int(vision.get("image_size"), 336)
    channels = _int(vision.get("num_channels"), 3)
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + hidden + inter + 4 * hidden
    positions = (image // max(patch, 1)) ** 2
    embeddings = channels * patch * patch * hidden + positions * hidden
    text = top.get("text_config")
    text_hidden = _int(text.get("hidden_size") if isinstance(text, Mapping) else None, hidden)
    projector = hidden * text_hidden + text_hidden
    return layers * per_layer + embeddings + projector
