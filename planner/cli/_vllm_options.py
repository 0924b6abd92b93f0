"""vLLM's serving flags as typer options, spelled and parsed as vLLM does (``32k``, ``32K``, ``auto``).

Commands declare ``**vllm_flags`` by listing these ``Annotated`` aliases, then call
:func:`serving_args` to build :class:`planner.vllm.args.ServingArgs`.
"""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from planner.errors import InvalidArgumentError
from planner.units import parse_human_int, parse_human_int_or_auto
from planner.vllm.args import ServingArgs

_V = "vLLM flags"

MaxModelLen = Annotated[
    str | None,
    typer.Option(
        "--max-model-len",
        "--max_model_len",
        rich_help_panel=_V,
        help="Context length: 32768, 32k (=32000), 32K (=32768) or auto.",
    ),
]
MaxNumSeqs = Annotated[
    int | None,
    typer.Option(
        "--max-num-seqs", "--max_num_seqs", rich_help_panel=_V, help="Concurrent sequences (vLLM default by GPU class)."
    ),
]
MaxNumBatchedTokens = Annotated[
    str | None,
    typer.Option("--max-num-batched-tokens", rich_help_panel=_V, help="Tokens per engine step (e.g. 8192 or 8K)."),
]
GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        "--gpu_memory_utilization",
        rich_help_panel=_V,
        help="Fraction of GPU memory vLLM may use (default 0.92 from 0.20, 0.9 before).",
    ),
]
KvCacheDtype = Annotated[
    str,
    typer.Option("--kv-cache-dtype", rich_help_panel=_V, help="auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16, float16, ..."),
]
KvCacheMemoryBytes = Annotated[
    str | None,
    typer.Option(
        "--kv-cache-memory-bytes", "--kv-cache-memory", rich_help_panel=_V, help="Fixed KV cache size per GPU (20G)."
    ),
]
BlockSize = Annotated[int | None, typer.Option("--block-size", rich_help_panel=_V, help="Tokens per KV block.")]
TensorParallel = Annotated[int, typer.Option("--tensor-parallel-size", "-tp", rich_help_panel=_V, min=1)]
PipelineParallel = Annotated[int, typer.Option("--pipeline-parallel-size", "-pp", rich_help_panel=_V, min=1)]
Nnodes = Annotated[
    int,
    typer.Option(
        "--nnodes",
        rich_help_panel=_V,
        min=1,
        help="Nodes the engine spans (vLLM's --nnodes, or the pods of a multi-node LWS/Ray group).",
    ),
]
DataParallel = Annotated[int, typer.Option("--data-parallel-size", "-dp", rich_help_panel=_V, min=1)]
Dtype = Annotated[str, typer.Option("--dtype", rich_help_panel=_V, help="auto, bfloat16, float16, float32.")]
Quantization = Annotated[
    str | None, typer.Option("--quantization", "-q", rich_help_panel=_V, help="Quantize while loading (e.g. fp8).")
]
EnforceEager = Annotated[bool, typer.Option("--enforce-eager", rich_help_panel=_V, help="No CUDA graphs.")]
CpuOffloadGb = Annotated[float, typer.Option("--cpu-offload-gb", rich_help_panel=_V, min=0)]
EnableExpertParallel = Annotated[bool, typer.Option("--enable-expert-parallel", rich_help_panel=_V)]
DisableHybrid = Annotated[bool, typer.Option("--disable-hybrid-kv-cache-manager", rich_help_panel=_V)]
NumGpuBlocksOverride = Annotated[int | None, typer.Option("--num-gpu-blocks-override", rich_help_panel=_V)]
EnableLora = Annotated[bool, typer.Option("--enable-lora", rich_help_panel=_V)]
MaxLoras = Annotated[int, typer.Option("--max-loras", rich_help_panel=_V, min=1)]
MaxLoraRank = Annotated[int, typer.Option("--max-lora-rank", rich_help_panel=_V, min=1)]
SpeculativeConfig = Annotated[str | None, typer.Option("--speculative-config", rich_help_panel=_V)]
KvTransferConfig = Annotated[str | None, typer.Option("--kv-transfer-config", rich_help_panel=_V)]
KvOffloadingSize = Annotated[
    float | None, typer.Option("--kv-offloading-size", rich_help_panel=_V, min=0, help="KV offload to CPU, GiB.")
]
KvOffloadingBackend = Annotated[
    str | None, typer.Option("--kv-offloading-backend", rich_help_panel=_V, help="native | lmcache.")
]
MoeBackend = Annotated[
    str | None,
    typer.Option("--moe-backend", rich_help_panel=_V, help="vLLM's MoE kernel (0.17+): auto | marlin | triton | ..."),
]
Mxfp4Backend = Annotated[
    str | None,
    typer.Option(
        "--mxfp4-backend",
        help="Not a vLLM flag: the MXFP4 MoE kernel the install runs, as its log names it (marlin | triton | "
        "flashinfer_trtllm | flashinfer_cutlass). Default: the release's choice, the band covering installs "
        "with other extras.",
    ),
]
LimitMmPerPrompt = Annotated[
    str | None,
    typer.Option(
        "--limit-mm-per-prompt",
        rich_help_panel=_V,
        help='Multimodal items per prompt, JSON ({"image": 0, "video": 0} serves text only).',
    ),
]
MmProcessorKwargs = Annotated[
    str | None,
    typer.Option("--mm-processor-kwargs", rich_help_panel=_V, help='Processor overrides, JSON ({"max_pixels": N}).'),
]
SkipMmProfiling = Annotated[
    bool, typer.Option("--skip-mm-profiling", rich_help_panel=_V, help="vLLM does not profile the vision encoder.")
]
HfOverrides = Annotated[
    str | None,
    typer.Option(
        "--hf-overrides",
        rich_help_panel=_V,
        help='Changes to the model\'s config.json, JSON ({"max_position_embeddings": 4096}), applied as the release '
        "applies them.",
    ),
]
VllmEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--env", rich_help_panel=_V, help="VLLM_* / LMCACHE_* environment of the server, KEY=VALUE (repeatable)."
    ),
]


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--env expects KEY=VALUE, got {pair!r}", flag="--env")
        env[key] = value
    return env


def serving_args(
    *,
    max_model_len: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: str | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: str = "auto",
    kv_cache_memory_bytes: str | None = None,
    block_size: int | None = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    nnodes: int = 1,
    dtype: str = "auto",
    quantization: str | None = None,
    enforce_eager: bool = False,
    cpu_offload_gb: float = 0.0,
    enable_expert_parallel: bool = False,
    disable_hybrid_kv_cache_manager: bool = False,
    num_gpu_blocks_override: int | None = None,
    enable_lora: bool = False,
    max_loras: int = 1,
    max_lora_rank: int = 16,
    speculative_config: str | None = None,
    kv_transfer_config: str | None = None,
    kv_offloading_size: float | None = None,
    kv_offloading_backend: str | None = None,
    moe_backend: str | None = None,
    mxfp4_backend: str | None = None,
    limit_mm_per_prompt: str | None = None,
    mm_processor_kwargs: str | None = None,
    skip_mm_profiling: bool = False,
    env: list[str] | None = None,
) -> ServingArgs:
    """Build ServingArgs from CLI values, with vLLM's value syntax and error messages."""

    def human(flag: str, value: str | None, *, auto: bool = False) -> int | None:
        if value is None:
            return None
        try:
            return parse_human_int_or_auto(value) if auto else parse_human_int(value)
        except ValueError as error:
            raise InvalidArgumentError(f"argument {flag}: {error}", flag=flag) from None

    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise InvalidArgumentError(
            f"argument --gpu-memory-utilization: must be in (0, 1], got {gpu_memory_utilization}",
            flag="--gpu-memory-utilization",
        )
    try:
        return ServingArgs(
            max_model_len=human("--max-model-len", max_model_len, auto=True),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=human("--max-num-batched-tokens", max_num_batched_tokens),
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype,
            kv_cache_memory_bytes=human("--kv-cache-memory-bytes", kv_cache_memory_bytes),
            block_size=block_size,
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            data_parallel_size=data_parallel_size,
            nnodes=nnodes,
            dtype=dtype,
            quantization=quantization,
            enforce_eager=enforce_eager,
            cpu_offload_gb=cpu_offload_gb,
            enable_expert_parallel=enable_expert_parallel,
            disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
            num_gpu_blocks_override=num_gpu_blocks_override,
            enable_lora=enable_lora,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            speculative_config=speculative_config,
            kv_transfer_config=kv_transfer_config,
            kv_offloading_size=kv_offloading_size,
            kv_offloading_backend=kv_offloading_backend,
            moe_backend=moe_backend,
            mxfp4_backend=mxfp4_backend,
            limit_mm_per_prompt=limit_mm_per_prompt,
            mm_processor_kwargs=mm_processor_kwargs,
            skip_mm_profiling=skip_mm_profiling,
            env=parse_env(env),
        )
    except ValidationError as error:
        raise _invalid_flag(error) from None


def _invalid_flag(error: ValidationError) -> InvalidArgumentError:
    """vLLM-style "argument --flag: ..." for a value ServingArgs refuses (field, value, what is allowed)."""
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "value"
    flag = "--" + field.replace("_", "-")
    allowed = first["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
    return InvalidArgumentError(f"argument {flag}: got {first.get('input')!r}; it must be {allowed}", flag=flag)
