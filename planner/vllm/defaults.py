"""The values vLLM fills in for flags the user left out, per release and device.

``EngineArgs`` defaults for ``vllm serve`` (usage context OPENAI_API_SERVER): batch limits by the
device's total memory, the model dtype from the checkpoint, the block size from the attention backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import InvalidArgumentError
from planner.gpus.spec import GpuSpec
from planner.models.spec import ModelSpec
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Release

# GPUs without bfloat16 (compute capability < 8.0): vLLM's "auto" picks float16 there.
_NO_BF16_ARCHITECTURES = {"volta", "turing", "pascal"}


@dataclass(frozen=True)
class ResolvedArgs:
    """ServingArgs with every default resolved for one release and GPU."""

    engine: str
    """"v1", or "v0" where an old release falls back to its V0 engine."""
    dtype: str
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    block_size_given: bool
    enable_prefix_caching: bool
    async_scheduling: bool
    max_model_len: int = 0
    """The context vLLM profiles with (the model's or --max-model-len; the derived one for auto-fit): the
    multimodal dummy batch depends on it (MultiModalBudget). 0 where not known."""


def resolve_dtype(requested: str, model: ModelSpec, gpu: GpuSpec) -> str:
    """vLLM's ``_get_and_verify_dtype``: ``auto`` = checkpoint dtype, float32 downcast to 16 bits."""
    aliases = {"half": "float16", "float": "float32", "fp16": "float16", "bf16": "bfloat16"}
    value = aliases.get(requested, requested)
    if value == "auto":
        value = model.dtype
        if value == "float32":
            value = "bfloat16"
        if value == "bfloat16" and gpu.architecture in _NO_BF16_ARCHITECTURES:
            value = "float16"
    if value not in ("bfloat16", "float16", "float32"):
        raise InvalidArgumentError(f"argument --dtype: invalid choice: {requested!r}", flag="--dtype")
    if value == "bfloat16" and gpu.architecture in _NO_BF16_ARCHITECTURES:
        raise InvalidArgumentError(
            f"Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your {gpu.name} GPU has compute capability {gpu.compute_capability or '< 8.0'}. "
            "You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
            flag="--dtype",
        )
    if value == "float16" and model.model_type in ("gemma2", "gemma3", "gemma3_text", "glm4"):
        raise InvalidArgumentError(
            f"The model type {model.model_type!r} does not support float16. Reason: Numerical instability. "
            "Please use bfloat16 or float32 instead.",
            flag="--dtype",
        )
    return value


def default_block_size(model: ModelSpec, gpu: GpuSpec, release: Release) -> int:
    """The attention backend's preferred block size on CUDA (16; MLA backends differ by GPU)."""
    if model.compressed_attention is not None:
        # DeepSeek-V4: the sparse MLA (FLASHMLA_SPARSE_DSV4) and indexer backends take only 256; the block size
        # every backend accepts (platforms/interface.py _preferred_block_size_for_backends) is 256.
        return 256
    if model.mla is None:
        return 16
    if model.mla.indexer_head_dim is not None:
        # DeepSeek-V3.2: the indexer backend takes only 64-token blocks on CUDA
        # (v1/attention/backends/mla/indexer.py: DeepseekV32IndexerBackend.get_supported_kernel_block_sizes), and
        # platforms/interface.py: _preferred_block_size_for_backends picks the size every backend accepts.
        return 64
    if gpu.architecture == "blackwell":
        return release.mla_block_size_blackwell
    if gpu.architecture == "hopper":
        return release.mla_block_size_hopper
    return release.mla_block_size_ampere


def uses_v0_engine(args: ServingArgs, gpu: GpuSpec, release: Release, dtype: str) -> bool:
    """Releases up to 0.10.2 run the V0 engine when asked (VLLM_USE_V1=0) or when V1 cannot serve the
    settings: an fp8 KV cache without FlashAttention 3 (pre-Hopper GPUs), float32, compute capability < 8."""
    if not release.v0_available:
        return False
    flag = args.env.get("VLLM_USE_V1")
    if flag is not None:
        return flag.strip() == "0"
    if not release.v1_default:
        return True
    fp8_kv = args.kv_cache_dtype.startswith("fp8")
    return (
        (fp8_kv and gpu.architecture not in ("hopper", "blackwell"))
        or dtype == "float32"
        or gpu.architecture in _NO_BF16_ARCHITECTURES
    )


def batch_defaults(gpu: GpuSpec, release: Release) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM serve picks for this device class."""
    memory_gib = gpu.memory_bytes / (1 << 30)
    is_a100 = gpu.name.upper().startswith(("A100", "A800"))
    for row in release.batch_defaults:
        if memory_gib >= row.min_memory_gib and not (row.excludes_a100 and is_a100):
            return row.max_num_batched_tokens, row.max_num_seqs
    last = release.batch_defaults[-1]
    return last.max_num_batched_tokens, last.max_num_seqs


def resolve_args(
    args: ServingArgs, model: ModelSpec, gpu: GpuSpec, release: Release, max_model_len: int
) -> ResolvedArgs:
    util = args.gpu_memory_utilization
    if util is None:
        util = release.default_gpu_memory_utilization
    if not 0 < util <= 1:
        raise InvalidArgumentError(
            f"gpu_memory_utilization must be in (0, 1], got {util}", flag="--gpu-memory-utilization"
        )
    dtype = resolve_dtype(args.dtype, model, gpu)
    v0 = uses_v0_engine(args, gpu, release, dtype)
    if v0:
        # V0 (vllm/engine/arg_utils.py _set_default_args_v0): 256 sequences; chunked prefill only past 32K.
        max_num_seqs = args.max_num_seqs or 256
        chunked = args.enable_chunked_prefill if args.enable_chunked_prefill is not None else max_model_len > 32768
        mnbt = args.max_num_batched_tokens or (2048 if chunked else max(max_model_len, 2048))
    else:
        mnbt_default, seqs_default = batch_defaults(gpu, release)
        if args.performance_mode == "throughput":
            mnbt_default, seqs_default = 2 * mnbt_default, 2 * seqs_default
        max_num_seqs = args.max_num_seqs or seqs_default
        mnbt = args.max_num_batched_tokens or mnbt_default
        turned_off = args.enable_chunked_prefill is False and not release.v1_chunked_prefill_forced
        if turned_off and args.max_num_batched_tokens is None:
            mnbt = max(max_model_len, mnbt)
        if args.max_num_batched_tokens is None and release.clamp_batched_tokens:
            mnbt = min(max_num_seqs * max_model_len, mnbt)
        if args.max_num_seqs is None:
            max_num_seqs = min(max_num_seqs, mnbt)
    block_size = args.block_size or default_block_size(model, gpu, release)
    hybrid = "M" in model.layer_pattern
    if args.enable_prefix_caching is not None:
        prefix = args.enable_prefix_caching
    else:
        prefix = not v0 and (release.hybrid_prefix_caching_default if hybrid else True)
    asynchronous = args.async_scheduling if args.async_scheduling is not None else release.async_scheduling_default
    return ResolvedArgs(
        engine="v0" if v0 else "v1",
        dtype=dtype,
        gpu_memory_utilization=util,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        block_size=block_size,
        block_size_given=args.block_size is not None,
        enable_prefix_caching=prefix,
        async_scheduling=asynchronous,
        max_model_len=max_model_len,
    )
