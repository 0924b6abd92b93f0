"""The labels of ``vllm:cache_config_info``: vLLM's ``CacheConfig.metrics_info()``.

vLLM turns every attribute of its ``CacheConfig`` into a label (``{k: str(v) for k, v in
self.__dict__.items()}``), in field order, and from 0.10.1 adds ``engine``. So the label *names* are the
release's ``CacheConfig`` fields (read from ``vllm/config/cache.py``, or ``vllm/config.py`` in 0.8.5;
checked by ``tests/sim/test_catalog_source.py``), and the *values* are what a default ``vllm serve`` holds
after start-up. kv-planner reads only ``num_gpu_blocks`` and ``block_size``; the other values are the
defaults of that release, documented in docs/simulator.md.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.vllm.metrics_catalog import Version, parse_version

_OLD = (
    "block_size gpu_memory_utilization swap_space cache_dtype is_attention_free num_gpu_blocks_override "
    "sliding_window enable_prefix_caching prefix_caching_hash_algo cpu_offload_gb calculate_kv_scales"
)
_MAMBA_010 = "cpu_kvcache_space_bytes mamba_page_size_padded mamba_cache_dtype mamba_ssm_cache_dtype"
_MAMBA_012 = "cpu_kvcache_space_bytes mamba_page_size_padded mamba_block_size mamba_cache_dtype mamba_ssm_cache_dtype"
_MAMBA_015 = _MAMBA_012 + " mamba_cache_mode"
_NEW_HEAD = (
    "gpu_memory_utilization cache_dtype is_attention_free num_gpu_blocks_override sliding_window "
    "enable_prefix_caching prefix_caching_hash_algo calculate_kv_scales"
)

# CacheConfig attribute order per modelled release (fields, then attributes set in __post_init__).
FIELDS: dict[str, str] = {
    "0.8.5": f"{_OLD} num_gpu_blocks num_cpu_blocks swap_space_bytes",
    "0.10.1": f"{_OLD} {_MAMBA_010} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill swap_space_bytes",
    "0.10.2": f"{_OLD} {_MAMBA_010} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes swap_space_bytes",
    "0.11.0": f"{_OLD} {_MAMBA_010} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes swap_space_bytes",
    "0.12.0": f"{_OLD} {_MAMBA_012} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend",
    "0.13.0": f"{_OLD} {_MAMBA_012} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend",
    "0.14.0": f"{_OLD} {_MAMBA_012} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend",
    "0.15.1": f"{_OLD} {_MAMBA_015} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend",
    "0.16.0": f"{_OLD} {_MAMBA_015} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend",
    "0.17.1": _OLD.replace("cpu_offload_gb", "cpu_offload_gb cpu_offload_params")
    + f" {_MAMBA_015} num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill kv_cache_memory_bytes "
    "kv_offloading_size kv_offloading_backend",
    "0.18.0": f"block_size user_specified_block_size {_NEW_HEAD} {_MAMBA_015} num_gpu_blocks "
    "num_cpu_blocks kv_sharing_fast_prefill kv_cache_memory_bytes kv_offloading_size "
    "kv_offloading_backend _block_size_resolved",
    "0.19.0": f"block_size user_specified_block_size {_NEW_HEAD} kv_cache_dtype_skip_layers {_MAMBA_015} "
    "num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill kv_cache_memory_bytes kv_offloading_size "
    "kv_offloading_backend _block_size_resolved",
    "0.20.2": "block_size user_specified_block_size user_specified_mamba_block_size hash_block_size "
    f"{_NEW_HEAD} kv_cache_dtype_skip_layers mamba_page_size_padded mamba_block_size mamba_cache_dtype "
    "mamba_ssm_cache_dtype mamba_cache_mode num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend _block_size_resolved",
    "0.21.0": "block_size user_specified_block_size user_specified_mamba_block_size hash_block_size "
    f"{_NEW_HEAD} kv_cache_dtype_skip_layers mamba_page_size_padded mamba_block_size mamba_cache_dtype "
    "mamba_ssm_cache_dtype mamba_cache_mode num_gpu_blocks num_cpu_blocks kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend _block_size_resolved",
    "0.26.0": "block_size user_specified_block_size user_specified_mamba_block_size prefix_match_unit "
    f"{_NEW_HEAD} kv_cache_dtype_skip_layers mamba_page_size_padded skip_page_size_padded "
    "mamba_block_size mamba_cache_dtype mamba_ssm_cache_dtype mamba_cache_mode num_gpu_blocks "
    "num_cpu_blocks kv_cache_size_tokens kv_cache_max_concurrency kv_sharing_fast_prefill "
    "kv_cache_memory_bytes kv_offloading_size kv_offloading_backend _block_size_resolved",
    "0.33.0": "block_size user_specified_block_size kv_cache_layout prefix_match_unit "
    "gpu_memory_utilization cache_dtype is_attention_free num_gpu_blocks_override sliding_window "
    "enable_prefix_caching prefix_caching_hash_algo prefix_cache_retention_interval "
    "kv_cache_dtype_skip_layers mamba_page_size_padded skip_page_size_padded mamba_block_size "
    "mamba_cache_dtype mamba_ssm_cache_dtype mamba_cache_mode enable_mamba_shared_prefix_checkpoint "
    "replayssm_buffer_len use_replayssm use_kda_recoverssm num_gpu_blocks num_cpu_blocks "
    "simple_cpu_offload_num_blocks effective_attention_block_size kv_cache_size_tokens "
    "kv_cache_max_concurrency hash_block_size cache_hit_alignment_tokens kv_sharing_fast_prefill "
    "swa_bounded_replay kv_cache_memory_bytes kv_offloading_size kv_offloading_backend "
    "_block_size_resolved",
}


class CacheSettings(BaseModel):
    """The served configuration the label values are rendered from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_gpu_blocks: int
    block_size: int
    gpu_memory_utilization: float
    cache_dtype: str
    enable_prefix_caching: bool
    max_model_len: int
    num_gpu_blocks_override: int | None = None
    block_size_given: bool = False


def _render(value: object) -> str:
    return str(value)


def field_names(release: str) -> list[str]:
    return FIELDS[release].split()


def cache_config_labels(release: str, version: Version, settings: CacheSettings) -> dict[str, str]:
    """``CacheConfig.metrics_info()`` of a default start-up with these settings (no ``engine`` label)."""
    tokens = settings.num_gpu_blocks * settings.block_size
    values: dict[str, object] = {
        "block_size": settings.block_size,
        "user_specified_block_size": settings.block_size_given,
        "user_specified_mamba_block_size": False,
        "kv_cache_layout": None,
        "prefix_match_unit": None,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "swap_space": 4,
        "cache_dtype": settings.cache_dtype,
        "is_attention_free": False,
        "num_gpu_blocks_override": settings.num_gpu_blocks_override,
        "sliding_window": None,
        "enable_prefix_caching": settings.enable_prefix_caching,
        # 0.8.5 hashed with Python's builtin hash; sha256 is the default from 0.10.2.
        "prefix_caching_hash_algo": "sha256" if version >= parse_version("0.10.2") else "builtin",
        "prefix_cache_retention_interval": 0,
        "cpu_offload_gb": 0,
        "cpu_offload_params": set(),
        "calculate_kv_scales": False,
        "kv_cache_dtype_skip_layers": [],
        "cpu_kvcache_space_bytes": None,
        "mamba_page_size_padded": None,
        "skip_page_size_padded": None,
        "mamba_block_size": None,
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "enable_mamba_shared_prefix_checkpoint": False,
        "replayssm_buffer_len": 16,
        "use_replayssm": False,
        "use_kda_recoverssm": False,
        "num_gpu_blocks": settings.num_gpu_blocks,
        # The V1 engine core set num_cpu_blocks = 0 until 0.17; from 0.18 it is left unset.
        "num_cpu_blocks": 0 if version < parse_version("0.18.0") else None,
        "simple_cpu_offload_num_blocks": None,
        "effective_attention_block_size": settings.block_size,
        "kv_cache_size_tokens": tokens,
        "kv_cache_max_concurrency": round(tokens / settings.max_model_len, 2),
        "hash_block_size": settings.block_size if version >= parse_version("0.26.0") else None,
        "cache_hit_alignment_tokens": settings.block_size,
        "kv_sharing_fast_prefill": False,
        "swa_bounded_replay": True,
        "kv_cache_memory_bytes": None,
        "kv_offloading_size": None,
        "kv_offloading_backend": "native" if version >= parse_version("0.14.0") else None,
        "swap_space_bytes": 4 * (1 << 30),
        "_block_size_resolved": True,
    }
    return {name: _render(values[name]) for name in field_names(release)}
