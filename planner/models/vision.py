"""Parameter estimate for a multimodal model's vision tower (it takes GPU memory, not KV cache).

A ViT encoder layer has attention (4 h^2 + 4 h) and an MLP (2 h i + h + i) plus two norms (4 h);
the patch embedding is ``channels * patch^2 * h`` and the position embedding ``(image/patch)^2 * h``.
A projector maps the vision width to the text width. Exact counts come from the checkpoint when it
is resolved; this estimate is used only for catalog entries and configs without safetensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def estimate_vision_parameters(vision: Mapping[str, Any], top: Mapping[str, Any]) -> int:
    hidden = _int(vision.get("hidden_size") or vision.get("width") or vision.get("embed_dim"), 1024)
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
