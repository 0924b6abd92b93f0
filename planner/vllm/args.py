"""ServingArgs: the vLLM serving flags that decide KV-cache sizing, as vLLM would receive them.

A field left ``None`` means "not given": vLLM's default for the release in force applies, resolved by
:func:`planner.vllm.releases.resolve_defaults`. Values use vLLM's own units (utilization is a
fraction, ``kv_cache_memory_bytes`` is bytes, ``cpu_offload_gb`` is GiB) and vLLM's spellings
(``kv_cache_dtype="fp8_e4m3"``), so a manifest's args map onto this model one to one.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# planner/memory/mxfp4.py BACKENDS (memory sits beside vllm in the layers, so the names are repeated;
# tests/core/test_profiling_causes.py keeps them equal).
Mxfp4Backend = Literal["marlin", "triton", "flashinfer_trtllm", "flashinfer_cutlass", "exact"]

KV_CACHE_DTYPES_ALL = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "octave_k3v4",
    "octave_k3v3",
    "octave_k3v3_compact",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)


# --quantization/-q choices, the union of vLLM 0.8.5, 0.19 and 0.33
# (model_executor/layers/quantization/__init__.py: QuantizationMethods).
QUANTIZATION_METHODS = frozenset(
    {
        "aqlm",
        "auto_awq",
        "auto_gptq",
        "auto-round",
        "awq",
        "awq_marlin",
        "bitblas",
        "bitsandbytes",
        "compressed-tensors",
        "cpu_awq",
        "deepseek_v4_fp8",
        "deepspeedfp",
        "experts_int8",
        "fbgemm_fp8",
        "fp8",
        "fp8_per_block",
        "fp8_per_channel",
        "fp8_per_tensor",
        "fp_quant",
        "gguf",
        "gpt_oss_mxfp4",
        "gptq",
        "gptq_bitblas",
        "gptq_marlin",
        "gptq_marlin_24",
        "hqq",
        "humming",
        "inc",
        "int8_per_channel_weight_only",
        "ipex",
        "marlin",
        "modelopt",
        "modelopt_fp4",
        "modelopt_mixed",
        "modelopt_mxfp8",
        "moe_wna16",
        "mxfp4",
        "mxfp8",
        "neuron_quant",
        "nvfp4",
        "nvfp4_per_token",
        "online",
        "petit_nvfp4",
        "ptpc_fp8",
        "qqq",
        "quark",
        "torchao",
        "tpu_int8",
    }
)


class ServingArgs(BaseModel):
    """The sizing-relevant subset of ``vllm serve`` flags (names as vLLM's argparse ``dest``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_model_len: int | None = Field(
        default=None, description="--max-model-len; -1 means auto (fit to memory); None = model default"
    )
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None)
    kv_cache_memory_bytes: int | None = Field(default=None, ge=0)
    kv_cache_dtype: str = "auto"
    block_size: int | None = Field(default=None, ge=1)
    num_gpu_blocks_override: int | None = Field(default=None, ge=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    data_parallel_size: int = Field(default=1, ge=1)
    nnodes: int = Field(
        default=1,
        ge=1,
        description="nodes one engine's ranks span: vLLM's --nnodes (multiprocessing backend), or the pods of "
        "a LeaderWorkerSet / Ray group the engine spans",
    )
    decode_context_parallel_size: int = Field(default=1, ge=1)
    enable_expert_parallel: bool = False
    dtype: str = "auto"
    quantization: str | None = None
    enforce_eager: bool = False
    cpu_offload_gb: float = Field(default=0.0, ge=0)
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    disable_hybrid_kv_cache_manager: bool = False
    performance_mode: str | None = None
    max_cudagraph_capture_size: int | None = None
    enable_lora: bool = False
    max_loras: int = Field(default=1, ge=1)
    max_lora_rank: int = Field(default=16, ge=1)
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    moe_backend: str | None = Field(
        default=None, description="--moe-backend (0.17+; the MXFP4 kernel follows it from 0.19); None: auto"
    )
    mxfp4_backend: Mxfp4Backend | None = Field(
        default=None,
        description="not a vLLM flag: the MXFP4 MoE kernel the install is known to run (a startup log's "
        "'Using ... backend' line, or what the image has installed); None: the release's choice for the GPU, "
        "and the safety band covers the kernels an install with other extras would run",
    )
    # Multimodal models: what vLLM's encoder profile run sizes (planner/memory/encoder.py).
    limit_mm_per_prompt: str | None = Field(
        default=None, description='--limit-mm-per-prompt, JSON ({"image": 0}) or the old "image=2,video=0" form'
    )
    mm_processor_kwargs: str | None = Field(default=None, description="--mm-processor-kwargs, JSON")
    skip_mm_profiling: bool = False
    language_model_only: bool = False
    mm_encoder_tp_mode: str | None = Field(default=None, description="weights (default) | data")
    mm_encoder_attn_backend: str | None = None
    # Features that change capacity in ways kv-planner does not model: each gets a named warning.
    speculative_config: str | None = None
    kv_transfer_config: str | None = None
    kv_offloading_size: float | None = None
    kv_offloading_backend: str | None = Field(default=None, description="native | lmcache (0.11.1+)")
    swap_space: float | None = None
    # Environment variables of the vLLM process that change sizing (VLLM_* and LMCACHE_* only).
    env: dict[str, str] = Field(default={})

    @property
    def gpus_per_engine(self) -> int:
        """GPUs one engine uses (TP x PP); DP replicas each use this many."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def tensor_parallel_across_nodes(self) -> bool:
        """The tensor-parallel group spans nodes: vLLM fills a node's GPUs with consecutive ranks, so a
        TP group is split when it is larger than one node's share of the engine (TP x PP / nodes)."""
        return self.nnodes > 1 and self.tensor_parallel_size > self.gpus_per_engine // self.nnodes

    @property
    def gpus_total(self) -> int:
        return self.gpus_per_engine * self.data_parallel_size
