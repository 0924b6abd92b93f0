"""vLLM release -> behaviour: the one table that says how each release sizes its KV cache.

Each row is a release whose source was read (``pip download vllm==X.Y.Z --no-deps``); the row holds
from that release until the next row. Releases between two rows were not read: they are planned with
the older row's behaviour (a change may have landed in any of them). ``docs/vllm-releases.md`` is the
same table for humans, with the file and function behind every field.
"""

from functools import lru_cache
from typing import Literal

import re2
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UnknownVllmVersionError
from planner.findings import Code, Finding

TokensFormula = Literal["blocks_x_block_size", "blocks_div_groups", "concurrency_x_len"]
InFlight = Literal["mnbt", "concurrent_batches"]
FitCheck = Literal["per_layer", "first_group_global", "first_group", "all_groups", "all_groups_null_block"]
FitErrorStyle = Literal["e0", "e1", "e2", "e3", "e4"]
CaptureRule = Literal["v0_8", "v0_10", "v0_12", "v0_20", "v0_31"]
MambaPrefixMode = Literal["one_block", "per_block", "all_or_align", "align_2", "align_mamba2_checkpoint", "align"]
RunnerV2Default = Literal["never", "dense", "all"]
SamplerKernel = Literal["flashinfer_if_installed", "sort_scatter", "triton_batch8", "flashinfer"]
NonTorchScope = Literal["init_free", "device", "baseline"]
MlaHybridAlign = Literal["64", "backend", "128"]
DeepseekV4Grouping = Literal["unified", "packed"]
NonKvAccounting = Literal["profile_peak", "consumed_since_init"]
Mxfp4Rule = Literal["v0_10_1", "v0_10_2", "v0_11_1", "v0_12", "v0_19", "v0_24"]
Mxfp4TritonLayout = Literal["strided", "mma", "mma_pad64", "mma_groups4"]
MmItemsRule = Literal["cdiv_limit_1", "floor_limit_999"]
MropeCache = Literal["x1", "x4", "x4_qwen3_x1"]


class Version(BaseModel):
    model_config = ConfigDict(frozen=True)

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> "Version":
        """``X.Y.Z`` with an optional leading ``v`` and an optional fourth part (``0.8.5.post1``,
        ``0.10.1.1``) or local/dev suffix, which do not change behaviour."""
        return _parse_version(text)

    @classmethod
    def _parse_uncached(cls, text: str) -> "Version":
        # At most six digits a part: the text is often untrusted (an image tag, an annotation), and int() of a
        # 10,000-digit string raises instead of saying "not a version".
        match = re2.match(r"^\s*v?(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?(?:[.+\-][0-9A-Za-z.+\-]*)?\s*$", text or "")
        if not match:
            raise UnknownVllmVersionError(
                f"vLLM version {text!r} is not X.Y.Z (a leading 'v' and a fourth part are accepted)"
            )
        return cls(major=int(match.group(1)), minor=int(match.group(2)), patch=int(match.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    # All four spelled out (not functools.total_ordering's derived ones): every plan compares releases many
    # times, and the derived comparisons cost a call and a negation each.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key() < other.key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key() <= other.key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key() > other.key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key() >= other.key()


@lru_cache(maxsize=1024)
def _parse_version(text: str) -> Version:
    # Versions are frozen: one parse per distinct text (every plan parses its release and the rows').
    return Version._parse_uncached(text)


class BatchDefaults(BaseModel):
    """``vllm serve`` defaults for one device class (``EngineArgs.get_batch_defaults``)."""

    model_config = ConfigDict(frozen=True)

    min_memory_gib: float
    max_num_batched_tokens: int
    max_num_seqs: int
    excludes_a100: bool = False


class Release(BaseModel):
    """How one range of vLLM releases sizes the KV cache (V1 engine unless said otherwise)."""

    model_config = ConfigDict(frozen=True)

    since: str = Field(description="the release whose source was read; the row holds until the next row")
    v0_available: bool = Field(description="the V0 engine still exists (fallback for fp8 KV without FA3)")
    v1_default: bool = Field(default=True, description="V1 is the default engine (VLLM_USE_V1 default 1)")
    default_gpu_memory_utilization: float
    budget_ceil: bool = Field(description="requested memory = ceil(total x util) (float product before)")
    cuda_graphs_counted: bool = Field(description="CUDA-graph estimate subtracted from the KV budget by default")
    tokens_formula: TokensFormula
    sliding_in_flight: InFlight
    async_scheduling_default: bool
    group_size_threshold: float | None = Field(description="use the largest bucket when max < t x min")
    strided_groups: bool
    fit_check: FitCheck
    fit_error_style: FitErrorStyle
    max_model_len_auto: bool
    chunked_local_hybrid_default: bool = Field(
        description="Llama-4 chunked layers keep their own groups (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE)"
    )
    mla_block_size_hopper: int
    mla_block_size_ampere: int = 16
    mla_block_size_blackwell: int
    batch_defaults: tuple[BatchDefaults, ...]
    clamp_batched_tokens: bool = Field(description="max_num_batched_tokens = min(max_num_seqs x max_model_len, ..)")
    v1_chunked_prefill_forced: bool = Field(
        default=True,
        description="V1 turns chunked prefill on whatever was asked (engine/arg_utils.py: `V1 always uses chunked "
        "prefills`, 0.8 .. 0.11.0), so enable_chunked_prefill=False leaves the batched-token default; 0.11.1+ "
        "keeps an explicit False, and the profile batch becomes max_model_len",
    )
    capture_rule: CaptureRule
    capture_limit_sm100: int = Field(
        default=512,
        description="the default largest CUDA-graph capture size on SM10x GPUs (B200/B300/GB200): 512 (<= 0.27, "
        "as every GPU), 1024 (0.28+, config/vllm.py _set_cudagraph_sizes: default_max_graph_size = 1024 if "
        "current_platform.is_device_capability_family(100) else 512)",
    )
    hybrid_prefix_caching_default: bool = Field(description="prefix caching on by default for Mamba hybrids")
    mamba_prefix_mode: MambaPrefixMode = Field(
        description="Mamba blocks per request with prefix caching on: one_block (<= 0.11), per_block "
        "(0.12-0.14: one per block of tokens), all_or_align (0.15-0.27: 'all' for models with "
        "Mamba prefix caching, else 'align' = 2), align_2 (0.28-0.31: 'align' = 2 for every model), "
        "align_mamba2_checkpoint (0.32: 2, +1 prefill checkpoint for Mamba2 layers), align (0.33: as 0.32, "
        "+1 GDN checkpoint on SM90+)"
    )
    auto_kv_from_checkpoint: bool = Field(description="kv_cache_dtype=auto follows the checkpoint's KV scheme")
    nemotron_h_ssm_default: Literal["model", "float16", "float32"] = Field(
        default="model",
        description="NemotronH SSM state dtype when neither --mamba-ssm-cache-dtype nor the config's "
        "mamba_ssm_cache_dtype says (model_executor/models/config.py NemotronHForCausalLMConfig): the model "
        "dtype (no such class), float16 (0.19), float32 (0.20+)",
    )
    sampler_kernel: SamplerKernel = Field(
        default="flashinfer_if_installed",
        description="top-k/top-p kernel of the sampler warm-up (v1/sample/ops/topk_topp_sampler.py): "
        "FlashInfer when installed (<= 0.11.0, VLLM_USE_FLASHINFER_SAMPLER unset = on), PyTorch sort + "
        "scatter copy (0.11.1-0.16, FlashInfer opt-in), Triton for >= 8 requests (0.17-0.20), FlashInfer "
        "on by default (0.21+)",
    )
    mxfp4_blackwell_intermediate_align: int = Field(
        default=256,
        description="MXFP4 MoE on Blackwell (FlashInfer TRT-LLM): intermediate size rounded up to this "
        "(256 in 0.10.1.1-0.26.0, 128 from 0.27; planner/memory/mxfp4.py)",
    )
    mxfp4_rule: Mxfp4Rule = Field(
        default="v0_10_1",
        description="how vLLM picks the MXFP4 MoE kernel (planner/memory/mxfp4.py choose_backend): v0_10_1 "
        "(0.10.1.x: Marlin below SM100, torch 2.7.1 has no Triton path), v0_10_2 (0.10.2-0.11.0: Triton only "
        "with the optional triton_kernels, which neither pip nor the image installs: Marlin on Hopper), v0_11_1 "
        "(0.11.x: + VLLM_MXFP4_USE_MARLIN, FlashInfer a dependency), v0_12 (0.12-0.18: triton_kernels in the "
        "wheel, Triton on SM90-10x), v0_19 (0.19-0.23: --moe-backend, then the variables, then the priority "
        "list), v0_24 (0.24+: the variables are gone)",
    )
    mxfp4_triton_layout: Mxfp4TritonLayout = Field(
        default="strided",
        description="Hopper layout of the Triton path's MXFP4 weights (quantization/utils/mxfp4_utils.py "
        "_swizzle_mxfp4, triton_kernels hopper_value.py/hopper_scale.py): strided (torch < 2.8.1, <= 0.11.0: "
        "the loaded tensors in place), mma (0.11.1-0.16, 0.22-0.25: tile packs, a second copy of the scales), "
        "mma_pad64 (0.17-0.21: both dims to 64 first), mma_groups4 (0.26+: scale groups to 4)",
    )
    weights_max_split_mb: int | None = Field(
        default=None,
        description="the caching allocator's max_split_size_mb while the model loads: unset (<= 0.20: a "
        "block is split when more than 1 MiB remains), 20 (0.21+: v1/worker/gpu_worker.py load_model under "
        "_scoped_allocator_max_split(20), so tensors of 20 MiB or more keep their whole 2 MiB-rounded "
        "segment; planner/models/allocation.py)",
    )
    moe_workspace_held: bool = Field(
        default=False,
        description="unquantized fused MoE allocates its workspaces from the persistent WorkspaceManager "
        "(0.14+), so they are held during the sampler warm-up",
    )
    fp8_moe_workspace_held: bool = Field(
        default=False,
        description="FP8 (W8A8) MoE on SM 8.9 runs the modular kernel with TritonExperts, whose workspaces "
        "come from the same WorkspaceManager (read in 0.29.0-0.33.0: fused_moe/oracle/fp8.py "
        "select_fp8_moe_backend leaves only TRITON below SM 9.0, make_fp8_moe_kernel, modular_kernel.py "
        "_allocate_buffers, experts/triton_moe.py workspace_shapes); earlier releases not read",
    )
    compile_autotune_examples: bool = Field(
        default=False,
        description="a cold torch.compile inside the profile run allocates Inductor's compile-time autotuning "
        "inputs: vLLM compiles with InductorStandaloneAdaptor (compilation/backends.py make_compiler: "
        "VLLM_USE_STANDALONE_COMPILE, default on except in 0.11.0, and torch >= 2.8: 0.10.2 and 0.11.1+), "
        "torch's _inductor/standalone_compile.py patches triton.autotune_at_compile_time on (torch 2.8-2.13), "
        "and codegen/wrapper.py then runs every Triton kernel of each graph on random copies of its inputs "
        "(generate_example_arg_value), freeing each after its last kernel: the embedding gather's copy of the "
        "embedding table is the largest (planner/memory/activation.py compile_example_bytes)",
    )
    model_runner_v2_default: RunnerV2Default = Field(
        default="never",
        description="Model Runner V2 is the default runner (VllmConfig.use_v2_model_runner): never (<= 0.25), "
        "dense (0.26-0.28: generate models that are neither MoE, unless listed, nor Mamba hybrids), all "
        "(0.29+). With async scheduling and PP > 1 it keeps pp + 1 batches in flight, the V1 runner pp "
        "(VllmConfig.max_concurrent_batches, 0.26+)",
    )
    runner_v2_sampler_warmup: bool = Field(
        default=False,
        description="Model Runner V2's sampler warm-up in the profile run (v1/worker/gpu/model_runner.py "
        "_dummy_sampler_run): one greedy pass over model-dtype logits (<= 0.32: the dummy requests keep the "
        "sampling states' defaults), or a second pass with SamplingParams.for_sampler_warmup that copies the "
        "logits to fp32 and samples with top-k/top-p (0.33+; planner/memory/activation.py "
        "runner_v2_sampler_bytes)",
    )
    non_kv_accounting: NonKvAccounting = Field(
        default="profile_peak",
        description="what the V1 worker subtracts besides the KV cache (utils/mem_utils.py memory_profiling, "
        "v1/worker/gpu_worker.py determine_available_memory): profile_peak (<= 0.26: weights + non-torch "
        "growth + torch's peak increase over the profile run, so torch buffers allocated between init_device "
        "and the profile run are in no term), consumed_since_init (0.27+: everything consumed on the device "
        "since init_device + the profile run's transient peak, so they count: Model Runner V2's sampler "
        "state, runner_v2_sampler_state_bytes)",
    )
    runner_v2_graph_estimate: bool = Field(
        default=False,
        description="Model Runner V2 estimates CUDA-graph memory before the KV cache is sized: no (<= 0.28, "
        "v1/worker/gpu/model_runner.py profile_cudagraph_memory returns 0, so nothing is subtracted when V2 "
        "runs the model), yes (0.29+, _profile_cudagraph_memory)",
    )
    v0_non_torch_scope: NonTorchScope = Field(
        default="baseline",
        description="what the V0 worker counts as non-KV memory outside PyTorch (worker/worker.py "
        "determine_num_available_blocks): init_free (0.6.0-0.6.3: the drop in free memory since init_device, "
        "after the CUDA context exists; the torch cache is not emptied), device (0.6.4: everything on the "
        "device torch did not allocate, CUDA context and other processes included), baseline (0.6.5+: the "
        "growth since the init_device snapshot, context and other processes excluded)",
    )
    v1_non_torch_scope: NonTorchScope = Field(
        default="baseline",
        description="the same for the V1 worker (v1/worker/gpu_worker.py determine_available_memory): device "
        "(0.7-0.8, as V0 0.6.4), baseline (0.9+: memory_profiling from the init_device snapshot)",
    )
    nccl_buffers_at_init: bool = Field(
        default=False,
        description="at TP > 1 NCCL allocates the buffers of every channel when vLLM's two TP communicators are "
        "created, after the baseline snapshot, so they count as non-torch memory (<= 0.10.1: vLLM sets "
        "NCCL_CUMEM_ENABLE=0, vllm/__init__.py 0.7, env_override.py 0.8-0.10.1, worker/worker_base.py 0.6.4, "
        "and NCCL without cuMem connects every ring and tree in ncclCommInitRank; before 2.22, the NCCL "
        "torch <= 2.6 bundles, it always does). From 0.10.2 cuMem stays on and NCCL connects on first use",
    )
    mla_hybrid_block_align: MlaHybridAlign = Field(
        default="64",
        description="the token multiple an MLA + Mamba hybrid's attention block is raised in until a page holds "
        "one state (Kimi-Linear): 64 (0.12-0.19 model_executor/models/config.py HybridAttentionMambaModelConfig; "
        "128 only with the CUTLASS MLA backend, not modelled), backend (0.20-0.26 platforms/interface.py "
        "_align_hybrid_block_size: the MLA backend's block size), 128 (0.27+: at least 128 for the TRT-LLM/"
        "FlashInfer MLA decode kernels)",
    )
    deepseek_v4_grouping: DeepseekV4Grouping = Field(
        default="unified",
        description="how DeepSeek-V4's caches of several page sizes are grouped: unified (0.20-0.28 "
        "v1/core/kv_cache_utils.py group_and_unify_kv_cache_specs, not modelled: plans are refused), packed "
        "(0.29+ _get_packed_kv_cache_groups, block-outermost layout)",
    )
    mm_items_rule: MmItemsRule = Field(
        default="floor_limit_999",
        description="items of the multimodal dummy batch (planner/memory/encoder.py): cdiv_limit_1 (0.7.3 "
        "v1/worker/gpu_model_runner.py profile_run: cdiv(budget, tokens per item), one item per prompt by "
        "default), floor_limit_999 (0.10.2+ MultiModalBudget: budget // tokens, 999 per prompt by default)",
    )
    runner_v2_mm_profile: bool = Field(
        default=True,
        description="Model Runner V2 profiles the vision encoder (v1/worker/gpu/model_runner.py profile_run): no "
        "in 0.26 (text forward only), yes from 0.27 (encoder_runner.profile_encoder_cache)",
    )
    vit_xformers: bool = Field(
        default=False,
        description="xformers is a dependency, so ViTs without FlashAttention take its kernels (<= 0.11: "
        "the 0.10.2 and 0.11.2 wheels require it); from 0.12 they take chunked torch SDPA",
    )
    pixtral_block_mask: bool = Field(
        default=False,
        description="Pixtral's ViT without xformers builds one additive mask over all patches of the dummy batch "
        "(model_executor/models/pixtral.py generate_block_attention_mask, 0.12-0.28); 0.29+ runs varlen attention",
    )
    vision_tower_skipped_at_zero_limit: bool = Field(
        default=False,
        description="a vision tower whose modalities all have --limit-mm-per-prompt 0 is not built, so its weights "
        "are not loaded (0.10.2 qwen2_5_vl.py, 0.15+ _mark_tower_model; 0.7.3 always builds it)",
    )
    sliding_window_kernel_block: bool = Field(
        default=False,
        description="sliding-window layers pick their own block size, the attention backend's smallest kernel "
        "block (16 on the CUDA backends), whatever --block-size says (0.25+ model_executor/layers/attention/"
        "attention.py get_kv_cache_spec, _largest_kernel_block_within); before, --block-size for every layer",
    )
    pad_unaligned_pages: bool = Field(
        default=False,
        description="an attention page that does not divide the largest page is padded to it instead of the "
        "unification failing (0.29+ v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size, any non-MLA "
        "attention layer; 0.24-0.28 only for backends that index KV by the block stride, not modelled)",
    )
    mrope_cache: MropeCache = Field(
        default="x4",
        description="positions the MRoPE cos/sin cache spans (MRotaryEmbedding.cache_max_position_num, built with "
        "the weights): x1 (up to 0.7.1: max_position_embeddings), x4 (0.7.2-0.31: 4 x max_position_embeddings, for "
        "Qwen2.5-VL's long videos), x4_qwen3_x1 (0.32+: Qwen3-VL and Qwen3.5 pass positions_factor 1 unless video "
        "pruning is on, the other MRoPE models keep 4)",
    )
    swap_space_flag: bool
    kv_cache_memory_bytes_flag: bool
    kv_cache_dtypes: tuple[str, ...]
    evidence: str = Field(description="source files read for this row")

    @property
    def null_block_in_fit_check(self) -> bool:
        return self.fit_check == "all_groups_null_block"


_D0 = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
_D1 = (*_D0, "fp8_inc")
_D2 = (*_D1, "bfloat16")
_D3 = (*_D2, "fp8_ds_mla")
_D4 = (*_D3, "float16")
_D5 = (
    *_D4,
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
)
_D6 = (*_D5, "int4_per_token_head")
_D7 = (*_D6, "nvfp4_ds_mla", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "nvfp4_4over6")
_D6_28 = (*_D6, "nvfp4_4over6")
_D6_30 = (*_D6, "nvfp4_ds_mla", "nvfp4_4over6")
_D6_32 = (*_D6, "nvfp4_ds_mla", "ultraquant_4bit", "nvfp4_4over6")

_BATCH_0_8 = (
    BatchDefaults(min_memory_gib=70, max_num_batched_tokens=8192, max_num_seqs=1024),
    BatchDefaults(min_memory_gib=0, max_num_batched_tokens=2048, max_num_seqs=256),
)
_BATCH_0_10 = (
    BatchDefaults(min_memory_gib=70, max_num_batched_tokens=8192, max_num_seqs=1024, excludes_a100=True),
    BatchDefaults(min_memory_gib=0, max_num_batched_tokens=2048, max_num_seqs=256),
)
_BATCH_0_33 = (BatchDefaults(min_memory_gib=160, max_num_batched_tokens=16384, max_num_seqs=1024), *_BATCH_0_10)

_V0_ONLY = Release(
    since="0.6.0",
    v0_available=True,
    v1_default=False,
    default_gpu_memory_utilization=0.9,
    budget_ceil=False,
    cuda_graphs_counted=False,
    tokens_formula="blocks_x_block_size",
    sliding_in_flight="mnbt",
    async_scheduling_default=False,
    group_size_threshold=None,
    strided_groups=False,
    fit_check="per_layer",
    fit_error_style="e0",
    max_model_len_auto=False,
    chunked_local_hybrid_default=False,
    mla_block_size_hopper=16,
    mla_block_size_blackwell=16,
    batch_defaults=_BATCH_0_8,
    clamp_batched_tokens=False,
    capture_rule="v0_8",
    hybrid_prefix_caching_default=False,
    mamba_prefix_mode="one_block",
    auto_kv_from_checkpoint=False,
    swap_space_flag=True,
    kv_cache_memory_bytes_flag=False,
    kv_cache_dtypes=_D0,
    v0_non_torch_scope="init_free",
    v1_non_torch_scope="device",
    nccl_buffers_at_init=True,
    mm_items_rule="cdiv_limit_1",
    vit_xformers=True,
    mrope_cache="x1",
    evidence="0.6.3.post1 and 0.6.0: worker/worker.py init_device (init_gpu_memory), "
    "determine_num_available_blocks (peak = init_gpu_memory - free after profile_run), worker/worker_base.py "
    "init_worker (NCCL_CUMEM_ENABLE=0; torch 2.4.0 bundles NCCL 2.20.5); the other fields "
    "read in 0.6.6.post1: config.py SchedulerConfig, engine/arg_utils.py",
)

_BASE = Release(
    since="0.8.0",
    v0_available=True,
    default_gpu_memory_utilization=0.9,
    budget_ceil=False,
    cuda_graphs_counted=False,
    tokens_formula="blocks_x_block_size",
    sliding_in_flight="mnbt",
    async_scheduling_default=False,
    group_size_threshold=None,
    strided_groups=False,
    fit_check="per_layer",
    fit_error_style="e0",
    max_model_len_auto=False,
    chunked_local_hybrid_default=False,
    mla_block_size_hopper=64,
    # platforms/cuda.py: FlashMLA (block 64) only on Hopper (attention/ops/flashmla.py); other GPUs get Triton
    # MLA with the default block of 16 (CUTLASS MLA only through VLLM_ATTENTION_BACKEND).
    mla_block_size_blackwell=16,
    batch_defaults=_BATCH_0_8,
    clamp_batched_tokens=False,
    capture_rule="v0_8",
    hybrid_prefix_caching_default=False,
    mamba_prefix_mode="one_block",
    auto_kv_from_checkpoint=False,
    swap_space_flag=True,
    kv_cache_memory_bytes_flag=False,
    kv_cache_dtypes=_D0,
    v1_non_torch_scope="device",
    nccl_buffers_at_init=True,
    mm_items_rule="cdiv_limit_1",
    vit_xformers=True,
    evidence="0.8.5.post1: v1/core/kv_cache_utils.py, v1/worker/gpu_worker.py, config.py, engine/arg_utils.py; "
    "0.8.5: env_override.py (NCCL_CUMEM_ENABLE=0), METADATA (torch==2.6.0, which pins NCCL 2.21.5)",
)


def _row(previous: Release, since: str, evidence: str, **changes: object) -> Release:
    return previous.model_copy(update={"since": since, "evidence": evidence, **changes})


# 0.9.2 read against 0.8.5.post1 and 0.10.0: v1/core/kv_cache_utils.py is 0.10.0's (the hybrid manager's
# groups, tokens = blocks // groups x block size, the fixed error text), engine/arg_utils.py already
# excludes A100 from the 70 GiB tier; config.py keeps 0.8's capture sizes (cuda_graph_sizes = [512]) and
# KV dtypes (no fp8_inc); Blackwell MLA still Triton (block 16).
_R_0_9 = _row(
    _BASE,
    "0.9.0",
    "0.9.2: v1/core/kv_cache_utils.py (get_kv_cache_config, check_enough_kv_cache_memory), "
    "config.py (cuda_graph_sizes, CacheDType), engine/arg_utils.py, platforms/cuda.py, v1/kv_cache_interface.py; "
    "0.9.0: v1/worker/gpu_worker.py determine_available_memory (device scope), env_override.py "
    "(NCCL_CUMEM_ENABLE=0), METADATA (torch==2.7.0: NCCL 2.26.2)",
    tokens_formula="blocks_div_groups",
    fit_error_style="e1",
    batch_defaults=_BATCH_0_10,
)
# 0.9.0's V1 worker still subtracts everything on the device outside torch (as 0.8); 0.9.1 moved it to
# memory_profiling from the init_device snapshot (with requested_memory = total x util).
_R_0_9_1 = _row(
    _R_0_9,
    "0.9.1",
    "0.9.1 and 0.9.2: v1/worker/gpu_worker.py init_device (init_snapshot, requested_memory), "
    "determine_available_memory (memory_profiling); 0.9.0 read too (device scope, as 0.8.5.post1)",
    v1_non_torch_scope="baseline",
)
_R_0_10 = _row(
    _R_0_9_1,
    "0.10.0",
    "0.10.1.1: v1/core/kv_cache_utils.py, config/cache.py, engine/arg_utils.py; 0.10.1 and 0.10.1.1: "
    "quantization/mxfp4.py Mxfp4MoEMethod._should_use_marlin, create_weights, METADATA (torch==2.7.1, "
    "flashinfer-python only in the flashinfer extra, no triton_kernels), env_override.py (NCCL_CUMEM_ENABLE=0 "
    "unless set)",
    mla_block_size_blackwell=128,
    capture_rule="v0_10",
    kv_cache_dtypes=_D1,
)
_R_0_10_2 = _row(
    _R_0_10,
    "0.10.2",
    "0.10.2: v1/worker/gpu_worker.py (kv_cache_memory_bytes), quantization/mxfp4.py get_mxfp4_backend, "
    "quantization/utils/mxfp4_utils.py _swizzle_mxfp4 (strided below torch 2.8.1), METADATA (torch==2.8.0), "
    "v1/worker/utils.py MultiModalBudget, model_executor/models/qwen2_5_vl.py (no tower at zero limits), "
    "the wheel's requirements (xformers), env_override.py (NCCL_CUMEM_ENABLE no longer set; 0.10.1 and "
    "0.10.1.1 set it to 0)",
    kv_cache_memory_bytes_flag=True,
    compile_autotune_examples=True,
    nccl_buffers_at_init=False,
    mxfp4_rule="v0_10_2",
    mm_items_rule="floor_limit_999",
    vision_tower_skipped_at_zero_limit=True,
)
_R_0_11 = _row(
    _R_0_10_2,
    "0.11.0",
    "0.11.0: v1/core/kv_cache_utils.py (strided groups), envs.py (no V0; VLLM_USE_STANDALONE_COMPILE "
    "defaults to 0, so compilation/backends.py takes InductorAdaptor)",
    v0_available=False,
    compile_autotune_examples=False,
    strided_groups=True,
    kv_cache_dtypes=_D2,
)
# 0.11.1 also moved the capture sizes to CompilationConfig.max_cudagraph_capture_size with the 8-then-16 step
# grid 0.12.0 keeps (config/vllm.py _set_cudagraph_sizes, alike in 0.11.1, 0.11.2 and 0.12.0).
# 0.11.1 made FlashInfer's top-k/top-p sampler opt-in (v1/sample/ops/topk_topp_sampler.py: forward_cuda only
# when VLLM_USE_FLASHINFER_SAMPLER is set true, else forward_native -> apply_top_k_top_p, the sort + scatter
# path 0.12 also takes); 0.11.0 still took FlashInfer whenever it was installed and the switch was not false.
# The MXFP4 kernel rule was read against 0.11.0 and 0.11.2 too (quantization/mxfp4.py is the same in 0.11.1
# and 0.11.2).
_R_0_11_1 = _row(
    _R_0_11,
    "0.11.1",
    "0.11.0, 0.11.1 and 0.11.2: v1/sample/ops/topk_topp_sampler.py (TopKTopPSampler.__init__), envs.py; "
    "quantization/mxfp4.py get_mxfp4_backend (VLLM_MXFP4_USE_MARLIN), "
    "quantization/utils/mxfp4_utils.py _swizzle_mxfp4, utils/import_utils.py has_triton_kernels, METADATA "
    "(torch==2.9.0, flashinfer-python required, no triton_kernels; no vllm/third_party/triton_kernels); "
    "0.11.1 and 0.11.2: config/vllm.py _set_cudagraph_sizes (max_cudagraph_capture_size, steps of 8 then 16); "
    "0.11.1: envs.py (VLLM_USE_STANDALONE_COMPILE on again), compilation/backends.py make_compiler; "
    "0.8.5, 0.10.1.1, 0.10.2, 0.11.0 against 0.11.1, 0.11.2, 0.12.0: engine/arg_utils.py (_set_default_args(_v1): "
    "enable_chunked_prefill = True for every non-pooling model up to 0.11.0, an explicit False kept since)",
    compile_autotune_examples=True,
    sampler_kernel="sort_scatter",
    v1_chunked_prefill_forced=False,
    mxfp4_rule="v0_11_1",
    mxfp4_triton_layout="mma",
    capture_rule="v0_12",
)
_R_0_12 = _row(
    _R_0_11_1,
    "0.12.0",
    "0.12.0: v1/core/kv_cache_utils.py, config/vllm.py, engine/arg_utils.py, model_executor/models/config.py "
    "HybridAttentionMambaModelConfig (MLA hybrids: 64), quantization/mxfp4.py get_mxfp4_backend (Triton on "
    "SM 9.0-10.x), utils/import_utils.py has_triton_kernels, third_party/triton_kernels (in the wheel), "
    "the wheel's requirements (no xformers), model_executor/models/pixtral.py (generate_block_attention_mask)",
    group_size_threshold=1.25,
    clamp_batched_tokens=True,
    capture_rule="v0_12",
    kv_cache_dtypes=_D3,
    mamba_prefix_mode="per_block",
    sampler_kernel="sort_scatter",
    mxfp4_rule="v0_12",
    vit_xformers=False,
    pixtral_block_mask=True,
)
_R_0_13 = _row(_R_0_12, "0.13.0", "0.13.0: v1/core/kv_cache_utils.py (error text)", fit_error_style="e2")
_R_0_14 = _row(
    _R_0_13,
    "0.14.0",
    "0.14.0: v1/worker/utils.py request_memory, envs.py, v1/core/kv_cache_utils.py",
    budget_ceil=True,
    fit_check="first_group_global",
    fit_error_style="e3",
    max_model_len_auto=True,
    chunked_local_hybrid_default=True,
    async_scheduling_default=True,
    auto_kv_from_checkpoint=True,
    moe_workspace_held=True,
)
_R_0_15 = _row(
    _R_0_14,
    "0.15.0",
    "0.15.1: platforms/cuda.py (Blackwell MLA), v1/kv_cache_interface.py, model_executor/models/config.py "
    "HybridAttentionMambaModelConfig (MLA hybrids: 64)",
    mla_block_size_blackwell=64,
    mamba_prefix_mode="all_or_align",
)
# 0.16.0 read field by field against 0.15.1 and 0.17.1: nothing the planner models changed (the new
# request_memory call is the XPU worker's; the dropped MXFP4 hidden pad is IPEX's).
_R_0_16 = _row(
    _R_0_15,
    "0.16.0",
    "0.16.0: v1/core/kv_cache_utils.py, v1/worker/utils.py, v1/sample/ops/topk_topp_sampler.py, "
    "quantization/mxfp4.py, platforms/cuda.py (as 0.15)",
)
_R_0_17 = _row(
    _R_0_16,
    "0.17.0",
    "0.17.1: v1/core/kv_cache_utils.py (fit check per worker), v1/sample/ops/topk_topp_sampler.py (Triton), "
    "third_party/triton_kernels/tensor_details/layout_details/hopper_value.py (pre-pad to 64)",
    fit_check="first_group",
    sampler_kernel="triton_batch8",
    mxfp4_triton_layout="mma_pad64",
)
_R_0_18 = _row(
    _R_0_17,
    "0.18.0",
    "0.18.0: v1/core/kv_cache_utils.py (1.5 rule), platforms/interface.py, config/cache.py (no swap_space), "
    "model_executor/models/config.py NemotronHForCausalLMConfig (SSM state float16 by default), "
    "HybridAttentionMambaModelConfig (MLA hybrids: 64), model_executor/models/kimi_linear.py",
    group_size_threshold=1.5,
    nemotron_h_ssm_default="float16",
    mla_block_size_hopper=16,
    mla_block_size_blackwell=32,
    swap_space_flag=False,
    kv_cache_dtypes=_D4,
)
_R_0_19 = _row(
    _R_0_18,
    "0.19.0",
    "0.19.0: v1/core/kv_cache_utils.py get_kv_cache_configs (all groups), model_executor/models/config.py "
    "NemotronHForCausalLMConfig (SSM state float16 by default), fused_moe/oracle/mxfp4.py "
    "select_mxfp4_moe_backend, quantization/mxfp4.py _setup_kernel (Triton keeps the loaded scales)",
    fit_check="all_groups",
    mxfp4_rule="v0_19",
)
_R_0_20 = _row(
    _R_0_19,
    "0.20.0",
    "0.20.0: v1/worker/gpu_worker.py, envs.py, config/cache.py, v1/core/kv_cache_utils.py "
    "_report_kv_cache_config (tokens still num_blocks // groups x min block size), model_executor/models/config.py "
    "NemotronHForCausalLMConfig (SSM state float32 by default), platforms/interface.py _align_hybrid_block_size "
    "(MLA hybrids: the backend's block), v1/core/kv_cache_utils.py group_and_unify_kv_cache_specs (DeepSeek-V4)",
    default_gpu_memory_utilization=0.92,
    nemotron_h_ssm_default="float32",
    mla_hybrid_block_align="backend",
    cuda_graphs_counted=True,
    capture_rule="v0_20",
    kv_cache_dtypes=_D5,
)
_R_0_20_2 = _row(
    _R_0_20,
    "0.20.2",
    "0.20.2: v1/core/kv_cache_utils.py _report_kv_cache_config (tokens = max concurrency x max_model_len: "
    "the ~10x jump of Gemma-4's logged size, vLLM #43308), _check_enough_kv_cache_memory (block override)",
    tokens_formula="concurrency_x_len",
)
_R_0_21 = _row(
    _R_0_20_2,
    "0.21.0",
    "0.21.0: v1/core/kv_cache_utils.py, v1/kv_cache_interface.py, envs.py (FlashInfer sampler on by default), "
    "v1/worker/gpu_worker.py load_model (_scoped_allocator_max_split: max_split_size_mb 20 while loading)",
    sampler_kernel="flashinfer",
    weights_max_split_mb=20,
)
_R_0_22 = _row(
    _R_0_21,
    "0.22.0",
    '0.22.1: v1/core/kv_cache_utils.py _check_enough_kv_cache_memory (error text: "model\'s", CPU backend); '
    "0.22.0: third_party/triton_kernels hopper_value.py (no pre-pad again)",
    fit_error_style="e4",
    mxfp4_triton_layout="mma",
)
_R_0_23 = _row(
    _R_0_22,
    "0.23.0",
    "0.23.0: v1/core/kv_cache_utils.py, v1/kv_cache_interface.py, config/cache.py, envs.py (as 0.22)",
)
_R_0_24 = _row(
    _R_0_23,
    "0.24.0",
    "0.24.0: v1/core/kv_cache_utils.py get_kv_cache_capacity (same tokens formula), v1/kv_cache_interface.py, "
    "fused_moe/oracle/mxfp4.py select_mxfp4_moe_backend and envs.py (no MXFP4 variables)",
    mxfp4_rule="v0_24",
)
_R_0_25 = _row(
    _R_0_24,
    "0.25.0",
    "0.25.1: config/cache.py CacheDType (int4_per_token_head), v1/kv_cache_interface.py (window still + mnbt); "
    "0.25.0: model_executor/layers/attention/attention.py get_kv_cache_spec (sliding windows on the kernel block)",
    kv_cache_dtypes=_D6,
    sliding_window_kernel_block=True,
)
_R_0_26 = _row(
    _R_0_25,
    "0.26.0",
    "0.26.0: config/vllm.py max_in_flight_tokens, max_concurrent_batches, _is_default_v2_model_runner_model, "
    "v1/kv_cache_interface.py, v1/core/kv_cache_utils.py (error text), platforms/interface.py "
    "_align_hybrid_block_size (MLA hybrids: still the backend's block), v1/worker/gpu/model_runner.py profile_run "
    "(no encoder profile), _dummy_sampler_run, load_model, v1/worker/gpu/sample/sampler.py, states.py, penalties.py, "
    "quantization/utils/mxfp4_utils.py _swizzle_mxfp4 (Hopper scale groups to 4)",
    sliding_in_flight="concurrent_batches",
    mxfp4_triton_layout="mma_groups4",
    model_runner_v2_default="dense",
    runner_v2_mm_profile=False,
)
_R_0_27 = _row(
    _R_0_26,
    "0.27.0",
    "0.27.1: model_executor/layers/fused_moe/oracle/mxfp4.py (TRT-LLM intermediate to 128), "
    "utils/mem_utils.py memory_profiling and v1/worker/gpu_worker.py determine_available_memory (total_consumed "
    "+ transient_peak_headroom), v1/core/kv_cache_utils.py, v1/kv_cache_interface.py, engine/arg_utils.py, "
    "platforms/interface.py _align_hybrid_block_size (MLA hybrids: at least 128), "
    "v1/worker/gpu/mm/encoder_runner.py profile_encoder_cache",
    mxfp4_blackwell_intermediate_align=128,
    mla_hybrid_block_align="128",
    non_kv_accounting="consumed_since_init",
    runner_v2_mm_profile=True,
)
_R_0_28 = _row(
    _R_0_27,
    "0.28.0",
    "0.28.0: engine/arg_utils.py (hybrid prefix caching on, >=160 GiB tier), model_executor/models/config.py "
    "(mamba_cache_mode defaults to align), v1/kv_cache_interface.py MambaSpec, config/cache.py, "
    "v1/core/kv_cache_utils.py group_and_unify_kv_cache_specs (DeepSeek-V4, as 0.20), config/vllm.py "
    "_set_cudagraph_sizes (1024 on SM10x)",
    batch_defaults=_BATCH_0_33,
    hybrid_prefix_caching_default=True,
    mamba_prefix_mode="align_2",
    kv_cache_dtypes=_D6_28,
    capture_limit_sm100=1024,
)
_R_0_29 = _row(
    _R_0_28,
    "0.29.0",
    "0.29.0: v1/core/kv_cache_utils.py get_kv_cache_configs, check_enough_kv_cache_memory (null block "
    "reserved before the fit check and auto-fit), _max_memory_usage_bytes_from_groups, _get_packed_kv_cache_groups; "
    "config/vllm.py use_v2_model_runner (V2 for every model), _set_cudagraph_sizes, max_concurrent_batches; "
    "v1/kv_cache_interface.py MambaSpec (num_prefill_checkpoint_blocks, unset by every Mamba layer), "
    "SlidingWindowSpec; config/cache.py; engine/arg_utils.py; v1/worker/utils.py request_memory; "
    "v1/sample/ops/topk_topp_sampler.py; fused_moe/oracle/mxfp4.py; platforms/cuda.py; "
    "models/deepseek_v4/attention.py, compressor.py, v1/attention/backends/mla/sparse_swa.py (DeepSeek-V4 caches "
    "as 0.33), model_executor/models/pixtral.py (MMEncoderAttention); fused_moe/oracle/fp8.py, "
    "modular_kernel.py, experts/triton_moe.py, quantization/compressed_tensors/compressed_tensors_moe/"
    "compressed_tensors_moe_w8a8_fp8.py (FP8 MoE workspaces from the WorkspaceManager on SM 8.9)",
    fit_check="all_groups_null_block",
    fp8_moe_workspace_held=True,
    model_runner_v2_default="all",
    runner_v2_graph_estimate=True,
    deepseek_v4_grouping="packed",
    pixtral_block_mask=False,
    pad_unaligned_pages=True,
)
_R_0_30 = _row(
    _R_0_29,
    "0.30.0",
    "0.30.0: config/cache.py CacheDType (nvfp4_ds_mla), v1/core/kv_cache_utils.py (fit check, capacity, "
    "grouping as 0.29), v1/kv_cache_interface.py, config/vllm.py, v1/sample/ops/topk_topp_sampler.py "
    "(FlashInfer still first), utils/torch_utils.py, platforms/interface.py",
    kv_cache_dtypes=_D6_30,
)
_R_0_31 = _row(
    _R_0_30,
    "0.31.0",
    "0.31.0: config/vllm.py _set_cudagraph_sizes (max_num_seqs captured), v1/core/kv_cache_utils.py, "
    "v1/kv_cache_interface.py SlidingWindowSpec, v1/worker/workspace.py, fused_moe/experts/triton_moe.py, "
    "v1/sample/ops/topk_topp_sampler.py, config/cache.py",
    capture_rule="v0_31",
)
_R_0_32 = _row(
    _R_0_31,
    "0.32.0",
    "0.32.0: model_executor/layers/mamba/mamba_mixer2.py get_kv_cache_spec (prefill checkpoint block), "
    "v1/kv_cache_interface.py MambaSpec, model_executor/models/config.py (no 'all' mode), config/cache.py "
    "CacheDType (ultraquant_4bit), v1/worker/utils.py request_memory, v1/core/kv_cache_utils.py, "
    "v1/worker/workspace.py, platforms/interface.py _align_hybrid_block_size, models/deepseek_v4 and kimi_k3 "
    "(as 0.33), models/qwen3_vl.py mrope_positions_factor (qwen3_vl_moe.py, qwen3_5.py), "
    "layers/rotary_embedding/mrope.py",
    mamba_prefix_mode="align_mamba2_checkpoint",
    kv_cache_dtypes=_D6_32,
    mrope_cache="x4_qwen3_x1",
)
_R_0_33 = _row(
    _R_0_32,
    "0.33.0",
    "0.33.0: v1/core/kv_cache_planning.py, v1/core/kv_cache_utils.py, engine/arg_utils.py, config/cache.py, "
    "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, config/vllm.py _set_cudagraph_sizes (as 0.32), "
    "models/deepseek_v4 (attention.py, compressor.py, nvidia/), models/kimi_k3/nvidia, "
    "model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py, v1/worker/gpu/model_runner.py _dummy_sampler_run "
    "(for_sampler_warmup pass), v1/worker/gpu/sample/sampler.py",
    mamba_prefix_mode="align",
    kv_cache_dtypes=_D7,
    runner_v2_sampler_warmup=True,
)

# The V0 worker's accounting changed in two patch releases (vLLM #9352 in 0.6.4, #10511 in 0.6.5).
_R_0_6_4 = _row(
    _V0_ONLY,
    "0.6.4",
    "0.6.4 and 0.6.4.post1: worker/worker.py determine_num_available_blocks (allocated_bytes.all.peak + "
    "mem_get_info used - torch allocated after empty_cache)",
    v0_non_torch_scope="device",
)
_R_0_6_5 = _row(
    _R_0_6_4,
    "0.6.5",
    "0.6.5 and 0.6.6.post1: worker/worker.py determine_num_available_blocks, utils.py memory_profiling "
    "(baseline = total - init_gpu_memory)",
    v0_non_torch_scope="baseline",
)
_R_0_7 = _row(
    _R_0_6_5,
    "0.7.0",
    "0.7.3: envs.py (VLLM_USE_V1 default 0), attention/backends/flashmla.py",
    mla_block_size_hopper=64,
)
# 0.7.1's MRotaryEmbedding caches max_position_embeddings positions; 0.7.2 enlarges the cache 4x.
_R_0_7_2 = _row(
    _R_0_7,
    "0.7.2",
    "0.7.2: model_executor/layers/rotary_embedding.py MRotaryEmbedding (cache_max_position_num = "
    "max_position_embeddings * 4; 0.7.1 has none)",
    mrope_cache="x4",
)

RELEASES: tuple[Release, ...] = (
    _V0_ONLY,
    _R_0_6_4,
    _R_0_6_5,
    _R_0_7,
    _R_0_7_2,
    _BASE,
    _R_0_9,
    _R_0_9_1,
    _R_0_10,
    _R_0_10_2,
    _R_0_11,
    _R_0_11_1,
    _R_0_12,
    _R_0_13,
    _R_0_14,
    _R_0_15,
    _R_0_16,
    _R_0_17,
    _R_0_18,
    _R_0_19,
    _R_0_20,
    _R_0_20_2,
    _R_0_21,
    _R_0_22,
    _R_0_23,
    _R_0_24,
    _R_0_25,
    _R_0_26,
    _R_0_27,
    _R_0_28,
    _R_0_29,
    _R_0_30,
    _R_0_31,
    _R_0_32,
    _R_0_33,
)

OLDEST = Version.parse(RELEASES[0].since)
LATEST_KNOWN = "0.33.0"
_LATEST = Version.parse(LATEST_KNOWN)
_STARTS = [(Version.parse(row.since), row) for row in RELEASES]


def resolve_release(version: str | None) -> tuple[Version, Release, list[Finding]]:
    """The behaviour row for ``version`` (default: the newest release kv-planner knows).

    Returns the parsed version, its row and warnings (a version newer than any known release is
    planned with the newest behaviour, and says so).
    """
    parsed, row, warnings = _resolve_release(version)
    return parsed, row, list(warnings)  # the caller's own list: plans append to it


@lru_cache(maxsize=256)
def _resolve_release(version: str | None) -> tuple[Version, Release, tuple[Finding, ...]]:
    warnings: list[Finding] = []
    parsed = Version.parse(version or LATEST_KNOWN)
    if parsed < OLDEST:
        raise UnknownVllmVersionError(f"vLLM {parsed} is older than the oldest release kv-planner models ({OLDEST})")
    if parsed > _LATEST:
        warnings.append(
            Finding.of(
                Code.NEWER_RELEASE,
                f"vLLM {parsed} is newer than the newest release checked ({LATEST_KNOWN}); "
                "planned with that release's behaviour",
            )
        )
    row = RELEASES[0]
    for start, candidate in _STARTS:
        if start <= parsed:
            row = candidate
    return parsed, row, tuple(warnings)
