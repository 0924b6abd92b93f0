"""DeepSeek-V4 planned as vLLM 0.33 plans it (FlashMLA, SM90/SM100), numbers derived by hand.

Facts: deepseek-ai/DeepSeek-V4-Flash's config.json, as quoted verbatim in a public repository's notes; the catalog
entry is the same parse. 43 layers: ``compress_ratios`` 0, 0 then 4/128 alternating (layer 42 is ratio 4; the 44th
entry, the MTP layer, is cut), so 2 sliding-only, 21 CSA (ratio 4) and 20 HCA (ratio 128) layers.

vLLM 0.33, per decoder layer (``models/deepseek_v4/attention.py``, ``compressor.py``,
``v1/attention/backends/mla/sparse_swa.py``), ``--kv-cache-dtype auto`` -> ``fp8_ds_mla`` (584 bytes a cached
token: 448 fp8 NoPE + 64 bf16 RoPE + 8 scale bytes), every page rounded up to 576 bytes, one head never split by TP:

=====================================  =========  ======  ======================================  ========
cache (spec)                           layers     block   page                                    window
=====================================  =========  ======  ======================================  ========
A  SWA cache (SlidingWindowMLASpec)    all 43     64      64 x 584 = 37,376 -> 37,440             128
B  CSA compressed (MLAAttentionSpec)   21         256     256 / 4 x 584 = 37,376 -> 37,440        -
C  HCA compressed (MLAAttentionSpec)   20         256     256 / 128 x 584 = 1,168 -> 1,728        -
D  CSA compressor state (fp32)         21         4       4 x 2 x 2 x 512 x 4 = 32,768 -> 32,832  8
E  HCA compressor state (fp32)         20         8       8 x 2 x 512 x 4 = 32,768 -> 32,832      128
F  indexer K cache (uint8, 132 B)      21         256     256 / 4 x 132 = 8,448 -> 8,640          -
G  indexer compressor state (fp32)     21         4       4 x 2 x 2 x 128 x 4 = 8,192 -> 8,640    8
=====================================  =========  ======  ======================================  ========

Block size: the sparse-MLA and indexer backends take only 256 (``_preferred_block_size_for_backends``).

Grouping (``v1/core/kv_cache_planning.py: _get_packed_kv_cache_groups``, the indexer's block-outermost layout):
greedy uniform-type buckets in registration order (F, G, A, B, D for a CSA layer; A, C, E for HCA): {A}, {F, B,
C}, {G, D}, {E}. Balanced buckets (as many layers of each page): A (43), G/D (21), E (20); the widest mixed one
(G/D) sets the floor 21; ``_approximate_gcd([43, 21, 20], 21)`` = 22 repeats a group. A splits into 2 groups
(22 + 21 layers), the others stay whole: 5 groups. One block id is the widest group: {F, B, C} = 21 x 8,640 +
21 x 37,440 + 20 x 1,728 = 1,002,240 bytes.

Per request (``get_max_concurrency_for_kv_cache_config``; in flight 2 x 8,192 on an H100 with async scheduling):
SWA groups cdiv(127 + 16,384, 64) + 1 = 259 each, CSA state cdiv(7 + 16,384, 4) + 1 = 4,099, HCA state
cdiv(127 + 16,384, 8) + 1 = 2,065, compressed caches cdiv(len, 256): 6,682 blocks whatever the length, plus
4,096 at 1,048,576 tokens. That constant part is what vLLM #51041's readers divided by: "GPU KV cache size" is
concurrency x max_model_len.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import InvalidArgumentError, UnsupportedArchitectureError
from planner.findings import Code
from planner.kv.grouping import _approximate_gcd
from planner.kv.specs import deepseek_v4_caches
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs

GiB = 1 << 30
MODEL_ID = "deepseek-ai/DeepSeek-V4-Flash"
RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]  # 44 entries: the last is the MTP layer's

DSV4_FLASH: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "attention_bias": False,
    "compress_ratios": RATIOS,
    "compress_rope_theta": 160000,
    "expert_dtype": "fp4",
    "hc_mult": 4,
    "head_dim": 512,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 512,
    "max_position_embeddings": 1048576,
    "model_type": "deepseek_v4",
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 64,
    "num_experts_per_tok": 6,
    "num_hash_layers": 3,
    "num_hidden_layers": 43,
    "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1,
    "o_groups": 8,
    "o_lora_rank": 1024,
    "q_lora_rank": 1024,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "scale_fmt": "ue8m0",
        "weight_block_size": [128, 128],
    },
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 16,
        "original_max_position_embeddings": 65536,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "sliding_window": 128,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 129280,
}


def _predict(gpu, version: str = "0.33.0", tp: int = 4, available: list[int] | None = None, **args: Any):  # type: ignore[no-untyped-def]
    spec = parse_config(DSV4_FLASH, model_id=MODEL_ID)
    return spec, predict(
        spec,
        gpu,
        ServingArgs(tensor_parallel_size=tp, **args),
        vllm_version=version,
        available_override=available or [40 * GiB],
    )


def _kv(gpu, **kwargs: Any):  # type: ignore[no-untyped-def]
    spec, prediction = _predict(gpu, **kwargs)
    return kv_report(spec, prediction)


def test_parse_and_catalog() -> None:
    spec = parse_config(DSV4_FLASH, model_id=MODEL_ID)
    c = spec.compressed_attention
    assert c is not None and c.compress_ratios == RATIOS[:43]
    assert (c.compress_ratios.count(0), c.compress_ratios.count(4), c.compress_ratios.count(128)) == (2, 21, 20)
    assert spec.layer_pattern == "SS" + "F" * 41 and spec.sliding_window == 128
    assert spec.quantization is not None and spec.quantization.expert_weight_bits == 4.25
    assert spec.derived_max_model_len == 1_048_576  # YaRN leaves max_position_embeddings as it is
    entry = lookup_model("deepseek-v4-flash")
    assert entry.model_dump(exclude={"source", "aliases", "notes", "checkpoint_bytes"}) == spec.model_dump(
        exclude={"source", "aliases", "notes", "checkpoint_bytes"}
    )


def test_caches_and_pages() -> None:
    spec = parse_config(DSV4_FLASH, model_id=MODEL_ID)
    caches = deepseek_v4_caches(spec, 256)
    assert len(caches) == 43 + 21 * 4 + 20 * 2  # A on every layer; B, D, F, G on CSA; C, E on HCA
    kinds = {(s.kind, s.block_size, s.page_bytes, s.window) for _, s in caches}
    assert kinds == {
        ("sliding_window", 64, 37_440, 128),  # A
        ("full", 256, 37_440, None),  # B
        ("full", 256, 1_728, None),  # C
        ("sliding_window", 4, 32_832, 8),  # D
        ("sliding_window", 8, 32_832, 128),  # E
        ("full", 256, 8_640, None),  # F
        ("sliding_window", 4, 8_640, 8),  # G
    }
    # A CSA layer registers F, G, A, B, D in that order (the indexer first).
    assert [(s.kind, s.page_bytes) for i, s in caches if i == 2] == [
        ("full", 8_640),
        ("sliding_window", 8_640),
        ("sliding_window", 37_440),
        ("full", 37_440),
        ("sliding_window", 32_832),
    ]
    assert _approximate_gcd([43, 21, 20], 21) == 22  # pads 1 + 1 + 2 layers, d = 21 would pad 21


def test_h100_layout_0_33(h100) -> None:  # type: ignore[no-untyped-def]
    # 40 GiB = 42,949,672,960 // 1,002,240 = 42,853 blocks. Per request at 1,048,576: 259 + 259 + 4,096 + 4,099
    # + 2,065 = 10,778. Concurrency 42,853 / 10,778 = 3.97597...; tokens int(3.97597... x 1,048,576) = 4,169,106.
    kv = _kv(h100)
    assert [(g.kind, g.num_layers, g.page_bytes, g.block_size, g.window) for g in kv.groups] == [
        ("sliding_window", 22, 22 * 37_440, 64, 128),
        ("sliding_window", 21, 21 * 37_440, 64, 128),
        ("full", 62, 1_002_240, 256, None),
        ("sliding_window", 42, 21 * (8_640 + 32_832), 4, 8),
        ("sliding_window", 20, 20 * 32_832, 8, 128),
    ]
    assert kv.kv_cache_dtype == "fp8_ds_mla"
    assert (kv.block_size, kv.bytes_per_block) == (256, 1_002_240)
    assert kv.num_gpu_blocks == 42_853
    assert kv.blocks_per_request == 10_778
    assert kv.max_concurrency == pytest.approx(3.975969568)
    assert kv.tokens == 4_169_106
    # The caches that keep every token: 1,002,240 bytes per 256 tokens = 3,915 a token; no Mamba state.
    assert (kv.bytes_per_token, kv.state_bytes_per_sequence) == (3_915, 0)


def test_misread_of_the_logged_size(h100) -> None:  # type: ignore[no-untyped-def]
    # At 121,344 tokens (vLLM #51041's context): 474 + 6,682 = 7,156 blocks a request; 42,853 / 7,156 = 5.98840...,
    # logged size int(5.98840... x 121,344) = 726,656 tokens, i.e. 40 GiB / 726,656 = 59,105 bytes "a token" though a
    # token of context costs 3,915 bytes: most of each request is its 6,682 window-capped blocks.
    spec, prediction = _predict(h100, max_model_len=121_344)
    kv = kv_report(spec, prediction)
    assert kv.blocks_per_request == 7_156
    assert kv.tokens == 726_656
    notes = [w.message for w in prediction.warnings if w.code == Code.WINDOW_BLOCKS_PER_REQUEST]
    assert len(notes) == 1 and "6,682 blocks" in notes[0] and "474 blocks" in notes[0]


def test_in_flight_tokens_size_the_capped_groups(h100) -> None:  # type: ignore[no-untyped-def]
    # --max-num-batched-tokens 2048: in flight 4,096. SWA cdiv(4,223, 64) + 1 = 67 (x 2), CSA state
    # cdiv(4,103, 4) + 1 = 1,027, HCA state cdiv(4,223, 8) + 1 = 529: 1,690 + 4,096.
    kv = _kv(h100, max_num_batched_tokens=2048)
    assert kv.blocks_per_request == 2 * 67 + 1_027 + 529 + 4_096


def test_one_head_on_every_rank(h100) -> None:  # type: ignore[no-untyped-def]
    assert _kv(h100, tp=1).bytes_per_block == _kv(h100, tp=8).bytes_per_block == 1_002_240


def test_pipeline_stages(h100) -> None:  # type: ignore[no-untyped-def]
    # PP 2: layers 0-21 and 22-42. Each worker's block is its widest projected group: stage 0 {F, B, C} = 10 x
    # (8,640 + 37,440) + 10 x 1,728 = 478,080; stage 1 = 11 x 46,080 + 10 x 1,728 = 524,160 (SWA: 11 x 37,440 =
    # 411,840; CSA state 11 x 41,472 = 456,192). Blocks: the smaller of 40 GiB // each = 81,940.
    _spec, prediction = _predict(h100, tp=4, pipeline_parallel_size=2, available=[40 * GiB, 40 * GiB])
    assert [s.bytes_per_block for s in prediction.layout.stages] == [478_080, 524_160]
    assert prediction.layout.num_gpu_blocks == 81_940


def test_what_is_refused(h100, a100) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgumentError, match="fp8_ds_mla"):
        _predict(h100, kv_cache_dtype="bfloat16")
    with pytest.raises(InvalidArgumentError, match="256-token blocks"):
        _predict(h100, block_size=128)
    with pytest.raises(UnsupportedArchitectureError, match="SM90/SM100"):
        _predict(a100)
    # 0.20-0.28 group the caches with group_and_unify_kv_cache_specs (other bytes per block and concurrency).
    with pytest.raises(UnsupportedArchitectureError, match="group_and_unify"):
        _predict(h100, version="0.26.0")
    with pytest.raises(UnsupportedArchitectureError, match="hybrid KV cache manager"):
        _predict(h100, disable_hybrid_kv_cache_manager=True)
    assert _kv(h100, kv_cache_dtype="fp8").kv_cache_dtype == "fp8_ds_mla"


def test_0_29_builds_the_same_layout(h100) -> None:  # type: ignore[no-untyped-def]
    # 0.29.0: the same specs (no max_tp_shards yet) and _get_packed_kv_cache_groups; 0.30/0.31 not read.
    old, new = _kv(h100, version="0.29.0"), _kv(h100)
    assert (old.bytes_per_block, old.num_gpu_blocks, old.blocks_per_request) == (
        new.bytes_per_block,
        new.num_gpu_blocks,
        new.blocks_per_request,
    )


def test_estimate_counts_each_cache() -> None:
    # planner estimate: the growing caches 3,915 B a token; the window caches per token kept: SWA 37,440 / 64 =
    # 585 B x 128 x 43, CSA state 32,832 / 4 x 8 x 21, indexer state 8,640 / 4 x 8 x 21, HCA state 32,832 / 8 x
    # 128 x 20. At 1,024 tokens: 4,008,960 + 3,219,840 + 1,378,944 + 362,880 + 10,506,240 = 19,476,864 bytes.
    from planner.cli.estimate import kv_bytes_per_token, sequence_bytes

    spec = parse_config(DSV4_FLASH, model_id=MODEL_ID)
    assert kv_bytes_per_token(spec, "auto", None) == 3_915
    assert sequence_bytes(spec, 1024, 0, 0) == 19_476_864
