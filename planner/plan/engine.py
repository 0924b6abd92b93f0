"""What one vLLM engine computes at startup: per-stage memory budgets and the KV layout.

This is the arithmetic core shared by ``make_plan`` (predictions from the GPU alone) and
``planner validate`` (the same arithmetic fed a logged KV memory or logged weights).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from planner.errors import InvalidArgumentError, UnsupportedArchitectureError
from planner.findings import Code, Finding
from planner.gpus.spec import GpuSpec
from planner.kv.capacity import KvLayout, StageKv
from planner.kv.dtypes import KvDtype, resolve_kv_dtype
from planner.kv.grouping import Grouping, group_layers, group_packed, stage_group_size
from planner.kv.specs import KERNEL_BLOCK_ALIGNMENT, RankLayout, build_layer_caches, deepseek_v4_caches
from planner.memory.activation import (
    activation_peak,
    runner_v2_flashinfer_sampler,
    runner_v2_sampler_state_bytes,
    sampler_kernel_in_force,
)
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.memory.cudagraph import cuda_graph_bytes
from planner.memory.encoder import EncoderProfile, combined_peak, deepstack_buffer_bytes
from planner.memory.mxfp4 import BackendChoice, choose_backend, padding_bytes_per_moe_layer, parse_capability
from planner.memory.nontorch import nccl_at_init_bytes, non_torch_bytes
from planner.models.allocation import weight_blocks_overhead
from planner.models.memo import IdentityMemo
from planner.models.quantization import scheme_quantization
from planner.models.spec import ModelSpec
from planner.models.weights import WeightEstimate, estimate_weights, pp_partition
from planner.plan.drafter import engine_drafter, with_drafter_layers
from planner.plan.multimodal import (
    encoder_data_parallel,
    multimodal_profile_on,
    text_only,
    vision_tower_disabled,
    vit_attention,
)
from planner.plan.speculative import DrafterCost, async_refused, drafter_turns_async_off, runner_v2_takes
from planner.units import DTYPE_BYTES, GiB
from planner.vllm.args import ServingArgs
from planner.vllm.defaults import ResolvedArgs
from planner.vllm.releases import Release, Version


@dataclass(frozen=True)
class TermDeltas:
    """Measured minus predicted bytes per budget term (from ``planner calibrate``)."""

    weights_bytes: int = 0
    non_torch_bytes: int = 0
    activation_peak_bytes: int = 0
    cuda_graph_bytes: int = 0


_NO_DELTAS = TermDeltas()


class TermCorrections(Protocol):
    """Measured corrections for a deployment, as the plan needs them.

    :class:`planner.calibration.corrections.Corrections` (a corrections file) implements it; the plan
    only asks for the deltas, so it does not depend on the calibration package that sits above it.
    """

    def deltas_for(
        self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, *, max_num_batched_tokens: int, max_num_seqs: int
    ) -> TermDeltas | None: ...


@dataclass
class StageMemory:
    stage: int
    budget_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_peak_bytes: int
    cuda_graph_bytes: int
    cuda_graph_counted: bool
    cold_compile_bytes: int = 0
    """how much of ``activation_peak_bytes`` only a cold torch.compile needs (a warm cache frees it)"""

    @property
    def kv_bytes(self) -> int:
        graphs = self.cuda_graph_bytes if self.cuda_graph_counted else 0
        return self.budget_bytes - self.weights_bytes - self.non_torch_bytes - self.activation_peak_bytes - graphs


@dataclass
class EngineLayout:
    """Everything computed for one engine, before formatting."""

    kv_dtype: KvDtype
    rank: RankLayout
    grouping: Grouping
    partition: list[int]
    hybrid_manager: bool
    mamba_bytes: tuple[int, int]
    """(conv, SSM) state bytes per element."""
    parameters: int
    weights_estimated: bool
    memory: list[StageMemory] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    drafter: DrafterCost | None = None
    drafter_layers: int = 0
    """KV layers the drafter appends (on the last pipeline stage)."""
    model_runner_v2: bool = False
    """vLLM runs the model with Model Runner V2 (``uses_model_runner_v2``, and the drafter allows it)."""
    async_scheduling: bool = False
    """Async scheduling is on (the resolved default, unless the drafter turns it off)."""
    mxfp4: BackendChoice | None = None
    """The MXFP4 MoE kernel planned (MXFP4 models on CUDA GPUs)."""
    mxfp4_spread_bytes: int = 0
    """How many more weight bytes (heaviest stage) the heaviest candidate kernel would hold."""
    encoder: EncoderProfile | None = None
    """The vision encoder part of vLLM's profile run (multimodal models; None when vLLM skips it)."""
    nccl_at_init_bytes: int = 0
    """Non-torch bytes of NCCL channel buffers connected when the TP communicators are created (each stage's
    ``non_torch_bytes`` holds them; planner/memory/nontorch.py ``nccl_at_init_bytes``)."""

    @property
    def cold_compile_bytes(self) -> int:
        """How much more KV memory vLLM finds when its compile cache is warm: the autotuning inputs of a
        cold compile the plan counts (planner/memory/activation.py compile_example_bytes)."""
        return max((stage.cold_compile_bytes for stage in self.memory), default=0)

    @property
    def encoder_band_bytes(self) -> int:
        """How much more activation an encoder profile that is only estimated (KVP131) may need: its peak."""
        encoder = self.encoder
        return encoder.encoder_peak_bytes if encoder is not None and not encoder.modelled else 0


def mxfp4_choice(model: ModelSpec, gpu: GpuSpec, args: ServingArgs, release: Release) -> BackendChoice:
    """The MXFP4 MoE kernel vLLM runs for this model, GPU and release (none for other models)."""
    quant = model.quantization
    if model.moe is None or quant is None or quant.method != "mxfp4":
        return BackendChoice(None)
    return choose_backend(
        release.mxfp4_rule,
        parse_capability(gpu.compute_capability),
        args.env,
        moe_backend=args.moe_backend,
        given=args.mxfp4_backend,
    )


def hybrid_manager_enabled(model: ModelSpec, args: ServingArgs, release: Release) -> tuple[bool, list[Finding]]:
    """Whether vLLM keeps sliding/chunked layers in their own groups (the hybrid KV cache manager)."""
    notes: list[Finding] = []
    if args.disable_hybrid_kv_cache_manager:
        return False, notes
    if "C" in model.layer_pattern:
        env = args.env.get("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE")
        allowed = release.chunked_local_hybrid_default if env is None else env.lower() in ("1", "true")
        if not allowed:
            notes.append(
                Finding.of(
                    Code.CHUNKED_AS_FULL,
                    "chunked local attention sized as full attention (vLLM disables the hybrid "
                    "KV cache manager for it in this release)",
                )
            )
            return False, notes
    if args.kv_transfer_config and ("S" in model.layer_pattern or "C" in model.layer_pattern):
        notes.append(
            Finding.of(
                Code.CONNECTOR_NO_HYBRID,
                "a KV connector turns the hybrid KV cache manager off: sliding-window layers "
                "are sized as full attention",
            )
        )
        return False, notes
    return True, notes


def in_flight_tokens(release: Release, resolved: ResolvedArgs, pp: int, runner_v2: bool, asynchronous: bool) -> int:
    """Tokens scheduled but not yet settled, added to sliding windows (``VllmConfig.max_in_flight_tokens``)."""
    if release.sliding_in_flight == "mnbt":
        return resolved.max_num_batched_tokens
    # VllmConfig.max_concurrent_batches: async scheduling overlaps one more batch, except that the V1
    # model runner does not overlap under pipeline parallelism (pp batches); the V2 runner does (pp + 1).
    if not asynchronous:
        batches = pp
    elif pp == 1:
        batches = 2
    else:
        batches = pp + 1 if runner_v2 else pp
    return batches * resolved.max_num_batched_tokens


# Architectures on Model Runner V2 by default whatever their MoE layers (vllm 0.26.0-0.28.0 config/vllm.py
# DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, the ones kv-planner can plan).
_RUNNER_V2_ARCHITECTURES = {"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"}


# 0.32+ models/qwen3_vl.py mrope_positions_factor: the Qwen3-VL and Qwen3.5 decoders (qwen3_vl.py, qwen3_vl_moe.py,
# qwen3_5.py) pass it to get_rope; video pruning (EVS, --video-pruning-rate), which Qwen3.5 does not support, is
# what makes it 4, and kv-planner plans it off.
_QWEN3_MROPE_PREFIXES = ("Qwen3VL", "Qwen3_5")


def mrope_cache_factor(model: ModelSpec, release: Release) -> int:
    """How many times ``max_position_embeddings`` the MRoPE cos/sin cache spans (``Release.mrope_cache``)."""
    if release.mrope_cache == "x1":
        return 1
    if release.mrope_cache == "x4_qwen3_x1" and model.architecture.startswith(_QWEN3_MROPE_PREFIXES):
        return 1
    return 4


def uses_model_runner_v2(model: ModelSpec, release: Release, env: Mapping[str, str] | None = None) -> bool:
    """Whether vLLM runs the model with Model Runner V2 (``VllmConfig.use_v2_model_runner``)."""
    if release.model_runner_v2_default == "never":
        return False  # opt-in V2 runners before 0.26 were not read: planned as the V1 runner
    forced = (env or {}).get("VLLM_USE_V2_MODEL_RUNNER", "").strip()
    if forced.isdigit():
        # 0.26-0.33 envs.py maybe_convert_bool: bool(int(value)) overrides the default either way (what
        # the memory terms then are: planner/memory/activation.py).
        return int(forced) != 0
    if release.model_runner_v2_default == "all":  # 0.29+: every model the V2 runner supports
        return True
    # 0.26-0.28 _is_default_v2_model_runner_model: listed architectures, else dense models; a Mamba hybrid
    # or attention-free model only when listed (none of those kv-planner plans is).
    if "M" in model.layer_pattern:
        return False
    return model.architecture in _RUNNER_V2_ARCHITECTURES or model.moe is None


# Models whose Mamba layers support "all"-mode prefix caching (vLLM SupportsMambaPrefixCaching, 0.15-0.27).
_MAMBA_ALL_MODE = {"jamba", "mamba", "mamba2", "nemotron_h", "zamba2", "granitemoehybrid", "falcon_h1", "bamba"}


def mamba_blocks_and_alignment(
    model: ModelSpec, gpu: GpuSpec, release: Release, resolved: ResolvedArgs
) -> tuple[int | None, int]:
    """(blocks a Mamba group holds per request — None for one per block of tokens —, block-size alignment)."""
    blocks, alignment = _mamba_blocks_and_alignment(model, gpu, release, resolved)
    if model.mla is not None and "M" in model.layer_pattern:
        # MLA + Mamba (Kimi-Linear): the release's MLA rule (mla_hybrid_block_align).
        if release.mla_hybrid_block_align == "64":
            alignment = 64
        elif release.mla_hybrid_block_align == "128":
            alignment = max(alignment, 128)
    return blocks, alignment


def _mamba_blocks_and_alignment(
    model: ModelSpec, gpu: GpuSpec, release: Release, resolved: ResolvedArgs
) -> tuple[int | None, int]:
    if "M" not in model.layer_pattern or not resolved.enable_prefix_caching:
        return 1, 16  # "none" mode: one state block per sequence
    mode = release.mamba_prefix_mode
    if mode == "one_block":
        return 1, 16
    if mode == "per_block":
        return None, 16
    if mode == "all_or_align":
        return (None, 16) if model.model_type in _MAMBA_ALL_MODE else (2, 16)
    if mode == "align_2":
        # vllm 0.28.0 model_executor/models/config.py: MambaModelConfig.verify_and_update_config sets
        # "align" for every model; v1/kv_cache_interface.py MambaSpec keeps 2 blocks (no checkpoint yet).
        return 2, 16
    # 0.32+: MambaMixer2.get_kv_cache_spec (model_executor/layers/mamba/mamba_mixer2.py) adds one prefill
    # checkpoint block (alignment 1), which MambaSpec.max_memory_usage_bytes counts in "align" mode.
    if model.mamba is not None and model.mamba.kind == "mamba2":
        return 3, 16
    # 0.33 "align": gated-delta-net prefill on Hopper/Blackwell (FlashInfer) also keeps a checkpoint block
    # and aligns blocks to 64 tokens.
    gdn_checkpoint = (
        mode == "align"
        and model.mamba is not None
        and model.mamba.kind == "gated_delta_net"
        and gpu.architecture in ("hopper", "blackwell")
    )
    return (3, 64) if gdn_checkpoint else (2, 16)


# Per-model invariants: the weights of one parallel layout and the MoE layer flags do not depend on the
# GPU or the release, so a sweep (and the release spread of every plan) computes them once per model.
_WEIGHTS: IdentityMemo[WeightEstimate] = IdentityMemo()
_BLOCKS: IdentityMemo[int] = IdentityMemo()
_MOE_FLAGS: IdentityMemo[tuple[int, ...]] = IdentityMemo()
# The KV specs and their grouping of one model: GPU-independent, shared by every release with the same
# group-size rule (the layout is read, never changed; a drafter's layers make a new one).
_RANK_LAYOUTS: IdentityMemo[tuple[RankLayout, Grouping]] = IdentityMemo()


def capture_limit(release: Release, gpu: GpuSpec) -> int:
    """The default largest CUDA-graph capture size: 512, or the release's SM10x ceiling on B200/B300/GB200
    (platforms/interface.py is_device_capability_family(100): compute capability 10.x)."""
    major = (gpu.compute_capability or "").split(".")[0]
    return release.capture_limit_sm100 if gpu.vendor == "nvidia" and major == "10" else 512


def moe_layer_count(model: ModelSpec, first: int, count: int) -> int:
    """MoE layers among decoder layers ``first .. first + count - 1``."""
    if model.moe is None:
        return 0
    prefix = _MOE_FLAGS.get(model, None, lambda: _moe_prefix(model))
    if first + count >= len(prefix):  # beyond the decoder layers (not expected): count directly
        return sum(1 for i in range(first, first + count) if model.is_moe_layer(i))
    return prefix[first + count] - prefix[first]


def _moe_prefix(model: ModelSpec) -> tuple[int, ...]:
    """Running count of MoE layers: element i is the number among layers 0 .. i - 1."""
    counts = [0]
    for index in range(model.num_layers):
        counts.append(counts[-1] + model.is_moe_layer(index))
    return tuple(counts)


def build_rank_layout(
    model: ModelSpec,
    mamba: tuple[int | None, int],
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    kv_dtype: KvDtype,
    hybrid: bool,
) -> tuple[RankLayout, Grouping]:
    """``mamba``: :func:`mamba_blocks_and_alignment` on the GPU planned (the only GPU value the layout reads)."""
    if not hybrid and "M" in model.layer_pattern and model.num_kv_heads:
        raise InvalidArgumentError(
            "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified "
            "type. (Mamba/linear-attention hybrids need the hybrid KV cache manager.)",
            flag="--disable-hybrid-kv-cache-manager",
        )
    conv, ssm = mamba_state_dtype_bytes(model, args, resolved.dtype, release)
    mamba_blocks, alignment = mamba
    fixed = model.mla is not None and "M" in model.layer_pattern and release.mla_hybrid_block_align == "64"
    tp, block_size = args.tensor_parallel_size, resolved.block_size
    threshold, strided = release.group_size_threshold, release.strided_groups
    sliding_block = KERNEL_BLOCK_ALIGNMENT if release.sliding_window_kernel_block else None
    pad = release.pad_unaligned_pages

    def build() -> tuple[RankLayout, Grouping]:
        if model.compressed_attention is not None:
            # DeepSeek-V4: one latent head, the same on every TP rank; caches of several page sizes packed.
            caches = deepseek_v4_caches(model, block_size)
            rank = RankLayout(
                layers=[], raw_layers=[], block_size=block_size, attention_page_per_token=0, mamba_state_bytes=0
            )
            return rank, group_packed(caches)
        rank = build_layer_caches(
            model,
            kv_dtype,
            tp=tp,
            block_size=block_size,
            unify_hybrid=not hybrid,
            mamba_conv_bytes=conv,
            mamba_ssm_bytes=ssm,
            mamba_blocks_per_request=mamba_blocks,
            hybrid_alignment=alignment,
            fixed_hybrid_alignment=fixed,
            sliding_block_size=sliding_block,
        )
        return rank, group_layers(rank.layers, group_size_threshold=threshold, strided=strided, pad_pages=pad)

    key = (
        kv_dtype,
        tp,
        block_size,
        hybrid,
        conv,
        ssm,
        mamba_blocks,
        alignment,
        fixed,
        threshold,
        strided,
        sliding_block,
        pad,
    )
    return _RANK_LAYOUTS.get(model, key, build)


def mamba_state_dtype_bytes(
    model: ModelSpec, args: ServingArgs, dtype: str, release: Release | None = None
) -> tuple[int, int]:
    """(conv, SSM) state bytes per element: ``--mamba-cache-dtype`` or the model dtype for the conv state;
    ``--mamba-ssm-cache-dtype``, else the dtype the model asks for (Qwen3.5 and NemotronH keep float32),
    else NemotronH's release default (``model_executor/models/config.py: NemotronHForCausalLMConfig``:
    float16 in 0.19, float32 from 0.20), else the conv dtype for the SSM state."""
    conv = DTYPE_BYTES.get(args.mamba_cache_dtype, DTYPE_BYTES[dtype])
    if model.mamba is not None and model.mamba.kind == "kda":
        # Kimi delta attention keeps its recurrent state in float32 whatever --mamba-ssm-cache-dtype says:
        # KimiGatedDeltaNetAttention.get_state_dtype (0.32-0.33) and kda_state_dtype (<= 0.29) never read it.
        return conv, 4
    asked = model.mamba.ssm_dtype if model.mamba is not None else None
    if asked is None and release is not None and model.model_type == "nemotron_h":
        default = release.nemotron_h_ssm_default
        asked = None if default == "model" else default
    ssm = DTYPE_BYTES.get(args.mamba_ssm_cache_dtype, DTYPE_BYTES[asked] if asked else conv)
    return conv, ssm


def compiles_with_autotune_examples(model: ModelSpec, args: ServingArgs, release: Release, engine: str) -> bool:
    """A cold start compiles the model inside the profile run with Inductor's compile-time autotuning, and
    the compiled graph begins at the token embedding (``Release.compile_autotune_examples``).

    Not with ``--enforce-eager`` (config/vllm.py: compilation mode NONE), the V0 engine (eager), or
    ``VLLM_USE_STANDALONE_COMPILE`` other than 1 (compilation/backends.py make_compiler then takes
    InductorAdaptor, which autotunes at run time on the real tensors). A model that takes multimodal inputs
    is embedded outside the compiled graph (gpu_model_runner.py _preprocess, v1/worker/gpu/model_runner.py:
    ``uses_inputs_embeds``), so the table is not among its graph inputs."""
    if engine == "v0" or args.enforce_eager or not release.compile_autotune_examples:
        return False
    if args.env.get("VLLM_USE_STANDALONE_COMPILE", "1") != "1":
        return False
    return model.vision is None or vision_tower_disabled(model, args)


def memory_budget(memory_bytes: int, utilization: float, *, ceil: bool) -> int:
    """The bytes vLLM may use on one GPU: ceil(total x util) from 0.14 (request_memory); a float product
    before, floored by the block division (``Release.budget_ceil``)."""
    product = memory_bytes * utilization
    return math.ceil(product) if ceil else math.floor(product)


def stage_memory(
    model: ModelSpec,
    on: BatchGpu,
    memory_bytes: int,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    partition: list[int],
    weights_per_stage: list[int],
    coefficients: MemoryCoefficients,
    deltas: TermDeltas | None = None,
    runner_v2: bool = False,
    encoder: EncoderProfile | None = None,
    nccl_at_init: int = 0,
) -> list[StageMemory]:
    """Each PP stage's budget terms (every TP rank of a stage is alike), on a GPU of ``memory_bytes`` whose other
    values are ``on``. ``deltas`` are measured-minus-predicted corrections from a calibration file, added to
    every stage. ``runner_v2``: Model Runner V2
    runs the model (its CUDA-graph estimate is 0 before 0.29, so nothing is subtracted; its sampler warm-up
    and sampler state are its own, planner/memory/activation.py). ``nccl_at_init``: the TP communicators' channel
    buffers NCCL allocates at their creation (planner/memory/nontorch.py ``nccl_at_init_bytes``), every stage's."""
    d = deltas or _NO_DELTAS
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    budget = memory_budget(memory_bytes, resolved.gpu_memory_utilization, ceil=release.budget_ceil)
    dtype_bytes = DTYPE_BYTES[resolved.dtype]
    compiles = compiles_with_autotune_examples(model, args, release, resolved.engine)
    stages = []
    start = 0
    for stage, count in enumerate(partition):
        last = stage == pp - 1
        # Model Runner V2 allocates a later stage's received hidden states and residual when the model loads
        # (v1/worker/gpu/model_runner.py load_model), the V1 runner in its first dummy run (gpu_model_runner.py
        # _dummy_run): under 0.26's accounting the V2 buffers are in no term; from 0.27 both count.
        receives = stage > 0 and not (runner_v2 and release.non_kv_accounting == "profile_peak")
        peak = activation_peak(
            model,
            coefficients=coefficients,
            max_num_batched_tokens=resolved.max_num_batched_tokens,
            max_num_seqs=resolved.max_num_seqs,
            tp=tp,
            dtype_bytes=dtype_bytes,
            last_stage=last,
            receives_from_previous_stage=receives,
            sampler_kernel=sampler_kernel_in_force(release.sampler_kernel, args.env),
            moe_workspace_held=release.moe_workspace_held,
            eager_engine=resolved.engine == "v0",
            runner_v2=runner_v2,
            runner_v2_sampler_warmup=release.runner_v2_sampler_warmup,
            flashinfer_sampler=runner_v2_flashinfer_sampler(args.env),
            fp8_moe_workspace_held=on.fp8_moe_workspace_held,
            compiles_embedding=compiles and stage == 0,
        )
        # V2's per-slot sampler state is allocated at load: counted (as consumed memory) from 0.27 only.
        sampler_state = (
            runner_v2_sampler_state_bytes(model, resolved.max_num_seqs)
            if runner_v2 and last and release.non_kv_accounting == "consumed_since_init"
            else 0
        )
        moe_layers = moe_layer_count(model, start, count)
        graphs = cuda_graph_bytes(
            layers_on_rank=count,
            moe_layers_on_rank=moe_layers,
            max_num_seqs=resolved.max_num_seqs,
            max_num_batched_tokens=resolved.max_num_batched_tokens,
            tp=tp,
            enforce_eager=args.enforce_eager,
            coefficients=coefficients,
            rule=release.capture_rule,
            limit=on.capture_limit,
            explicit_max=args.max_cudagraph_capture_size,
            interactivity=args.performance_mode == "interactivity",
        )
        counted = (
            release.cuda_graphs_counted
            and (release.runner_v2_graph_estimate or not runner_v2)
            and args.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1").lower() not in ("0", "false")
        )
        # Model Runner V2 runs the encoder on the first pipeline stage only; the V1 runner on every one.
        stage_encoder = encoder if stage == 0 or not runner_v2 else None
        # The compile's autotuning inputs are freed before the forward starts, so they are a candidate of
        # the peak beside the forward (an encoder-fed model has none: see compiles_with_autotune_examples).
        warm = combined_peak(stage_encoder, peak.forward_bytes, peak.sampler_bytes)
        activation = max(warm, peak.compile_bytes)
        weights = weights_per_stage[stage]
        if args.cpu_offload_gb:
            weights = max(0, weights - int(args.cpu_offload_gb * GiB))
        stages.append(
            StageMemory(
                stage=stage,
                budget_bytes=budget,
                weights_bytes=max(0, weights + d.weights_bytes),
                non_torch_bytes=max(
                    0,
                    on.non_torch_bytes + nccl_at_init + sampler_state + d.non_torch_bytes,
                ),
                activation_peak_bytes=max(0, activation + d.activation_peak_bytes),
                cuda_graph_bytes=max(0, graphs + d.cuda_graph_bytes),
                cuda_graph_counted=counted,
                cold_compile_bytes=activation - warm,
            )
        )
        start += count
    return stages


def lora_bytes(model: ModelSpec, args: ServingArgs, dtype_bytes: int) -> int:
    """LoRA weight buffers vLLM preallocates: ``max_loras`` slots of A and B for every linear layer."""
    if not args.enable_lora:
        return 0
    hidden = model.hidden_size
    inter = model.intermediate_size or (model.moe.moe_intermediate_size if model.moe else hidden)
    q = model.num_attention_heads * model.head_dim
    kv = model.num_kv_heads * (model.head_dim + model.head_size_v)
    modules_in_out = [(hidden, q + kv), (q, hidden), (hidden, 2 * inter), (inter, hidden)]
    per_layer = sum(args.max_lora_rank * (i + o) for i, o in modules_in_out)
    return int(args.max_loras * per_layer * model.num_layers * dtype_bytes / args.tensor_parallel_size)


def with_online_quantization(model: ModelSpec, args: ServingArgs) -> ModelSpec:
    """``--quantization fp8`` (or bitsandbytes) on an unquantized checkpoint quantizes it while loading."""
    if not args.quantization or model.quantization is not None:
        return model
    scheme = scheme_quantization(args.quantization)
    if scheme is None:
        return model
    # The file is still 16-bit: checkpoint bytes no longer give the loaded size.
    return model.model_copy(update={"quantization": scheme, "checkpoint_bytes": None})


# vLLM 0.29+ serves DeepSeek-V4 on CUDA with FlashMLA sparse attention on SM90/SM100 (fp8_ds_mla pages, the
# layout planner/kv/specs.py: deepseek_v4_caches follows) and FlashInfer on SM120 (plain bf16/fp8 rows).
_DSV4_FLASHMLA_SM = ("9", "10")
# The KV dtypes vLLM turns into fp8_ds_mla for DeepSeek-V4 on FlashMLA (_resolve_dsv4_kv_cache_dtype).
_DSV4_FP8 = ("auto", "fp8", "fp8_e4m3", "fp8_ds_mla")
# Releases whose Kimi-Linear model reads --mamba-ssm-cache-dtype when it aligns the block size (read in 0.32.0
# and 0.33.0; 0.29.0's kda_state_dtype ignores the flag).
_KDA_SSM_FLAG_FROM = Version.parse("0.32.0")


def check_deepseek_v4(gpu: GpuSpec, args: ServingArgs, release: Release, resolved: ResolvedArgs) -> None:
    """Refuse what kv-planner does not model of DeepSeek-V4 (or what vLLM itself refuses)."""
    if release.deepseek_v4_grouping != "packed":
        raise UnsupportedArchitectureError(
            f"vLLM {release.since}'s row groups DeepSeek-V4's KV caches with group_and_unify_kv_cache_specs "
            "(0.20-0.28), which kv-planner does not model; its layout is planned as vLLM 0.29+ builds it "
            "(read in 0.29.0, 0.32.0 and 0.33.0). Plan for vLLM >= 0.29.0.",
            field="architectures",
        )
    major = (gpu.compute_capability or "").split(".")[0]
    if major and major not in _DSV4_FLASHMLA_SM:
        raise UnsupportedArchitectureError(
            f"DeepSeek-V4 on {gpu.name} (SM {gpu.compute_capability}): vLLM serves it with FlashMLA on SM90/SM100 "
            "(the layout kv-planner models) and with FlashInfer on SM120 (not modelled); older GPUs are not served",
            field="--gpu",
        )
    if args.kv_cache_dtype not in _DSV4_FP8:
        raise InvalidArgumentError(
            f"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {args.kv_cache_dtype}. Please set "
            "`--kv-cache-dtype fp8` or select a backend that supports bfloat16 KV cache.",
            flag="--kv-cache-dtype",
        )
    if resolved.block_size_given and resolved.block_size != 256:
        raise InvalidArgumentError(
            f"--block-size {resolved.block_size}: DeepSeek-V4's sparse MLA and indexer backends take only "
            "256-token blocks (FLASHMLA_SPARSE_DSV4, DEEPSEEK_V4_INDEXER get_supported_kernel_block_sizes)",
            flag="--block-size",
        )
    if args.decode_context_parallel_size > 1:
        raise InvalidArgumentError(
            "DCP not support sliding window. (DeepSeek-V4 keeps sliding-window caches on every layer)",
            flag="--decode-context-parallel-size",
        )


def check_kimi_delta_attention(args: ServingArgs, release: Release) -> None:
    """Kimi-Linear: 0.32+ sizes the block for --mamba-ssm-cache-dtype but the layers keep float32."""
    asked = args.mamba_ssm_cache_dtype
    if asked in (None, "auto", "float32") or Version.parse(release.since) < _KDA_SSM_FLAG_FROM:
        return
    if asked != "bfloat16":
        raise InvalidArgumentError(
            f"KDA recurrent state supports only auto, float32, and bfloat16; got {asked}",
            flag="--mamba-ssm-cache-dtype",
        )
    raise InvalidArgumentError(
        "--mamba-ssm-cache-dtype bfloat16 with Kimi-Linear: vLLM sizes the attention block for a bfloat16 recurrent "
        "state (KimiLinearForCausalLM.get_mamba_state_dtype_from_config) but the KDA layers keep it in float32 "
        "(KimiGatedDeltaNetAttention.get_state_dtype), so the padded page is smaller than the state and vLLM's "
        "MambaSpec assertion fails at startup; leave the flag unset",
        flag="--mamba-ssm-cache-dtype",
    )


def _native_fp8(gpu: GpuSpec) -> bool:
    """SM 8.9+ (Ada, Hopper, Blackwell) has fp8 tensor cores; older GPUs run fp8 checkpoints with Marlin."""
    major, _, minor = (gpu.compute_capability or "0.0").partition(".")
    try:
        return (int(major), int(minor or 0)) >= (8, 9)
    except ValueError:
        return False


@dataclass(frozen=True)
class EngineBase:
    """The part of an engine stage that reads neither vLLM's batch sizes nor the context: the KV specs and
    their grouping, the drafter, the weights per stage, the MXFP4 kernel, NCCL's buffers at init. The engine
    reads ``--max-num-seqs``, ``--max-num-batched-tokens`` and ``--max-model-len`` only through
    :class:`ResolvedArgs`' batch fields (``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``),
    and those only in :func:`engine_with_batch`; so flags that differ in them alone, with the other resolved
    fields equal (:func:`base_fields`), share one base (the sweep's replans: planner/plan/sweep.py)."""

    model: ModelSpec
    """The model as the engine runs it (online quantization and text-only applied)."""
    kv_dtype: KvDtype
    rank: RankLayout
    grouping: Grouping
    partition: tuple[int, ...]
    hybrid_manager: bool
    notes: tuple[Finding, ...]
    drafter: DrafterCost | None
    drafter_layers: int
    model_runner_v2: bool
    async_scheduling: bool
    parameters: int
    weights_estimated: bool
    weights_per_stage: tuple[int, ...]
    """Each stage's weights, padding and allocator blocks (the drafter's on the last), before DeepStack's
    buffers (which read max_num_batched_tokens)."""
    mxfp4: BackendChoice
    mxfp4_spread_bytes: int
    nccl_at_init_bytes: int
    mamba_bytes: tuple[int, int]


class EngineSource(Protocol):
    """Where :func:`planner.plan.build.limited_stage` takes an engine stage from, instead of computing it
    (for flags without corrections or a drafter model): :class:`EngineMemo` (one sweep's), or
    :class:`planner.plan.engine_cache.EngineCache` (a long-lived planner's, bounded)."""

    def engine(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        release: Release,
        resolved: ResolvedArgs,
        *,
        coefficients: MemoryCoefficients,
        version: Version | None,
    ) -> EngineLayout: ...


@dataclass
class EngineMemo:
    """Engine stages of one model and one set of flags but the batch sizes and the context, on any GPUs, with
    no corrections: the bases by :func:`base_fields` and the values the base takes from the GPU
    (:class:`BaseGpu`), the engines by the base, the batch values they read and the values they take from the
    GPU (:class:`BatchGpu`). The engine reads a GPU only through those and its memory, and the memory only for
    the budget, which :class:`StageMemory` figures do not depend on beyond ``budget_bytes``: GPUs of other
    fields share what they compute alike (a Llama's engine is the same on an A100 and an L40S).

    A shared engine keeps the ``budget_bytes`` (so ``kv_bytes``) of the GPU it was first planned on: a reader
    takes ``budget_bytes - kv_bytes`` (what is not KV) and its own GPU's budget (planner/plan/sweep.py).
    One memo serves one release, version and set of coefficients, those of its first use; an engine asked
    for with others is planned unshared."""

    bases: dict[tuple[object, ...], EngineBase] = field(default_factory=dict)
    engines: dict[tuple[object, ...], EngineLayout] = field(default_factory=dict)
    bound: tuple[Release, Version | None, MemoryCoefficients] | None = None
    on_gpus: dict[tuple[object, ...], tuple[EngineBase, BatchGpu]] = field(default_factory=dict)
    """(:func:`gpu_base_key`, base fields) -> (the base, the :class:`BatchGpu`): the GPU's values are computed
    once per GPU fields, not for every GPU and limit the sweep's search asks about (the flags differ only in
    the limits, which neither reads)."""
    batch_gpus: dict[BatchGpu, BatchGpu] = field(default_factory=dict)

    def engine(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        args: ServingArgs,
        release: Release,
        resolved: ResolvedArgs,
        *,
        coefficients: MemoryCoefficients,
        version: Version | None,
    ) -> EngineLayout:
        if self.bound is None:
            self.bound = (release, version, coefficients)
        elif self.bound[0] is not release or self.bound[1] != version or self.bound[2] is not coefficients:
            return compute_engine(model, gpu, args, release, resolved, coefficients=coefficients, version=version)
        fields = base_fields(resolved)
        gpu_key = (gpu_base_key(gpu), fields)
        known = self.on_gpus.get(gpu_key)
        if known is None:
            served, online = engine_model(model, args, release)
            on = base_gpu(served, gpu, args, release, resolved, coefficients=coefficients)
            base = self.bases.get((fields, on))
            if base is None:
                base = self.bases[(fields, on)] = base_on(
                    served, on, args, release, resolved, online, coefficients=coefficients, version=version
                )
            batch = batch_gpu(base, gpu, args, release, resolved, coefficients=coefficients)
            # Equal values of other GPU fields: one object, so the engines' keys hold it by identity.
            batch = self.batch_gpus.setdefault(batch, batch)
            known = self.on_gpus[gpu_key] = (base, batch)
        base, batch = known
        key = (id(base), *batch_fields(base, resolved), id(batch))
        found = self.engines.get(key)
        if found is None:
            found = self.engines[key] = batch_on(
                base, batch, gpu.memory_bytes, args, release, resolved, coefficients=coefficients
            )
        return found


def gpu_base_key(gpu: GpuSpec) -> tuple[object, ...]:
    """Every GpuSpec field :func:`base_gpu` and :func:`batch_gpu` read but the memory (the budget's: see
    :class:`EngineMemo`) and the name, which words only a refusal: GPUs alike in these have the same values.
    NVLink and native FP8 are read nowhere there today and kept so that a new reader stays exact."""
    return (gpu.vendor, gpu.architecture, gpu.compute_capability, gpu.nvlink, gpu.nvswitch_multicast, gpu.fp8)


def base_fields(resolved: ResolvedArgs) -> tuple[object, ...]:
    """The resolved values :func:`engine_base` reads (every field but the batch sizes and the context)."""
    return (
        resolved.engine,
        resolved.dtype,
        resolved.block_size,
        resolved.block_size_given,
        resolved.enable_prefix_caching,
        resolved.async_scheduling,
    )


def batch_fields(base: EngineBase, resolved: ResolvedArgs) -> tuple[object, ...]:
    """The resolved values :func:`engine_with_batch` reads on top of ``base``: the utilization, the batch sizes
    and, for a vision model, the context (it reaches the memory terms only through the encoder's profile)."""
    context = resolved.max_model_len if base.model.vision is not None else None
    return (resolved.gpu_memory_utilization, resolved.max_num_batched_tokens, resolved.max_num_seqs, context)


def compute_engine(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    deltas: TermDeltas | None = None,
    version: Version | None = None,
    draft: ModelSpec | None = None,
) -> EngineLayout:
    """``version`` and ``draft`` (the resolved drafter) size ``--speculative-config``. :class:`EngineMemo`
    shares the two parts between flags that differ only in the limits."""
    base = engine_base(model, gpu, args, release, resolved, coefficients=coefficients, version=version, draft=draft)
    return engine_with_batch(base, gpu, args, release, resolved, coefficients=coefficients, deltas=deltas)


def engine_base(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    version: Version | None = None,
    draft: ModelSpec | None = None,
) -> EngineBase:
    """The engine stage's :class:`EngineBase` (raises what vLLM refuses about the model and these flags)."""
    served, quantized_online = engine_model(model, args, release)
    on = base_gpu(served, gpu, args, release, resolved, coefficients=coefficients)
    return base_on(
        served, on, args, release, resolved, quantized_online, coefficients=coefficients, version=version, draft=draft
    )


def engine_model(model: ModelSpec, args: ServingArgs, release: Release) -> tuple[ModelSpec, bool]:
    """(the model as the engine runs it — online quantization and text-only applied —, whether the flags
    quantize it online)."""
    quantized = with_online_quantization(model, args)
    return text_only(quantized, args, release), model.quantization is None and quantized is not model


@dataclass(frozen=True)
class BaseGpu:
    """Every value :func:`base_on` takes from the GPU, computed from it by :func:`base_gpu`: the engine base
    reads the GPU only through these, so GPUs whose values agree share a base whatever their fields (a
    Llama's base is the same on an A100 and an L40S: it reads the compute capability only for an MXFP4
    kernel). An :class:`EngineMemo` keys its bases by them."""

    mamba: tuple[int | None, int]
    """:func:`mamba_blocks_and_alignment`."""
    mxfp4: BackendChoice
    paddings: tuple[tuple[str | None, int], ...]
    """Bytes per MoE layer each candidate MXFP4 kernel pads the experts by (:func:`padding_bytes_per_moe_layer`)."""
    native_fp8: bool
    nccl_at_init_bytes: int


def base_gpu(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    coefficients: MemoryCoefficients,
) -> BaseGpu:
    """:class:`BaseGpu` of ``model`` (as :func:`engine_model` gives it) on ``gpu``; raises what vLLM refuses
    about the GPU (DeepSeek-V4 off SM90/SM100), the base's first check, as it was before the split."""
    if model.compressed_attention is not None:
        check_deepseek_v4(gpu, args, release, resolved)
    tp = args.tensor_parallel_size
    expert_shards = tp * args.data_parallel_size if args.enable_expert_parallel else tp
    mxfp4 = mxfp4_choice(model, gpu, args, release)
    capability = parse_capability(gpu.compute_capability)
    paddings = tuple(
        (
            backend,
            padding_bytes_per_moe_layer(
                model,
                tp=tp,
                expert_shards=expert_shards,
                backend=backend,
                trtllm_intermediate_align=release.mxfp4_blackwell_intermediate_align,
                triton_layout=release.mxfp4_triton_layout,
                capability=capability,
            ),
        )
        for backend in sorted({mxfp4.backend, *mxfp4.candidates}, key=str)
    )
    return BaseGpu(
        mamba=mamba_blocks_and_alignment(model, gpu, release, resolved),
        mxfp4=mxfp4,
        paddings=paddings,
        native_fp8=_native_fp8(gpu),
        nccl_at_init_bytes=nccl_at_init_bytes(
            gpu,
            tp=tp,
            buffers_at_init=release.nccl_buffers_at_init,
            env=args.env,
            across_nodes=args.tensor_parallel_across_nodes,
            coefficients=coefficients,
        ),
    )


def base_on(
    model: ModelSpec,
    on: BaseGpu,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    quantized_online: bool,
    *,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    version: Version | None = None,
    draft: ModelSpec | None = None,
) -> EngineBase:
    """:func:`engine_base` from the model as the engine runs it and the GPU's values (it sees no GpuSpec)."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if model.mamba is not None and model.mamba.kind == "kda":
        check_kimi_delta_attention(args, release)
    kv_dtype = resolve_kv_dtype(
        args.kv_cache_dtype, model, resolved.dtype, from_checkpoint=release.auto_kv_from_checkpoint
    )
    if args.kv_cache_dtype not in release.kv_cache_dtypes and args.kv_cache_dtype != "auto":
        raise InvalidArgumentError(
            f"argument --kv-cache-dtype: invalid choice: {args.kv_cache_dtype!r} (choose from "
            f"{', '.join(release.kv_cache_dtypes)})",
            flag="--kv-cache-dtype",
        )
    hybrid, notes = hybrid_manager_enabled(model, args, release)
    if model.compressed_attention is not None and not hybrid:
        raise UnsupportedArchitectureError(
            f"{model.id}: DeepSeek-V4's sliding-window and compressor caches need the hybrid KV cache manager "
            "(a KV connector or --disable-hybrid-kv-cache-manager turns it off; kv-planner does not model that)",
            field="--disable-hybrid-kv-cache-manager",
        )
    if resolved.engine == "v0":
        hybrid = False  # V0 has no hybrid KV cache manager: every attention layer keeps every token
        reason = (
            "V0 is this release's default engine"
            if not release.v1_default
            else "fp8 KV cache without FlashAttention 3, float32, a pre-Ampere GPU, or VLLM_USE_V1=0"
        )
        notes.append(Finding.of(Code.V0_ENGINE, f"planned for vLLM's V0 engine ({reason})"))
    rank, grouping = build_rank_layout(model, on.mamba, args, release, resolved, kv_dtype, hybrid)
    drafter = engine_drafter(model, args, version, kv=kv_dtype, dtype=resolved.dtype, draft=draft)
    if drafter is not None and model.compressed_attention is not None:
        raise UnsupportedArchitectureError(
            f"{model.id}: speculative decoding with DeepSeek-V4 (its MTP layer's caches and the retained "
            "window tokens) is not modelled by kv-planner",
            field="--speculative-config",
        )
    rank, grouping, drafter_layers, drafter_notes = with_drafter_layers(rank, grouping, drafter, release)
    runner_v2 = uses_model_runner_v2(model, release, args.env)
    asynchronous = resolved.async_scheduling
    if drafter is not None and version is not None:
        runner_v2 = runner_v2 and runner_v2_takes(drafter.method, version, pp)
        if args.async_scheduling is None and drafter_turns_async_off(drafter.method, version, runner_v2):
            asynchronous = False
        if args.async_scheduling and async_refused(drafter.method, version, runner_v2):
            raise InvalidArgumentError(
                f"argument --async-scheduling: vLLM {version} does not run async scheduling with "
                f"{drafter.method} speculative decoding (drop --async-scheduling or pick an EAGLE/MTP drafter)",
                flag="--async-scheduling",
            )
    notes += drafter_notes
    partition = pp_partition(model.num_layers, pp, args.env.get("VLLM_PP_LAYER_PARTITION"))
    expert_shards = tp * args.data_parallel_size if args.enable_expert_parallel else tp
    pp_override = args.env.get("VLLM_PP_LAYER_PARTITION")
    rope_factor = mrope_cache_factor(model, release)
    vision_whole = encoder_data_parallel(model, args, release)
    weights = _WEIGHTS.get(
        model,
        (resolved.dtype, tp, pp, pp_override, expert_shards, rope_factor, vision_whole),
        lambda: estimate_weights(
            model,
            dtype=resolved.dtype,
            tp=tp,
            pp=pp,
            pp_override=pp_override,
            checkpoint_bytes=model.checkpoint_bytes,
            expert_shards=expert_shards,
            mrope_cache_factor=rope_factor,
            vision_data_parallel=vision_whole,
        ),
    )
    estimated = weights.estimated
    if (
        estimated
        and model.parameters
        and model.quantization is None
        and abs(weights.parameters - model.parameters) <= 1e-4 * model.parameters
    ):
        # The architecture reproduces the published exact parameter count: unquantized weights are then
        # exactly parameters x dtype bytes, whatever the files' size.
        estimated = False
    extra = lora_bytes(model, args, DTYPE_BYTES[resolved.dtype])
    mxfp4 = on.mxfp4
    paddings = dict(on.paddings)
    padding = paddings[mxfp4.backend]
    # The heaviest kernel an install with other extras may run instead (0 when the kernel is known).
    spread_per_layer = max(paddings.values()) - padding
    ranks = expert_shards if args.enable_expert_parallel else None
    fp8 = on.native_fp8
    per_stage = []
    spread = 0
    first = 0
    for stage, (stage_bytes, count) in enumerate(zip(weights.bytes_per_stage, partition, strict=True)):
        moe_layers = moe_layer_count(model, first, count)
        # The caching allocator's blocks around each tensor, which "Model loading took" counts.
        key = (resolved.dtype, tp, tuple(partition), stage, release.weights_max_split_mb, quantized_online, fp8, ranks)
        blocks = _BLOCKS.get(
            model,
            key,
            functools.partial(
                weight_blocks_overhead,
                model,
                dtype=resolved.dtype,
                tp=tp,
                partition=partition,
                stage=stage,
                max_split_mb=release.weights_max_split_mb,
                online_quantization=quantized_online,
                native_fp8=fp8,
                expert_ranks=ranks,
            ),
        )
        per_stage.append(stage_bytes + extra + padding * moe_layers + blocks)
        spread = max(spread, spread_per_layer * moe_layers)
        first += count
    if drafter is not None:
        per_stage[-1] += drafter.weights_bytes  # loaded by the runner with the target (last stage)
    nccl_at_init = on.nccl_at_init_bytes
    return EngineBase(
        model=model,
        kv_dtype=kv_dtype,
        rank=rank,
        grouping=grouping,
        partition=tuple(partition),
        hybrid_manager=hybrid,
        notes=tuple(notes),
        drafter=drafter,
        drafter_layers=drafter_layers,
        model_runner_v2=runner_v2,
        async_scheduling=asynchronous,
        parameters=weights.parameters,
        weights_estimated=estimated,
        weights_per_stage=tuple(per_stage),
        mxfp4=mxfp4,
        mxfp4_spread_bytes=spread,
        nccl_at_init_bytes=nccl_at_init,
        mamba_bytes=mamba_state_dtype_bytes(model, args, resolved.dtype, release),
    )


def engine_with_batch(
    base: EngineBase,
    gpu: GpuSpec,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    deltas: TermDeltas | None = None,
) -> EngineLayout:
    """The engine stage of ``base`` with these batch sizes and this context: DeepStack's buffers, the vision
    encoder's profile and every stage's memory terms."""
    on = batch_gpu(base, gpu, args, release, resolved, coefficients=coefficients)
    return batch_on(base, on, gpu.memory_bytes, args, release, resolved, coefficients=coefficients, deltas=deltas)


@dataclass(frozen=True)
class BatchGpu:
    """Every value :func:`batch_on` takes from the GPU but its memory, computed from it by :func:`batch_gpu`:
    GPUs whose values agree share an engine stage on one base (the memory makes only the budget, which the
    sweep reads as its own GPU's: see :class:`EngineMemo`)."""

    capture_limit: int
    """:func:`capture_limit`."""
    fp8_moe_workspace_held: bool
    """0.29+ FP8 MoE workspaces come from the WorkspaceManager where TritonExperts is the only kernel (SM 8.9)."""
    non_torch_bytes: int
    """:func:`planner.memory.nontorch.non_torch_bytes` (NCCL's buffers at init are the base's)."""
    vit_attention: str | None
    """The vision encoder's attention backend (:func:`planner.memory.encoder.vit_backend`); None for a model
    without a vision tower, whose engine reads none."""


def batch_gpu(
    base: EngineBase,
    gpu: GpuSpec,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    coefficients: MemoryCoefficients,
) -> BatchGpu:
    """:class:`BatchGpu` of the engines on ``base`` on ``gpu``."""
    scope = release.v0_non_torch_scope if resolved.engine == "v0" else release.v1_non_torch_scope
    return BatchGpu(
        capture_limit=capture_limit(release, gpu),
        fp8_moe_workspace_held=release.fp8_moe_workspace_held and parse_capability(gpu.compute_capability) == (8, 9),
        non_torch_bytes=non_torch_bytes(
            gpu,
            tp=args.tensor_parallel_size,
            pp=args.pipeline_parallel_size,
            coefficients=coefficients,
            device_scope=scope == "device",
        ),
        vit_attention=None if base.model.vision is None else vit_attention(gpu, args, release),
    )


def batch_on(
    base: EngineBase,
    on: BatchGpu,
    memory_bytes: int,
    args: ServingArgs,
    release: Release,
    resolved: ResolvedArgs,
    *,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    deltas: TermDeltas | None = None,
) -> EngineLayout:
    """:func:`engine_with_batch` from the GPU's values and memory (it sees no GpuSpec)."""
    model, runner_v2 = base.model, base.model_runner_v2
    per_stage = list(base.weights_per_stage)
    partition = list(base.partition)
    dtype_bytes = DTYPE_BYTES[resolved.dtype]
    per_stage[0] += deepstack_buffer_bytes(model, resolved.max_num_batched_tokens, dtype_bytes, model.hidden_size)
    encoder, encoder_notes = multimodal_profile_on(
        model,
        on.vit_attention,
        args,
        release,
        max_num_batched_tokens=resolved.max_num_batched_tokens,
        max_num_seqs=resolved.max_num_seqs,
        max_model_len=resolved.max_model_len or model.derived_max_model_len,
        dtype_bytes=dtype_bytes,
        runner_v2=runner_v2,
        engine=resolved.engine,
    )
    memory = stage_memory(
        model,
        on,
        memory_bytes,
        args,
        release,
        resolved,
        partition=partition,
        weights_per_stage=per_stage,
        coefficients=coefficients,
        deltas=deltas,
        runner_v2=runner_v2,
        encoder=encoder,
        nccl_at_init=base.nccl_at_init_bytes,
    )
    return EngineLayout(
        kv_dtype=base.kv_dtype,
        rank=base.rank,
        grouping=base.grouping,
        partition=partition,
        hybrid_manager=base.hybrid_manager,
        mamba_bytes=base.mamba_bytes,
        parameters=base.parameters,
        weights_estimated=base.weights_estimated,
        memory=memory,
        warnings=[*base.notes, *encoder_notes, *base.grouping.warnings],
        mxfp4=base.mxfp4 if base.mxfp4.backend is not None else None,
        mxfp4_spread_bytes=base.mxfp4_spread_bytes,
        drafter=base.drafter,
        drafter_layers=base.drafter_layers,
        model_runner_v2=runner_v2,
        async_scheduling=base.async_scheduling,
        encoder=encoder,
        nccl_at_init_bytes=base.nccl_at_init_bytes,
    )


def kv_layout(
    engine: EngineLayout, release: Release, resolved: ResolvedArgs, args: ServingArgs, available_per_stage: list[int]
) -> KvLayout:
    """Blocks per stage for the given per-stage KV memory."""
    stages = []
    start = 0
    last = len(engine.partition) - 1
    for stage, target_layers in enumerate(engine.partition):
        # The drafter's KV layers follow the target's, on the last stage.
        count = target_layers + (engine.drafter_layers if stage == last else 0)
        layers = range(start, start + count)
        slots = stage_group_size(engine.grouping, layers)
        per_block = (
            engine.grouping.stage_bytes_per_block(layers)
            if engine.grouping.packed
            else slots * engine.grouping.page_bytes
        )
        stages.append(
            StageKv(
                stage=stage,
                first_layer=start,
                num_layers=count,
                group_slots=slots,
                bytes_per_block=per_block,
                available_bytes=available_per_stage[stage],
            )
        )
        start += count
    return KvLayout(
        grouping=engine.grouping,
        block_size=engine.rank.block_size,
        stages=stages,
        in_flight=in_flight_tokens(
            release, resolved, args.pipeline_parallel_size, engine.model_runner_v2, engine.async_scheduling
        ),
        fit_check=release.fit_check,
        raw_layers=engine.rank.raw_layers,
        dcp=args.decode_context_parallel_size,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        override_in_fit_check=release.tokens_formula == "concurrency_x_len",  # 0.20+
        v0=resolved.engine == "v0",
    )
