"""The vision-encoder part of vLLM's profiling run (planner/memory/encoder.py), cause by cause (issue 12).

Every expectation cites the file of vLLM's source it was read in (``pip download vllm==X.Y.Z --no-deps``); the
worked example reproduces one catalog model's encoder peak from its vision_config by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.calibration.dataset import dataset_records
from planner.calibration.validate import resolve_record_model, serving_args
from planner.errors import InvalidArgumentError
from planner.findings import Code, Finding
from planner.gpus.catalog import lookup_gpu
from planner.memory.coefficients import GiB
from planner.memory.encoder import EncoderProfile, combined_peak, parse_limits
from planner.models.catalog import lookup_model
from planner.models.config import parse_config
from planner.plan.build import predict
from planner.plan.multimodal import multimodal_profile, vision_tower_disabled
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Release, resolve_release


def _release(version: str) -> Release:
    return resolve_release(version)[1]


def _profile(
    model_id: str,
    version: str = "0.23.0",
    gpu: str = "H100-80GB",
    *,
    mnbt: int = 8192,
    seqs: int = 256,
    length: int | None = None,
    runner_v2: bool = False,
    engine: str = "v1",
    **flags: Any,
) -> tuple[EncoderProfile | None, list[Finding]]:
    model = lookup_model(model_id)
    return multimodal_profile(
        model,
        lookup_gpu(gpu),
        ServingArgs(**flags),
        _release(version),
        max_num_batched_tokens=mnbt,
        max_num_seqs=seqs,
        max_model_len=length or model.derived_max_model_len,
        dtype_bytes=2,
        runner_v2=runner_v2,
        engine=engine,
    )


def test_release_fields_follow_the_source() -> None:
    # 0.7.3 v1/worker/gpu_model_runner.py profile_run: cdiv(encoder_budget, tokens) items, one per prompt by default;
    # 0.10.2 v1/worker/utils.py MultiModalBudget.get_max_items: budget // tokens, config/__init__.py 999 per prompt.
    assert _release("0.7.3").mm_items_rule == "cdiv_limit_1"
    assert _release("0.10.2").mm_items_rule == _release("0.33.0").mm_items_rule == "floor_limit_999"
    # 0.26.0 v1/worker/gpu/model_runner.py profile_run runs the text forward only; 0.27.1 calls
    # encoder_runner.profile_encoder_cache first.
    assert not _release("0.26.0").runner_v2_mm_profile
    assert _release("0.27.1").runner_v2_mm_profile and _release("0.33.0").runner_v2_mm_profile
    # The 0.10.2 and 0.11.2 wheels require xformers, 0.12.0's requirements do not.
    assert _release("0.11.0").vit_xformers and not _release("0.12.0").vit_xformers
    # pixtral.py: generate_block_attention_mask without xformers in 0.12-0.28, MMEncoderAttention from 0.29.
    assert not _release("0.11.0").pixtral_block_mask
    assert _release("0.12.0").pixtral_block_mask and _release("0.28.0").pixtral_block_mask
    assert not _release("0.29.0").pixtral_block_mask
    # 0.10.2 qwen2_5_vl.py builds no tower when every modality's limit is 0; 0.7.3 always builds it.
    assert not _release("0.7.0").vision_tower_skipped_at_zero_limit
    assert _release("0.10.2").vision_tower_skipped_at_zero_limit


def test_qwen3_dummy_image_is_the_largest_the_processor_allows() -> None:
    # qwen2_vl.py get_image_size_with_most_features: size.longest_edge 16777216 px in units of (16 x 2)^2 px =
    # 16384 tokens, a 128 x 128 grid of merged tokens = 65536 patches; the video (2 frames at 25165824 / 2 px,
    # qwen3_vl.py get_max_video_tokens) has 12288, so the image wins (encoder_budget.py get_modality_with_max_tokens).
    profile, _ = _profile("Qwen/Qwen3-VL-8B-Instruct", mnbt=8192)
    assert profile is not None
    assert (profile.modality, profile.tokens_per_item, profile.patches) == ("image", 16384, 65536)
    # compute_mm_encoder_budget: max(max_num_batched_tokens, tokens per item); one item fits.
    assert (profile.budget_tokens, profile.items) == (16384, 1)
    # --limit-mm-per-prompt image 0: the video is profiled instead.
    video, _ = _profile("Qwen/Qwen3-VL-8B-Instruct", mnbt=8192, limit_mm_per_prompt='{"image": 0}')
    assert video is not None and (video.modality, video.tokens_per_item) == ("video", 12288)
    # --mm-processor-kwargs max_pixels: qwen2_vl.py _get_vision_info reads it for images only; the video dummy
    # keeps the video processor's size (qwen3_vl.py get_max_video_tokens reads only a "size" override), so the
    # video becomes the largest item unless its limit is 0.
    kwargs = '{"max_pixels": 1048576}'
    small, _ = _profile("Qwen/Qwen3-VL-8B-Instruct", mnbt=8192, mm_processor_kwargs=kwargs)
    assert small is not None and (small.modality, small.tokens_per_item) == ("video", 12288)
    images, _ = _profile(
        "Qwen/Qwen3-VL-8B-Instruct", mnbt=8192, mm_processor_kwargs=kwargs, limit_mm_per_prompt='{"video": 0}'
    )
    assert images is not None and (images.tokens_per_item, images.items) == (1024, 8)


def test_qwen2_5_dummy_video_fills_max_model_len_up_to_14_frames() -> None:
    # qwen2_vl.py _get_max_video_frames(seq_len=max_model_len) and get_num_frames_with_most_features (at most 14
    # frames, _MAX_FRAMES_PER_VIDEO), each pair of frames 16384 tokens at the image size of most features.
    # The default 128000 context gives 7 x 16384 = 114688, the budget a public vLLM 0.23.0 log of
    # Qwen2.5-VL-7B-Instruct prints ("Encoder cache will be initialized with a budget of 114688 tokens, and
    # profiled with 1 video items of the maximum feature size").
    profile, _ = _profile("Qwen/Qwen2.5-VL-7B-Instruct", mnbt=2048, length=128000)
    assert profile is not None and (profile.modality, profile.budget_tokens, profile.items) == ("video", 114688, 1)
    assert profile.patches == 7 * 65536
    short, _ = _profile("Qwen/Qwen2.5-VL-7B-Instruct", mnbt=2048, length=32768)
    assert short is not None and short.tokens_per_item == 32768
    # A context shorter than one frame pair still profiles one pair; image and video tie (16384), the video wins
    # the tie on its name (0.23 get_modality_with_max_tokens: key (tokens, modality)).
    tiny, _ = _profile("Qwen/Qwen2.5-VL-7B-Instruct", mnbt=2048, length=4096)
    assert tiny is not None and tiny.tokens_per_item == 16384


def test_items_per_batch_follow_the_budget_and_the_per_prompt_limit() -> None:
    # Gemma-3: 256 tokens per image (mm_tokens_per_image; pan-and-scan off by default, gemma3_mm.py get_num_crops).
    # MultiModalBudget._get_max_items: min(budget // 256, max_num_seqs x min(limit, max_model_len // 256)).
    profile, _ = _profile("google/gemma-3-27b-it", mnbt=8192, seqs=1024, length=4096)
    assert profile is not None and (profile.tokens_per_item, profile.items, profile.patches) == (256, 32, 32 * 4096)
    capped, _ = _profile("google/gemma-3-27b-it", mnbt=8192, seqs=2, length=4096, limit_mm_per_prompt='{"image": 3}')
    assert capped is not None and capped.items == 6
    # 0.7.3: cdiv and one image per prompt by default.
    old, _ = _profile("google/gemma-3-27b-it", "0.8.5", mnbt=2000, seqs=1024, length=4096)
    assert old is not None and old.items == 8


def test_zero_limits_and_skip_mm_profiling_remove_the_encoder() -> None:
    model = lookup_model("Qwen/Qwen3.5-4B")
    off = ServingArgs(limit_mm_per_prompt='{"image": 0, "video": 0}')
    assert vision_tower_disabled(model, off)
    assert vision_tower_disabled(model, ServingArgs(language_model_only=True))
    assert not vision_tower_disabled(model, ServingArgs(limit_mm_per_prompt='{"image": 0}'))
    gpu = lookup_gpu("RTX-4090")
    full = predict(model, gpu, ServingArgs(max_model_len=4096), vllm_version="0.23.0")
    text = predict(model, gpu, off.model_copy(update={"max_model_len": 4096}), vllm_version="0.23.0")
    # Without the tower: no profile, and its weights are not loaded (0.23 qwen3_5.py _mark_tower_model).
    assert text.engine.encoder is None and full.engine.encoder is not None
    tower = full.engine.memory[0].weights_bytes - text.engine.memory[0].weights_bytes
    assert tower == 333_514_240 * 2
    skipped, findings = _profile("Qwen/Qwen3.5-4B", mnbt=2048, skip_mm_profiling=True)
    assert skipped is None and findings[0].code is Code.ENCODER_PROFILE and "skip-mm-profiling" in findings[0].message


def test_runner_v2_holds_only_the_outputs() -> None:
    # V1 gpu_model_runner.py profile_run keeps batched_dummy_mm_inputs through _dummy_run; the V2 runner's
    # encoder_runner.execute_mm_encoder drops them; 0.26's V2 runner profiles no encoder at all.
    v1, _ = _profile("Qwen/Qwen3-VL-8B-Instruct", "0.27.1", mnbt=8192)
    v2, _ = _profile("Qwen/Qwen3-VL-8B-Instruct", "0.27.1", mnbt=8192, runner_v2=True)
    assert v1 is not None and v2 is not None
    pixels = 65536 * 3 * 2 * 16 * 16 * 2
    assert v1.held_bytes - v2.held_bytes == pixels
    none, findings = _profile("Qwen/Qwen3-VL-8B-Instruct", "0.26.0", mnbt=8192, runner_v2=True)
    assert none is None and "text forward only" in findings[0].message
    # The encoder peak comes before the text forward; what is held adds to the text peaks.
    assert combined_peak(v1, 10, 20) == max(v1.encoder_peak_bytes, 20 + v1.held_bytes)


def test_pixtral_block_mask_is_the_patches_squared() -> None:
    # pixtral.py (0.12-0.28, no xformers): generate_block_attention_mask over every patch of the batch, in the
    # model dtype; 1540 px / 14 = 110 x 110 patches per image, 3025 tokens (55 x 55 merged, break tokens not
    # embedded), 2 images in a budget of 8192.
    masked, _ = _profile("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "0.23.0", mnbt=8192)
    varlen, _ = _profile("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "0.29.0", mnbt=8192)
    assert masked is not None and varlen is not None
    assert (masked.items, masked.patches, masked.tokens_per_item) == (2, 24200, 3025)
    assert masked.encoder_peak_bytes - varlen.encoder_peak_bytes == 24200 * 24200 * 2


def test_pre_ampere_vit_attention_backend() -> None:
    # 0.23 platforms/cuda.py get_vit_attn_backend: FLASH_ATTN needs compute capability 8.0, so a T4 gets
    # TORCH_SDPA (vit_attn_wrappers.torch_sdpa_wrapper: one image at a time, outputs concatenated); 0.10.2
    # falls back to xformers.
    t4, _ = _profile("Qwen/Qwen3-VL-2B-Instruct", gpu="T4", mnbt=2048)
    a10, _ = _profile("Qwen/Qwen3-VL-2B-Instruct", gpu="A10G", mnbt=2048)
    old, _ = _profile("Qwen/Qwen3-VL-2B-Instruct", "0.10.2", gpu="T4", mnbt=2048)
    assert t4 is not None and a10 is not None and old is not None
    assert (t4.attention, a10.attention, old.attention) == ("TORCH_SDPA", "FLASH_ATTN", "XFORMERS")
    # The concatenated attention output: one more hidden-width tensor per patch.
    assert t4.encoder_peak_bytes - a10.encoder_peak_bytes == 65536 * 1024 * 2


def test_worked_example_qwen3_5_4b_on_an_rtx_4090() -> None:
    """Qwen3.5-4B, vLLM 0.23.0 on an RTX 4090 (mnbt 2048, 256 sequences), by hand from its vision_config.

    The dummy image: 65536 patches (above). One Qwen3_VisionBlock (qwen3_vl.py) at its peak keeps, per patch, in
    units of the width 1024: the block input, norm1's output, the fused QKV (3), the contiguous q/k copy (2) and
    its rotation (2), FlashAttention's output (1) and the projection (1) = 11; the MLP phase keeps the input,
    the residual sum, norm2's output and fc1/GELU (2 x 4096 / 1024) = 11 as well. Held through every block: the
    interpolated position embeddings (1024) and the rotary cos/sin (head_dim 64). The input: 65536 patches of
    3 x 2 x 16 x 16 bf16 values, kept by the V1 runner until after the sampler. The output: 16384 tokens of 2560.
    """
    patches = 65536
    layer = 11 * 1024 + 1024 + 64
    pixels = patches * 1536 * 2
    peak = pixels + patches * layer * 2
    output = 16384 * 2560 * 2
    profile, _ = _profile("Qwen/Qwen3.5-4B", gpu="RTX-4090", mnbt=2048, seqs=256, length=4096)
    assert profile is not None
    assert profile.encoder_peak_bytes == peak  # 1.695 GiB
    assert profile.held_bytes == output + pixels  # 0.266 GiB
    # The text side (FlashInfer sampler on 256 rows of 248320 logits, 0.90 GiB) plus what is held stays below the
    # encoder's peak, so the profile's torch peak is the encoder's.
    record = next(r for r in dataset_records() if r.id == "w002")
    spec, online = resolve_record_model(record, lookup_model)
    prediction = predict(
        spec, lookup_gpu("RTX-4090"), serving_args(record, online_quantization=online), vllm_version="0.23.0"
    )
    assert prediction.engine.memory[0].activation_peak_bytes == peak
    assert abs(peak / GiB - 1.695) < 0.001


def test_w002_budget_error_is_within_the_issue_12_band() -> None:
    """w002 (Qwen3.5-4B, RTX 4090 D, vLLM 0.23.0): with the logged 8.61 GiB weights the planner left 0.56 GiB too
    little non-KV memory (+5.5%) before the encoder profile; with it the error is -2.2%."""
    record = next(r for r in dataset_records() if r.id == "w002")
    spec, online = resolve_record_model(record, lookup_model)
    args = serving_args(record, online_quantization=online)
    memory = predict(spec, lookup_gpu("RTX-4090"), args, vllm_version="0.23.0").engine.memory[0]
    assert record.weights_gib is not None and record.kv_cache_memory_gib is not None
    kv = (memory.kv_bytes + memory.weights_bytes) / GiB - record.weights_gib
    assert abs(kv / record.kv_cache_memory_gib - 1) < 0.03


def test_unmodelled_towers_are_said_and_covered_by_the_band() -> None:
    # Gemma-4's tower (gemma4_mm.py) and every V0 engine profile are not derived: KVP131, and the safety band's
    # low side grows by the estimated encoder peak.
    model = lookup_model("google/gemma-4-31B-it")
    prediction = predict(model, lookup_gpu("H100-80GB"), ServingArgs(max_model_len=8192), vllm_version="0.23.0")
    codes = [f.code for f in prediction.warnings]
    assert Code.ENCODER_NOT_MODELLED in codes
    assert prediction.engine.encoder_band_bytes > 0
    from planner.plan.build import plan_without_recommendation

    plan, _ = plan_without_recommendation(
        model, lookup_gpu("H100-80GB"), ServingArgs(max_model_len=8192), vllm_version="0.23.0"
    )
    assert plan.margin is not None
    terms = {t.name: t for t in plan.margin.terms}
    assert terms["vision_encoder"].low_bytes == prediction.engine.encoder_band_bytes
    v0, findings = _profile("Qwen/Qwen3-VL-2B-Instruct", "0.7.3", mnbt=2048, engine="v0")
    assert v0 is not None and not v0.modelled and Code.ENCODER_NOT_MODELLED in [f.code for f in findings]


def test_limits_parse_as_vllm_reads_them() -> None:
    assert parse_limits('{"image": 2, "video": 0}') == {"image": 2, "video": 0}
    assert parse_limits('{"image": {"count": 1, "width": 512}}') == {"image": 1}
    assert parse_limits("image=4,video=1") == {"image": 4, "video": 1}
    for bad in ('{"image": -1}', "image", "[1]"):
        with pytest.raises(InvalidArgumentError):
            parse_limits(bad)
    for kwargs in ('{"max_pixels": "lots"}', '{"max_pixels": -5}', "max_pixels=5", "[1]"):
        with pytest.raises(InvalidArgumentError):
            _profile("Qwen/Qwen3-VL-8B-Instruct", mm_processor_kwargs=kwargs)


def test_config_parsing_reads_the_encoder_facts() -> None:
    spec = parse_config(
        {
            "architectures": ["Qwen2VLForConditionalGeneration"],
            "model_type": "qwen2_vl",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 32768,
            # Qwen2-VL: hidden_size is the merger's output, the ViT width is embed_dim, the MLP embed_dim x mlp_ratio.
            "vision_config": {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "mlp_ratio": 4, "num_heads": 16},
        },
        model_id="test/qwen2-vl",
    )
    assert spec.vision is not None
    assert (spec.vision.encoder, spec.vision.hidden_size, spec.vision.intermediate_size) == ("qwen2_vl", 1280, 5120)
    assert (spec.vision.out_hidden_size, spec.vision.patch_size, spec.vision.spatial_merge_size) == (3584, 14, 2)
    llava = lookup_model("llava-hf/llava-v1.6-mistral-7b-hf")
    # vision_feature_layer -2: vLLM runs 23 of the 24 CLIP layers; the 672 x 672 pinpoint: 5 tiles, 2928 tokens.
    assert llava.vision is not None and (llava.vision.depth, llava.vision.max_tiles, llava.vision.tokens_per_image) == (
        23,
        5,
        2928,
    )


def test_qwen3_vl_deepstack_buffers_count_as_weights() -> None:
    # qwen3_vl.py Qwen3VLForConditionalGeneration.__init__: one (max_num_batched_tokens, text hidden) buffer per
    # deepstack level, allocated while the model loads, so "Model loading took" includes them.
    model = lookup_model("Qwen/Qwen3-VL-8B-Instruct")
    gpu = lookup_gpu("H100-80GB")
    small = predict(model, gpu, ServingArgs(max_num_batched_tokens=2048), vllm_version="0.23.0")
    large = predict(model, gpu, ServingArgs(max_num_batched_tokens=8192), vllm_version="0.23.0")
    assert large.engine.memory[0].weights_bytes - small.engine.memory[0].weights_bytes == 3 * 6144 * 4096 * 2
