"""Configs and safetensors files for the hub tests.

Small real files are written by the ``safetensors`` library itself (``safetensors.numpy.save``).
Large "virtual" checkpoints (billions of parameters, BF16/FP8 dtypes numpy lacks) are only a header in
the safetensors layout: the 8-byte little-endian length, then the JSON padded with spaces to a multiple
of 8 (as the library pads), no tensor data. The metadata API and the planner read nothing else.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
from safetensors.numpy import save

DTYPE_BITS = {
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "I64": 64,
}


def llama_config(**overrides: Any) -> dict[str, Any]:
    """A small but complete Llama config.json (what the real parse_config needs)."""
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    config.update(overrides)
    return config


def config_bytes(config: dict[str, Any]) -> bytes:
    return json.dumps(config, indent=2).encode()


def llama_tensors(config: dict[str, Any], dtype: type[np.generic] = np.float16) -> dict[str, np.ndarray]:
    """Every weight of a small Llama, as numpy arrays (zeros: only shapes and dtypes matter)."""
    h = config["hidden_size"]
    inter = config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = config["num_key_value_heads"]
    hd = h // heads
    vocab = config["vocab_size"]
    tensors = {
        "model.embed_tokens.weight": np.zeros((vocab, h), dtype),
        "model.norm.weight": np.zeros(h, dtype),
    }
    if not config.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = np.zeros((vocab, h), dtype)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes = {
            "self_attn.q_proj": (heads * hd, h),
            "self_attn.k_proj": (kv * hd, h),
            "self_attn.v_proj": (kv * hd, h),
            "self_attn.o_proj": (h, heads * hd),
            "mlp.gate_proj": (inter, h),
            "mlp.up_proj": (inter, h),
            "mlp.down_proj": (h, inter),
        }
        for name, shape in shapes.items():
            tensors[p + name + ".weight"] = np.zeros(shape, dtype)
        tensors[p + "input_layernorm.weight"] = np.zeros(h, dtype)
        tensors[p + "post_attention_layernorm.weight"] = np.zeros(h, dtype)
    return tensors


def real_safetensors(tensors: dict[str, np.ndarray]) -> bytes:
    return save(tensors, metadata={"format": "pt"})


def header_only(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> tuple[bytes, int]:
    """A safetensors header for tensors of the given dtype and shape; returns (header bytes, full size)."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        nbytes = math.prod(shape) * DTYPE_BITS[dtype] // 8
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    header = struct.pack("<Q", len(text)) + text
    return header, len(header) + offset


def tensor_bytes(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> int:
    return sum(math.prod(shape) * DTYPE_BITS[dtype] // 8 for dtype, shape in tensors.values())


def big_llama_layout(
    layers: int,
    hidden: int,
    inter: int,
    vocab: int,
    heads: int,
    kv: int,
    dtype: str = "BF16",
    *,
    prefix: str = "model.",
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Shapes of a full-size Llama-style checkpoint (for virtual files)."""
    hd = hidden // heads
    out: dict[str, tuple[str, tuple[int, ...]]] = {
        f"{prefix}embed_tokens.weight": (dtype, (vocab, hidden)),
        f"{prefix}norm.weight": (dtype, (hidden,)),
        "lm_head.weight": (dtype, (vocab, hidden)),
    }
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        for name, shape in {
            "self_attn.q_proj": (heads * hd, hidden),
            "self_attn.k_proj": (kv * hd, hidden),
            "self_attn.v_proj": (kv * hd, hidden),
            "self_attn.o_proj": (hidden, heads * hd),
            "mlp.gate_proj": (inter, hidden),
            "mlp.up_proj": (inter, hidden),
            "mlp.down_proj": (hidden, inter),
        }.items():
            out[p + name + ".weight"] = (dtype, shape)
        out[p + "input_layernorm.weight"] = (dtype, (hidden,))
        out[p + "post_attention_layernorm.weight"] = (dtype, (hidden,))
    return out
