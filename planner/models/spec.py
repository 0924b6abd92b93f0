"""ModelSpec: kv-planner's own schema of a model's architecture facts.

Everything the planner needs about a model, normalised from the many spellings of Hugging Face
``config.json`` (see :mod:`planner.models.config`), and the schema of the embedded catalog
(``planner/models/data/*.yaml``). Field meanings follow vLLM's reading of the config
(``vllm/transformers_utils/model_arch_config_convertor.py``), not any one model's field names.

``layer_pattern`` has one character per decoder layer:

=====  ==========================================================================================
``F``  full attention (MHA/GQA/MQA, or MLA when ``mla`` is set)
``S``  sliding-window attention (``sliding_window`` tokens)
``C``  chunked local attention (``attention_chunk_size`` tokens; Llama-4)
``M``  Mamba / linear-attention (gated delta net, Kimi delta attention) layer: constant per-sequence state
``N``  no KV cache of its own (e.g. cross-layer KV sharing)
=====  ==========================================================================================

DeepSeek-V4 (``compressed_attention``) reuses two letters: ``S`` for a layer with only its sliding-window
cache (compress ratio 0) and ``F`` for a compressed layer (ratio 4 or 128), which keeps the window cache
too; the ratio of each layer is in ``compressed_attention.compress_ratios``.
"""

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_LAYER_PATTERN = re.compile(r"^[FSCMN]+$")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CatalogSource(_Spec):
    """Where the facts of a catalog entry came from."""

    url: str
    revision: str | None = None
    verified: bool = Field(
        default=False, description="checked field by field against a real config.json of that revision"
    )
    checkpoint_bytes_source: str | None = Field(
        default=None, description="where checkpoint_bytes came from (safetensors index/metadata, model card)"
    )


class MlaSpec(_Spec):
    """Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2): one latent KV head per token."""

    kv_lora_rank: int = Field(ge=1)
    qk_rope_head_dim: int = Field(ge=0)
    qk_nope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(ge=1)
    q_lora_rank: int | None = None
    indexer_head_dim: int | None = Field(
        default=None,
        ge=1,
        description="DeepSeek-V3.2 sparse-attention indexer key size (index_head_dim); every layer then keeps an "
        "indexer K cache of its own beside the latent cache",
    )

    @property
    def indexer_bytes_per_token(self) -> int:
        """The indexer K cache of one layer, bytes per token: fp8 values plus one float32 scale per 128
        (``model_executor/models/deepseek_v2.py: Indexer``, ``DeepseekV32IndexerCache``: uint8,
        ``head_dim + head_dim // 128 * 4``), whatever ``--kv-cache-dtype`` is."""
        if self.indexer_head_dim is None:
            return 0
        return self.indexer_head_dim + self.indexer_head_dim // 128 * 4

    @property
    def latent_size(self) -> int:
        """vLLM's MLA head size: ``kv_lora_rank + qk_rope_head_dim`` (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class MoeSpec(_Spec):
    """Mixture of experts (weights only: the KV cache does not depend on experts)."""

    num_experts: int = Field(ge=1)
    experts_per_token: int = Field(ge=1)
    moe_intermediate_size: int = Field(ge=1)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int | None = None
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP")
    moe_layer_period: int = Field(default=1, ge=1, description="every n-th layer is MoE (Jamba: 2)")
    moe_layer_offset: int = Field(default=0, ge=0)
    layer_mask: str | None = Field(
        default=None, description="one character per layer, 1 = MoE, 0 = dense (a per-layer list in the config)"
    )

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` has the MoE block."""
        if self.layer_mask is not None:
            return index < len(self.layer_mask) and self.layer_mask[index] == "1"
        if index < self.first_dense_layers:
            return False
        return self.moe_layer_period <= 1 or (index - self.moe_layer_offset) % self.moe_layer_period == 0


class MambaSpec(_Spec):
    """State-space / linear-attention layers and their per-sequence state (per TP rank in vLLM)."""

    kind: Literal["mamba1", "mamba2", "gated_delta_net", "kda"]
    conv_kernel: int = Field(ge=1)
    # mamba1 / mamba2
    d_inner: int | None = Field(default=None, description="intermediate size (expand * hidden)")
    d_state: int | None = None
    n_groups: int = 1
    num_heads: int | None = Field(default=None, description="mamba2 heads; Kimi delta attention heads")
    head_dim: int | None = Field(default=None, description="mamba2 head dim; Kimi delta attention head dim")
    # gated delta net (Qwen3-Next / Qwen3.5)
    num_k_heads: int | None = None
    num_v_heads: int | None = None
    k_head_dim: int | None = None
    v_head_dim: int | None = None
    ssm_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        default=None, description="SSM state dtype the model asks for (mamba_ssm_dtype); None = model dtype"
    )


class QuantSpec(_Spec):
    """A quantized checkpoint: what it does to weight bytes and to the KV dtype ``auto`` picks."""

    method: str = Field(description="quantization_config.quant_method (fp8, awq, gptq, compressed-tensors...)")
    weight_bits: float = Field(gt=0, le=32, description="bits per quantized weight, scales included")
    scope: Literal["linear", "experts"] = Field(
        default="linear", description="which weights are quantized: all decoder linears, or MoE experts only"
    )
    kv_cache_dtype: str | None = Field(
        default=None, description="KV dtype the checkpoint declares (vLLM uses it for kv_cache_dtype=auto)"
    )
    expert_weight_bits: float | None = Field(
        default=None,
        gt=0,
        le=32,
        description="bits per routed-expert weight where they differ from weight_bits (DeepSeek-V4: fp8 linears, "
        "fp4 experts, expert_dtype)",
    )


class CompressedAttentionSpec(_Spec):
    """DeepSeek-V4 attention (``DeepseekV4Attention``): one latent KV head of ``head_dim`` per layer, a
    sliding-window cache on every layer, and on compressed layers a cache of one entry per
    ``compress_ratio`` tokens (CSA, ratio 4, with a Lightning-Indexer K cache; HCA, ratio 128), each fed by a
    compressor whose fp32 state vLLM keeps in the KV cache too."""

    head_dim: int = Field(ge=1, description="latent head size (512)")
    rope_head_dim: int = Field(ge=0, description="qk_rope_head_dim (64)")
    compress_ratios: list[int] = Field(
        description="per decoder layer: 0 (sliding window only), 4 (CSA) or 128 (HCA); MTP layers excluded"
    )
    index_head_dim: int = Field(ge=1, description="indexer key size (128)")
    index_n_heads: int = Field(ge=1)
    q_lora_rank: int = Field(ge=1)
    o_lora_rank: int = Field(ge=1)
    o_groups: int = Field(ge=1)
    hc_mult: int = Field(default=1, ge=1, description="manifold-constrained hyper-connection width (weights only)")


class ContextSpec(_Spec):
    """What vLLM's ``_get_and_verify_max_len`` reads, so the derivation can follow each release's rules."""

    base_max_len: int | None = Field(description="smallest of max_position_embeddings, n_positions, seq_length...")
    base_key: str | None = None
    model_max_length: int | None = Field(default=None, description="config's model_max_length (Cohere)")
    rope_type: str | None = None
    rope_factor: float | None = None
    rope_original_max_position: int | None = None


VisionEncoder = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "siglip", "clip_anyres", "pixtral", "llama4"]


class VisionSpec(_Spec):
    """A multimodal model's vision tower: its weights, and the facts vLLM's encoder profile run depends on
    (:mod:`planner.memory.encoder`). ``encoder`` names the tower family whose profile kv-planner derives;
    None means the profile is not modelled for this architecture (the plan says so, KVP131)."""

    parameters: int = Field(ge=0)
    encoder: VisionEncoder | None = Field(
        default=None,
        description="vision tower vLLM builds: qwen2_vl, qwen2_5_vl (window attention, gated MLP), qwen3_vl "
        "(also Qwen3.5), siglip (fixed resolution, Gemma-3), clip_anyres (LLaVA-NeXT tiles), pixtral "
        "(Mistral-3), llama4 (tiles); None: not modelled",
    )
    depth: int | None = Field(default=None, ge=1, description="encoder layers vLLM runs")
    hidden_size: int | None = Field(default=None, ge=1)
    num_heads: int | None = Field(default=None, ge=1)
    intermediate_size: int | None = Field(default=None, ge=1)
    patch_size: int | None = Field(default=None, ge=1)
    in_channels: int = Field(default=3, ge=1)
    temporal_patch_size: int = Field(default=1, ge=1, description="frames folded into one patch (Qwen: 2)")
    spatial_merge_size: int = Field(default=1, ge=1, description="patches merged per side into one token")
    out_hidden_size: int | None = Field(default=None, ge=1, description="width of one encoder output token")
    deepstack_layers: int = Field(default=0, ge=0, description="Qwen3-VL deepstack_visual_indexes (extra outputs)")
    image_size: int | None = Field(
        default=None, ge=1, description="fixed input side (SigLIP/CLIP/Llama-4 tile, Pixtral's largest image)"
    )
    tokens_per_image: int | None = Field(
        default=None, ge=1, description="fixed tokens per image or tile (Gemma-3 mm_tokens_per_image)"
    )
    max_tiles: int | None = Field(default=None, ge=1, description="tiles of the largest image, base tile included")
    max_pixels: int | None = Field(
        default=None,
        ge=1,
        description="Qwen family: the image processor's size.longest_edge / max_pixels (preprocessor_config.json)",
    )
    video_max_pixels: int | None = Field(
        default=None, ge=1, description="Qwen3-VL family: the video processor's size.longest_edge"
    )


class ModelSpec(_Spec):
    """The architecture facts of one model, as vLLM will read them."""

    id: str
    architecture: str = Field(description="architectures[0] of config.json")
    model_type: str
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=0, description="total KV heads (1 for MQA); 0 for attention-free models")
    head_dim: int = Field(ge=1, description="K head size (MLA: q/k head size qk_nope+qk_rope)")
    head_dim_v: int | None = Field(default=None, description="V head size where it differs from head_dim")
    full_attention_head_dim: int | None = Field(
        default=None,
        ge=1,
        description="head size of the full-attention (F) layers where it differs from head_dim "
        "(Gemma-4 global_head_dim); sliding layers keep head_dim",
    )
    full_attention_kv_heads: int | None = Field(
        default=None,
        ge=1,
        description="KV heads of the full-attention (F) layers where they differ from num_kv_heads "
        "(Gemma-4 num_global_key_value_heads with attention_k_eq_v)",
    )
    kv_shared_layers: int = Field(
        default=0,
        ge=0,
        description="trailing layers that read an earlier layer's KV cache and keep none (N in layer_pattern; "
        "Gemma-4 num_kv_shared_layers)",
    )
    vocab_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=0, description="dense MLP size (0 if every layer is MoE)")
    mlp_gated: bool = Field(default=True, description="gate+up+down (SwiGLU) vs up+down (GELU)")
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None
    derived_max_model_len: int = Field(ge=1, description="vLLM's derived max_model_len (newest rules)")
    derived_max_model_len_key: str | None = None
    context: ContextSpec | None = Field(
        default=None, description="inputs of vLLM's max_model_len derivation, re-run per release"
    )
    layer_pattern: str
    sliding_window: int | None = Field(default=None, ge=1)
    attention_chunk_size: int | None = Field(default=None, ge=1)
    mla: MlaSpec | None = None
    compressed_attention: CompressedAttentionSpec | None = Field(
        default=None, description="DeepSeek-V4 compressed sparse / sliding-window attention"
    )
    moe: MoeSpec | None = None
    mamba: MambaSpec | None = None
    quantization: QuantSpec | None = None
    vision: VisionSpec | None = None
    mtp_layers: int = Field(default=0, ge=0, description="multi-token-prediction layers in the checkpoint")
    single_block_layers: bool = Field(
        default=False,
        description="each layer is one block (NemotronH hybrid_override_pattern): M = Mamba only, F = attention "
        "only, N = an MLP or MoE layer (MoE where moe.layer_mask says so)",
    )
    rotary_dim: int | None = Field(default=None, description="rotary dims per head (partial rotary)")
    mrope: bool = Field(
        default=False,
        description="the rope parameters carry an mrope_section (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): vLLM "
        "builds MRotaryEmbedding, whose cos/sin cache may span more positions (planner/models/weights.py)",
    )
    parameters: int | None = Field(default=None, description="exact parameter count when known")
    checkpoint_bytes: int | None = Field(default=None, description="exact bytes of the weight files")
    source: CatalogSource | None = None
    aliases: list[str] = Field(default=[])
    notes: list[str] = Field(default=[], description="caveats found while reading the config")
    popular_rank: int | None = Field(default=None, description="rough deployment popularity, for listings")

    @model_validator(mode="after")
    def _check_layers(self) -> "ModelSpec":
        if not _LAYER_PATTERN.match(self.layer_pattern):
            raise ValueError("layer_pattern must use only the letters F, S, C, M, N")
        if len(self.layer_pattern) != self.num_layers:
            raise ValueError(f"layer_pattern has {len(self.layer_pattern)} layers, num_layers is {self.num_layers}")
        if "S" in self.layer_pattern and self.sliding_window is None:
            raise ValueError("sliding-window layers (S) need sliding_window")
        if "C" in self.layer_pattern and self.attention_chunk_size is None:
            raise ValueError("chunked layers (C) need attention_chunk_size")
        if "M" in self.layer_pattern and self.mamba is None:
            raise ValueError("mamba layers (M) need a mamba section")
        if self.num_kv_heads == 0 and any(c in self.layer_pattern for c in "FSC"):
            raise ValueError("attention layers need num_kv_heads >= 1")
        if self.kv_shared_layers and set(self.layer_pattern[self.num_layers - self.kv_shared_layers :]) != {"N"}:
            raise ValueError("the kv_shared_layers trailing layers must be N in layer_pattern")
        if self.compressed_attention is not None:
            ratios = self.compressed_attention.compress_ratios
            if len(ratios) != self.num_layers or any(r not in (0, 4, 128) for r in ratios):
                raise ValueError(f"compress_ratios must give 0, 4 or 128 for each of the {self.num_layers} layers")
            if self.layer_pattern != "".join("S" if r == 0 else "F" for r in ratios):
                raise ValueError("DeepSeek-V4 layer_pattern must be S for ratio-0 layers and F for compressed ones")
        return self

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` carries the MoE block."""
        return self.moe is not None and self.moe.is_moe_layer(index)

    @property
    def head_size_v(self) -> int:
        return self.head_dim_v if self.head_dim_v is not None else self.head_dim

    @property
    def full_head_size(self) -> int:
        """K head size of the full-attention layers (Gemma-4: global_head_dim)."""
        return self.full_attention_head_dim or self.head_dim

    @property
    def full_head_size_v(self) -> int:
        """V head size of the full-attention layers (a separate global head size applies to K and V)."""
        return self.full_attention_head_dim or self.head_size_v

    @property
    def full_kv_heads(self) -> int:
        """KV heads of the full-attention layers."""
        return self.full_attention_kv_heads or self.num_kv_heads

    @property
    def heterogeneous_attention(self) -> bool:
        """Full-attention layers have another KV shape than the sliding ones (Gemma-4)."""
        return (self.full_head_size, self.full_head_size_v, self.full_kv_heads) != (
            self.head_dim,
            self.head_size_v,
            self.num_kv_heads,
        )

    def count(self, kind: str) -> int:
        """Number of layers of one kind letter."""
        return self.layer_pattern.count(kind)

    @property
    def attention_design(self) -> str:
        """Short description: mha/gqa/mqa/mla, plus hybrid markers."""
        if self.compressed_attention is not None:
            return "mla+compressed+sliding"
        if self.mla is not None:
            base = "mla"
        elif self.num_kv_heads == 0:
            base = "none"
        elif self.num_kv_heads == 1:
            base = "mqa"
        elif self.num_kv_heads == self.num_attention_heads:
            base = "mha"
        else:
            base = "gqa"
        extras = [
            name
            for letter, name in (("S", "sliding"), ("C", "chunked"), ("M", "mamba"))
            if letter in self.layer_pattern
        ]
        return "+".join([base, *extras])
