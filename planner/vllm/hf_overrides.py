"""``--hf-overrides``: the model config vLLM plans with, after it applied the overrides, release by release.

vLLM reads ``--hf-overrides '{json}'`` (argparse type ``json.loads``) or the dotted ``--hf-overrides.key value``
(merged into one object by ``FlexibleArgumentParser`` and appended after every other word, so it replaces a
JSON object given anywhere) and changes the Hugging Face config object with it before it derives the context
length or sizes anything. How depends on the release (read in each release's source; ``--rope-scaling`` and
``--rope-theta``, removed in 0.11.1, are folded into the same object, after it):

================  ==========================================================================================
up to 0.9.x       0.8.5 ``config.py: ModelConfig.__init__``: ``hf_config.update(overrides)`` after ``get_config``
                  returned, i.e. after ``patch_rope_scaling``: a ``rope_scaling`` object is read as written (it
                  must say ``rope_type``). Older releases are assumed to do the same.
0.10.0 - 0.11.0   ``transformers_utils/config.py: get_config`` (0.10.1.1, 0.10.2, 0.11.0; vLLM #20857):
                  ``config.update(overrides)`` then ``patch_rope_scaling``. Every key replaces the attribute,
                  objects included: a ``text_config`` object replaces the whole section.
0.11.1 and later  ``config/model.py: ModelConfig.__post_init__`` (0.11.1, 0.12.0, 0.19.0, 0.20.2, 0.33.0): values
                  that are not objects go through ``config.update`` in ``get_config`` as before; objects are
                  applied after it by ``_apply_dict_overrides``: merged key by key into a sub-config
                  (``_update_nested``: objects merge into objects, anything else is replaced), set whole on
                  any other attribute (``rope_scaling``). That is after vLLM's rope patching, so such an object
                  is read as written.
================  ==========================================================================================

Which rope attribute sizes the context (``_get_and_verify_max_len``): ``rope_scaling`` up to 0.11.x,
``rope_parameters`` from 0.12.0. Under transformers 4 (0.12-0.19 require it) vLLM's ``patch_rope_parameters``
makes ``rope_parameters`` the *same* dict as the published ``rope_scaling``: a top-level ``rope_scaling``
object then replaces an attribute vLLM no longer reads and changes nothing, while ``rope_parameters``, or
``rope_scaling`` merged inside a ``text_config`` (into the shared dict), does. Under transformers 5 (required
from 0.24.0; 0.20-0.23 accept 4.56+ and 5.x, so both are planned and must agree) ``rope_scaling`` is a
property over ``rope_parameters``. This module replays those steps on the config as plain data
(:class:`_Obj` stands for a transformers config object) and hands the result to the same parser as a
published config.json (:func:`planner.models.config.parse_config`), so the plausibility bounds apply to it.

What is *not* replayed, and so not planned (the override stays "not checked", with the reason):

* values the transformers config class derived in its constructor, before the override: LlamaConfig's
  ``head_dim`` from ``hidden_size``, ``num_key_value_heads`` from ``num_attention_heads``, Qwen2's
  ``layer_types`` from ``sliding_window`` / ``use_sliding_window`` / ``max_window_layers``. Those keys are
  planned only where the config states the derived value itself (a ``head_dim``, a KV head count), and the
  per-layer attention keys never;
* ``attribute_map`` spellings (GPT-2's ``n_positions`` for ``max_position_embeddings``): an override spelled
  differently from the config's own key is not planned;
* keys kv-planner does not read (``architectures``, ``model_type``, ``quantization_config``, ``dtype``, vision
  tower sizes, ...), except those that change no memory vLLM sizes (token ids, norms, dropout, logit scaling,
  routing weights, pooling labels), which are applied by vLLM and listed as ignored;
* a callable ``hf_overrides`` (Python API only: the command line gives JSON).

A shape change (layers, heads, widths) makes the checkpoint's tensors the wrong size for the model vLLM
builds: vLLM loads it only when they match (or with ``--load-format dummy``), and the weights are then
estimated from the overridden architecture.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from planner.errors import HfOverridesError, InvalidModelConfigError
from planner.models.bounds import check_config_bounds
from planner.models.config import (
    FIELD_ALIASES,
    MAX_LEN_KEYS,
    TEXT_SECTIONS,
    context_of,
    derived_max_model_len,
    parse_config,
    text_section,
)
from planner.models.spec import ModelSpec
from planner.vllm.checks import length_rules
from planner.vllm.releases import RELEASES, Version

__all__ = [
    "MAX_OVERRIDE_CHARS",
    "MAX_OVERRIDE_DEPTH",
    "MAX_OVERRIDE_KEYS",
    "Overridden",
    "Rules",
    "apply_hf_overrides",
    "parse_hf_overrides",
    "rules_for",
    "with_rope_flags",
]

# Bounds on what kv-planner applies (docs/security.md). Real overrides are a few keys deep and short: Qwen's
# YaRN object is ~90 characters, the longest recipe seen (a Qwen3.5 text_config.rope_parameters) ~250.
MAX_OVERRIDE_CHARS = 16_384
MAX_OVERRIDE_DEPTH = 6
MAX_OVERRIDE_KEYS = 256
MAX_KEY_CHARS = 128

_SHOWN = 40  # characters of a value shown in a message


class _VllmFails(Exception):
    """vLLM itself would fail on the overridden config (KeyError / ValueError at startup)."""


@dataclass(frozen=True)
class Rules:
    """How one range of vLLM releases applies ``hf_overrides`` (see the module docstring)."""

    label: str
    split: bool  # objects applied after get_config, merged into sub-configs (0.11.1+)
    patched: bool  # values applied before vLLM's rope patching (0.10.0+)
    reads: Literal["rope_scaling", "rope_parameters"]  # the attribute the context is derived from
    transformers: int  # the transformers major release the range runs on
    yarn_original: bool  # YaRN's context is original_max_position_embeddings x factor (kv-planner's rules)


def _rules(label: str, since: str, *, split: bool, patched: bool, transformers: int) -> Rules:
    version = Version.parse(since)
    reads: Literal["rope_scaling", "rope_parameters"] = (
        "rope_parameters" if version >= Version.parse("0.12.0") else "rope_scaling"
    )
    return Rules(
        label=label,
        split=split,
        patched=patched,
        reads=reads,
        transformers=transformers,
        yarn_original=length_rules(version) == "yarn-original",
    )


# (first release, the rule sets in force from it)
_ERAS: tuple[tuple[Version, tuple[Rules, ...]], ...] = (
    (Version.parse("0.0.0"), (_rules("<= 0.9", "0.8.5", split=False, patched=False, transformers=4),)),
    (Version.parse("0.10.0"), (_rules("0.10.0-0.11.0", "0.10.0", split=False, patched=True, transformers=4),)),
    (Version.parse("0.11.1"), (_rules("0.11.1-0.11.x", "0.11.1", split=True, patched=True, transformers=4),)),
    (Version.parse("0.12.0"), (_rules("0.12.0-0.19.x", "0.12.0", split=True, patched=True, transformers=4),)),
    (
        Version.parse("0.20.0"),
        (
            _rules("0.20-0.23 on transformers 4", "0.20.0", split=True, patched=True, transformers=4),
            _rules("0.20-0.23 on transformers 5", "0.20.0", split=True, patched=True, transformers=5),
        ),
    ),
    (Version.parse("0.24.0"), (_rules(">= 0.24.0", "0.24.0", split=True, patched=True, transformers=5),)),
)


def rules_for(version: str | None) -> tuple[Rules, ...]:
    """The rule sets of ``version``; for an unknown release, those of every release kv-planner plans."""
    versions = [Version.parse(row.since) for row in RELEASES] if version is None else [Version.parse(version)]
    found: list[Rules] = []
    for release in versions:
        rules: tuple[Rules, ...] = ()
        for start, candidates in _ERAS:
            if start <= release:
                rules = candidates
        found += [r for r in rules if r not in found]
    return tuple(found)


# --- reading the flag -----------------------------------------------------------------------------------


def parse_hf_overrides(raw: Any) -> dict[str, Any]:
    """The overrides of ``--hf-overrides`` as vLLM reads them: JSON text (``json.loads``) or the object the
    dotted form built; {} for none. Raises :class:`HfOverridesError` for text vLLM's parser refuses, a JSON
    value that is not an object (vLLM fails on it) and overrides past kv-planner's bounds."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        data: Any = raw
    else:
        text = str(raw)
        if not text.strip():
            return {}
        if len(text) > MAX_OVERRIDE_CHARS:
            raise HfOverridesError(
                f"--hf-overrides has {len(text):,} characters, more than kv-planner applies ({MAX_OVERRIDE_CHARS:,})"
            )
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise HfOverridesError(
                f"--hf-overrides {_shown(text)} is not JSON: vLLM's argument parser refuses it"
            ) from None
    if not isinstance(data, dict):
        raise HfOverridesError(
            f"--hf-overrides is a JSON {_json_kind(data)}, not an object: vLLM cannot apply it (it fails to start)"
        )
    _check_shape(data)
    return data


def with_rope_flags(overrides: Mapping[str, Any], rope_scaling: Any, rope_theta: Any) -> dict[str, Any]:
    """``--rope-scaling`` / ``--rope-theta`` (up to 0.11.0) as vLLM folds them in: ``hf_overrides_kw.update(
    {"rope_scaling": ...})`` after the overrides, when the flag is set (``config/model.py``, 0.8.5 ``config.py``)."""
    result = dict(overrides)
    if rope_scaling is not None:
        scaling = parse_hf_overrides(rope_scaling) if not isinstance(rope_scaling, Mapping) else dict(rope_scaling)
        if scaling:
            result["rope_scaling"] = scaling
    if rope_theta is not None:
        try:
            result["rope_theta"] = float(rope_theta)
        except (TypeError, ValueError):
            raise HfOverridesError(f"--rope-theta {_shown(rope_theta)} is not a number") from None
    _check_shape(result)
    return result


def _check_shape(data: Mapping[str, Any]) -> None:
    """Depth, key count, key length and the characters of its text (the dotted form builds the object from
    many arguments, each up to the manifest's value cap), walked without recursion."""
    keys = 0
    chars = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            chars += len(node)
            if chars > MAX_OVERRIDE_CHARS:
                raise HfOverridesError(
                    f"--hf-overrides has more than {MAX_OVERRIDE_CHARS:,} characters of text, more than kv-planner "
                    "applies"
                )
        elif isinstance(node, Mapping):
            if depth > MAX_OVERRIDE_DEPTH:
                raise HfOverridesError(
                    f"--hf-overrides nests objects deeper than kv-planner applies ({MAX_OVERRIDE_DEPTH} levels)"
                )
            keys += len(node)
            if keys > MAX_OVERRIDE_KEYS:
                raise HfOverridesError(f"--hf-overrides has more keys than kv-planner applies ({MAX_OVERRIDE_KEYS})")
            for key, value in node.items():
                if not isinstance(key, str) or len(key) > MAX_KEY_CHARS:
                    raise HfOverridesError(f"--hf-overrides key {_shown(key)} is not a config field name")
                chars += len(key)
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_OVERRIDE_DEPTH:
                raise HfOverridesError(
                    f"--hf-overrides nests lists deeper than kv-planner applies ({MAX_OVERRIDE_DEPTH} levels)"
                )
            keys += len(node)
            if keys > MAX_OVERRIDE_KEYS:
                raise HfOverridesError(f"--hf-overrides has more values than kv-planner applies ({MAX_OVERRIDE_KEYS})")
            stack.extend((item, depth + 1) for item in node)


# --- what each key means for the plan ---------------------------------------------------------------------

# Keys vLLM reads that change no memory it sizes: ids, norms, dropout, logit and residual scaling, RoPE's
# base frequency, MoE routing weights, the labels of a pooling head. Applied by vLLM, ignored by the plan.
_INERT = frozenset(
    [
        "rope_theta",
        "rms_norm_eps",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "norm_eps",
        "initializer_range",
        "use_cache",
        "hidden_act",
        "hidden_activation",
        "attention_dropout",
        "hidden_dropout",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "query_pre_attn_scalar",
        "logits_scaling",
        "logit_scale",
        "embedding_multiplier",
        "residual_multiplier",
        "attention_multiplier",
        "norm_topk_prob",
        "router_aux_loss_coef",
        "output_router_logits",
        "routed_scaling_factor",
        "scoring_func",
        "topk_method",
        "n_group",
        "topk_group",
        "aux_loss_alpha",
        "num_labels",
        "id2label",
        "label2id",
        "problem_type",
        "classifier_from_token",
        "is_original_qwen3_reranker",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "transformers_version",
        "_name_or_path",
        "tokenizer_class",
    ]
)
_INERT_SUFFIXES = ("_token_id", "_token_ids", "_token_index", "_eps", "_epsilon", "_dropout", "_pdrop", "dropout_prob")
# Inside a rope object: what only shapes the rotation (the context comes from rope_type, factor and
# original_max_position_embeddings, which the parser reads).
_ROPE_INERT = frozenset(
    [
        "rope_theta",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "low_freq_factor",
        "high_freq_factor",
        "mscale",
        "mscale_all_dim",
        "long_factor",
        "short_factor",
        "truncate",
        "extrapolation_factor",
        "finetuned",
    ]
)
_ROPE_CONTEXT = frozenset(("rope_type", "type", "factor", "original_max_position_embeddings"))
_ROPE_KEYS = ("rope_scaling", "rope_parameters")
# Context keys: what vLLM derives max_model_len from (plus the RoPE objects, handled apart).
_CONTEXT = frozenset((*MAX_LEN_KEYS, "original_max_position_embeddings"))
# Shape keys the parser reads; the weights are then estimated from the overridden architecture.
_SHAPE_SINGLE = frozenset(
    [
        "head_dim",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "tie_word_embeddings",
        "num_nextn_predict_layers",
        "first_k_dense_replace",
    ]
)
_GROUP_OF: dict[str, str] = {key: group for group, keys in FIELD_ALIASES.items() for key in keys}
# attribute_map spellings of one field (transformers 4.57 / 5.16: GPT-2, GPT-J, CodeGen, ... map
# max_position_embeddings to n_positions); the alias groups of the parser are the others.
_SPELLINGS: dict[str, tuple[str, ...]] = {
    **{key: FIELD_ALIASES[group] for key, group in _GROUP_OF.items()},
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
    "n_positions": ("max_position_embeddings", "n_positions"),
}
_HEAD_SIZE_KEYS = ("head_dim", "hidden_size_per_head", "kv_channels", "attention_head_dim", "kv_lora_rank")
# Per-layer lists and patterns: a changed layer count would have to match them (the config class built its
# derived per-layer lists for the published count).
_PER_LAYER_KEYS = (
    "layer_types",
    "layers_block_type",
    "attn_type_list",
    "moe_layer_freq",
    "hybrid_override_pattern",
    "no_rope_layers",
    "mlp_only_layers",
    "compress_ratios",
    "compress_rates",
    "linear_attn_config",
    "block_configs",
)
# transformers sub-configs (PretrainedConfig objects, which 0.11.1+ merges into) besides the text sections.
_OTHER_SECTIONS = frozenset(("vision_config", "audio_config", "speech_config", "thinker_config", "talker_config"))


def _inert(key: str) -> bool:
    return key in _INERT or key.endswith(_INERT_SUFFIXES)


def _shape_key(key: str) -> bool:
    return key in _SHAPE_SINGLE or key in _GROUP_OF


@dataclass
class _Report:
    planned: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    shape: bool = False
    rope: list[str] = field(default_factory=list)  # paths of rope overrides (reported once their effect is known)
    unapplied: list[str] = field(default_factory=list)  # rope overrides this release does not apply


@dataclass(frozen=True)
class Overridden:
    """The model with ``--hf-overrides`` applied, and what was planned, ignored and noted."""

    spec: ModelSpec
    planned: tuple[str, ...] = ()  # "max_position_embeddings=4096"
    ignored: tuple[str, ...] = ()  # "eos_token_id (changes no memory)"
    notes: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # the release ranges whose rules were applied
    # RoPE overrides vLLM takes but does not apply to the attribute it derives the context from (a surprise
    # worth a warning: the context the user asked for is not the one vLLM serves)
    unapplied: tuple[str, ...] = ()

    def summary(self) -> str:
        parts = []
        if self.planned:
            parts.append("planned with " + ", ".join(self.planned))
        else:
            parts.append("nothing planned differs from the published config")
        if self.unapplied:
            parts.append("not applied by vLLM: " + ", ".join(self.unapplied))
        if self.ignored:
            parts.append("ignored: " + ", ".join(self.ignored))
        parts += list(self.notes)
        return "; ".join(parts)


def apply_hf_overrides(
    spec: ModelSpec, config: Mapping[str, Any] | None, overrides: Mapping[str, Any], *, version: str | None
) -> Overridden:
    """``spec`` with ``overrides`` applied the way ``version`` applies them (None: every release kv-planner plans,
    which must agree). ``config`` is the published config.json (None for a catalog entry: then only the
    context keys can be planned, from the entry's context facts).

    Raises :class:`HfOverridesError` naming the key and the reason when kv-planner cannot plan them as vLLM
    applies them, or vLLM would fail on them.
    """
    if not overrides:
        return Overridden(spec=spec)
    outcomes: list[tuple[Rules, Overridden | HfOverridesError]] = []
    for rules in rules_for(version):
        try:
            outcomes.append((rules, _apply(spec, config, overrides, rules)))
        except HfOverridesError as error:
            outcomes.append((rules, error))
    failures = [result for _, result in outcomes if isinstance(result, HfOverridesError)]
    if len(failures) == len(outcomes):
        raise failures[0]
    first_rules, first = outcomes[0]
    differ = [(rules, result) for rules, result in outcomes[1:] if not _same(first, result)]
    if not differ and isinstance(first, Overridden):
        return Overridden(
            spec=first.spec,
            planned=first.planned,
            ignored=first.ignored,
            notes=first.notes,
            rules=tuple(rules.label for rules, _ in outcomes),
            unapplied=first.unapplied,
        )
    rules, other = differ[0]
    raise HfOverridesError(
        f"--hf-overrides changes the model differently across vLLM releases (vLLM {first_rules.label}: "
        f"{_brief(first, first_rules)}; vLLM {rules.label}: {_brief(other, rules)}): name the release to plan it"
    )


def _same(a: Overridden | HfOverridesError, b: Overridden | HfOverridesError) -> bool:
    if isinstance(a, Overridden) and isinstance(b, Overridden):
        return a.spec == b.spec
    return False


def _brief(result: Overridden | HfOverridesError, rules: Rules) -> str:
    if isinstance(result, HfOverridesError):
        return result.message.removeprefix("--hf-overrides").lstrip(": ")
    spec = result.spec
    context = spec.derived_max_model_len
    if spec.context is not None:
        context = derived_max_model_len(spec.context, spec.model_type, rules=_length_rules(rules))[0]
    return f"context {context}" + ("; its RoPE override not applied" if result.unapplied else "")


def _length_rules(rules: Rules) -> str:
    return "yarn-original" if rules.yarn_original else "newest"


# --- one release range --------------------------------------------------------------------------------------


def _apply(spec: ModelSpec, config: Mapping[str, Any] | None, overrides: Mapping[str, Any], rules: Rules) -> Overridden:
    catalog = config is None
    published = _catalog_config(spec) if config is None else config
    section = text_section(published)
    text: Mapping[str, Any] = published[section] if section is not None else published
    report = _Report()
    _check_bounds(overrides)
    if catalog and spec.vision is not None and any(not _inert(key) for key in overrides):
        raise HfOverridesError(
            f"--hf-overrides: kv-planner has the catalog facts of {spec.id}, not its config.json, and cannot tell "
            "which section of this multimodal config the overrides change"
        )
    for key, value in overrides.items():
        _classify_top(key, value, overrides, published, section, text, spec, rules, catalog, report)
    try:
        view, effective, baseline = _replay(published, section, overrides, rules)
    except _VllmFails as error:
        raise HfOverridesError(f"--hf-overrides: vLLM {rules.label} would fail to start: {error}") from None
    _rope_outcome(report, effective, baseline, rules)
    try:
        result = _spec_of(spec, view, report, catalog)
    except InvalidModelConfigError as error:
        raise HfOverridesError(f"--hf-overrides makes a config kv-planner cannot plan: {error.message}") from None
    return Overridden(
        spec=result,
        planned=tuple(report.planned),
        ignored=tuple(report.ignored),
        notes=tuple(report.notes),
        unapplied=tuple(report.unapplied),
    )


def _check_bounds(overrides: Mapping[str, Any]) -> None:
    try:
        check_config_bounds(overrides, model_id="", document="--hf-overrides")
    except InvalidModelConfigError as error:
        raise HfOverridesError(error.message) from None


def _classify_top(
    key: str,
    value: Any,
    overrides: Mapping[str, Any],
    published: Mapping[str, Any],
    section: str | None,
    text: Mapping[str, Any],
    spec: ModelSpec,
    rules: Rules,
    catalog: bool,
    report: _Report,
) -> None:
    """Where vLLM puts a top-level override, and whether kv-planner can plan it there."""
    is_object = isinstance(value, Mapping)
    if key in TEXT_SECTIONS or key in _OTHER_SECTIONS:
        if not isinstance(published.get(key), Mapping):
            raise HfOverridesError(
                f"--hf-overrides sets {key}, a section this model's config does not have: vLLM would read the "
                "override's object as that section"
            )
        if not is_object or not rules.split:
            raise HfOverridesError(
                f"--hf-overrides replaces the whole {key} section (vLLM {rules.label} sets the attribute with "
                "config.update)"
            )
        for inner, inner_value in value.items():
            path = f"{key}.{inner}"
            if key == section:
                _classify(path, inner, inner_value, text, value, spec, rules, catalog, report)
            elif _inert(inner):
                report.ignored.append(f"{path} (changes no memory)")
            else:
                raise HfOverridesError(
                    f"--hf-overrides {path}: kv-planner does not re-plan the {key} section (its sizes are "
                    "the encoder's)"
                )
        return
    if section is not None and not _inert(key) and (key in _CONTEXT or key in _ROPE_KEYS or _shape_key(key)):
        raise HfOverridesError(
            f"--hf-overrides {key} is set on the top-level config, but vLLM reads it from {section} for this "
            f'model: write {{"{section}": {{"{key}": ...}}}}'
        )
    _classify(key, key, value, text, overrides, spec, rules, catalog, report)


def _classify(
    path: str,
    key: str,
    value: Any,
    level: Mapping[str, Any],
    siblings: Mapping[str, Any],
    spec: ModelSpec,
    rules: Rules,
    catalog: bool,
    report: _Report,
) -> None:
    """One key of the language model's own config (``level``, as published; ``siblings``: the override's keys
    for that level): planned, ignored or not checked."""
    if _inert(key):
        report.ignored.append(f"{path} (changes no memory)")
        return
    if key in _ROPE_KEYS:
        _classify_rope(path, value, spec, catalog)
        report.rope.append(path)
        return
    if key in _CONTEXT:
        _check_spelling(path, key, level)
        report.planned.append(f"{path}={_shown(value)}")
        return
    if key == "partial_rotary_factor" and not catalog:
        report.planned.append(f"{path}={_shown(value)}")
        return
    if _shape_key(key):
        if catalog:
            raise HfOverridesError(
                f"--hf-overrides {path}: kv-planner has this model's catalog facts, not its config.json, and plans "
                "only context keys on them"
            )
        _check_spelling(path, key, level)
        _check_derived(path, key, {**level, **siblings}, spec)
        report.planned.append(f"{path}={_shown(value)}")
        if not report.shape:
            report.notes.append(
                "weights estimated from the overridden shapes (vLLM loads the checkpoint only if its tensors have "
                "them, e.g. with --load-format dummy)"
            )
        report.shape = True
        return
    raise HfOverridesError(f"--hf-overrides {path}: {_why_not(key, rules)}")


def _why_not(key: str, rules: Rules) -> str:
    if key in ("architectures", "model_type"):
        return "another model class; kv-planner plans the published one"
    if key in ("quantization_config", "torch_dtype", "dtype"):
        return "changes how the checkpoint is loaded; kv-planner plans the published format"
    if (
        key in ("sliding_window", "use_sliding_window", "max_window_layers", "sliding_window_pattern")
        or key in (_PER_LAYER_KEYS)
        or key in ("attention_chunk_size", "interleaved_sliding_window")
    ):
        return (
            "the transformers config class derives each layer's attention kind from it when it is built, before "
            f"vLLM {rules.label} applies the override, so whether vLLM sees the change depends on the class"
        )
    return "kv-planner does not know whether vLLM sizes anything from it"


def _classify_rope(path: str, value: Any, spec: ModelSpec, catalog: bool) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise HfOverridesError(
            f"--hf-overrides {path} must be an object or null, got {_shown(value)}: vLLM fails on it"
        )
    if isinstance(value, Mapping):
        if value and all(isinstance(v, Mapping) for v in value.values()):
            raise HfOverridesError(f"--hf-overrides {path}: per-layer-type RoPE parameters are not planned")
        if catalog:
            other = [k for k in value if k not in _ROPE_CONTEXT and k not in _ROPE_INERT]
            if other or spec.vision is not None:
                raise HfOverridesError(
                    f"--hf-overrides {path}: kv-planner has this model's catalog facts, not its config.json, and "
                    f"does not plan {', '.join(other) or 'the rope of a multimodal model'} on them"
                )


def _check_spelling(path: str, key: str, level: Mapping[str, Any]) -> None:
    """An override spelled unlike the config's own key for the field: transformers' attribute_map decides
    which attribute it lands on, class by class."""
    if key in level:
        return
    others = [k for k in _SPELLINGS.get(key, ()) if k != key and level.get(k) is not None]
    if others:
        raise HfOverridesError(
            f"--hf-overrides {path}: this config spells the field {others[0]}; whether the override reaches it "
            f"depends on the transformers class (attribute_map): write {others[0]}"
        )


def _check_derived(path: str, key: str, level: Mapping[str, Any], spec: ModelSpec) -> None:
    """Values the config class derives in its constructor, before vLLM applies the override."""
    group = _GROUP_OF.get(key, key)
    if group in ("hidden_size", "num_attention_heads") and not any(level.get(k) is not None for k in _HEAD_SIZE_KEYS):
        raise HfOverridesError(
            f"--hf-overrides {path}: the config gives no head_dim, so the head size comes from hidden_size / "
            "num_attention_heads, and whether it is the published or the overridden one depends on the "
            "transformers class (set head_dim too)"
        )
    if group == "num_attention_heads" and not any(level.get(k) is not None for k in FIELD_ALIASES["num_kv_heads"]):
        raise HfOverridesError(
            f"--hf-overrides {path}: the config gives no KV head count, which the transformers class derives from "
            "the published num_attention_heads (set num_key_value_heads too)"
        )
    if group == "num_hidden_layers" and (
        len(set(spec.layer_pattern)) > 1 or any(level.get(k) is not None for k in _PER_LAYER_KEYS)
    ):
        raise HfOverridesError(
            f"--hf-overrides {path}: this model's layers are not all alike, and the per-layer lists the config "
            "class built for the published layer count do not follow the override"
        )


def _rope_outcome(report: _Report, effective: Any, baseline: Any, rules: Rules) -> None:
    """Report rope overrides by their effect: planned when the attribute vLLM reads changed, else ignored."""
    if not report.rope:
        return
    if _relevant(effective) == _relevant(baseline):
        for path in report.rope:
            report.unapplied.append(
                f"{path} (vLLM {rules.label} derives the context from {rules.reads}, which this override leaves "
                "as published)"
            )
        return
    if effective is not None and not isinstance(effective, Mapping):
        raise HfOverridesError(f"--hf-overrides leaves {rules.reads} = {_shown(effective)}: vLLM fails on it")
    if isinstance(effective, Mapping) and effective:
        if "rope_type" not in effective:
            raise HfOverridesError(
                f"--hf-overrides: vLLM {rules.label} reads {rules.reads}['rope_type'], which the override (applied "
                'as written, after vLLM normalises "type") does not give: it would fail to start (KeyError); '
                'write "rope_type"'
            )
        if (
            rules.yarn_original
            and effective.get("rope_type") == "yarn"
            and effective.get("original_max_position_embeddings") is None
        ):
            raise HfOverridesError(
                f"--hf-overrides: vLLM {rules.label} derives a YaRN context from {rules.reads}"
                "['original_max_position_embeddings'], which the override does not give: it would fail to start "
                "(KeyError)"
            )
    for path in report.rope:
        report.planned.append(f"{path} -> {rules.reads}={_shown(_rope_brief(effective))}")


def _relevant(rope: Any) -> Any:
    """A rope object without what only shapes the rotation (rope_theta, YaRN's betas, ...)."""
    if isinstance(rope, Mapping):
        return {k: _relevant(v) for k, v in rope.items() if k not in _ROPE_INERT}
    return rope


def _rope_brief(rope: Any) -> Any:
    if not isinstance(rope, Mapping):
        return rope
    return {k: rope[k] for k in ("rope_type", "factor", "original_max_position_embeddings") if k in rope}


# --- the replay -----------------------------------------------------------------------------------------------


class _Obj:
    """A transformers config object as far as vLLM's override code touches it: its attributes; sub-configs
    are objects too. Under transformers 5, ``rope_scaling`` is a property over ``rope_parameters``."""

    def __init__(self, data: Mapping[str, Any], transformers: int, sections: frozenset[str]) -> None:
        self.transformers = transformers
        self.attrs: dict[str, Any] = {}
        for key, value in data.items():
            if key in sections and isinstance(value, Mapping):
                self.attrs[key] = _Obj(value, transformers, frozenset())
            else:
                self.attrs[key] = copy.deepcopy(value)
        if transformers >= 5 and "rope_scaling" in self.attrs:
            legacy = self.attrs.pop("rope_scaling")
            if self.attrs.get("rope_parameters") is None:
                self.attrs["rope_parameters"] = legacy

    def _name(self, key: str) -> str:
        return "rope_parameters" if self.transformers >= 5 and key == "rope_scaling" else key

    def get(self, key: str) -> Any:
        return self.attrs.get(self._name(key))

    def set(self, key: str, value: Any) -> None:
        self.attrs[self._name(key)] = value

    def to_json(self) -> dict[str, Any]:
        return {k: v.to_json() if isinstance(v, _Obj) else v for k, v in self.attrs.items()}


def _replay(
    published: Mapping[str, Any], section: str | None, overrides: Mapping[str, Any], rules: Rules
) -> tuple[dict[str, Any], Any, Any]:
    """(the config as vLLM holds it after the overrides, as JSON, with the rope attribute vLLM reads in the
    language model's ``rope_scaling``; that attribute after the overrides; the same without them)."""
    sections = frozenset((*TEXT_SECTIONS, *_OTHER_SECTIONS))
    baseline_top = _Obj(published, rules.transformers, sections)
    _patch(_text_obj(baseline_top, section), rules)
    baseline = copy.deepcopy(_text_obj(baseline_top, section).get(rules.reads))

    top = _Obj(published, rules.transformers, sections)
    text = _text_obj(top, section)
    items = [(k, copy.deepcopy(v)) for k, v in overrides.items()]
    if not rules.split:
        if not rules.patched:  # 0.8.5: the config comes patched, the overrides go on after
            _patch(text, rules)
        for key, value in items:
            top.set(key, value)  # config.update
        if rules.patched:
            _patch(text, rules)
    else:
        for key, value in items:
            if not isinstance(value, dict):
                top.set(key, value)  # config.update inside get_config
        _patch(text, rules)
        for key, value in items:
            if isinstance(value, dict):  # ModelConfig._apply_dict_overrides
                target = top.get(key)
                if isinstance(target, _Obj):
                    _update_nested(target, value)
                else:
                    top.set(key, value)
    effective = copy.deepcopy(text.get(rules.reads))
    view = top.to_json()
    level = view[section] if section is not None else view
    original = published[section] if section is not None else published
    if _relevant(effective) == _relevant(baseline):
        for key in _ROPE_KEYS:  # as published: the parser reads it as it reads any config
            if key in original:
                level[key] = copy.deepcopy(original[key])
            else:
                level.pop(key, None)
    else:
        level["rope_scaling"] = effective
        level.pop("rope_parameters", None)
    return view, effective, baseline


def _text_obj(top: _Obj, section: str | None) -> _Obj:
    if section is None:
        return top
    text = top.get(section)
    return text if isinstance(text, _Obj) else top


def _update_nested(target: _Obj | dict[str, Any], updates: Mapping[str, Any]) -> None:
    """vLLM's ``ModelConfig._update_nested``: objects merge into objects (or config objects), the rest is set."""
    for key, value in updates.items():
        if isinstance(value, dict):
            nested = target.get(key)
            if isinstance(nested, (dict, _Obj)):
                _update_nested(nested, value)
                continue
        if isinstance(target, _Obj):
            target.set(key, value)
        else:
            target[key] = value


def _patch(obj: _Obj, rules: Rules) -> None:
    """vLLM's rope patching of the language model's config: ``patch_rope_scaling`` (<= 0.11.x) or
    ``patch_rope_parameters`` (0.12+, its transformers 4 and 5 branches)."""
    if rules.reads == "rope_scaling":
        rope = obj.get("rope_scaling")
        if isinstance(rope, dict):
            _normalise(rope, "rope_scaling")
        elif rope is not None:
            raise _VllmFails(f"rope_scaling is {_shown(rope)}, not an object")
        return
    theta = obj.get("rope_theta") if obj.get("rope_theta") is not None else obj.get("rotary_emb_base")
    fraction = next(
        (obj.get(k) for k in ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction") if obj.get(k) is not None),
        None,
    )
    original = obj.get("original_max_position_embeddings")
    if rules.transformers < 5:
        scaling = obj.get("rope_scaling")
        if scaling is not None:
            obj.set("rope_parameters", scaling)  # the same object: later merges into one show in the other
        if (theta is not None or fraction is not None or original is not None) and not obj.get("rope_parameters"):
            obj.set("rope_parameters", {"rope_type": "default"})
        params = obj.get("rope_parameters")
        if params is not None and not isinstance(params, dict):
            raise _VllmFails(f"rope_parameters is {_shown(params)}, not an object")
        if isinstance(params, dict):
            if theta is not None:
                params["rope_theta"] = theta
            if fraction is not None:
                params["partial_rotary_factor"] = fraction
            if original is not None:
                params["original_max_position_embeddings"] = original
    else:
        params = obj.get("rope_parameters")
        if params is not None and not isinstance(params, dict):
            raise _VllmFails(f"rope_parameters is {_shown(params)}, not an object")
        if theta is not None or params:
            params = params if isinstance(params, dict) else {}
            if not _nested(params):  # standardize_rope_params
                params.setdefault("rope_type", params.get("type", "default"))
                params.setdefault("rope_theta", theta)
                if params["rope_type"] in ("llama3", "yarn", "longrope"):
                    if original is not None:
                        params["original_max_position_embeddings"] = original
                    else:
                        params.setdefault("original_max_position_embeddings", obj.get("max_position_embeddings"))
            obj.set("rope_parameters", params)
    params = obj.get("rope_parameters")
    if isinstance(params, dict) and params:
        for part in params.values() if _nested(params) else (params,):
            if isinstance(part, dict):
                _normalise(part, "rope_parameters")


def _nested(rope: Mapping[str, Any]) -> bool:
    return bool(rope) and all(isinstance(v, Mapping) for v in rope.values())


def _normalise(rope: dict[str, Any], name: str) -> None:
    """``patch_rope_scaling_dict`` / ``patch_rope_parameters_dict``: the legacy ``type`` key and values."""
    modern, legacy = rope.get("rope_type"), rope.get("type")
    allowed = (legacy == "su" and modern == "longrope") or (legacy == "mrope" and modern == "default")
    if "rope_type" in rope and "type" in rope and modern != legacy and not allowed:
        raise _VllmFails(f"{name} gives rope_type={_shown(modern)} and type={_shown(legacy)}")
    if "rope_type" not in rope and "type" in rope:
        rope["rope_type"] = legacy
    if "rope_type" not in rope:
        raise _VllmFails(f"{name} has no 'rope_type' key")
    if rope["rope_type"] == "su":
        rope["rope_type"] = "longrope"
    elif rope["rope_type"] == "mrope":
        if "mrope_section" not in rope:
            raise _VllmFails(f"{name} says mrope without an mrope_section")
        rope["rope_type"] = "default"


# --- back to a spec -----------------------------------------------------------------------------------------

_CONTEXT_FIELDS = ("context", "derived_max_model_len", "derived_max_model_len_key", "max_position_embeddings")


def _spec_of(spec: ModelSpec, view: Mapping[str, Any], report: _Report, catalog: bool) -> ModelSpec:
    if not report.planned:
        return spec  # only ignored keys (or RoPE overrides the release does not apply): the published model
    if catalog:
        context, derived, key, positions = context_of(view, model_id=spec.id)
        return spec.model_copy(
            update={
                "context": context,
                "derived_max_model_len": derived,
                "derived_max_model_len_key": key,
                "max_position_embeddings": positions,
            }
        )
    parsed = parse_config(view, model_id=spec.id)
    if report.shape:
        return parsed.model_copy(update={"checkpoint_bytes": None, "parameters": None})
    update = {name: getattr(parsed, name) for name in (*_CONTEXT_FIELDS, "rotary_dim", "mrope")}
    return spec.model_copy(update=update)


def _catalog_config(spec: ModelSpec) -> dict[str, Any]:
    """A config holding what a catalog entry records of the context (its shortest length key, model_max_length,
    the RoPE type, factor and original length), for the overrides to be applied to."""
    context = spec.context
    if context is None:
        raise HfOverridesError(
            f"--hf-overrides: the catalog entry of {spec.id} records no context facts to apply it to"
        )
    config: dict[str, Any] = {"model_type": spec.model_type, "architectures": [spec.architecture]}
    if context.base_key is not None and context.base_max_len is not None:
        config[context.base_key] = context.base_max_len
    if spec.max_position_embeddings is not None and context.base_key != "max_position_embeddings":
        config["max_position_embeddings"] = spec.max_position_embeddings
    if context.model_max_length is not None:
        config["model_max_length"] = context.model_max_length
    if context.rope_type is not None:
        rope: dict[str, Any] = {"rope_type": context.rope_type}
        if context.rope_type == "mrope":  # (Qwen2.5-VL's legacy type: vLLM normalises it with its mrope_section)
            rope = {"rope_type": "default", "mrope_section": None}
        if context.rope_factor is not None:
            rope["factor"] = context.rope_factor
        if context.rope_original_max_position is not None:
            rope["original_max_position_embeddings"] = context.rope_original_max_position
        config["rope_scaling"] = rope
    return config


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def keys_of(overrides: Mapping[str, Any]) -> Sequence[str]:
    """The dotted paths of the leaves of ``overrides`` (for messages)."""
    paths: list[str] = []
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in reversed(list(overrides.items()))]
    while stack:
        path, value = stack.pop()
        if isinstance(value, Mapping) and value and path.split(".")[-1] not in _ROPE_KEYS:
            stack.extend((f"{path}.{k}", v) for k, v in reversed(list(value.items())))
        else:
            paths.append(path)
    return paths
