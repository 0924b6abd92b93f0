"""Qwen3.5 / Qwen3.6: the vision tower's weights and profile, the MRoPE cache, the family's parameter counts
(issue 12).

Facts: ``config.json`` of Qwen/Qwen3.5-27B as copied in ai-dynamo/aiconfigurator@095f58a51
(aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3.5-27B_config.json), the keys the planner reads;
nvidia--Qwen3.6-27B-NVFP4_config.json in the same folder has the same text and vision facts. Expectations cite
the vLLM source they were read in (``pip download vllm==X.Y.Z --no-deps``).

Records: c027 / c028 (vLLM 0.19.0, TP=4 on RTX 3090s: "Model loading took 13.01 GiB", "Encoder cache will be
initialized with a budget of 16384 tokens, and profiled with 1 image items of the maximum feature size"), c030
(0.27.1, TP=2 on an A100: 25.69 GiB, the same encoder line) and c029 (0.27.1, Qwen3.6-27B-FP8 with
--language-model-only: no tower).
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.calibration.dataset import dataset_records
from planner.calibration.validate import resolve_record_model, serving_args
from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.models.spec import ModelSpec
from planner.models.vision import qwen_vision_tp_sharded
from planner.models.weights import estimate_weights
from planner.plan.build import predict
from planner.plan.engine import mrope_cache_factor
from planner.plan.multimodal import encoder_data_parallel
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release

QWEN35_27B: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "tie_word_embeddings": False,
    "text_config": {
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144,
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "num_attention_heads": 24,
        "num_hidden_layers": 64,
        "num_key_value_heads": 4,
        "vocab_size": 248320,
        # transformers 5 spelling: partial_rotary_factor only inside rope_parameters.
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
        },
    },
    "vision_config": {
        "deepstack_visual_indexes": [],
        "depth": 27,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "in_channels": 3,
        "intermediate_size": 4304,
        "model_type": "qwen3_5",
        "num_heads": 16,
        "num_position_embeddings": 2304,
        "out_hidden_size": 5120,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}

# The tower as vLLM builds it (qwen3_vl.py Qwen3_VisionTransformer), d = 1152, MLP i = 4304, merged 4 x 1152 = 4608:
# per block two LayerNorms (4d), fused QKV 3d x d + 3d, proj d x d + d, fc1 d x i + i, fc2 i x d + d;
# Conv3d patch embedding 3 x 2 x 16 x 16 x d + d; position table 2304 x d; merger norm 2d, fc1 4608^2 + 4608,
# fc2 4608 x 5120 + 5120.
D, MLP, MERGED = 1152, 4304, 4608
BLOCK = 4 * D + (3 * D * D + 3 * D) + (D * D + D) + (D * MLP + MLP) + (MLP * D + D)
TOWER = 27 * BLOCK + (3 * 2 * 16 * 16 * D + D) + 2304 * D + 2 * D + (MERGED * MERGED + MERGED) + (MERGED * 5120 + 5120)
# TP splits QKV (weight and bias), proj's weight, fc1 (weight and bias), fc2's weight and the merger's fc1 and fc2
# weight (ColumnParallelLinear / RowParallelLinear); RowParallelLinear biases, norms, patch and position tables stay
# whole on every rank.
SHARDED = 27 * ((3 * D * D + 3 * D) + D * D + (D * MLP + MLP) + MLP * D) + (MERGED * MERGED + MERGED) + MERGED * 5120


def _spec() -> ModelSpec:
    return parse_config(QWEN35_27B, model_id="Qwen/Qwen3.5-27B")


def test_catalog_entries_are_the_config_parse() -> None:
    parsed = _spec()
    for model_id in ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.6-27B"):
        entry = lookup_model(model_id)
        for field in ("architecture", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim"):
            assert getattr(entry, field) == getattr(parsed, field), (model_id, field)
        assert entry.layer_pattern == parsed.layer_pattern and entry.mamba == parsed.mamba
        assert entry.vision == parsed.vision
        assert entry.mtp_layers == parsed.mtp_layers == 1
        # rope_parameters' partial_rotary_factor 0.25 of 256 and its mrope_section.
        assert entry.rotary_dim == parsed.rotary_dim == 64
        assert entry.mrope and parsed.mrope
    assert parsed.vision is not None and parsed.vision.parameters == TOWER == 460_730_096


def test_text_tower_and_mtp_reproduce_the_hf_parameter_count() -> None:
    # The MTP layer vLLM does not load (qwen3_5_mtp.py): fc 2h -> h, pre_fc_norm_hidden / _embedding, one
    # full-attention decoder layer (q with its output gate 2 x 24 x 256, k and v 4 x 256, o 6144 -> h, q/k norms,
    # the dense MLP, two norms) and the final norm.
    h = 5120
    attention = h * 2 * 24 * 256 + 2 * h * 4 * 256 + 24 * 256 * h + 2 * 256
    mtp = 2 * h * h + 2 * h + attention + 3 * h * 17408 + 2 * h + h
    loaded = estimate_weights(_spec(), dtype="bfloat16").parameters
    # AlexsJones/llmfit@5bdc9df9 llmfit-core/data/hf_models.json: Qwen/Qwen3.5-27B and Qwen/Qwen3.6-27B,
    # 27,781,427,952 (the HF API's safetensors total), which c030's log prints as "Checkpoint size: 51.75 GiB".
    assert loaded + mtp == 27_781_427_952
    assert round(27_781_427_952 * 2 / 2**30, 2) == 51.75


def test_tower_weights_per_rank_follow_the_encoder_tp_mode() -> None:
    model = lookup_model("Qwen/Qwen3.5-27B")
    assert model.vision is not None and qwen_vision_tp_sharded(model.vision) == SHARDED
    text = model.model_copy(update={"vision": None})

    def tower(tp: int, data: bool = False) -> int:
        return (
            estimate_weights(model, dtype="bfloat16", tp=tp, vision_data_parallel=data).bytes_per_stage[0]
            - estimate_weights(text, dtype="bfloat16", tp=tp).bytes_per_stage[0]
        )

    assert tower(1) == TOWER * 2
    assert tower(4) == int((SHARDED / 4 + (TOWER - SHARDED)) * 2)
    assert tower(2) == int((SHARDED / 2 + (TOWER - SHARDED)) * 2)
    # --mm-encoder-tp-mode data: every linear built with disable_tp, the whole tower on each rank.
    assert tower(4, data=True) == TOWER * 2
    # 0.19 qwen3_vl.py / qwen3_5.py: Qwen3VLForConditionalGeneration.supports_encoder_tp_data (Qwen3.5 inherits
    # it); gemma3_mm.py does not set it, so config/model.py falls back to weights mode.
    release = resolve_release("0.19.0")[1]
    data = ServingArgs(mm_encoder_tp_mode="data", tensor_parallel_size=4)
    assert encoder_data_parallel(model, data, release)
    assert not encoder_data_parallel(lookup_model("google/gemma-3-27b-it"), data, release)
    assert not encoder_data_parallel(model, ServingArgs(tensor_parallel_size=4), release)
    # 0.10.2 lists qwen2_5_vl.py and mllama4.py only; qwen2_vl.py supports it from 0.11.
    qwen2 = lookup_model("Qwen/Qwen2.5-VL-7B-Instruct").model_copy(
        update={"vision": model.vision.model_copy(update={"encoder": "qwen2_vl"})}
    )
    assert not encoder_data_parallel(qwen2, data, resolve_release("0.10.2")[1])
    assert encoder_data_parallel(qwen2, data, resolve_release("0.11.0")[1])


@pytest.mark.parametrize(
    ("version", "model_id", "factor"),
    [
        # 0.6.4 / 0.7.1 rotary_embedding.py MRotaryEmbedding: the cache spans max_position_embeddings.
        ("0.7.1", "Qwen/Qwen2.5-VL-7B-Instruct", 1),
        # 0.7.2 - 0.31 (rotary_embedding/mrope.py): cache_max_position_num = max_position_embeddings * 4.
        ("0.7.2", "Qwen/Qwen2.5-VL-7B-Instruct", 4),
        ("0.19.0", "Qwen/Qwen3.5-27B", 4),
        ("0.27.1", "Qwen/Qwen3.6-27B", 4),
        ("0.31.0", "Qwen/Qwen3-VL-8B-Instruct", 4),
        # 0.32: qwen3_vl.py mrope_positions_factor is 1 without video pruning (qwen3_5.py, qwen3_vl_moe.py pass
        # it too); other MRoPE models keep positions_factor 4.
        ("0.32.0", "Qwen/Qwen3.5-27B", 1),
        ("0.33.0", "Qwen/Qwen3-VL-30B-A3B-Instruct", 1),
        ("0.33.0", "Qwen/Qwen2.5-VL-7B-Instruct", 4),
    ],
)
def test_mrope_cache_positions_per_release(version: str, model_id: str, factor: int) -> None:
    assert mrope_cache_factor(lookup_model(model_id), resolve_release(version)[1]) == factor


def test_mrope_cache_is_part_of_the_weights() -> None:
    # One cos/sin cache shared by every full-attention layer (get_rope's _ROPE_DICT), max_positions x rotary_dim in
    # bf16: 4 x 262144 x 64 x 2 = 128 MiB on each rank up to 0.31, 32 MiB without the enlargement; a model without
    # an mrope_section keeps max_position_embeddings.
    model = lookup_model("Qwen/Qwen3.5-27B")
    x4 = estimate_weights(model, dtype="bfloat16", tp=4, mrope_cache_factor=4).bytes_per_stage[0]
    x1 = estimate_weights(model, dtype="bfloat16", tp=4, mrope_cache_factor=1).bytes_per_stage[0]
    assert x4 - x1 == 3 * 262144 * 64 * 2
    plain = model.model_copy(update={"mrope": False})
    assert estimate_weights(plain, dtype="bfloat16", tp=4, mrope_cache_factor=4).bytes_per_stage[0] == x1
    gpu = lookup_gpu("RTX-3090")
    args = ServingArgs(tensor_parallel_size=4, max_model_len=32768, enforce_eager=True)
    old = predict(model, gpu, args, vllm_version="0.19.0").engine.memory[0].weights_bytes
    new = predict(model, gpu, args, vllm_version="0.32.0").engine.memory[0].weights_bytes
    assert old - new == 3 * 262144 * 64 * 2


def _planned(record_id: str) -> Any:
    record = next(r for r in dataset_records() if r.id == record_id)
    spec, online = resolve_record_model(record, lookup_model)
    assert record.gpu is not None
    args = serving_args(record, online_quantization=online)
    return predict(spec, lookup_gpu(record.gpu), args, vllm_version=record.vllm_version)


@pytest.mark.parametrize("record_id", ["c027", "c028", "c030"])
def test_records_profile_the_encoder_as_their_logs_print(record_id: str) -> None:
    # "Encoder cache will be initialized with a budget of 16384 tokens, and profiled with 1 image items of the
    # maximum feature size": one 4096 x 4096 image (size.longest_edge 16777216 px, 16384 merged tokens) is more than
    # max_num_batched_tokens (2048 on an RTX 3090 and on an A100), so the budget is the item.
    encoder = _planned(record_id).engine.encoder
    assert encoder is not None
    assert (encoder.modality, encoder.budget_tokens, encoder.items, encoder.patches) == ("image", 16384, 1, 65536)
    # Held through the text forward and the sampler (0.19 / 0.27 V1 gpu_model_runner.py profile_run): the encoder
    # cache's 16384 x 5120 outputs (the merger's RowParallelLinear all-reduces them whole on each rank) and the
    # batched bf16 pixel values (multimodal/processing/context.py casts them to the model dtype).
    assert encoder.held_bytes == 16384 * 5120 * 2 + 65536 * 3 * 2 * 16 * 16 * 2


def test_language_model_only_record_has_no_tower() -> None:
    # c029: 'language_model_only': True in the log's non-default args; 0.27 interfaces.py _mark_tower_model builds
    # the tower as StageMissingLayer, so neither its weights nor an encoder profile.
    plan = _planned("c029")
    assert plan.engine.encoder is None
    record = next(r for r in dataset_records() if r.id == "c029")
    assert record.language_model_only is True
    with_tower = record.model_copy(update={"language_model_only": None})
    spec, online = resolve_record_model(with_tower, lookup_model)
    assert record.gpu is not None
    args = serving_args(with_tower, online_quantization=online)
    full = predict(spec, lookup_gpu(record.gpu), args, vllm_version="0.27.1")
    assert full.engine.encoder is not None
    assert full.engine.memory[0].weights_bytes - plan.engine.memory[0].weights_bytes == TOWER * 2


@pytest.mark.parametrize(
    ("model_id", "hf_count"),
    [
        # AlexsJones/llmfit@5bdc9df9 llmfit-core/data/hf_models.json (the HF API's safetensors totals).
        ("Qwen/Qwen3.5-35B-A3B", 35_951_822_704),
        ("Qwen/Qwen3.6-35B-A3B", 35_951_822_704),
        ("Qwen/Qwen3.5-122B-A10B", 125_086_497_008),
        ("Qwen/Qwen3.5-397B-A17B", 403_397_928_944),
    ],
)
def test_moe_family_entries_reproduce_their_hf_counts(model_id: str, hf_count: int) -> None:
    # The loaded model (text, each MoE layer's one-output shared_expert_gate as qwen3_next.py builds it, the tower)
    # plus the MTP layer (qwen3_5_mtp.py: fc 2h -> h, three norms, one full-attention MoE decoder layer).
    model = lookup_model(model_id)
    assert model.moe is not None and model.mtp_layers == 1
    h, heads, kv = model.hidden_size, model.num_attention_heads, model.num_kv_heads
    attention = h * (heads * 256 * 2 + 2 * kv * 256) + heads * 256 * h + 2 * 256
    experts, width = model.moe.num_experts, model.moe.moe_intermediate_size
    shared = model.moe.shared_expert_intermediate_size or 0
    moe = experts * 3 * h * width + 3 * h * shared + h * experts + h
    mtp = 2 * h * h + 3 * h + attention + moe + 2 * h
    assert estimate_weights(model, dtype="bfloat16").parameters + mtp == hf_count


def test_qwen3_6_35b_is_the_qwen3_5_35b_architecture() -> None:
    # nvidia/Qwen3.6-35B-A3B-NVFP4's config (its quantization_config left out) parses to Qwen3.5-35B-A3B's facts.
    new, old = lookup_model("Qwen/Qwen3.6-35B-A3B"), lookup_model("Qwen/Qwen3.5-35B-A3B")
    skip = {"id", "source", "aliases", "notes", "popular_rank"}
    assert new.model_dump(exclude=skip) == old.model_dump(exclude=skip)
