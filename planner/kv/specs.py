"""Per-layer KV-cache specs on one GPU, as vLLM's ``get_kv_cache_spec`` builds them.

One :class:`LayerCache` per decoder layer that keeps a cache (``layer_pattern`` letters F, S, C, M),
with the page size of one block on one tensor-parallel rank (``vllm/v1/kv_cache_interface.py``):

* attention: ``block_size * kv_heads_per_rank * (head_size + head_size_v) * dtype_bytes`` where
  ``kv_heads_per_rank = max(1, kv_heads // tp)`` — KV heads are replicated once TP exceeds them
  (``ModelConfig.get_num_kv_heads``);
* MLA: one latent head of ``kv_lora_rank + qk_rope_head_dim`` on every rank, never split by TP
  (``MLAAttentionSpec``, ``max_tp_shards = 1``); ``fp8_ds_mla`` is 656 bytes per token;
* Mamba / gated delta net: the per-sequence conv + SSM state of one rank (``MambaSpec``), padded to
  the attention page, whose block size vLLM raises until attention pages are at least that large.
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
    """K+V bytes one token takes over every attention layer with a cache of its own (one rank)."""
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


def hybrid_block_size(
    attention_page_per_token: int, mamba_page: int, requested: int, alignment: int = KERNEL_BLOCK_ALIGNMENT
) -> int:
    """vLLM's ``_align_hybrid_block_size``: the smallest aligned block size whose attention page holds at
    least one Mamba state (never below the block size already in force)."""
    if mamba_page <= 0 or attention_page_per_token <= 0:
        return requested
    align = max(alignment, requested)
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
        spec = LayerCache("sliding_window", attention_page, block_size, window=model.sliding_window)
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
) -> RankLayout:
    """The per-layer specs of one rank. ``unify_hybrid`` is vLLM's "hybrid KV cache manager disabled":
    sliding-window and chunked layers become full attention when full layers exist too.
    ``mamba_blocks_per_request`` None is vLLM's "all" mode: Mamba groups keep a block per block of tokens."""
    per_token = attention_bytes_per_token(model, kv, tp) if model.num_kv_heads or model.mla else 0
    state = mamba_state_bytes(model, tp, mamba_conv_bytes, mamba_ssm_bytes) if "M" in model.layer_pattern else 0
    if state and per_token:
        block_size = hybrid_block_size(per_token, state, block_size, hybrid_alignment)
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
