"""``quantization_config`` -> weight bits and the KV dtype vLLM picks for ``--kv-cache-dtype auto``.

Bits per weight include the format's scales and zero points, so that ``params * bits / 8`` is the
checkpoint's bytes for the quantized tensors:

- fp8 (per-tensor / per-channel / 128x128 block scales): 8 bits (scales are < 0.1%).
- int8 w8a8: 8 bits.
- AWQ / GPTQ 4-bit, group g: 4 bits + one fp16 scale and one 4-bit zero point per g weights
  (``4 + 20/g``; 4.156 at g=128). Symmetric GPTQ still stores packed zeros.
- compressed-tensors pack-quantized w4a16 group g: 4 + 16/g (symmetric, no zeros) or + 20/g.
- bitsandbytes nf4: 4 bits + fp32 absmax per 64 (double-quantized to 8-bit + small): ~4.13.
- MXFP4 (gpt-oss): 4 bits + one 8-bit shared exponent per 32 = 4.25, on MoE experts only.
- NVFP4 (ModelOpt / compressed-tensors): 4 bits + one fp8 scale per 16 = 4.5.

KV dtype for ``auto`` follows ``vllm/utils/torch_utils.py: get_kv_cache_quant_algo_string`` and the
compressed-tensors ``kv_cache_scheme`` (8-bit float => fp8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.models.spec import QuantSpec


def _group_bits(bits: float, group: Any, *, zeros: bool) -> float:
    if isinstance(group, int) and group > 0:
        return bits + (16 + (4 if zeros else 0)) / group
    return bits


def _kv_from_modelopt(cfg: Mapping[str, Any]) -> str | None:
    inner = cfg.get("quantization", cfg)
    algo = (
        inner.get("kv_cache_scheme")
        or cfg.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or cfg.get("kv_cache_quant_algo")
    )
    if isinstance(algo, Mapping):
        if algo.get("num_bits") == 8 and algo.get("type") == "float":
            return "fp8"
        if algo.get("num_bits") == 4 and algo.get("type") == "float":
            return "nvfp4"
        return None
    if isinstance(algo, str):
        lowered = algo.lower()
        if lowered in ("fp8", "fp8_e4m3"):
            return "fp8_e4m3"
        if lowered == "fp8_e5m2":
            return "fp8_e5m2"
        if lowered == "nvfp4":
            return "nvfp4"
    return None


def _kv_from_scheme(scheme: Any) -> str | None:
    if isinstance(scheme, Mapping) and scheme.get("num_bits") == 8:
        return "fp8"
    return None


def parse_quantization(cfg: Any, *, model_id: str) -> tuple[QuantSpec | None, list[str]]:
    """Map a ``quantization_config`` to a :class:`QuantSpec`; notes explain any guess."""
    if not isinstance(cfg, Mapping) or not cfg:
        return None, []
    method = str(cfg.get("quant_method") or cfg.get("quant_algo") or "").lower()
    notes: list[str] = []
    kv: str | None = None
    bits: float
    scope = "linear"
    if method in {"fp8", "fbgemm_fp8"}:
        bits = 8.0
    elif method.startswith("modelopt"):
        inner = cfg.get("quantization", cfg)
        algo = str(inner.get("quant_algo") or cfg.get("quant_algo") or "").upper()
        bits = 4.5 if "FP4" in algo else (4.0 + 16 / 128 if "W4A8" in algo or "INT4" in algo else 8.0)
        kv = _kv_from_modelopt(cfg)
    elif method == "mxfp4":
        bits, scope = 4.25, "experts"
    elif method in ("awq", "awq_marlin", "gptq", "gptq_marlin", "auto-round", "auto_round"):
        raw_bits = cfg.get("bits", cfg.get("w_bit", 4))
        group = cfg.get("group_size", cfg.get("q_group_size", 128))
        bits = _group_bits(float(raw_bits), group, zeros=True)
    elif method == "bitsandbytes":
        bits = 8.0 + 32 / 4096 if cfg.get("load_in_8bit") else 4.0 + 8 / 64 + 32 / (64 * 256)
    elif method == "compressed-tensors":
        bits, kv = _compressed_tensors(cfg, notes, model_id)
    elif method in ("experts_int8", "int8", "w8a8", "smoothquant"):
        bits = 8.0
    else:
        declared = cfg.get("bits") or cfg.get("w_bit") or cfg.get("weight_bits")
        if isinstance(declared, (int, float)):
            bits = float(declared)
            notes.append(f"quantization method {method!r} is not modelled; assumed {bits:g}-bit weights")
        else:
            notes.append(f"quantization method {method!r} is not modelled; weights sized at 16 bits")
            bits = 16.0
    return QuantSpec(method=method or "unknown", weight_bits=bits, scope=scope, kv_cache_dtype=kv), notes


def _compressed_tensors(cfg: Mapping[str, Any], notes: list[str], model_id: str) -> tuple[float, str | None]:
    kv = _kv_from_scheme(cfg.get("kv_cache_scheme"))
    groups = cfg.get("config_groups")
    weights: Mapping[str, Any] | None = None
    if isinstance(groups, Mapping):
        for group in groups.values():
            if isinstance(group, Mapping) and isinstance(group.get("weights"), Mapping):
                weights = group["weights"]
                break
    if weights is None:
        notes.append("compressed-tensors config without config_groups weights; sized at 8 bits")
        return 8.0, kv
    num_bits = float(weights.get("num_bits", 8))
    kind = weights.get("type", "int")
    strategy = weights.get("strategy")
    group = weights.get("group_size")
    fmt = str(cfg.get("format", ""))
    if num_bits == 4 and kind == "float":  # nvfp4: fp8 scale per 16
        return 4.5, kv
    if num_bits < 8 and strategy in ("group", "tensor_group") and isinstance(group, int):
        return _group_bits(num_bits, group, zeros=not weights.get("symmetric", True)), kv
    if num_bits < 8 and strategy == "channel":
        return num_bits, kv
    if "pack" not in fmt and num_bits < 8:
        notes.append(f"{model_id}: compressed-tensors {num_bits:g}-bit weights in format {fmt!r}")
    return num_bits, kv


# Bits per weight of schemes named by a record or by ``--quantization`` (online / quantized variants).
_SCHEME_BITS: dict[str, tuple[float, str]] = {
    "fp8": (8.0, "linear"),
    "fbgemm_fp8": (8.0, "linear"),
    "w8a8": (8.0, "linear"),
    "int8": (8.0, "linear"),
    "experts_int8": (8.0, "experts"),
    "w4a16": (4.0 + 16 / 128, "linear"),
    "awq": (4.0 + 20 / 128, "linear"),
    "gptq": (4.0 + 20 / 128, "linear"),
    "mxfp4": (4.25, "experts"),
    "nvfp4": (4.5, "linear"),
    "bitsandbytes": (4.0 + 8 / 64 + 32 / (64 * 256), "linear"),
}


def scheme_quantization(scheme: str) -> QuantSpec | None:
    """A QuantSpec for a scheme name (``--quantization fp8`` quantizes a bf16 checkpoint at load time;
    calibration records name the scheme of a quantized variant). None for unknown names."""
    key = scheme.lower().replace("-", "_")
    if key not in _SCHEME_BITS:
        return None
    bits, scope = _SCHEME_BITS[key]
    return QuantSpec(method=key, weight_bits=bits, scope="experts" if scope == "experts" else "linear")
