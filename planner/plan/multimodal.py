"""The serving flags and the release row that decide vLLM's vision-encoder profile run, turned into the
inputs of :mod:`planner.memory.encoder` (which holds the arithmetic, below the vLLM layer)."""

from __future__ import annotations

from planner.findings import Code, Finding
from planner.gpus.spec import GpuSpec
from planner.memory.encoder import (
    EncoderProfile,
    EncoderRun,
    encoder_profile,
    modalities,
    parse_limits,
    parse_processor_kwargs,
    vit_backend,
)
from planner.models.memo import IdentityMemo
from planner.models.spec import ModelSpec
from planner.units import DTYPE_BYTES
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Release, Version

_DEFAULT_LIMIT = {"cdiv_limit_1": 1, "floor_limit_999": 999}


def vision_tower_disabled(model: ModelSpec, args: ServingArgs) -> bool:
    """Every modality of the tower has limit 0 (or ``--language-model-only``): vLLM runs text only
    (``MultiModalRegistry.supports_multimodal_inputs`` is false, so ``profile_run`` skips the encoder)."""
    if model.vision is None:
        return False
    if args.language_model_only:
        return True
    limits = parse_limits(args.limit_mm_per_prompt)
    return all(limits.get(m, 1) == 0 for m in modalities(model.vision))


_TEXT_ONLY: IdentityMemo[ModelSpec] = IdentityMemo()


def text_only(model: ModelSpec, args: ServingArgs, release: Release) -> ModelSpec:
    """``model`` without its vision tower where vLLM does not build it (all limits 0, from 0.10.2:
    :attr:`Release.vision_tower_skipped_at_zero_limit`), so its weights are not loaded. An exact checkpoint size
    loses the tower's (estimated) bytes."""
    if not (release.vision_tower_skipped_at_zero_limit and vision_tower_disabled(model, args)):
        return model
    vision = model.vision
    assert vision is not None

    def strip() -> ModelSpec:
        checkpoint = model.checkpoint_bytes
        if checkpoint is not None:
            checkpoint = max(0, checkpoint - vision.parameters * DTYPE_BYTES[model.dtype])
        parameters = model.parameters - vision.parameters if model.parameters is not None else None
        return model.model_copy(update={"vision": None, "checkpoint_bytes": checkpoint, "parameters": parameters})

    return _TEXT_ONLY.get(model, None, strip)


# Towers whose vLLM model class sets supports_encoder_tp_data (0.10.2 qwen2_5_vl.py and mllama4.py; 0.11+ also
# qwen2_vl.py and qwen3_vl.py, which Qwen3.5 inherits). Others fall back to weights mode with a warning
# (config/model.py: "This model does not support `--mm-encoder-tp-mode data`").
_DATA_MODE_TOWERS = {"qwen2_5_vl", "qwen3_vl", "llama4"}
_DATA_MODE_TOWERS_0_11 = {*_DATA_MODE_TOWERS, "qwen2_vl"}


def encoder_data_parallel(model: ModelSpec, args: ServingArgs, release: Release) -> bool:
    """--mm-encoder-tp-mode data in force: every TP rank holds the whole tower and encodes its share of the
    items (the tower's linears are built with ``disable_tp``)."""
    if (args.mm_encoder_tp_mode or "weights") != "data" or model.vision is None:
        return False
    towers = _DATA_MODE_TOWERS_0_11 if Version.parse(release.since) >= Version.parse("0.11.0") else _DATA_MODE_TOWERS
    return model.vision.encoder in towers


def vit_attention(gpu: GpuSpec, args: ServingArgs, release: Release) -> str:
    """The vision encoder's attention backend on ``gpu`` (what the encoder's profile reads of the GPU)."""
    return vit_backend(gpu.compute_capability, args.mm_encoder_attn_backend, release.vit_xformers)


def encoder_run(
    model: ModelSpec, attention: str, args: ServingArgs, release: Release, *, runner_v2: bool, engine: str
) -> EncoderRun:
    """``attention``: :func:`vit_attention` on the GPU planned."""
    return EncoderRun(
        limits=parse_limits(args.limit_mm_per_prompt),
        processor_kwargs=parse_processor_kwargs(args.mm_processor_kwargs),
        default_limit=_DEFAULT_LIMIT[release.mm_items_rule],
        items_cdiv=release.mm_items_rule == "cdiv_limit_1",
        # (V1 up to 0.11.0 turns chunked prefill on whatever was asked: releases.v1_chunked_prefill_forced)
        chunked_prefill=args.enable_chunked_prefill is not False
        or (engine == "v1" and release.v1_chunked_prefill_forced),
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel=encoder_data_parallel(model, args, release),
        attention=attention,
        pixtral_block_mask=release.pixtral_block_mask,
        inputs_held=not runner_v2,
        engine=engine,
    )


def multimodal_profile(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    release: Release,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    dtype_bytes: int,
    runner_v2: bool,
    engine: str,
) -> tuple[EncoderProfile | None, list[Finding]]:
    """The encoder part of vLLM's profile run, or None (with why) where vLLM does not run it: a text model,
    every modality disabled, ``--skip-mm-profiling``, or 0.26's Model Runner V2."""
    return multimodal_profile_on(
        model,
        None if model.vision is None else vit_attention(gpu, args, release),
        args,
        release,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        dtype_bytes=dtype_bytes,
        runner_v2=runner_v2,
        engine=engine,
    )


def multimodal_profile_on(
    model: ModelSpec,
    attention: str | None,
    args: ServingArgs,
    release: Release,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    dtype_bytes: int,
    runner_v2: bool,
    engine: str,
) -> tuple[EncoderProfile | None, list[Finding]]:
    """:func:`multimodal_profile` with the GPU's encoder attention backend (:func:`vit_attention`; None only for
    a model without a vision tower)."""
    if model.vision is None or vision_tower_disabled(model, args):
        return None, []
    if args.skip_mm_profiling:
        return None, [
            Finding.of(
                Code.ENCODER_PROFILE,
                "--skip-mm-profiling: vLLM does not profile the vision encoder, so its first image batches need "
                "memory the KV budget did not reserve",
            )
        ]
    if runner_v2 and not release.runner_v2_mm_profile:
        return None, [
            Finding.of(
                Code.ENCODER_PROFILE,
                f"Model Runner V2 in vLLM {release.since} profiles the text forward only (no vision encoder run)",
            )
        ]
    assert attention is not None  # a vision model's
    return encoder_profile(
        model,
        encoder_run(model, attention, args, release, runner_v2=runner_v2, engine=engine),
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        dtype_bytes=dtype_bytes,
        text_hidden_size=model.hidden_size,
    )
