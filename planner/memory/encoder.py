"""The vision-encoder part of vLLM's profiling run, for multimodal models.

Before the text forward pass, ``profile_run`` (V1 runner ``v1/worker/gpu_model_runner.py``; Model Runner V2
``v1/worker/gpu/model_runner.py`` + ``gpu/mm/encoder_runner.py`` from 0.27) builds a dummy batch of the
modality with the most tokens per item and runs the vision tower on it (``embed_multimodal``), unless
``--skip-mm-profiling`` or every modality's ``--limit-mm-per-prompt`` is 0. The batch
(``MultiModalBudget``, ``multimodal/encoder_budget.py``):

* tokens per item: the processor's largest item (Qwen: the image of ``max_pixels`` pixels, or a video whose
  frames fill ``max_model_len``; Gemma-3: ``mm_tokens_per_image``; LLaVA-NeXT / Llama-4: the most tiles);
* encoder budget ``max(max_num_batched_tokens, tokens per item)`` (``compute_mm_encoder_budget``: the encoder
  cache and the encoder compute budget both default to ``max_num_batched_tokens``);
* items ``max(1, min(budget // tokens, max_num_seqs x min(limit, max_model_len // tokens)))`` (0.7.3: ``cdiv``
  and one item per prompt by default, ``Release.mm_items_rule``).

The outputs stay in the encoder cache through the text forward and the sampler warm-up; the V1 runner also
keeps the batched inputs (``batched_dummy_mm_inputs`` is a local of ``profile_run``), Model Runner V2 frees
them with ``execute_mm_encoder``. So the profile's torch peak is the larger of the tower's own peak and the
text peaks plus what is held (:func:`combined_peak`).

The tower's peak is the live set of one encoder layer run eagerly (the tower is not torch-compiled:
``compile_mm_encoder`` is off by default), counted from each family's forward in vLLM 0.23
(``model_executor/models/*``), in elements per patch: the layer input (held by the caller), the residual
stream and norm outputs, and the larger of the attention phase (fused QKV, the rotated q/k copies, the
attention output, the output projection) and the MLP phase (fc1 / gate_up, the activation). Element-wise
ops allocate only their output: vLLM's native ops are compiled (``CustomOp(compile_native=True)``) and
PyTorch's fused kernels (LayerNorm, GELU) write one tensor. Dims split by tensor parallelism (QKV, MLP
intermediate) divide by the encoder's TP size; the residual stream does not. Attention never materialises
scores on CUDA: FlashAttention varlen and xformers take the packed patches, the chunked SDPA fallback
(pre-Ampere GPUs from 0.12, ``vit_attn_wrappers.torch_sdpa_wrapper``) runs one image at a time on
PyTorch's memory-efficient kernel and adds one concatenated output. The exception is Pixtral 0.12-0.28,
which builds one additive mask over every patch of the batch (``Release.pixtral_block_mask``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import InvalidArgumentError
from planner.findings import Code, Finding
from planner.models.spec import ModelSpec, VisionSpec
from planner.units import GiB

# Qwen processors' size.longest_edge as the published checkpoints ship it (preprocessor_config.json of
# Qwen2-VL / Qwen2.5-VL: max_pixels 12845056; Qwen3-VL and Qwen3.5: size.longest_edge 16777216, video
# processor 25165824): config.json does not carry them, so a VisionSpec without max_pixels takes these.
_QWEN_MAX_PIXELS = {"qwen2_vl": 12_845_056, "qwen2_5_vl": 12_845_056, "qwen3_vl": 16_777_216}
_QWEN3_VIDEO_MAX_PIXELS = 25_165_824
# qwen2_vl.py _MAX_FRAMES_PER_VIDEO: the most frames of a Qwen2-VL / Qwen2.5-VL dummy video.
_QWEN2_MAX_FRAMES = 14


@dataclass(frozen=True)
class EncoderRun:
    """How vLLM runs the tower in its profile, from the serving flags and the release (built by
    :func:`planner.plan.multimodal.encoder_run`)."""

    limits: Mapping[str, int] = field(default_factory=dict)
    """--limit-mm-per-prompt counts; a modality not given gets ``default_limit``."""
    processor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    default_limit: int = 999
    items_cdiv: bool = False
    """0.7.3: cdiv(budget, tokens) items instead of budget // tokens (Release.mm_items_rule)."""
    chunked_prefill: bool = True
    tensor_parallel_size: int = 1
    data_parallel: bool = False
    """--mm-encoder-tp-mode data: every rank runs the whole tower on its share of the items."""
    attention: str = "FLASH_ATTN"
    """The ViT attention backend: FLASH_ATTN, XFORMERS or TORCH_SDPA (:func:`vit_backend`)."""
    pixtral_block_mask: bool = False
    inputs_held: bool = True
    """The V1 runner keeps the batched inputs through the text forward; Model Runner V2 does not."""
    engine: str = "v1"


@dataclass(frozen=True)
class EncoderProfile:
    """What the encoder part of vLLM's profile run allocates, on one GPU."""

    modality: str
    tokens_per_item: int
    items: int
    budget_tokens: int
    patches: int
    """Patches the tower runs over (all items on this rank)."""
    encoder_peak_bytes: int
    """Torch memory above the baseline while the tower runs: inputs, layer live set, mask."""
    held_bytes: int
    """Kept through the text forward and the sampler: encoder outputs (and the V1 runner's inputs)."""
    attention: str
    modelled: bool = True
    """False: a generic ViT estimate for an architecture whose profile is not derived (KVP131)."""
    notes: list[str] = field(default_factory=list)

    def finding(self) -> Finding:
        what = (
            f"vLLM profiles the vision encoder with {self.items} {self.modality} item(s) of {self.tokens_per_item:,} "
            f"tokens (encoder budget {self.budget_tokens:,}; {self.patches:,} patches, {self.attention} attention): "
            f"peak {self.encoder_peak_bytes / GiB:.2f} GiB, {self.held_bytes / GiB:.2f} GiB held through the text "
            "forward"
        )
        extra = "; ".join(self.notes)
        return Finding.of(Code.ENCODER_PROFILE, f"{what}{'; ' + extra if extra else ''}")


def combined_peak(encoder: EncoderProfile | None, forward_bytes: int, sampler_bytes: int) -> int:
    """The profile run's torch peak with the encoder part: the tower's own peak happens before the text forward;
    its outputs (and, in the V1 runner, its inputs) stay allocated through the forward and the sampler."""
    text = max(forward_bytes, sampler_bytes)
    if encoder is None:
        return text
    return max(encoder.encoder_peak_bytes, text + encoder.held_bytes)


def parse_limits(text: str | None) -> dict[str, int]:
    """``--limit-mm-per-prompt``: JSON (``{"image": 2, "video": 0}``, a value may be ``{"count": n, ...}``) or the
    pre-0.10 ``image=2,video=0`` form. Unknown modalities are kept; counts must be non-negative integers."""
    if not text:
        return {}
    raw: Any
    try:
        raw = json.loads(text)
    except ValueError:
        raw = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise InvalidArgumentError(
                    f"argument --limit-mm-per-prompt: {text!r} is neither JSON nor modality=count pairs",
                    flag="--limit-mm-per-prompt",
                ) from None
            raw[name.strip()] = value.strip()
    if not isinstance(raw, dict):
        raise InvalidArgumentError(
            "argument --limit-mm-per-prompt: expected a JSON object of modality -> count", flag="--limit-mm-per-prompt"
        )
    limits: dict[str, int] = {}
    for name, value in raw.items():
        count = value.get("count", 999) if isinstance(value, dict) else value
        try:
            number = int(str(count))
        except ValueError:
            number = -1
        if number < 0:
            raise InvalidArgumentError(
                f"argument --limit-mm-per-prompt: the limit of {name!r} must be a non-negative integer, got {count!r}",
                flag="--limit-mm-per-prompt",
            )
        limits[str(name)] = number
    return limits


def parse_processor_kwargs(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError:
        raise InvalidArgumentError(
            f"argument --mm-processor-kwargs: {text!r} is not JSON", flag="--mm-processor-kwargs"
        ) from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError(
            "argument --mm-processor-kwargs: expected a JSON object", flag="--mm-processor-kwargs"
        )
    return raw


def modalities(vision: VisionSpec) -> tuple[str, ...]:
    """The modalities that run through the tower (the Qwen processors also take videos)."""
    return ("image", "video") if vision.encoder in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") else ("image",)


def _closest_factor_pair(n: int) -> tuple[int, int]:
    for d in range(math.isqrt(n), 0, -1):
        if n % d == 0:
            return d, n // d
    return 1, n


def _qwen_grid_tokens(max_pixels: int, unit: int) -> int:
    """Merged tokens of ``get_image_size_with_most_features`` (qwen2_vl.py): the most units that factor into an
    aspect ratio of at most 200."""
    seq = max(1, max_pixels // (unit * unit))
    for n in range(seq, 0, -1):
        h, w = _closest_factor_pair(n)
        if w / h <= 200:
            return n
    return 1


@dataclass(frozen=True)
class _Item:
    """One dummy item: patches the tower runs, tokens it yields, input elements."""

    tokens: int
    patches: int
    input_elements: int


def _qwen_items(
    vision: VisionSpec, max_model_len: int, kwargs: Mapping[str, Any], notes: list[str]
) -> dict[str, _Item]:
    assert vision.encoder is not None and vision.patch_size is not None
    patch, merge, temporal = vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size
    unit = patch * merge
    size = kwargs.get("size")
    size_edge = _pixels(size.get("longest_edge")) if isinstance(size, dict) else None
    override = _pixels(kwargs.get("max_pixels")) or size_edge
    max_pixels = override or vision.max_pixels or _QWEN_MAX_PIXELS[vision.encoder]
    if override:
        notes.append(f"max_pixels {max_pixels:,} from --mm-processor-kwargs")
    per_slice = _qwen_grid_tokens(max_pixels, unit)
    per_patch_input = vision.in_channels * temporal * patch * patch
    image = _Item(
        tokens=per_slice, patches=per_slice * merge * merge, input_elements=per_slice * merge * merge * per_patch_input
    )
    if vision.encoder == "qwen3_vl":
        # Qwen3-VL dummy video: 2 frames at the video processor's size.longest_edge / temporal_patch_size; only a
        # "size" override reaches it (qwen3_vl.py get_max_video_tokens: mm_kwargs.get("size", video_processor.size)).
        video_pixels = (size_edge or vision.video_max_pixels or _QWEN3_VIDEO_MAX_PIXELS) // temporal
        slice_tokens = _qwen_grid_tokens(video_pixels, unit)
        video = _Item(slice_tokens, slice_tokens * merge * merge, slice_tokens * merge * merge * per_patch_input)
    else:
        # Qwen2-VL / Qwen2.5-VL: as many frames (at the image size) as max_model_len holds, at most 14; frames are
        # padded to a multiple of temporal_patch_size (_get_max_video_frames, get_num_frames_with_most_features).
        def tokens(frames: int) -> int:
            return max(1, (frames + frames % temporal) // temporal) * per_slice

        frames = 1
        while tokens(frames + 1) <= max_model_len:
            frames += 1
        frames = max(1, min(frames, _QWEN2_MAX_FRAMES))
        slices = tokens(frames) // per_slice
        video = _Item(tokens(frames), slices * image.patches, slices * image.input_elements)
    return {"image": image, "video": video}


def _pixels(value: Any) -> int | None:
    """A pixel count from --mm-processor-kwargs (vLLM passes it to the HF processor, which wants an integer)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidArgumentError(
            f"argument --mm-processor-kwargs: a pixel count must be a positive number, got {value!r}",
            flag="--mm-processor-kwargs",
        )
    return int(value)


def _fixed_items(vision: VisionSpec) -> dict[str, _Item] | None:
    """Fixed-resolution towers: SigLIP (one 896px image), CLIP tiles (LLaVA-NeXT), Pixtral (its largest image),
    Llama-4 tiles. ``tokens_per_image`` is vLLM's count of embeddings per image (get_num_image_tokens)."""
    if vision.image_size is None or vision.patch_size is None:
        return None
    side = vision.image_size // vision.patch_size
    pixels = vision.in_channels * vision.image_size * vision.image_size
    if vision.encoder == "siglip":
        tokens = vision.tokens_per_image or side * side
        return {"image": _Item(tokens, side * side, pixels)}
    if vision.encoder in ("clip_anyres", "llama4"):
        if vision.tokens_per_image is None or vision.max_tiles is None:
            return None
        per_tile = side * side + 1  # class token
        return {"image": _Item(vision.tokens_per_image, vision.max_tiles * per_tile, vision.max_tiles * pixels)}
    if vision.encoder == "pixtral":
        merged = side // vision.spatial_merge_size
        return {"image": _Item(merged * merged, side * side, pixels)}
    return None


def _layer_width(vision: VisionSpec, t: int, sdpa: bool) -> float:
    """Elements per patch alive at one encoder layer's peak (see the module docstring; vLLM 0.23 forwards)."""
    d = float(vision.hidden_size or 0)
    i = float(vision.intermediate_size or 4 * d)
    family = vision.encoder
    # torch_sdpa_wrapper runs packed (cu_seqlens) sequences one at a time and concatenates the outputs; batched
    # towers (SigLIP, CLIP) call SDPA once.
    concat = d / t if sdpa and family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llama4") else 0.0
    if family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llama4"):
        # x_in, norm1 out, proj out + qkv (3), rotated q/k copy and result (2 + 2), attention out (1)
        attention = 3 * d + 8 * d / t + concat
    elif family == "pixtral":
        # x_in, norm out, o_proj out + qkv (3), rotated q, k (2), SDPA out and its contiguous copy (2)
        attention = 3 * d + 7 * d / t
    else:  # siglip, clip: x_in, norm out, out_proj + qkv (3), attention out (1)
        attention = 3 * d + 4 * d / t + concat
    if family == "qwen2_5_vl":
        # Qwen2_5_VisionBlock: x_in, x_attn, the add-RMSNorm's two new outputs + gate_up (2I), act (I), down
        mlp = 5 * d + 3 * i / t
    elif family == "pixtral":
        # PixtralHFTransformerBlock: x_in, r, h, ffn_norm(h) + gate_up (2I), act (I), down
        mlp = 5 * d + 3 * i / t
    else:
        # x_in, x1, norm2 out + fc1 (I), act (I)
        mlp = 3 * d + 2 * i / t
    return max(attention, mlp)


def _baseline_width(vision: VisionSpec) -> float:
    """Elements per patch held through every layer besides the layer's own live set."""
    d = float(vision.hidden_size or 0)
    heads = vision.num_heads or 1
    rotary = d / heads if vision.encoder in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "pixtral", "llama4") else 0.0
    if vision.encoder == "qwen3_vl":
        return rotary + d  # interpolated position embeddings kept in encoder_metadata
    if vision.encoder == "pixtral":
        return rotary + 2 * d  # patch_embeds_list (conv outputs) and ln_pre's output stay referenced
    return rotary


def vit_backend(compute_capability: str | None, forced: str | None, xformers: bool) -> str:
    """The ViT attention backend (0.23 platforms/cuda.py get_vit_attn_backend: FlashAttention needs compute
    capability 8.0; below it xformers while vLLM requires it, else TORCH_SDPA); ``forced``:
    --mm-encoder-attn-backend."""
    if (forced or "").upper() in ("TORCH_SDPA", "SDPA"):
        return "TORCH_SDPA"
    major = (compute_capability or "8.0").split(".")[0]
    if major.isdigit() and int(major) >= 8:
        return "FLASH_ATTN"
    return "XFORMERS" if xformers else "TORCH_SDPA"


def encoder_profile(
    model: ModelSpec,
    run: EncoderRun,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    dtype_bytes: int,
    text_hidden_size: int,
) -> tuple[EncoderProfile | None, list[Finding]]:
    """The encoder part of the profile run for ``model`` (None when nothing runs through the tower), with the
    findings that say what was planned (KVP130) or that it is not derived for this model or engine (KVP131)."""
    vision = model.vision
    if vision is None:
        return None, []
    limits, kwargs, engine = run.limits, run.processor_kwargs, run.engine
    notes: list[str] = []
    modelled = vision.encoder is not None and engine == "v1"
    items_by_modality: dict[str, _Item] | None = None
    if vision.encoder is not None and not (vision.hidden_size and vision.patch_size and vision.num_heads):
        modelled = False  # a family whose width or patch the config does not give: the generic estimate below
    elif vision.encoder in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        items_by_modality = _qwen_items(vision, max_model_len, kwargs, notes)
    elif vision.encoder is not None:
        items_by_modality = _fixed_items(vision)
        if vision.encoder == "siglip" and kwargs.get("do_pan_and_scan"):
            modelled = False
            notes.append("do_pan_and_scan adds crops that are not modelled")
    if items_by_modality is None:
        items_by_modality = _generic_items(vision)
        modelled = False
        if items_by_modality is None:
            return None, [_not_modelled(model, engine, None)]
    default_limit = run.default_limit
    active = {m: item for m, item in items_by_modality.items() if limits.get(m, default_limit) > 0}
    if not active:
        return None, []
    modality, item = max(active.items(), key=lambda kv: (kv[1].tokens, kv[0]))
    tokens = item.tokens
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(1, min(limits.get(modality, default_limit), max_model_len // tokens if max_model_len else 1))
    reqs = max_num_seqs
    if not run.chunked_prefill:
        reqs = min(reqs, max_num_batched_tokens // tokens)
    by_budget = -(-budget // tokens) if run.items_cdiv else budget // tokens
    items = max(1, min(by_budget, reqs * per_prompt))
    tp = run.tensor_parallel_size
    t = 1 if run.data_parallel else tp
    rank_items = -(-items // tp) if run.data_parallel else items
    backend = run.attention
    sdpa = backend == "TORCH_SDPA"
    patches = rank_items * item.patches
    width = _layer_width(vision, t, sdpa) + _baseline_width(vision)
    inputs = rank_items * item.input_elements * dtype_bytes
    peak = inputs + patches * width * dtype_bytes
    attention = backend
    if vision.encoder == "pixtral" and run.pixtral_block_mask and backend != "XFORMERS":
        # generate_block_attention_mask: a (patches x patches) additive mask in the model dtype.
        peak += patches * patches * dtype_bytes
        attention = "TORCH_SDPA with a block mask"
    out_hidden = vision.out_hidden_size or text_hidden_size
    outputs = rank_items * tokens * out_hidden * (1 + vision.deepstack_layers) * dtype_bytes
    # Deepstack features (Qwen3-VL) are taken from early layers and held while the later ones run.
    peak += rank_items * tokens * out_hidden * vision.deepstack_layers * dtype_bytes
    held = outputs + (inputs if run.inputs_held else 0)
    profile = EncoderProfile(
        modality=modality,
        tokens_per_item=tokens,
        items=items,
        budget_tokens=budget,
        patches=patches,
        encoder_peak_bytes=int(peak),
        held_bytes=int(held),
        attention=attention,
        modelled=modelled,
        notes=notes,
    )
    findings = [profile.finding()]
    if not modelled:
        findings.append(_not_modelled(model, engine, profile))
    return profile, findings


def _generic_items(vision: VisionSpec) -> dict[str, _Item] | None:
    """A plain ViT estimate for towers whose profile is not derived: one image of ``image_size`` pixels (or of
    ``tokens_per_image`` tokens, each pooled from ``spatial_merge_size``^2 patches), one token per merged patch."""
    if not (vision.hidden_size and vision.patch_size):
        return None
    merge = vision.spatial_merge_size
    if vision.image_size:
        side = vision.image_size // vision.patch_size
        tokens = max(1, side // merge) ** 2
        patches = side * side
    elif vision.tokens_per_image:
        tokens = vision.tokens_per_image
        patches = tokens * merge * merge
    else:
        return None
    return {"image": _Item(tokens, patches, patches * vision.in_channels * vision.patch_size**2)}


def _not_modelled(model: ModelSpec, engine: str, estimate: EncoderProfile | None) -> Finding:
    if engine != "v1":
        why = "vLLM's V0 engine profiles images inside its dummy sequences, which kv-planner does not derive"
    else:
        family = model.vision.encoder if model.vision is not None else None
        why = (
            f"the {model.architecture} vision tower's profile is not derived by kv-planner"
            if family is None
            else f"the {family} tower's profile with these processor settings is not derived by kv-planner"
        )
    size = (
        f"; planned with an estimate (a {estimate.encoder_peak_bytes / GiB:.2f} GiB peak) and the safety band "
        "widened by it"
        if estimate is not None
        else "; the activation peak may be too small"
    )
    return Finding.of(Code.ENCODER_NOT_MODELLED, f"{why}{size}")


def deepstack_buffer_bytes(model: ModelSpec, max_num_batched_tokens: int, dtype_bytes: int, text_hidden: int) -> int:
    """Qwen3-VL with deepstack keeps one ``(max_num_batched_tokens, text hidden)`` buffer per deepstack level from
    model init (qwen3_vl.py ``deepstack_input_embeds``), so vLLM counts them in "Model loading took"."""
    vision = model.vision
    if vision is None or vision.encoder != "qwen3_vl" or not vision.deepstack_layers:
        return 0
    return vision.deepstack_layers * max_num_batched_tokens * text_hidden * dtype_bytes
