"""Kimi-Linear (Kimi delta attention + MLA) planned as vLLM 0.33 plans it, numbers derived by hand.

Facts: moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json, as printed verbatim in a public model report; the
catalog entry is the same parse.

vLLM 0.33 (``models/kimi_k3/nvidia/model.py``, registered for ``KimiLinearForCausalLM``):

* ``KimiDecoderLayer``: layer i is Kimi delta attention when ``i + 1`` is in ``linear_attn_config.kda_layers``
  (``KimiLinearConfig.is_kda_layer``), MLA otherwise: 20 KDA + 7 MLA (layers 3, 7, ..., 23, 26);
* KDA (``KimiGatedDeltaNetAttention``, no ``use_full_rank_gate`` in the config): ``MambaBase.get_kv_cache_spec``,
  no prefill checkpoint; ``mamba_utils.py: kda_state_shape``: conv (3 x 32 x 128 / tp) x (4 - 1) in the model
  dtype, recurrent (32 / tp) x 128 x 128 in float32 (``kda_state_dtype``: "auto" is float32). TP 2:
  6,144 x 3 x 2 + 16 x 128 x 128 x 4 = 36,864 + 1,048,576 = 1,085,440 bytes a layer; TP 1: 2,170,880;
* MLA (``kimi_k3/nvidia/mla.py: MultiHeadLatentAttention.get_kv_cache_spec``): one latent head of
  ``kv_lora_rank + qk_rope_head_dim`` = 576, never split by TP: 1,152 bytes per token in bf16;
* ``platforms/interface.py: _align_hybrid_block_size``: MLA hybrids align to at least 128 (0.27+), so the
  block is 128 x cdiv(state, 128 x 1,152); the KDA page is padded to the attention page;
* prefix caching on (hybrid default from 0.28) -> ``mamba_cache_mode`` "align": 2 blocks a KDA group per
  request (``MambaSpec.max_memory_usage_bytes``);
* groups (``_get_kv_cache_groups_uniform_page_size``): 20 KDA >= 1.5 x 7 MLA, so groups of 7: 3 KDA groups
  (7, 7, 6 + 1 padding layer) and 1 MLA group; one block id is 7 pages.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import InvalidArgumentError, UnsupportedArchitectureError
from planner.findings import Code
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.models.weights import estimate_weights
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs

GiB = 1 << 30
MODEL_ID = "moonshotai/Kimi-Linear-48B-A3B-Instruct"

KIMI_LINEAR_48B: dict[str, Any] = {
    "architectures": ["KimiLinearForCausalLM"],
    "dtype": "bfloat16",
    "first_k_dense_replace": 1,
    "head_dim": 72,
    "hidden_act": "silu",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "kv_lora_rank": 512,
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "head_dim": 128,
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "num_heads": 32,
        "short_conv_kernel_size": 4,
    },
    "mla_use_nope": True,
    "model_max_length": 1048576,
    "model_type": "kimi_linear",
    "moe_intermediate_size": 1024,
    "moe_layer_freq": 1,
    "num_attention_heads": 32,
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_hidden_layers": 27,
    "num_key_value_heads": 32,
    "num_nextn_predict_layers": 0,
    "num_shared_experts": 1,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "v_head_dim": 128,
    "vocab_size": 163840,
}


def _kv(gpu, version: str = "0.33.0", tp: int = 2, **args: Any):  # type: ignore[no-untyped-def]
    spec = parse_config(KIMI_LINEAR_48B, model_id=MODEL_ID)
    prediction = predict(
        spec, gpu, ServingArgs(tensor_parallel_size=tp, **args), vllm_version=version, available_override=[40 * GiB]
    )
    return kv_report(spec, prediction)


def test_parse_and_catalog() -> None:
    spec = parse_config(KIMI_LINEAR_48B, model_id=MODEL_ID)
    assert spec.layer_pattern == "MMMF" * 6 + "MMF"
    assert spec.mamba is not None and (spec.mamba.kind, spec.mamba.num_heads, spec.mamba.head_dim) == ("kda", 32, 128)
    assert spec.mla is not None and spec.mla.latent_size == 576 and spec.mla.q_lora_rank is None
    assert spec.moe is not None and (spec.moe.num_shared_experts, spec.moe.first_dense_layers) == (1, 1)
    assert spec.derived_max_model_len == 1_048_576  # model_max_length overrides the class's 4,096 positions
    entry = lookup_model("kimi-linear-48b-a3b-instruct")
    assert entry.model_dump(exclude={"source", "aliases", "notes", "parameters"}) == spec.model_dump(
        exclude={"source", "aliases", "notes", "parameters"}
    )
    # The checkpoint's tensor list: 49,122,681,728 parameters; the routers' e_score_correction_bias (26 x 256)
    # is the only tensor the architecture does not count.
    assert entry.parameters == 49_122_681_728
    assert estimate_weights(spec, dtype="bfloat16").parameters == 49_122_681_728 - 26 * 256


def test_h100_tp2_layout_0_33(h100) -> None:  # type: ignore[no-untyped-def]
    # Block 128 x cdiv(1,085,440, 128 x 1,152 = 147,456) = 128 x 8 = 1,024; page 1,024 x 1,152 = 1,179,648.
    # Bytes per block 7 x 1,179,648 = 8,257,536; 40 GiB = 42,949,672,960 // that = 5,201 blocks.
    # Per request at 1,048,576: MLA cdiv(1,048,576, 1,024) = 1,024 + 3 KDA groups x 2 = 1,030.
    # Concurrency 5,201 / 1,030 = 5.04951...; tokens int(5.04951... x 1,048,576) = 5,294,799.
    kv = _kv(h100)
    assert [(g.kind, g.num_layers, g.page_bytes, g.block_size, g.blocks_per_sequence_const) for g in kv.groups] == [
        ("mamba", 7, 1_179_648, 1_024, 2)
    ] * 3 + [("full", 7, 1_179_648, 1_024, None)]
    assert kv.bytes_per_block == 8_257_536
    assert kv.num_gpu_blocks == 5_201
    assert kv.blocks_per_request == 1_030
    assert kv.max_concurrency == pytest.approx(5.049514563)
    assert kv.tokens == 5_294_799
    # Whole model at TP 1: 7 MLA layers x 1,152 B a token; 20 KDA states of 2,170,880 B a sequence.
    assert kv.bytes_per_token == 8_064
    assert kv.state_bytes_per_sequence == 20 * 2_170_880


def test_tp1_block_0_33(h100) -> None:  # type: ignore[no-untyped-def]
    # TP 1: 128 x cdiv(2,170,880, 147,456) = 128 x 15 = 1,920 tokens; 7 x 1,920 x 1,152 = 15,482,880 a block.
    kv = _kv(h100, tp=1)
    assert (kv.block_size, kv.bytes_per_block) == (1_920, 15_482_880)
    assert kv.num_gpu_blocks == 42_949_672_960 // 15_482_880


@pytest.mark.parametrize(
    ("version", "block", "kda_blocks"),
    [
        # 0.12-0.19 HybridAttentionMambaModelConfig: MLA hybrids align to 64 -> 64 x cdiv(1,085,440, 73,728) = 960;
        # prefix caching off for hybrids: "none" mode, one state block a request.
        ("0.18.0", 960, 1),
        # 0.20-0.26: the MLA backend's block (16 on H100) -> 16 x cdiv(1,085,440, 18,432) = 16 x 59 = 944.
        ("0.20.2", 944, 1),
        ("0.26.0", 944, 1),
        # 0.27: at least 128 -> 1,024; 0.28 turns prefix caching on ("align": 2 blocks).
        ("0.27.1", 1_024, 1),
        ("0.28.0", 1_024, 2),
    ],
)
def test_block_alignment_by_release(h100, version: str, block: int, kda_blocks: int) -> None:  # type: ignore[no-untyped-def]
    kv = _kv(h100, version=version)
    assert kv.block_size == block
    assert kv.groups[0].blocks_per_sequence_const == kda_blocks


def test_recurrent_state_stays_float32(h100) -> None:  # type: ignore[no-untyped-def]
    # float32 asked explicitly: the same layout. bfloat16 in 0.32+: vLLM sizes the block for a bf16 state
    # (get_mamba_state_dtype_from_config) while the layers keep float32, and MambaSpec's page assertion fails.
    assert _kv(h100, mamba_ssm_cache_dtype="float32").block_size == 1_024
    with pytest.raises(InvalidArgumentError, match="MambaSpec assertion"):
        _kv(h100, mamba_ssm_cache_dtype="bfloat16")
    # 0.29's kda_state_dtype never reads the flag: float32 whatever it says.
    assert _kv(h100, version="0.29.0", mamba_ssm_cache_dtype="bfloat16").block_size == 1_024


def test_registry(h100) -> None:  # type: ignore[no-untyped-def]
    # KimiLinearForCausalLM: not in 0.10.0's registry, in 0.12.0's; 0.11 was not read.
    spec = parse_config(KIMI_LINEAR_48B, model_id=MODEL_ID)
    with pytest.raises(UnsupportedArchitectureError):
        predict(spec, h100, ServingArgs(tensor_parallel_size=2), vllm_version="0.10.0", available_override=[40 * GiB])
    unread = predict(
        spec, h100, ServingArgs(tensor_parallel_size=2), vllm_version="0.11.0", available_override=[40 * GiB]
    )
    assert Code.ARCHITECTURE_SUPPORT_UNKNOWN in [w.code for w in unread.warnings]
    read = predict(
        spec, h100, ServingArgs(tensor_parallel_size=2), vllm_version="0.12.0", available_override=[40 * GiB]
    )
    assert Code.ARCHITECTURE_SUPPORT_UNKNOWN not in [w.code for w in read.warnings]


def test_kda_layers_must_be_layer_numbers() -> None:
    from planner.errors import InvalidModelConfigError

    broken = {**KIMI_LINEAR_48B, "linear_attn_config": {**KIMI_LINEAR_48B["linear_attn_config"], "kda_layers": [0, 1]}}
    with pytest.raises(InvalidModelConfigError, match="kda_layers"):
        parse_config(broken, model_id="x")
