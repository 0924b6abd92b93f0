"""Per-layer KV-cache specs on one GPU, as vLLM's ``get_kv_cache_spec`` builds them.

One :class:`LayerCache` per decoder layer that keeps a cache (``layer_pattern`` letters F, S, C, M),
with the page size of one block on one tensor-parallel rank (``vllm/v1/kv_cache_interface.py``):

* attention: ``block_size * kv_heads_per_rank * (head_size + head_size_v) * dtype_bytes`` where
  ``kv_heads_per_rank = max(1, kv_heads // tp)`` — KV heads are replicated once TP exceeds them
  (``ModelConfig.get_num_kv_heads``);
* MLA: one latent head of ``kv_lora_rank + qk_rope_head_dim`` on every rank, never split by TP
  (``MLAAttentionSpec``, ``max_tp_shards = 1``); ``fp8_ds_mla`` is 656 bytes per token;
* Mamba / gated delta net / Kimi delta attention: the per-sequence conv + SSM state of one rank
  (``MambaSpec``), padded to the attention page, whose block size vLLM raises until attention pages are
  at least that large;
* DeepSeek-V4 (:func:`deepseek_v4_caches`): several caches per decoder layer, each its own vLLM "layer".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.errors import UnsupportedArchitectureError
from planner.kv.dtypes import KvDtype
from planner.models.spec import ModelSpec
from planner.units import cdiv

CacheKind = Literal["full", "sliding_window", "chunked_local", "mamba"]

# Smallest kernel block of the CUDA attention backends (FlashAttention: MultipleOf(16)).
KERNEL_BLOCK_ALIGNMENT = 16


@dataclass(frozen=True)
class LayerCache:
    """The KV spec of one layer on one rank (hashable: equal specs group together)."""

    kind: CacheKind
    page_bytes: int
    """Bytes of one block of ``block_size`` tokens for this layer (padded where vLLM pads)."""
    block_size: int
    window: int | None = None
    """Sliding window or attention chunk, in tokens."""
    const_blocks: int | None = None
    """Mamba: blocks one request holds whatever its length (None for Mamba in "all" mode: one per block)."""

    def blocks_for(self, tokens: int, *, in_flight: int, dcp: int = 1) -> int:
        """Blocks one request of ``tokens`` tokens needs in this layer's group
        (``max_memory_usage_bytes // page_size_bytes`` at ``max_model_len = tokens``)."""
        if self.const_blocks is not None:
            return self.const_blocks
        if self.kind == "sliding_window":
            assert self.window is not None
            return cdiv(min(self.window - 1 + in_flight, tokens), self.block_size) + 1
        if self.kind == "chunked_local":
            assert self.window is not None
            return cdiv(min(self.window + in_flight, tokens), self.block_size)
        return cdiv(cdiv(tokens, dcp), self.block_size)

    def tokens_cap(self, in_flight: int) -> int | None:
        """Most tokens one request keeps in this layer (None: all of them)."""
        if self.kind == "sliding_window" and self.window is not None:
            return self.window - 1 + in_flight
        if self.kind == "chunked_local" and self.window is not None:
            return self.window + in_flight
        return None


def kv_heads_per_rank(model: ModelSpec, tp: int, *, full: bool = False) -> int:
    """KV heads one TP rank stores: MLA keeps one latent head; otherwise split down to one, then replicated.
    ``full``: the full-attention layers' heads (Gemma-4's global layers have their own count)."""
    if model.mla is not None:
        return 1
    return max(1, (model.full_kv_heads if full else model.num_kv_heads) // tp)


def attention_bytes_per_token(model: ModelSpec, kv: KvDtype, tp: int, *, full: bool = False) -> int:
    """Bytes one token takes in one attention layer on one rank (K and V together). ``full``: a
    full-attention layer, whose shape differs from the sliding layers' in Gemma-4
    (``Attention.get_kv_cache_spec`` builds each layer's spec from its own heads and head size)."""
    if model.mla is not None:
        # DeepSeek-V3.2: each layer's indexer K cache is its own MLAAttentionSpec (uint8, one head) in the same
        # full-attention group (UniformTypeKVCacheSpecs): a block holds both pages, so they add per token.
        latent = (
            kv.mla_bytes_per_token
            if kv.mla_bytes_per_token is not None
            else int(model.mla.latent_size * kv.element_bytes)
        )
        return latent + model.mla.indexer_bytes_per_token
    if full:
        return kv_heads_per_rank(model, tp, full=True) * kv.head_vector_bytes(
            model.full_head_size, model.full_head_size_v
        )
    return kv_heads_per_rank(model, tp) * kv.head_vector_bytes(model.head_dim, model.head_size_v)


def kv_bytes_per_token_all_layers(model: ModelSpec, kv: KvDtype, tp: int) -> int:
    """K+V bytes one token takes over every attention layer with a cache of its own (one rank).
    DeepSeek-V4: the caches that keep every token (compressed and indexer caches, whole padded pages per
    256-token block); its sliding-window and compressor caches are capped per request."""
    if model.compressed_attention is not None:
        growing = [spec for _, spec in deepseek_v4_caches(model, 256) if spec.kind == "full"]
        return sum(spec.page_bytes for spec in growing) // 256
    sliding = sum(1 for letter in model.layer_pattern if letter in "SC")
    full = model.layer_pattern.count("F")
    total = full * attention_bytes_per_token(model, kv, tp, full=True) if full else 0
    return total + (sliding * attention_bytes_per_token(model, kv, tp) if sliding else 0)


def mamba_state_bytes(model: ModelSpec, tp: int, conv_bytes: int, ssm_bytes: int) -> int:
    """Conv + SSM state of one Mamba/GDN layer for one sequence on one rank
    (``vllm/model_executor/layers/mamba/mamba_utils.py: MambaStateShapeCalculator``)."""
    m = model.mamba
    if m is None:
        return 0
    kernel = m.conv_kernel - 1
    if m.kind == "kda":
        # MambaStateShapeCalculator.kda_state_shape: one conv state over q, k and v (3 x heads x head_dim,
        # split by TP) of kernel - 1 positions, and a head_dim x head_dim recurrent state per local head.
        assert m.num_heads and m.head_dim
        conv_dim = 3 * m.num_heads * m.head_dim // tp
        return conv_dim * kernel * conv_bytes + (m.num_heads // tp) * m.head_dim * m.head_dim * ssm_bytes
    if m.kind == "gated_delta_net":
        assert m.num_k_heads and m.num_v_heads and m.k_head_dim and m.v_head_dim
        conv_dim = (2 * m.num_k_heads * m.k_head_dim + m.num_v_heads * m.v_head_dim) // tp
        ssm = (m.num_v_heads // tp) * m.v_head_dim * m.k_head_dim
        return conv_dim * kernel * conv_bytes + ssm * ssm_bytes
    d_inner, d_state = m.d_inner or 0, m.d_state or 0
    if m.kind == "mamba2":
        conv_dim = (d_inner + 2 * m.n_groups * d_state) // tp
        ssm = ((m.num_heads or 1) // tp) * (m.head_dim or 1) * d_state
        return conv_dim * kernel * conv_bytes + ssm * ssm_bytes
    return (d_inner // tp) * kernel * conv_bytes + (d_inner // tp) * d_state * ssm_bytes


# DeepSeek-V4 (vLLM 0.32-0.33, FlashMLA on SM90/SM100, fp8_ds_mla). Block sizes the model's cache classes fix
# whatever --block-size says: DeepseekV4SWACache (v1/attention/backends/mla/sparse_swa.py) 64 tokens,
# CompressorStateCache (models/deepseek_v4/compressor.py) 4 tokens for ratio 4 and 8 for ratio 128.
DSV4_SWA_BLOCK = 64
DSV4_FP8_DS_MLA_TOKEN_BYTES = 584  # 448 fp8 NoPE + 64 bf16 RoPE + 8 scale bytes (state_content_bytes)
DSV4_PAGE_ALIGNMENT = 576  # _apply_alignment_padding: fp8_ds_mla pages round up to 576 bytes


def _round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def deepseek_v4_caches(model: ModelSpec, block_size: int) -> list[tuple[int, LayerCache]]:
    """Every KV cache vLLM 0.33 registers for DeepSeek-V4, in its order, each with its decoder layer.

    Per layer (``models/deepseek_v4/attention.py`` and ``compressor.py``), in the order the caches enter the
    forward context, which is the order ``get_kv_cache_spec`` lists them:

    * ratio 4 (CSA): the indexer K cache (``DeepseekV4IndexerCache``: ``MLAAttentionSpec``, uint8,
      ``index_head_dim + index_head_dim // 128 x 4`` = 132 bytes per compressed token, block ``block_size``,
      one entry per 4 tokens) and its compressor's state (``CompressorStateCache``: ``SlidingWindowMLASpec``,
      fp32, ``2 x 2 x index_head_dim`` values per token, block 4, window 8), then the SWA cache, the
      compressed cache (``MLAAttentionSpec``, 584 bytes per entry, one per 4 tokens) and its compressor's
      state (fp32, ``2 x 2 x head_dim`` values, block 4, window 8);
    * ratio 128 (HCA): the SWA cache, the compressed cache (one entry per 128 tokens) and its compressor's
      state (fp32, ``2 x head_dim`` values, block 8, window 128);
    * ratio 0: only the SWA cache (``DeepseekV4SWACache``: ``SlidingWindowMLASpec``, 584 bytes per token,
      block 64, window ``sliding_window``).

    Every page is rounded up to 576 bytes (``alignment``). One latent head, never split by TP
    (``max_tp_shards=1``), so every rank holds the same caches.
    """
    c = model.compressed_attention
    assert c is not None and model.sliding_window is not None
    window = model.sliding_window

    def page(tokens_in_block: int, bytes_per_entry: int) -> int:
        return _round_up(tokens_in_block * bytes_per_entry, DSV4_PAGE_ALIGNMENT)

    swa = LayerCache("sliding_window", page(DSV4_SWA_BLOCK, DSV4_FP8_DS_MLA_TOKEN_BYTES), DSV4_SWA_BLOCK, window=window)
    indexer_entry = c.index_head_dim + c.index_head_dim // 128 * 4
    out: list[tuple[int, LayerCache]] = []
    for index, ratio in enumerate(c.compress_ratios):
        if ratio == 4:
            out.append((index, LayerCache("full", page(block_size // 4, indexer_entry), block_size)))
            out.append((index, LayerCache("sliding_window", page(4, 2 * 2 * c.index_head_dim * 4), 4, window=8)))
        out.append((index, swa))
        if ratio:
            compressed = page(block_size // ratio, DSV4_FP8_DS_MLA_TOKEN_BYTES)
            out.append((index, LayerCache("full", compressed, block_size)))
            coff = 2 if ratio == 4 else 1
            state_block = 4 if ratio == 4 else 8
            state = page(state_block, 2 * coff * c.head_dim * 4)
            out.append((index, LayerCache("sliding_window", state, state_block, window=coff * ratio)))
    return out


def hybrid_block_size(
    attention_page_per_token: int,
    mamba_page: int,
    requested: int,
    alignment: int = KERNEL_BLOCK_ALIGNMENT,
    *,
    fixed_alignment: bool = False,
) -> int:
    """vLLM's ``_align_hybrid_block_size``: the smallest aligned block size whose attention page holds at
    least one Mamba state (never below the block size already in force). The multiple is the larger of
    ``alignment`` and the block size in force, or ``alignment`` alone with ``fixed_alignment`` (0.12-0.19
    ``HybridAttentionMambaModelConfig`` for MLA hybrids: 64)."""
    if mamba_page <= 0 or attention_page_per_token <= 0:
        return requested
    align = alignment if fixed_alignment else max(alignment, requested)
    needed = align * cdiv(mamba_page, align * attention_page_per_token)
    needed = KERNEL_BLOCK_ALIGNMENT * cdiv(needed, KERNEL_BLOCK_ALIGNMENT)
    return max(requested, needed)


def _letter_spec(
    model: ModelSpec,
    letter: str,
    block_size: int,
    per_token: int,
    state: int,
    attention_page: int,
    full_page: int,
    mamba_blocks_per_request: int | None,
    *,
    unify: bool,
    sliding_block_size: int | None,
) -> tuple[LayerCache | None, LayerCache | None]:
    """(the spec of a layer of this letter, the spec after the hybrid manager's unification)."""
    spec: LayerCache | None
    if letter == "N":
        return None, None
    if letter == "M":
        page = max(state, attention_page) if per_token else state
        spec = LayerCache("mamba", page, block_size, const_blocks=mamba_blocks_per_request)
    elif letter == "F":
        spec = LayerCache("full", full_page, block_size)
    elif letter == "S":
        window_block = sliding_block_size or block_size
        spec = LayerCache("sliding_window", per_token * window_block, window_block, window=model.sliding_window)
    else:
        spec = LayerCache("chunked_local", attention_page, block_size, window=model.attention_chunk_size)
    if unify and spec.kind in ("sliding_window", "chunked_local"):
        if full_page != attention_page:
            # vLLM merges the full specs of both shapes into one group (UniformTypeKVCacheSpecs) whose
            # block holds every layer's page: not modelled, so refused rather than sized wrongly.
            raise UnsupportedArchitectureError(
                f"{model.id}: with the hybrid KV cache manager off, full and sliding layers of different "
                "KV shapes share one group (vLLM UniformTypeKVCacheSpecs); kv-planner does not model it",
                field="--disable-hybrid-kv-cache-manager",
            )
        return spec, LayerCache("full", attention_page, block_size)
    return spec, spec


@dataclass(frozen=True)
class RankLayout:
    """What one TP rank stores per layer, before grouping."""

    layers: list[LayerCache | None]
    """One entry per decoder layer; None for layers without a cache of their own."""
    raw_layers: list[LayerCache | None]
    """The same before the hybrid manager's unification (vLLM <= 0.13 checks the fit on these)."""
    block_size: int
    attention_page_per_token: int
    mamba_state_bytes: int


def build_layer_caches(
    model: ModelSpec,
    kv: KvDtype,
    *,
    tp: int,
    block_size: int,
    unify_hybrid: bool,
    mamba_conv_bytes: int,
    mamba_ssm_bytes: int,
    mamba_blocks_per_request: int | None,
    hybrid_alignment: int = KERNEL_BLOCK_ALIGNMENT,
    fixed_hybrid_alignment: bool = False,
    sliding_block_size: int | None = None,
) -> RankLayout:
    """The per-layer specs of one rank. ``unify_hybrid`` is vLLM's "hybrid KV cache manager disabled":
    sliding-window and chunked layers become full attention when full layers exist too.
    ``mamba_blocks_per_request`` None is vLLM's "all" mode: Mamba groups keep a block per block of tokens.
    ``sliding_block_size``: the block sliding-window layers take whatever ``block_size`` is (vLLM 0.25+, the
    backend's smallest kernel block); None: ``block_size``."""
    per_token = attention_bytes_per_token(model, kv, tp) if model.num_kv_heads or model.mla else 0
    state = mamba_state_bytes(model, tp, mamba_conv_bytes, mamba_ssm_bytes) if "M" in model.layer_pattern else 0
    if state and per_token:
        block_size = hybrid_block_size(
            per_token, state, block_size, hybrid_alignment, fixed_alignment=fixed_hybrid_alignment
        )
    attention_page = per_token * block_size
    # Gemma-4: the full layers' page differs from the sliding layers'; the grouping unifies them.
    full_page = attention_bytes_per_token(model, kv, tp, full=True) * block_size if per_token else 0
    has_full = "F" in model.layer_pattern
    # Every layer of one letter has the same spec: one object per letter (grouping compares them).
    by_letter: dict[str, tuple[LayerCache | None, LayerCache | None]] = {}
    layers: list[LayerCache | None] = []
    raw: list[LayerCache | None] = []
    for letter in model.layer_pattern:
        found = by_letter.get(letter)
        if found is None:
            found = by_letter[letter] = _letter_spec(
                model,
                letter,
                block_size,
                per_token,
                state,
                attention_page,
                full_page,
                mamba_blocks_per_request,
                unify=unify_hybrid and has_full,
                sliding_block_size=sliding_block_size,
            )
        raw.append(found[0])
        layers.append(found[1])
    return RankLayout(
        layers=layers,
        raw_layers=raw,
        block_size=block_size,
        attention_page_per_token=per_token,
        mamba_state_bytes=state,
    )
