"""Weight bytes per GPU, from the architecture (and scaled to the checkpoint's exact size when known).

vLLM measures weights at load time ("Model loading took X GiB"); kv-planner predicts that figure:

* the parameter count of every tensor vLLM creates, layer by layer, from the ModelSpec;
* split the way vLLM shards them: column/row-parallel linears and vocab-parallel embeddings divide by
  TP, KV projections are replicated when ``num_kv_heads < tp`` (``QKVParallelLinear``), MLA's
  ``kv_a``/``q_a`` projections and routers are replicated, layers are split across PP stages by
  ``get_pp_indices`` (embeddings on the first stage, final norm + LM head on the last; tied embeddings
  are materialised on both ends when PP > 1);
* at the serving dtype, except quantized tensors at the checkpoint's bits per weight;
* plus the RoPE cos/sin cache vLLM builds (``max_position x rotary_dim`` elements; MRoPE models' cache
  spans ``mrope_cache_factor`` times the positions, see :func:`estimate_weights`).

When the checkpoint's exact byte count is known, the architecture only decides how the total splits
across ranks: the per-rank figures are scaled so the whole model equals the checkpoint (converted to
the serving dtype for unquantized checkpoints), minus multi-token-prediction layers vLLM does not load.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.models.spec import ModelSpec
from planner.models.vision import qwen_vision_tp_sharded
from planner.units import DTYPE_BYTES, cdiv


@dataclass
class _Tensors:
    """Parameter counts of one layer (or the embeddings), split by how they are sharded/stored."""

    sharded_quantizable: float = 0.0  # TP-split linears that a checkpoint's quantization applies to
    sharded_experts: float = 0.0  # routed experts (TP- or EP-split), quantizable
    sharded_plain: float = 0.0  # TP-split, never quantized (embeddings, lm_head)
    replicated_quantizable: float = 0.0  # replicated on every TP rank, quantizable (MLA kv_a, q_a)
    replicated_plain: float = 0.0  # norms, routers, biases, state params

    def total(self) -> float:
        return (
            self.sharded_quantizable
            + self.sharded_experts
            + self.sharded_plain
            + self.replicated_quantizable
            + self.replicated_plain
        )


@dataclass
class WeightEstimate:
    """Weights of one model under one parallel layout."""

    parameters: int
    """Parameters vLLM loads for the whole model (MTP layers excluded)."""
    bytes_per_stage: list[int] = field(default_factory=list)
    """Bytes on one TP rank of each PP stage (vLLM's "Model loading took" for that rank)."""
    estimated: bool = True
    """False when scaled to an exact checkpoint size."""

    @property
    def max_bytes(self) -> int:
        return max(self.bytes_per_stage)


def pp_partition(num_layers: int, pp: int, override: str | None = None) -> list[int]:
    """Layers per PP stage as vLLM's ``get_pp_indices`` assigns them (``VLLM_PP_LAYER_PARTITION``)."""
    if override:
        parts = [int(p) for p in override.split(",")]
        if len(parts) != pp or sum(parts) != num_layers:
            raise ValueError(f"VLLM_PP_LAYER_PARTITION={override!r} does not split {num_layers} layers in {pp}")
        return parts
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def _deepseek_v4_attention(spec: ModelSpec, tp: int, ratio: int) -> _Tensors:
    """DeepSeek-V4's attention block (``models/deepseek_v4/attention.py``, ``compressor.py``): the fused
    replicated ``wq_a``/``wkv`` projection, ``wq_b`` and the grouped output projection ``wo_a``/``wo_b`` split
    by TP, a compressor on ratio-4/128 layers and the Lightning Indexer on ratio-4 layers (replicated,
    compressors and ``weights_proj`` unquantized), plus the hyper-connection mixing parameters."""
    c = spec.compressed_attention
    assert c is not None
    hidden, heads = spec.hidden_size, spec.num_attention_heads
    t = _Tensors(replicated_plain=_norms_per_layer(spec) + c.q_lora_rank + c.head_dim + heads)
    t.replicated_quantizable += hidden * (c.q_lora_rank + c.head_dim)
    t.sharded_quantizable += c.q_lora_rank * heads * c.head_dim / tp
    t.sharded_quantizable += heads * c.head_dim * c.o_lora_rank / tp  # wo_a: o_groups x (heads x head / groups)
    t.sharded_quantizable += c.o_groups * c.o_lora_rank * hidden / tp
    mixes = c.hc_mult * c.hc_mult + 2 * c.hc_mult
    t.replicated_plain += 2 * (mixes * c.hc_mult * hidden + mixes + 3)  # hc_attn_* and hc_ffn_*

    def compressor(head: int) -> float:
        coff = 2 if ratio == 4 else 1
        return hidden * 2 * coff * head + ratio * coff * head + head

    if ratio:
        t.replicated_plain += compressor(c.head_dim)
    if ratio == 4:
        t.replicated_quantizable += c.q_lora_rank * c.index_n_heads * c.index_head_dim
        t.replicated_plain += hidden * c.index_n_heads + compressor(c.index_head_dim)
    return t


def _attention(spec: ModelSpec, tp: int, index: int = 0) -> _Tensors:
    if spec.compressed_attention is not None:
        return _deepseek_v4_attention(spec, tp, spec.compressed_attention.compress_ratios[index])
    hidden, heads = spec.hidden_size, spec.num_attention_heads
    t = _Tensors(replicated_plain=_norms_per_layer(spec))
    if spec.mla is not None:
        mla = spec.mla
        q_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            t.replicated_quantizable += hidden * mla.q_lora_rank
            t.replicated_plain += mla.q_lora_rank
            t.sharded_quantizable += mla.q_lora_rank * heads * q_head / tp
        else:
            t.sharded_quantizable += hidden * heads * q_head / tp
        t.replicated_quantizable += hidden * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        t.replicated_plain += mla.kv_lora_rank
        t.sharded_quantizable += mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim) / tp
        t.sharded_quantizable += heads * mla.v_head_dim * hidden / tp
        return t
    head, head_v, kv_heads = spec.head_dim, spec.head_size_v, spec.num_kv_heads
    if spec.heterogeneous_attention and spec.layer_pattern[index] == "F":
        # Gemma-4 full layers (vllm models/gemma4.py Gemma4DecoderLayer, gemma4_layer_config): their own head
        # size and KV heads for q/k/v/o; with attention_k_eq_v the V slot of qkv_proj is still allocated.
        head, head_v, kv_heads = spec.full_head_size, spec.full_head_size_v, spec.full_kv_heads
    q_out = heads * head * (2 if spec.model_type in _GATED_ATTENTION_TYPES else 1)  # gated attention
    kv_rank = max(1, kv_heads // tp) if kv_heads >= tp else 1
    kv_out_rank = kv_rank * (head + head_v)
    t.sharded_quantizable += hidden * q_out / tp + heads * head_v * hidden / tp
    # KV projections: split by TP down to one head per rank, then replicated.
    t.sharded_quantizable += hidden * kv_out_rank
    if spec.attention_bias:
        t.replicated_plain += (q_out + kv_heads * (head + head_v)) / tp
    return t


# Qwen3NextAttention with attn_output_gate: the q projection also yields the output gate (Qwen3.5's decoder
# layers reuse it, vllm 0.23 qwen3_5.py).
_GATED_ATTENTION_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}

# Families with four norms per layer (pre/post attention and MLP) and per-head q/k norms.
_FOUR_NORM_TYPES = {"gemma2", "gemma3", "gemma3_text", "olmo2", "glm4"}
_QK_NORM_TYPES = {
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "gemma3",
    "gemma3_text",
    "olmo2",
    "cohere2",
}


# Families whose LayerNorms carry a bias (the final norm counts weight + bias).
_LAYERNORM_BIAS_TYPES = {"falcon", "starcoder2", "gpt2", "gpt_bigcode", "phi", "gpt_neox"}


def _norms_per_layer(spec: ModelSpec) -> float:
    norms = (4 if spec.model_type in _FOUR_NORM_TYPES else 2) * spec.hidden_size
    if spec.model_type == "falcon":
        norms = spec.hidden_size * 2  # one LayerNorm (weight + bias) for parallel attention/MLP
    if spec.model_type in _QK_NORM_TYPES:
        norms += 2 * spec.head_dim
    return norms


def _dense_mlp(spec: ModelSpec, tp: int, size: int) -> float:
    matrices = 3 if spec.mlp_gated else 2
    return matrices * spec.hidden_size * size / tp


_SHARED_EXPERT_GATE_TYPES = {"qwen2_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"}


def _moe_mlp(spec: ModelSpec, tp: int, t: _Tensors, expert_shards: int) -> None:
    moe = spec.moe
    assert moe is not None
    matrices = 3 if spec.mlp_gated else 2
    # Experts split over TP ranks, or over TP x DP ranks with expert parallelism (whole experts per rank).
    t.sharded_experts += moe.num_experts * matrices * spec.hidden_size * moe.moe_intermediate_size / expert_shards
    t.replicated_plain += spec.hidden_size * moe.num_experts  # router
    if spec.model_type == "gpt_oss":  # expert biases
        t.replicated_plain += moe.num_experts * (2 * moe.moe_intermediate_size + spec.hidden_size) / tp
    if moe.num_shared_experts:
        shared = moe.shared_expert_intermediate_size or moe.moe_intermediate_size * moe.num_shared_experts
        if moe.shared_expert_intermediate_size:
            shared *= moe.num_shared_experts
        t.sharded_quantizable += matrices * spec.hidden_size * shared / tp
        if spec.model_type in _SHARED_EXPERT_GATE_TYPES:
            # qwen2_moe.py / qwen3_next.py (Qwen3.5's MoE block): shared_expert_gate, ReplicatedLinear(hidden, 1).
            t.replicated_plain += spec.hidden_size


def _mamba(spec: ModelSpec, tp: int) -> _Tensors:
    m = spec.mamba
    assert m is not None
    hidden = spec.hidden_size
    t = _Tensors(replicated_plain=2 * hidden)
    if m.kind == "kda":
        # KimiGatedDeltaNetAttention (model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py): q/k/v and beta
        # projections split by TP, the f_a and g_a down-projections replicated, f_b/g_b up-projections, a
        # q/k/v short convolution, A_log and dt_bias split, o_norm, o_proj row-parallel.
        assert m.num_heads and m.head_dim
        proj = m.num_heads * m.head_dim
        t.sharded_quantizable += hidden * (3 * proj + m.num_heads) / tp + 2 * m.head_dim * proj / tp
        t.replicated_quantizable += 2 * hidden * m.head_dim
        t.sharded_plain += (3 * proj * m.conv_kernel + m.num_heads + proj) / tp
        t.replicated_plain += m.head_dim
        t.sharded_quantizable += proj * hidden / tp
        return t
    if m.kind == "gated_delta_net":
        assert m.num_k_heads and m.num_v_heads and m.k_head_dim and m.v_head_dim
        key_dim, value_dim = m.num_k_heads * m.k_head_dim, m.num_v_heads * m.v_head_dim
        t.sharded_quantizable += hidden * (2 * key_dim + 2 * value_dim + 2 * m.num_v_heads) / tp
        t.sharded_plain += (2 * key_dim + value_dim) * m.conv_kernel / tp + 2 * m.num_v_heads / tp
        t.replicated_plain += m.v_head_dim
        t.sharded_quantizable += value_dim * hidden / tp
        return t
    d_inner, d_state = m.d_inner or 2 * hidden, m.d_state or 16
    if m.kind == "mamba2":
        heads = m.num_heads or 1
        conv_dim = d_inner + 2 * m.n_groups * d_state
        t.sharded_quantizable += hidden * (d_inner + conv_dim + heads) / tp + d_inner * hidden / tp
        t.sharded_plain += conv_dim * m.conv_kernel / tp + 3 * heads / tp + d_inner / tp
        return t
    dt_rank = cdiv(hidden, 16)
    t.sharded_quantizable += hidden * 2 * d_inner / tp + d_inner * hidden / tp
    t.sharded_quantizable += d_inner * (dt_rank + 2 * d_state) / tp + dt_rank * d_inner / tp
    t.sharded_plain += d_inner * (m.conv_kernel + 1) / tp + d_inner * (d_state + 2) / tp
    return t


def _layer(spec: ModelSpec, index: int, tp: int, expert_shards: int | None = None) -> _Tensors:
    kind = spec.layer_pattern[index]
    if spec.single_block_layers:
        if kind == "M":
            return _mamba(spec, tp)
        if kind in "FSC":
            return _attention(spec, tp, index)
        t = _Tensors(replicated_plain=spec.hidden_size)  # the block's norm
        if spec.is_moe_layer(index):
            _moe_mlp(spec, tp, t, expert_shards or tp)
        else:
            t.sharded_quantizable += _dense_mlp(spec, tp, spec.intermediate_size)
        return t
    t = _mamba(spec, tp) if kind == "M" else _attention(spec, tp, index)
    if spec.is_moe_layer(index):
        _moe_mlp(spec, tp, t, expert_shards or tp)
        if spec.model_type == "gemma4_text" and spec.intermediate_size:
            # Gemma-4's MoE block runs beside the layer's dense MLP, not instead of it (vllm models/gemma4.py
            # Gemma4DecoderLayer: self.mlp always, self.router + self.moe with enable_moe_block).
            t.sharded_quantizable += _dense_mlp(spec, tp, spec.intermediate_size)
    elif spec.intermediate_size:
        t.sharded_quantizable += _dense_mlp(spec, tp, spec.intermediate_size)
    return t


def _layers(spec: ModelSpec, tp: int, expert_shards: int | None = None) -> list[_Tensors]:
    """Every decoder layer's tensors; layers of the same kind (attention letter, MoE or dense) are alike,
    so each distinct kind is computed once."""
    kinds: dict[tuple[str, bool, int], _Tensors] = {}
    ratios = spec.compressed_attention.compress_ratios if spec.compressed_attention else None
    out = []
    for index, letter in enumerate(spec.layer_pattern):
        key = (letter, spec.is_moe_layer(index), ratios[index] if ratios else 0)
        if key not in kinds:
            kinds[key] = _layer(spec, index, tp, expert_shards)
        out.append(kinds[key])
    return out


def _layer_bytes(spec: ModelSpec, tp: int, dtype_bytes: int, expert_shards: int | None) -> list[float]:
    cache: dict[int, float] = {}
    out = []
    for tensors in _layers(spec, tp, expert_shards):
        key = id(tensors)
        if key not in cache:
            cache[key] = _bytes(tensors, spec, dtype_bytes)
        out.append(cache[key])
    return out


def _bytes(t: _Tensors, spec: ModelSpec, dtype_bytes: int) -> float:
    quant = spec.quantization
    plain = t.sharded_plain + t.replicated_plain
    if quant is None or quant.weight_bits >= 16:
        return t.total() * dtype_bytes
    qbytes = quant.weight_bits / 8
    if quant.expert_weight_bits is not None:
        linear = t.sharded_quantizable + t.replicated_quantizable
        return t.sharded_experts * quant.expert_weight_bits / 8 + linear * qbytes + plain * dtype_bytes
    if quant.scope == "experts":
        return t.sharded_experts * qbytes + (t.total() - t.sharded_experts) * dtype_bytes
    quantized = t.sharded_quantizable + t.sharded_experts + t.replicated_quantizable
    return quantized * qbytes + plain * dtype_bytes


def _vision_tensors(spec: ModelSpec, tp: int, data_parallel: bool) -> _Tensors:
    """The vision tower on one TP rank: whole with --mm-encoder-tp-mode data (its linears are built with
    ``disable_tp``), else its column/row-parallel linears split (:func:`qwen_vision_tp_sharded`; an
    unmodelled tower is split whole)."""
    vision = spec.vision
    if vision is None:
        return _Tensors()
    if data_parallel or tp == 1:
        return _Tensors(replicated_plain=vision.parameters)
    sharded = qwen_vision_tp_sharded(vision)
    if sharded is None:
        return _Tensors(sharded_plain=vision.parameters / tp)
    return _Tensors(sharded_plain=sharded / tp, replicated_plain=vision.parameters - sharded)


def _rope_cache_bytes(spec: ModelSpec, dtype_bytes: int, mrope_cache_factor: int = 1) -> int:
    if spec.max_position_embeddings is None:
        return 0
    if spec.compressed_attention is not None:
        # DeepSeek-V4 builds two float32 DeepSeek-YaRN caches (models/deepseek_v4/common/rope.py: "main" for
        # sliding-window layers, "compress" for compressed ones), each max_position x rope dims.
        return 2 * spec.max_position_embeddings * spec.compressed_attention.rope_head_dim * 4
    rotary = spec.rotary_dim or (spec.mla.qk_rope_head_dim if spec.mla else spec.head_dim)
    # DeepSeek's YaRN scaling keeps its cache in float32.
    element = 4 if spec.mla is not None else dtype_bytes
    positions = spec.max_position_embeddings * (mrope_cache_factor if spec.mrope else 1)
    cache = positions * rotary * element
    if spec.model_type == "gemma4_text" and spec.heterogeneous_attention and "F" in spec.layer_pattern:
        # Gemma-4 full layers build a second cache (rope_parameters["full_attention"], "proportional": vllm
        # layers/rotary_embedding/gemma4_rope.py Gemma4RotaryEmbedding runs over rotary_dim = head_size).
        cache += spec.max_position_embeddings * spec.full_head_size * element
    return cache


def estimate_weights(
    spec: ModelSpec,
    *,
    dtype: str,
    tp: int = 1,
    pp: int = 1,
    expert_shards: int | None = None,
    pp_override: str | None = None,
    checkpoint_bytes: int | None = None,
    mrope_cache_factor: int = 1,
    vision_data_parallel: bool = False,
) -> WeightEstimate:
    """Bytes of weights on one TP rank of each PP stage, and the loaded parameter count.

    ``expert_shards``: ranks the MoE experts are spread over (TP by default; TP x DP with
    ``--enable-expert-parallel``, where each rank holds whole experts instead of slices).
    ``mrope_cache_factor``: how many times ``max_position_embeddings`` an MRoPE model's cos/sin cache spans
    (``MRotaryEmbedding.cache_max_position_num``; the release decides, planner/plan/engine.py).
    ``vision_data_parallel``: --mm-encoder-tp-mode data on a tower that supports it, so every rank holds all of it."""
    dtype_bytes = DTYPE_BYTES[dtype]
    vocab = cdiv(spec.vocab_size, 64) * 64  # vLLM pads vocab-parallel embeddings to a multiple of 64
    embed = _Tensors(sharded_plain=vocab * spec.hidden_size / tp)
    final_norm = spec.hidden_size * (2 if spec.model_type in _LAYERNORM_BIAS_TYPES else 1)
    head = _Tensors(sharded_plain=vocab * spec.hidden_size / tp, replicated_plain=final_norm)
    vision = _vision_tensors(spec, tp, vision_data_parallel)
    layer_bytes = _layer_bytes(spec, tp, dtype_bytes, expert_shards)
    parts = pp_partition(spec.num_layers, pp, pp_override)

    stage_bytes: list[float] = []
    start = 0
    for stage, count in enumerate(parts):
        total = sum(layer_bytes[start : start + count])
        start += count
        if stage == 0:
            total += _bytes(embed, spec, dtype_bytes) + _bytes(vision, spec, dtype_bytes)
        if stage == pp - 1:
            if spec.tie_word_embeddings and pp == 1:
                total += spec.hidden_size * dtype_bytes
            else:
                total += _bytes(head, spec, dtype_bytes)
        stage_bytes.append(total)

    full = _layers(spec, 1)
    params = sum(t.total() for t in full) + vocab * spec.hidden_size + final_norm
    if not spec.tie_word_embeddings:
        params += vocab * spec.hidden_size
    if spec.vision:
        params += spec.vision.parameters

    estimated = True
    if checkpoint_bytes:
        whole_tp1 = _whole_model_bytes(spec, full, vocab, dtype_bytes)
        exact = _loaded_bytes_from_checkpoint(spec, checkpoint_bytes, dtype, full, vocab)
        scale = exact / whole_tp1
        stage_bytes = [b * scale for b in stage_bytes]
        estimated = False
    rope = _rope_cache_bytes(spec, dtype_bytes, mrope_cache_factor)
    return WeightEstimate(
        parameters=int(params),
        bytes_per_stage=[int(b) + rope for b in stage_bytes],
        estimated=estimated,
    )


def _whole_model_bytes(spec: ModelSpec, full: list[_Tensors], vocab: int, dtype_bytes: int) -> float:
    total = sum(_bytes(t, spec, dtype_bytes) for t in full)
    total += vocab * spec.hidden_size * dtype_bytes * (1 if spec.tie_word_embeddings else 2)
    total += spec.hidden_size * dtype_bytes
    if spec.vision:
        total += spec.vision.parameters * dtype_bytes
    return total


def _loaded_bytes_from_checkpoint(
    spec: ModelSpec, checkpoint_bytes: int, dtype: str, full: list[_Tensors], vocab: int
) -> float:
    """The checkpoint's bytes as vLLM will hold them: MTP layers dropped, unquantized weights cast."""
    checkpoint_dtype_bytes = DTYPE_BYTES[spec.dtype]
    loaded = float(checkpoint_bytes)
    if spec.tie_word_embeddings:
        # Some tied checkpoints still store lm_head.weight (Qwen3-0.6B/1.7B, Falcon); vLLM does not load it.
        head = vocab * spec.hidden_size * checkpoint_dtype_bytes
        tied_total = _whole_model_bytes(spec, full, vocab, checkpoint_dtype_bytes)
        if abs(loaded - head - tied_total) < 0.01 * tied_total:
            loaded -= head
    if spec.mtp_layers:
        per_layer = (
            _bytes(full[-1], spec, checkpoint_dtype_bytes)
            + 2 * spec.hidden_size * spec.hidden_size * checkpoint_dtype_bytes
        )
        loaded -= spec.mtp_layers * per_layer
    if spec.quantization is None and DTYPE_BYTES[dtype] != checkpoint_dtype_bytes:
        loaded *= DTYPE_BYTES[dtype] / checkpoint_dtype_bytes
    return loaded
