"""``--kv-cache-dtype`` values and the bytes one token of one KV head takes in each.

Storage follows ``vllm/utils/torch_utils.py: STR_DTYPE_TO_TORCH_DTYPE``: every fp8 variant is one
byte per element (per-tensor k/v scales are scalars per layer, negligible); ``*_per_token_head``
formats add two fp32 scales (K and V) per token and head; NVFP4 stores ``d/2`` bytes of values plus
one fp8 scale per 16 elements. DeepSeek's MLA formats are fixed per token and layer: ``fp8_ds_mla``
656 bytes, ``nvfp4_ds_mla`` 352 bytes (``vllm/v1/kv_cache_interface.py: MLAAttentionSpec``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InvalidArgumentError
from planner.models.spec import ModelSpec


@dataclass(frozen=True)
class KvDtype:
    """A resolved KV-cache storage format."""

    name: str
    element_bytes: float
    """Bytes per stored element of K or V."""
    per_token_head_extra: int = 0
    """Extra bytes per (token, KV head) for K and V scales together."""
    mla_bytes_per_token: int | None = None
    """Fixed bytes per token per layer for DeepSeek MLA formats."""

    def head_vector_bytes(self, head_size_k: int, head_size_v: int) -> int:
        """Bytes of one token of one KV head: K and V together."""
        if self.name == "nvfp4":
            return (
                2 * (head_size_k // 2 + head_size_k // 16)
                if head_size_k == head_size_v
                else (head_size_k // 2 + head_size_k // 16) + (head_size_v // 2 + head_size_v // 16)
            )
        if self.name in ("int4_per_token_head", "turboquant_4bit_nc", "ultraquant_4bit"):
            return (head_size_k + head_size_v) // 2 + self.per_token_head_extra
        return int((head_size_k + head_size_v) * self.element_bytes) + self.per_token_head_extra


_FIXED: dict[str, KvDtype] = {
    "float16": KvDtype("float16", 2),
    "bfloat16": KvDtype("bfloat16", 2),
    "float32": KvDtype("float32", 4),
    "fp8": KvDtype("fp8", 1),
    "fp8_e4m3": KvDtype("fp8_e4m3", 1),
    "fp8_e5m2": KvDtype("fp8_e5m2", 1),
    "fp8_inc": KvDtype("fp8_inc", 1),
    "fp8_ds_mla": KvDtype("fp8_ds_mla", 1, mla_bytes_per_token=656),
    "nvfp4_ds_mla": KvDtype("nvfp4_ds_mla", 0.5, mla_bytes_per_token=352),
    "int8_per_token_head": KvDtype("int8_per_token_head", 1, per_token_head_extra=8),
    "fp8_per_token_head": KvDtype("fp8_per_token_head", 1, per_token_head_extra=8),
    "int4_per_token_head": KvDtype("int4_per_token_head", 0.5, per_token_head_extra=8),
    "nvfp4": KvDtype("nvfp4", 0.5625),
    "nvfp4_4over6": KvDtype("nvfp4_4over6", 0.5625),
}

# Packed research formats (TurboQuant, Octave, UltraQuant): vLLM sizes them with backend-specific
# layouts; kv-planner approximates them by their nominal bits per element and says so.
_APPROXIMATE: dict[str, float] = {
    "turboquant_k8v4": 0.75,
    "turboquant_4bit_nc": 0.5,
    "turboquant_k3v4_nc": 0.4375,
    "turboquant_3bit_nc": 0.375,
    "octave_k3v4": 0.4375,
    "octave_k3v3": 0.375,
    "octave_k3v3_compact": 0.375,
    "ultraquant_4bit": 0.5,
}


def is_approximate(name: str) -> bool:
    return name in _APPROXIMATE


def resolve_kv_dtype(requested: str, model: ModelSpec, model_dtype: str, *, from_checkpoint: bool = True) -> KvDtype:
    """The storage format in force for ``--kv-cache-dtype requested``.

    ``auto`` takes the checkpoint's declared KV scheme (ModelOpt ``kv_cache_quant_algo``,
    compressed-tensors ``kv_cache_scheme``; vLLM 0.14+, ``from_checkpoint``) and otherwise the model
    dtype, as vLLM does.
    """
    name = requested
    if model.compressed_attention is not None:
        # DeepSeek-V4 on FlashMLA: auto and every fp8 spelling become fp8_ds_mla (models/deepseek_v4/attention.py
        # _resolve_dsv4_kv_cache_dtype); its pages are sized by planner.kv.specs.deepseek_v4_caches.
        if name not in ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla"):
            raise InvalidArgumentError(
                f"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {requested}", flag="--kv-cache-dtype"
            )
        return _FIXED["fp8_ds_mla"]
    if name == "auto":
        declared = model.quantization.kv_cache_dtype if model.quantization and from_checkpoint else None
        name = declared or model_dtype
    if name in ("half",):
        name = "float16"
    if name in _FIXED:
        kv = _FIXED[name]
        if kv.mla_bytes_per_token is not None and model.mla is None:
            raise InvalidArgumentError(
                f"--kv-cache-dtype {name} is only for DeepSeek MLA models", flag="--kv-cache-dtype"
            )
        return kv
    if name in _APPROXIMATE:
        return KvDtype(name, _APPROXIMATE[name])
    raise InvalidArgumentError(f"argument --kv-cache-dtype: invalid choice: {requested!r}", flag="--kv-cache-dtype")
