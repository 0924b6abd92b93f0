"""Everything one simulated vLLM server needs, validated; and the engine settings derived from it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import CapacityError, InvalidArgumentError
from planner.sim.engine import EngineConfig, SpeedModel
from planner.sim.versions import (
    modelled_release,
    prefix_cache_counts_blocks,
    prefix_cache_skips_preempted,
    reserves_full_prompt,
)
from planner.units import cdiv
from planner.vllm.metrics_catalog import parse_version

# vLLM's fallback scheduler defaults for `vllm serve` on a GPU below 70 GiB (0.33
# EngineArgs.get_batch_defaults, usage context OPENAI_API_SERVER).
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_MODEL_LEN_CAP = 8192


class SimulatorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(default="kv-planner/simulated-model", description="--model as vLLM receives it")
    served_model_name: str | None = None
    num_gpu_blocks: int = Field(ge=2, description="KV blocks per engine, null block included")
    block_size: int = Field(default=16, ge=1)
    block_size_given: bool = False
    max_model_len: int | None = Field(default=None, ge=2)
    max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, ge=1)
    max_num_batched_tokens: int = Field(default=DEFAULT_MAX_NUM_BATCHED_TOKENS, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_cache_dtype: str = "auto"
    vllm_version: str | None = None
    engine_kind: Literal["v1", "v0"] = "v1"
    data_parallel_size: int = Field(default=1, ge=1, le=64)
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    time_scale: float = Field(default=1.0, ge=0, description="wall seconds per simulated second; 0 = flat out")
    seed: int = 0
    speed: SpeedModel = SpeedModel()
    eos_probability: float = Field(default=0.0, ge=0, lt=1)
    check_invariants: bool = False
    source: str = Field(default="--num-gpu-blocks", description="where num_gpu_blocks came from")

    @model_validator(mode="after")
    def _check(self) -> SimulatorSettings:
        release, version = modelled_release(self.vllm_version)
        if self.engine_kind == "v0" and version >= parse_version("0.11.0"):
            raise InvalidArgumentError(
                f"the V0 engine does not exist in vLLM {release}; it was removed in 0.11.0",
                flag="--vllm-engine",
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.effective_max_model_len:
            raise InvalidArgumentError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than max_model_len "
                f"({self.effective_max_model_len}) with chunked prefill disabled: such requests could never "
                "be scheduled.",
                flag="--max-num-batched-tokens",
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InvalidArgumentError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater than or equal to "
                f"max_num_seqs ({self.max_num_seqs}).",
                flag="--max-num-batched-tokens",
            )
        tokens_needed = cdiv(self.effective_max_model_len, self.block_size)
        if tokens_needed > self.num_gpu_blocks:
            # vLLM refuses to start when one max-length request does not fit (check_enough_kv_cache_memory).
            raise CapacityError(
                f"To serve at least one request with max seq len ({self.effective_max_model_len}), "
                f"{tokens_needed} KV blocks are needed, more than the {self.num_gpu_blocks} available.",
                hint="Lower --max-model-len or give more --num-gpu-blocks.",
            )
        return self

    @property
    def name(self) -> str:
        return self.served_model_name or self.model

    @property
    def release(self) -> str:
        return modelled_release(self.vllm_version)[0]

    @property
    def effective_max_model_len(self) -> int:
        if self.max_model_len is not None:
            return self.max_model_len
        return max(2, min(DEFAULT_MAX_MODEL_LEN_CAP, (self.num_gpu_blocks - 1) * self.block_size))

    @property
    def prefix_caching(self) -> bool:
        if self.enable_prefix_caching is not None:
            return self.enable_prefix_caching
        return self.engine_kind == "v1"  # on by default in V1, off in V0

    def engine_config(self) -> EngineConfig:
        version = parse_version(self.release)
        return EngineConfig(
            num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size,
            max_model_len=self.effective_max_model_len,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_prefix_caching=self.prefix_caching,
            enable_chunked_prefill=self.enable_chunked_prefill,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            reserve_full_prompt=self.engine_kind == "v1" and reserves_full_prompt(version),
            prefix_stats_in_blocks=prefix_cache_counts_blocks(version),
            prefix_stats_skip_preempted=prefix_cache_skips_preempted(version),
            speed=self.speed,
            eos_probability=self.eos_probability,
            seed=self.seed,
            check_invariants=self.check_invariants,
        )
