"""Qwen3.5 (gated delta net + full attention) planned as vLLM 0.33 plans it, numbers derived by hand.

Facts: the ``text_config`` of Qwen/Qwen3.5-35B-A3B (https://huggingface.co/Qwen/Qwen3.5-35B-A3B), as
transcribed in public test fixtures; the catalog entry is the same parse.

vLLM 0.33:

* ``model_executor/models/qwen3_5.py``: ``layer_types`` picks a ``linear_attention`` (GDN) or full-attention
  layer; ``get_mamba_state_shape_from_config`` -> ``mamba_utils.py: gated_delta_net_state_shape``:
  conv (2 x 16 x 128 + 32 x 128) = 8,192 x (4 - 1), temporal 32 x 128 x 128;
* ``model_executor/models/config.py: Qwen3_5ForConditionalGenerationConfig``: ``mamba_ssm_cache_dtype``
  auto -> the config's ``mamba_ssm_dtype`` (float32); the conv state keeps the model dtype (bf16):
  state = 8,192 x 3 x 2 + 32 x 128 x 128 x 4 = 49,152 + 2,097,152 = 2,146,304 bytes per layer;
* ``platforms/interface.py: _align_hybrid_block_size``: attention block = align x cdiv(state, align x
  2,048) (2 KV heads x (256 + 256) x 2 bytes per token), align 16, or lcm with the FlashInfer GDN prefill
  checkpoint alignment 64 (``qwen_gdn_linear_attn.py``, Hopper/Blackwell, mamba_cache_mode "align");
  the Mamba page is padded to the attention page;
* prefix caching is on for hybrids and ``mamba_cache_mode`` is "align": a Mamba group holds 2 blocks per
  request (``MambaSpec``), plus one prefill checkpoint block with the FlashInfer GDN backend;
* groups (``_get_kv_cache_groups_uniform_page_size``): 30 GDN + 10 full, 30 >= 1.5 x 10, so groups of 10:
  3 Mamba groups + 1 full group; bytes per block 10 x page.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.models.weights import estimate_weights
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs

GiB = 1 << 30

QWEN35_35B_A3B: dict[str, Any] = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "tie_word_embeddings": False,
    "text_config": {
        "attention_bias": False,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144,
        "model_type": "qwen3_5_moe_text",
        "moe_intermediate_size": 512,
        "mtp_num_hidden_layers": 1,
        "num_attention_heads": 16,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 40,
        "num_key_value_heads": 2,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "rope_type": "default",
        },
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "vocab_size": 248320,
    },
    # ai-dynamo/aiconfigurator@095f58a51
    # aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3.5-35B-A3B_config.json
    "vision_config": {
        "deepstack_visual_indexes": [],
        "depth": 27,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "in_channels": 3,
        "intermediate_size": 4304,
        "model_type": "qwen3_5_moe",
        "num_heads": 16,
        "num_position_embeddings": 2304,
        "out_hidden_size": 2048,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}


def _kv(gpu, version: str = "0.33.0", **args: Any):  # type: ignore[no-untyped-def]
    spec = parse_config(QWEN35_35B_A3B, model_id="Qwen/Qwen3.5-35B-A3B")
    prediction = predict(spec, gpu, ServingArgs(**args), vllm_version=version, available_override=[40 * GiB])
    return kv_report(spec, prediction)


def test_parse_and_catalog() -> None:
    spec = parse_config(QWEN35_35B_A3B, model_id="Qwen/Qwen3.5-35B-A3B")
    assert spec.layer_pattern == "MMMF" * 10
    assert spec.mamba is not None and spec.mamba.kind == "gated_delta_net"
    assert spec.mamba.ssm_dtype == "float32"
    assert (spec.num_kv_heads, spec.head_dim) == (2, 256)
    entry = lookup_model("qwen3.5-35b-a3b")
    assert entry.model_dump(exclude={"source", "aliases", "notes"}) == spec.model_dump(
        exclude={"source", "aliases", "notes"}
    )


def test_a100_layout_0_33(a100) -> None:  # type: ignore[no-untyped-def]
    # Block: 16 x cdiv(2,146,304, 16 x 2,048) = 16 x 66 = 1,056; page 1,056 x 2,048 = 2,162,688.
    # Bytes per block 10 x 2,162,688 = 21,626,880; 40 GiB // that = 1,985 blocks.
    # Per request at 262,144: full cdiv(262144, 1056) = 249; 3 Mamba groups x 2 = 6; total 255.
    # 1,985 / 255 = 7.7843...; x 262,144 -> 2,040,611 tokens.
    kv = _kv(a100)
    assert [(g.kind, g.num_layers, g.page_bytes, g.block_size, g.blocks_per_sequence_const) for g in kv.groups] == [
        ("mamba", 10, 2_162_688, 1_056, 2)
    ] * 3 + [("full", 10, 2_162_688, 1_056, None)]
    assert kv.num_gpu_blocks == 1_985
    assert kv.blocks_per_request == 255
    assert kv.tokens == 2_040_611
    assert kv.state_bytes_per_sequence == 30 * 2_146_304


def test_h100_gdn_checkpoint_block_0_33(h100) -> None:  # type: ignore[no-untyped-def]
    # Align 64 (FlashInfer GDN checkpoints): 64 x cdiv(2,146,304, 64 x 2,048) = 64 x 17 = 1,088;
    # page 2,228,224; 10 x page = 22,282,240 per block; 40 GiB // that = 1,927 blocks.
    # Per request: cdiv(262144, 1088) = 241 + 3 groups x (2 + 1 checkpoint) = 250. 1,927 / 250 = 7.708.
    kv = _kv(h100)
    assert kv.block_size == 1_088
    assert kv.bytes_per_block == 22_282_240
    assert kv.num_gpu_blocks == 1_927
    assert kv.blocks_per_request == 250
    assert kv.max_concurrency == pytest.approx(7.708)
    assert kv.tokens == 2_020_605  # int(7.708 x 262,144)


def test_bf16_ssm_state_when_asked(a100) -> None:  # type: ignore[no-untyped-def]
    # --mamba-ssm-cache-dtype bfloat16 overrides the config's float32: state 49,152 + 1,048,576 = 1,097,728;
    # block 16 x cdiv(1,097,728, 32,768) = 16 x 34 = 544.
    kv = _kv(a100, mamba_ssm_cache_dtype="bfloat16")
    assert kv.block_size == 544


def test_registry_unknown_between_read_releases(a100) -> None:  # type: ignore[no-untyped-def]
    # Qwen3_5MoeForConditionalGeneration: not in 0.10.0's registry, in 0.18.0's; 0.11-0.17 were not read.
    from planner.errors import UnsupportedArchitectureError
    from planner.findings import Code

    spec = parse_config(QWEN35_35B_A3B, model_id="Qwen/Qwen3.5-35B-A3B")
    with pytest.raises(UnsupportedArchitectureError):
        predict(spec, a100, ServingArgs(), vllm_version="0.10.0", available_override=[40 * GiB])
    prediction = predict(spec, a100, ServingArgs(), vllm_version="0.15.0", available_override=[40 * GiB])
    assert Code.ARCHITECTURE_SUPPORT_UNKNOWN in [w.code for w in prediction.warnings]


def test_weights_count_the_gated_attention_and_qk_norms() -> None:
    """Qwen3.5's full-attention layers are Qwen3NextAttention (vllm 0.23 qwen3_5.py): the q projection also yields
    the output gate (attn_output_gate) and q/k are RMS-normed per head. With them the architecture reproduces
    Qwen/Qwen3.5-397B-A17B's HF safetensors total, 403,397,928,944 parameters at revision 8472618 (the HF API as
    BrendanJamesLynskey/llm-architectures-explained@203a8742 data/hf/Qwen__Qwen3.5-397B-A17B.json records it, with
    that revision's config.json), less the MTP layer vLLM does not load (skip_prefixes=["mtp."])."""
    text = {
        **QWEN35_35B_A3B["text_config"],
        "hidden_size": 4096,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 15,
        "linear_num_value_heads": 64,
        "moe_intermediate_size": 1024,
        "num_attention_heads": 32,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 60,
        "shared_expert_intermediate_size": 1024,
    }
    vision = {**QWEN35_35B_A3B["vision_config"], "out_hidden_size": 4096}
    spec = parse_config(
        {**QWEN35_35B_A3B, "text_config": text, "vision_config": vision}, model_id="Qwen/Qwen3.5-397B-A17B"
    )
    hidden = 4096
    attention = hidden * (32 * 256 * 2 + 2 * 2 * 256) + 32 * 256 * hidden + 2 * 256
    moe = 512 * 3 * hidden * 1024 + 3 * hidden * 1024 + hidden * 512 + hidden
    mtp = 2 * hidden * hidden + 3 * hidden + attention + moe + 2 * hidden  # fc, three norms, one layer
    loaded = 403_397_928_944 - mtp
    planned = estimate_weights(spec, dtype="bfloat16").parameters
    # Each layer's one-output shared-expert gate (qwen3_next.py shared_expert_gate, 60 x 4096) included.
    assert loaded == planned
