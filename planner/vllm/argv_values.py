"""Raw vLLM flag values -> the types vLLM's argparse gives them, and :class:`ServingArgs`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from planner.errors import InvalidArgumentError
from planner.units import parse_human_int, parse_human_int_or_auto
from planner.vllm.args import ServingArgs

_INT = {
    "max_num_seqs",
    "block_size",
    "num_gpu_blocks_override",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "nnodes",
    "decode_context_parallel_size",
    "max_cudagraph_capture_size",
    "max_loras",
    "max_lora_rank",
}
_HUMAN_INT = {"max_num_batched_tokens", "kv_cache_memory_bytes"}
_FLOAT = {"gpu_memory_utilization", "cpu_offload_gb", "kv_offloading_size", "swap_space"}
_BOOL = {
    "enable_expert_parallel",
    "enforce_eager",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "async_scheduling",
    "disable_hybrid_kv_cache_manager",
    "enable_lora",
    "skip_mm_profiling",
    "language_model_only",
}
_STR = {
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "performance_mode",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "speculative_config",
    "kv_transfer_config",
    "kv_offloading_backend",
    "moe_backend",
    "limit_mm_per_prompt",
    "mm_processor_kwargs",
    "mm_encoder_tp_mode",
    "mm_encoder_attn_backend",
}


def option_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def typed_value(dest: str, value: Any) -> Any:
    """Convert one raw flag value to the type vLLM's argparse gives it (ServingArgs fields only)."""
    flag = option_name(dest)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if dest in _STR else value
    if isinstance(value, list):
        value = value[-1] if value else None
    try:
        if dest == "max_model_len":
            return parse_human_int_or_auto(str(value))
        if dest in _HUMAN_INT:
            return parse_human_int(str(value))
        if dest in _INT:
            return int(str(value))
        if dest in _FLOAT:
            return float(str(value))
    except ValueError:
        raise InvalidArgumentError(f"argument {flag}: invalid value {value!r}", flag=flag) from None
    if dest in _BOOL:
        return bool(value)
    return None if value is None else str(value)


def to_serving_args(values: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> ServingArgs:
    """ServingArgs from parsed flag values (dest -> raw value) and the container's environment."""
    fields: dict[str, Any] = {}
    for dest, raw in values.items():
        if dest in ServingArgs.model_fields and dest != "env":
            fields[dest] = typed_value(dest, raw)
    if fields.get("kv_cache_dtype") is None:
        fields.pop("kv_cache_dtype", None)
    if fields.get("dtype") is None:
        fields.pop("dtype", None)
    if env:
        # LMCACHE_*: the LMCache connector's local CPU tier is configured from the environment.
        fields["env"] = {k: v for k, v in env.items() if k.startswith(("VLLM_", "LMCACHE_"))}
    try:
        return ServingArgs(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        dest = str(first["loc"][0]) if first.get("loc") else "?"
        flag = option_name(dest)
        raise InvalidArgumentError(f"argument {flag}: {first['msg']}", flag=flag) from None
