"""Gemma-4 planned as vLLM 0.33 plans it, every number derived by hand from vLLM's source.

Facts: the ``text_config`` of google/gemma-4-31B-it and google/gemma-4-E2B-it
(https://huggingface.co/google/gemma-4-31B-it, https://huggingface.co/google/gemma-4-E2B-it), as vendored
in public test fixtures; the catalog entries carry the same facts.

What vLLM 0.33 does with them:

* transformers 5 ``Gemma4TextConfig.__post_init__`` gives every ``full_attention`` layer a
  ``per_layer_config`` of ``head_dim = global_head_dim`` and, only with ``attention_k_eq_v``,
  ``num_key_value_heads = num_global_key_value_heads``; ``model_executor/models/gemma4.py:
  Gemma4DecoderLayer`` builds each layer's ``Attention`` from it, so sliding and full layers have
  different KV specs (``FullAttentionSpec`` / ``SlidingWindowSpec``, page =
  block_size x kv_heads x (K + V head size) x 2 bytes, ``v1/kv_cache_interface.py``);
* ``Gemma4Attention``: the last ``num_kv_shared_layers`` layers get ``kv_sharing_target_layer_name`` and
  ``v1/worker/gpu_model_runner.py: get_kv_cache_spec`` gives them no spec at all;
* ``v1/core/kv_cache_planning.py: get_kv_cache_groups``: not uniform, not one type, the default CUDA layout
  (``LBNHC``, ``v1/attention/backends/utils.py: _DEFAULT_LAYOUT_PREFERENCE``) is not block-outermost so
  ``_get_packed_kv_cache_groups`` returns None; ``unify_kv_cache_spec_page_size`` multiplies the block
  size of the smaller page; ``_get_kv_cache_groups_uniform_page_size`` cuts buckets into groups of the
  smallest bucket (the largest when max < 1.5 x min);
* ``_get_kv_cache_bytes_per_block``: the largest group's summed pages; ``num_blocks = memory // that``;
* ``v1/core/kv_cache_utils.py: get_max_concurrency_for_kv_cache_config``: blocks per request summed over
  groups (full: cdiv(len, block); sliding: cdiv(min(window - 1 + in_flight, len), block) + 1,
  ``SlidingWindowSpec.max_admission_blocks_per_request``), ``get_kv_cache_capacity``: tokens =
  int(concurrency x max_model_len);
* in-flight tokens (``config/vllm.py: max_in_flight_tokens``): 2 batches (async scheduling) x
  max_num_batched_tokens; A100 is not in 0.33's >= 70 GiB batch class, so 2048 tokens.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import InvalidModelConfigError, UnsupportedArchitectureError
from planner.findings import Code
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.models.weights import estimate_weights
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs

GiB = 1 << 30

_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}


def _config(text: dict[str, Any]) -> dict[str, Any]:
    base = {
        "model_type": "gemma4_text",
        "attention_bias": False,
        "enable_moe_block": False,
        "final_logit_softcapping": 30.0,
        "global_head_dim": 512,
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "rope_parameters": _ROPE,
        "tie_word_embeddings": True,
        "vocab_size": 262144,
        "vocab_size_per_layer_input": 262144,
    }
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "dtype": "bfloat16",
        "text_config": {**base, **text},
    }


# vision_config of NVIDIA's quantized copy of gemma-4-31B-it, the fields the planner reads (ai-dynamo/aiconfigurator
# @095f58a51 aic-core/src/aiconfigurator_core/model_configs/nvidia--Gemma-4-31B-IT-NVFP4_config.json).
GEMMA4_VISION = {
    "hidden_size": 1152,
    "image_seq_length": 280,
    "intermediate_size": 4304,
    "model_type": "gemma4_vision",
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "patch_size": 16,
    "pooling_kernel_size": 3,
    "position_embedding_size": 10240,
}

GEMMA4_31B = _config(
    {
        "attention_k_eq_v": True,
        "hidden_size": 5376,
        "hidden_size_per_layer_input": 0,
        "intermediate_size": 21504,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
        "max_position_embeddings": 262144,
        "num_attention_heads": 32,
        "num_global_key_value_heads": 4,
        "num_hidden_layers": 60,
        "num_key_value_heads": 16,
        "num_kv_shared_layers": 0,
        "sliding_window": 1024,
        "use_bidirectional_attention": "vision",
    }
) | {"vision_config": GEMMA4_VISION}

GEMMA4_E2B = _config(
    {
        "attention_k_eq_v": False,
        "hidden_size": 1536,
        "hidden_size_per_layer_input": 256,
        "intermediate_size": 6144,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7,
        "max_position_embeddings": 131072,
        "num_attention_heads": 8,
        "num_hidden_layers": 35,
        "num_key_value_heads": 1,
        "num_kv_shared_layers": 20,
        "sliding_window": 512,
        "use_double_wide_mlp": True,
    }
)


def _plan(config: dict[str, Any], model_id: str, gpu, kv_bytes: int, version: str, **args: Any):  # type: ignore[no-untyped-def]
    spec = parse_config(config, model_id=model_id)
    prediction = predict(spec, gpu, ServingArgs(**args), vllm_version=version, available_override=[kv_bytes])
    return spec, prediction, kv_report(spec, prediction)


def test_31b_parses_two_attention_shapes() -> None:
    spec = parse_config(GEMMA4_31B, model_id="google/gemma-4-31B-it")
    assert spec.layer_pattern == "SSSSSF" * 10
    assert (spec.num_kv_heads, spec.head_dim) == (16, 256)  # sliding layers
    assert (spec.full_kv_heads, spec.full_head_size) == (4, 512)  # attention_k_eq_v: the global KV heads
    assert spec.sliding_window == 1024
    assert spec.derived_max_model_len == 262144
    # The catalog entry is this parse (plus its source and notes).
    entry = lookup_model("gemma-4-31b-it")
    assert entry.model_dump(exclude={"source", "aliases", "notes"}) == spec.model_dump(
        exclude={"source", "aliases", "notes"}
    )


def test_global_kv_heads_only_with_k_eq_v() -> None:
    # Gemma4TextConfig: num_global_key_value_heads applies only when attention_k_eq_v is true.
    config = _config({**GEMMA4_31B["text_config"], "attention_k_eq_v": False})
    spec = parse_config(config, model_id="x")
    assert (spec.full_kv_heads, spec.full_head_size) == (16, 512)


def test_31b_layout_0_33(a100) -> None:  # type: ignore[no-untyped-def]
    # Sliding page: 16 tokens x 16 KV heads x (256 + 256) x 2 B = 262,144 B.
    # Full page: 16 x 4 x (512 + 512) x 2 = 131,072 B -> unified by doubling its block size to 32.
    # Buckets: 50 sliding, 10 full; 50 >= 1.5 x 10, so groups of 10: 5 sliding groups + 1 full group.
    # Bytes per block: 10 x 262,144 = 2,621,440. 50 GiB // 2,621,440 = 20,480 blocks.
    # Per request at 262,144 tokens: full cdiv(262144, 32) = 8,192; each sliding group
    # cdiv(min(1024 - 1 + 2 x 2048, 262144), 16) + 1 = cdiv(5119, 16) + 1 = 321, x5 = 1,605. Total 9,797.
    # Concurrency 20,480 / 9,797 = 2.0904...; tokens int(2.0904358... x 262,144) = 547,995.
    _, prediction, kv = _plan(GEMMA4_31B, "google/gemma-4-31B-it", a100, 50 * GiB, "0.33.0")
    kinds = [(g.kind, g.num_layers, g.page_bytes, g.block_size) for g in kv.groups]
    assert kinds == [("sliding_window", 10, 262_144, 16)] * 5 + [("full", 10, 262_144, 32)]
    assert kv.bytes_per_block == 2_621_440
    assert kv.num_gpu_blocks == 20_480
    assert kv.blocks_per_request == 9_797
    assert kv.max_concurrency == pytest.approx(20_480 / 9_797)
    assert kv.tokens == 547_995
    # Bytes per token over the 60 layers: 50 x 16,384 + 10 x 8,192 = 901,120.
    assert kv.bytes_per_token == 901_120
    assert prediction.fits


def test_31b_logged_size_moves_10x_from_0_20_0_to_0_21(a100) -> None:  # type: ignore[no-untyped-def]
    # vLLM #43308: "GPU KV cache size" ~55k tokens on 0.20.0, ~525k on 0.21.0, same memory.
    # 0.20.0 v1/core/kv_cache_utils.py _report_kv_cache_config: num_blocks // len(groups) x min block size
    #   = 20,480 // 6 x 16 = 54,608.
    # 0.20.2 / 0.21.0: int(concurrency x max_model_len); in-flight = max_num_batched_tokens (2048, one batch
    #   before 0.26): sliding cdiv(1023 + 2048, 16) + 1 = 193, x5 = 965; + 8,192 = 9,157 blocks per request;
    #   20,480 / 9,157 x 262,144 -> 586,295.
    _, _, old = _plan(GEMMA4_31B, "google/gemma-4-31B-it", a100, 50 * GiB, "0.20.0")
    _, _, new = _plan(GEMMA4_31B, "google/gemma-4-31B-it", a100, 50 * GiB, "0.21.0")
    assert old.num_gpu_blocks == new.num_gpu_blocks == 20_480  # the memory did not change
    assert old.tokens == 54_608
    assert new.tokens == 586_295
    assert old.max_concurrency == new.max_concurrency == pytest.approx(20_480 / 9_157)
    assert 9 < new.tokens / old.tokens < 11


def test_e2b_shared_layers_keep_no_cache_0_33(a100) -> None:  # type: ignore[no-untyped-def]
    # 35 layers, the last 20 KV-shared: layers 0-14 own a cache, 12 sliding + 3 full.
    # Sliding page 16 x 1 x (256 + 256) x 2 = 16,384; full 16 x 1 x (512 + 512) x 2 = 32,768 -> sliding
    # block size doubled to 32. Buckets 12 and 3 (12 >= 4.5): groups of 3 = 4 sliding + 1 full.
    # Bytes per block 3 x 32,768 = 98,304; 8 GiB // 98,304 = 87,381 blocks.
    # Per request at 131,072: full cdiv(131072, 16) = 8,192; sliding cdiv(511 + 4096, 32) + 1 = 145, x4 = 580.
    # 87,381 / 8,772 = 9.9613...; x 131,072 -> 1,305,654 tokens.
    spec, _, kv = _plan(GEMMA4_E2B, "google/gemma-4-E2B-it", a100, 8 * GiB, "0.33.0")
    assert spec.layer_pattern == "SSSSF" * 3 + "N" * 20
    assert spec.kv_shared_layers == 20
    kinds = [(g.kind, g.num_layers, g.page_bytes, g.block_size) for g in kv.groups]
    assert kinds == [("sliding_window", 3, 32_768, 32)] * 4 + [("full", 3, 32_768, 16)]
    assert kv.num_gpu_blocks == 87_381
    assert kv.blocks_per_request == 8_772
    assert kv.tokens == 1_305_654
    # 12 x 1,024 + 3 x 2,048 bytes per token: the 20 shared layers cost nothing.
    assert kv.bytes_per_token == 18_432


def test_shared_layers_need_an_owner_of_their_type() -> None:
    text = {**GEMMA4_E2B["text_config"], "num_kv_shared_layers": 31}  # leaves layers 0-3, all sliding
    with pytest.raises(InvalidModelConfigError, match="no earlier full"):
        parse_config(_config(text), model_id="x")


def test_no_layer_types_every_sixth_layer_is_full() -> None:
    text = {k: v for k, v in GEMMA4_31B["text_config"].items() if k != "layer_types"}
    text["num_hidden_layers"] = 8
    spec = parse_config(_config(text), model_id="x")
    assert spec.layer_pattern == "SSSSSFSF"  # every 6th, and the last layer forced to full


def test_releases_without_gemma4_refuse_it(a100) -> None:  # type: ignore[no-untyped-def]
    # registry.py: 0.18.0 does not list Gemma4ForConditionalGeneration, 0.19.0 does.
    for version in ("0.10.0", "0.18.0"):
        with pytest.raises(UnsupportedArchitectureError, match="does not serve Gemma4ForConditionalGeneration"):
            _plan(GEMMA4_31B, "google/gemma-4-31B-it", a100, 50 * GiB, version)
    _, prediction, _ = _plan(GEMMA4_31B, "google/gemma-4-31B-it", a100, 50 * GiB, "0.19.0")
    assert Code.ARCHITECTURE_SUPPORT_UNKNOWN not in [w.code for w in prediction.warnings]


def test_hybrid_manager_off_is_refused_not_misplanned(a100) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedArchitectureError, match="hybrid KV cache manager off"):
        _plan(GEMMA4_31B, "google/gemma-4-31B-it", a100, 50 * GiB, "0.33.0", disable_hybrid_kv_cache_manager=True)


# google/gemma-4-26B-A4B-it (the catalog entry's facts): 30 layers, 5 sliding + 1 full, 8 KV heads of 256 on
# sliding layers, 2 global KV heads of 512 (attention_k_eq_v) on full ones, window 1024, 128 experts of 704.
GEMMA4_26B_A4B = _config(
    {
        "attention_k_eq_v": True,
        "enable_moe_block": True,
        "hidden_size": 2816,
        "hidden_size_per_layer_input": 0,
        "intermediate_size": 2112,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
        "max_position_embeddings": 262144,
        "moe_intermediate_size": 704,
        "num_attention_heads": 16,
        "num_experts": 128,
        "num_global_key_value_heads": 2,
        "num_hidden_layers": 30,
        "num_key_value_heads": 8,
        "num_kv_shared_layers": 0,
        "sliding_window": 1024,
        "top_k_experts": 8,
    }
)


def test_sliding_layers_keep_the_kernel_block_from_0_25(a100) -> None:  # type: ignore[no-untyped-def]
    # --block-size 128 (calibration record g010, vLLM 0.29.0, 15.64 GiB, async scheduling off, 512 batched
    # tokens). 0.25+ model_executor/layers/attention/attention.py get_kv_cache_spec: a sliding layer takes the
    # backend's smallest kernel block (_largest_kernel_block_within: MultipleOf(16) -> 16), not --block-size.
    # Sliding page 16 x 8 x (256 + 256) x 2 = 131,072; full 128 x 2 x (512 + 512) x 2 = 524,288, so the
    # sliding block is scaled x4 to 64. Groups of 5 (25 >= 1.5 x 5): 5 sliding + 1 full; a block id is
    # 5 x 524,288 = 2,621,440 B; int(15.64 GiB) // that = 6,406 blocks. Per request at 4,096 tokens: full
    # cdiv(4096, 128) = 32, each sliding group cdiv(min(1023 + 512, 4096), 64) + 1 = 25 -> 157;
    # int(6,406 / 157 x 4,096) = 167,127, the logged "GPU KV cache size".
    args = dict(max_model_len=4096, max_num_batched_tokens=512, block_size=128, async_scheduling=False)
    kv_bytes = int(15.64 * GiB)
    _, _, kv = _plan(GEMMA4_26B_A4B, "google/gemma-4-26B-A4B-it", a100, kv_bytes, "0.29.0", **args)
    kinds = [(g.kind, g.num_layers, g.page_bytes, g.block_size) for g in kv.groups]
    assert kinds == [("sliding_window", 5, 524_288, 64)] * 5 + [("full", 5, 524_288, 128)]
    assert kv.num_gpu_blocks == 6_406
    assert kv.blocks_per_request == 157
    assert kv.tokens == 167_127
    # 0.24.0 sized sliding layers at --block-size: page 1,048,576, the full block scaled to 256.
    _, _, old = _plan(GEMMA4_26B_A4B, "google/gemma-4-26B-A4B-it", a100, kv_bytes, "0.24.0", **args)
    assert [(g.page_bytes, g.block_size) for g in old.groups] == [(1_048_576, 128)] * 5 + [(1_048_576, 256)]
    assert old.num_gpu_blocks == kv_bytes // (5 * 1_048_576) == 3_203


def test_unaligned_sliding_pages_are_padded_from_0_29(a100) -> None:  # type: ignore[no-untyped-def]
    # --block-size 48 (record g009, 8.56 GiB, async scheduling: 2 x 2048 tokens in flight). Sliding page at the
    # kernel block 16 x 8,192 = 131,072 B does not divide the full page 48 x 4,096 = 196,608 B: 0.29.0
    # v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size pads it (page_size_padded) and keeps block 16.
    # A block id is 5 x 196,608 = 983,040 B; int(8.56 GiB) // that = 9,349. Per request: full
    # cdiv(4096, 48) = 86, sliding cdiv(min(1023 + 4096, 4096), 16) + 1 = 257 x 5 -> 1,371;
    # int(9,349 / 1,371 x 4,096) = 27,931.
    args = dict(max_model_len=4096, max_num_batched_tokens=2048, block_size=48)
    kv_bytes = int(8.56 * GiB)
    _, _, kv = _plan(GEMMA4_26B_A4B, "google/gemma-4-26B-A4B-it", a100, kv_bytes, "0.29.0", **args)
    kinds = [(g.kind, g.page_bytes, g.block_size) for g in kv.groups]
    assert kinds == [("sliding_window", 196_608, 16)] * 5 + [("full", 196_608, 48)]
    assert kv.num_gpu_blocks == 9_349
    assert kv.blocks_per_request == 1_371
    assert kv.tokens == 27_931
    # 0.28.0 pads only for backends that index KV by the block stride: not modelled, refused.
    with pytest.raises(UnsupportedArchitectureError, match="cannot be unified"):
        _plan(GEMMA4_26B_A4B, "google/gemma-4-26B-A4B-it", a100, kv_bytes, "0.28.0", **args)


def test_26b_a4b_weights_keep_the_dense_mlp_beside_the_moe_block() -> None:
    # vllm 0.29 models/gemma4.py Gemma4DecoderLayer: every layer has self.mlp (3 x 2816 x 2112 = 17,842,176)
    # and, with enable_moe_block, a router (2816 x 128 = 360,448) and 128 experts (128 x 3 x 2816 x 704 =
    # 761,266,176). Gemma4Attention takes each layer's own shape: sliding q/k/v/o 2816 x 16 x 256,
    # 2816 x 8 x 512, 16 x 256 x 2816 = 34,603,008; full 2816 x 16 x 512, 2816 x 2 x 1024, 16 x 512 x 2816 =
    # 51,904,512 (k_eq_v still allocates the V slot). Two norms of 2816 a layer as the planner counts them.
    # 25 x 814,077,440 + 5 x 831,378,944 + 262,144 x 2816 embeddings (tied) + the final norm = 25,247,031,040.
    # RoPE caches: 262,144 x 256 (sliding, default) + 262,144 x 512 (full, Gemma4RotaryEmbedding over the
    # whole head) bf16 = 402,653,184 B.
    spec = parse_config(GEMMA4_26B_A4B, model_id="google/gemma-4-26B-A4B-it")
    weights = estimate_weights(spec, dtype="bfloat16")
    assert weights.parameters == 25_247_031_040
    assert weights.bytes_per_stage == [2 * 25_247_031_040 + 402_653_184]
    entry = lookup_model("gemma-4-26b-a4b-it")
    assert entry.model_dump(exclude={"source", "aliases", "notes"}) == spec.model_dump(
        exclude={"source", "aliases", "notes"}
    )
