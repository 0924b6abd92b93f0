"""Settings vLLM refuses before touching memory, with vLLM's own messages."""

from __future__ import annotations

from planner.errors import InvalidArgumentError
from planner.models.config import derived_max_model_len
from planner.models.memo import IdentityMemo
from planner.models.spec import ModelSpec
from planner.units import AUTO
from planner.vllm.args import QUANTIZATION_METHODS, ServingArgs
from planner.vllm.releases import Release, Version


def check_parallelism(model: ModelSpec, args: ServingArgs) -> None:
    """TP must divide the attention heads, and the KV heads (or be a multiple of them);
    PP cannot exceed the layers (``ModelConfig.verify_with_parallel_config``, model ``__init__``)."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if model.num_attention_heads % tp:
        raise InvalidArgumentError(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible by "
            f"tensor parallel size ({tp}).",
            flag="--tensor-parallel-size",
        )
    kv = model.num_kv_heads
    if model.mla is None and kv:
        if kv >= tp and kv % tp:
            raise InvalidArgumentError(
                f"Total number of KV heads ({kv}) must be divisible by tensor parallel size ({tp}).",
                flag="--tensor-parallel-size",
            )
        if kv < tp and tp % kv:
            raise InvalidArgumentError(
                f"Tensor parallel size ({tp}) must be a multiple of the number of KV heads ({kv}) "
                "when it exceeds them (KV heads are replicated).",
                flag="--tensor-parallel-size",
            )
    if pp > model.num_layers:
        raise InvalidArgumentError(
            f"pipeline parallel size ({pp}) is larger than the number of layers ({model.num_layers})",
            flag="--pipeline-parallel-size",
        )
    if args.decode_context_parallel_size > 1 and model.mla is None and kv and tp <= kv:
        raise InvalidArgumentError(
            "Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` "
            f"({tp}) to be greater than the model's total number of KV heads ({kv}).",
            flag="--decode-context-parallel-size",
        )


def check_values(args: ServingArgs) -> None:
    """Flag values vLLM's parser or CUDA backends refuse outright."""
    if args.quantization is not None and args.quantization not in QUANTIZATION_METHODS:
        raise InvalidArgumentError(
            f"argument --quantization/-q: invalid choice: {args.quantization!r} (e.g. fp8, awq, gptq, "
            "compressed-tensors, bitsandbytes, mxfp4, modelopt)",
            flag="--quantization",
        )
    if args.block_size is not None and args.block_size not in (1, 8) and args.block_size % 16:
        raise InvalidArgumentError(
            f"--block-size {args.block_size}: vLLM's CUDA attention backends need a multiple of 16 "
            "(16, 32, 64, 128 ...)",
            flag="--block-size",
        )


def derived_length(model: ModelSpec, version: Version) -> int:
    """The context vLLM derives from the config for this release (YaRN rules changed after 0.19)."""
    context = model.context
    if context is None:
        return model.derived_max_model_len
    rules = length_rules(version)
    return _DERIVED.get(model, rules, lambda: derived_max_model_len(context, model.model_type, rules=rules)[0])


def length_rules(version: Version) -> str:
    """The rule set of :func:`planner.models.config.derived_max_model_len` for this release."""
    return "newest" if version >= _YARN_NEWEST else "yarn-original"


_YARN_NEWEST = Version.parse("0.20.0")
# Per model and rule set: every plan asks it several times (report, band, auto-fit).
_DERIVED: IdentityMemo[int] = IdentityMemo()


def resolve_max_model_len(model: ModelSpec, args: ServingArgs, release: Release, version: Version) -> tuple[int, bool]:
    """(max_model_len to plan with, auto_fit requested). Refuses what vLLM refuses."""
    derived = derived_length(model, version)
    requested = args.max_model_len
    if requested is None:
        default = derived
        ctx = model.context
        if ctx is not None and ctx.rope_type == "longrope" and ctx.rope_original_max_position:
            default = ctx.rope_original_max_position  # vLLM: LongRoPE defaults to the original length
        return default, False
    if requested == AUTO:
        if not release.max_model_len_auto:
            raise InvalidArgumentError(
                f"--max-model-len auto/-1: vLLM {version} cannot auto-fit the context (that arrived in 0.14.0)",
                flag="--max-model-len",
            )
        return derived, True
    if requested < 1:
        raise InvalidArgumentError(f"--max-model-len must be positive, got {requested}", flag="--max-model-len")
    if requested > derived:
        model_max = model.context.model_max_length if model.context else None
        allowed = args.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").lower() in ("1", "true")
        if (model_max is None or requested > model_max) and not allowed:
            key = model.derived_max_model_len_key or "max_position_embeddings"
            raise InvalidArgumentError(
                f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
                f"({key}={derived} or model_max_length={model_max} in model's config.json). To allow "
                "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
                flag="--max-model-len",
            )
    return requested, False
