"""Speculative decoding (``--speculative-config``): what the drafter costs, release by release.

Three things change vLLM's KV arithmetic when a drafter runs (V1 engine):

* **drafter weights** load with the target in ``GPUModelRunner.load_model`` (the drafter's
  ``load_model``), so they are part of "Model loading took X GiB" and come out of the KV budget;
* **drafter KV layers**: an EAGLE / EAGLE3 head, MTP modules and a separate draft model register
  attention layers in the same forward context, so ``get_kv_cache_spec`` returns them with the target's
  and they join the KV-cache groups (``vllm 0.19.0 v1/worker/gpu_model_runner.py:
  GPUModelRunner.get_kv_cache_spec``): a layer of the same shape joins the target's group (one block id
  costs one more page); a draft model of another shape makes one ``UniformTypeKVCacheSpecs`` group whose
  page is the sum of the layers' pages. Either way one block costs the drafter's pages on top;
* **lookahead slots**: the scheduler allocates ``num_lookahead_tokens`` KV slots per running sequence
  past its scheduled tokens (``Scheduler.__init__``), which the drafter writes.

Per release, as the source does it (each rule checked in the wheel named):

=========================  =================================================================================
release                    rule (file: function)
=========================  =================================================================================
0.8.5                      V1 drafters: ngram, eagle, eagle3; lookahead = k for ``use_eagle()``
                           (eagle, eagle3) (v1/core/sched/scheduler.py: Scheduler.__init__; config.py:
                           SpeculativeConfig.use_eagle). No ``--speculative-model`` /
                           ``--num-speculative-tokens`` flags any more: only ``--speculative-config``.
0.10.1.1                   ``use_eagle()`` adds deepseek_mtp (config/__init__.py: use_eagle)
0.11.0 - 0.14.0            every MTP variant is method ``mtp``; ``use_eagle()`` = eagle, eagle3, mtp;
                           method ``draft_model`` raises NotImplementedError ("Speculative decoding with
                           draft model is not supported yet", config/speculative.py: __post_init__)
0.15.1 - 0.21.0            ``draft_model`` supported (v1/spec_decode/draft_model.py); lookahead = k for
                           ``use_eagle()`` and ``uses_draft_model()`` (v1/core/sched/scheduler.py)
0.26.0                     ``use_eagle()`` adds dflash (lookahead k + 1) and dspark (k)
0.33.0                     ``VllmConfig.num_lookahead_tokens`` (config/vllm.py): dflash k + 1, eagle family
                           and draft model k, others 0
=========================  =================================================================================

n-gram, suffix and ngram_gpu proposers keep no GPU weights and no KV layers; their draft tokens are
scheduled as spec tokens (no lookahead slots). Medusa and MLP speculator heads read hidden states and
keep no KV; their weights are counted from the draft config when it resolves.

Weights: a draft model's own (resolved spec); an EAGLE head's when its config resolves, else one
decoder layer of the target's shape plus the fc projection (2h x h for EAGLE, 3h x h plus its own
``draft_vocab_size x h`` LM head for EAGLE3) with embeddings and LM head shared with the target
(``eagle.py: EagleProposer._maybe_share_embeddings / _maybe_share_lm_head``); MTP: ``n_predict``
(``num_nextn_predict_layers``) target-shaped decoder layers plus ``eh_proj`` (2h x h), embeddings and
head shared when identical.
"""

import json
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import InvalidArgumentError
from planner.kv.dtypes import KvDtype
from planner.kv.specs import attention_bytes_per_token
from planner.models.spec import ModelSpec
from planner.units import DTYPE_BYTES
from planner.vllm.releases import Version

Method = Literal[
    "ngram",
    "ngram_gpu",
    "suffix",
    "eagle",
    "eagle3",
    "mtp",
    "draft_model",
    "medusa",
    "mlp_speculator",
    "dflash",
    "dspark",
    "extract_hidden_states",
]
_FLAG = "--speculative-config"
_NO_GPU = ("ngram", "ngram_gpu", "suffix", "extract_hidden_states")
_HEADS = ("medusa", "mlp_speculator")
_EAGLE3_DRAFT_VOCAB = 32000  # draft_vocab_size of the published EAGLE3 heads when their config is not read


class SpeculativeSettings(BaseModel):
    """``--speculative-config`` as vLLM reads it (the fields that change memory)."""

    model_config = ConfigDict(frozen=True)

    method: Method
    num_speculative_tokens: int = Field(ge=1)
    model: str | None = Field(default=None, description="drafter repo/path; None: the target's own MTP modules")
    draft_tensor_parallel_size: int | None = None


def _v(text: str) -> tuple[int, int, int]:
    return Version.parse(text).key()


def parse_speculative_config(text: str, version: Version) -> SpeculativeSettings:
    """Parse the JSON and detect the method as vLLM does (``config/speculative.py: __post_init__``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgumentError(f"argument {_FLAG}: invalid JSON ({error.msg})", flag=_FLAG) from None
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"argument {_FLAG}: expected a JSON object", flag=_FLAG)
    model = data.get("model")
    model = str(model) if model is not None else None
    method = data.get("method")
    if isinstance(method, str) and method.endswith("_mtp"):
        method = "mtp"  # 0.11+: every *_mtp method is "mtp" (deprecated names still accepted)
    if method is None:
        if model in ("ngram", "[ngram]"):
            method = "ngram"
        elif model is None:
            raise InvalidArgumentError(
                f"argument {_FLAG}: num_speculative_tokens was provided but without speculative model.",
                flag=_FLAG,
            )
        else:
            lowered = model.lower()
            # Name-based detection of EAGLE heads (0.19 __post_init__ order: "eagle-" then "eagle3").
            method = "eagle" if "eagle-" in lowered else "eagle3" if "eagle3" in lowered else "draft_model"
    if method == "[ngram]":
        method = "ngram"
    known = Method.__args__  # type: ignore[attr-defined]
    if method not in known:
        raise InvalidArgumentError(f"argument {_FLAG}: unsupported speculative method {method!r}", flag=_FLAG)
    tokens = data.get("num_speculative_tokens")
    if tokens is None:
        if method != "mtp":
            raise InvalidArgumentError(f"argument {_FLAG}: num_speculative_tokens is required", flag=_FLAG)
        tokens = 1  # MTP defaults to the checkpoint's n_predict, 1 for the published models
    try:
        count = int(tokens)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"argument {_FLAG}: num_speculative_tokens must be an integer", flag=_FLAG) from None
    if count < 1:
        raise InvalidArgumentError(f"argument {_FLAG}: num_speculative_tokens must be at least 1", flag=_FLAG)
    if method == "draft_model" and version.key() < _v("0.15.0"):
        raise InvalidArgumentError(
            "Speculative decoding with draft model is not supported yet (vLLM < 0.15); use ngram, eagle, eagle3 or mtp",
            flag=_FLAG,
        )
    if method in ("dflash", "dspark") and version.key() < _v("0.26.0"):
        raise InvalidArgumentError(f"argument {_FLAG}: method {method!r} needs vLLM 0.26 or later", flag=_FLAG)
    draft_tp = data.get("draft_tensor_parallel_size")
    return SpeculativeSettings(
        method=method,
        num_speculative_tokens=count,
        model=None if method in ("ngram", "ngram_gpu", "suffix") else model,
        draft_tensor_parallel_size=int(draft_tp) if isinstance(draft_tp, int) else None,
    )


def eagle_family(method: str, version: Version) -> bool:
    """``SpeculativeConfig.use_eagle()`` of the release."""
    key = version.key()
    if key < _v("0.10.0"):
        return method in ("eagle", "eagle3")
    if key < _v("0.26.0"):
        return method in ("eagle", "eagle3", "mtp")
    return method in ("eagle", "eagle3", "mtp", "dflash", "dspark")


# Model Runner V2 with a drafter (config/vllm.py: _get_v2_model_runner_unsupported_features), per release:
# 0.26.0-0.29.0 only eagle, eagle3, mtp, dflash, dspark (and extract_hidden_states from 0.29.0), and not EAGLE3
# under pipeline parallelism; 0.30.0 all but ngram, ngram_gpu, draft_model, suffix, medusa, mlp_speculator;
# 0.31.0 also draft_model; 0.32.0 also ngram and ngram_gpu; 0.33.0 all but suffix (and custom_class).
_V2_ONLY_WITH = ("eagle", "eagle3", "mtp", "dflash", "dspark")
_V2_LACKS: tuple[tuple[str, frozenset[str]], ...] = (
    ("0.30.0", frozenset({"ngram", "ngram_gpu", "draft_model", "suffix", "medusa", "mlp_speculator"})),
    ("0.31.0", frozenset({"ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator"})),
    ("0.32.0", frozenset({"suffix", "medusa", "mlp_speculator"})),
    ("0.33.0", frozenset({"suffix"})),
)
# Async scheduling is off by default with these drafters (config/vllm.py, the async_scheduling default:
# not an EAGLE-type, ngram_gpu or dspark method, nor draft_model from 0.28.0) — whatever the runner up to
# 0.32.0, only on the V1 runner from 0.33.0 (v1_async_sched_incompat).
_NO_ASYNC = frozenset({"ngram", "suffix", "medusa", "mlp_speculator"})


def runner_v2_takes(method: str, version: Version, pp: int) -> bool:
    """Whether Model Runner V2 (when it is the default) runs this drafter, or vLLM falls back to V1."""
    key = version.key()
    if key < _v("0.30.0"):
        supported = (*_V2_ONLY_WITH, "extract_hidden_states") if key >= _v("0.29.0") else _V2_ONLY_WITH
        return method in supported and not (method == "eagle3" and pp > 1)
    lacks = frozenset[str]()
    for since, methods in _V2_LACKS:
        if key >= _v(since):
            lacks = methods
    return method not in lacks


def async_refused(method: str, version: Version, runner_v2: bool) -> bool:
    """Whether ``--async-scheduling`` with this drafter is an error (config/vllm.py, read in 0.26.0-0.33.0:
    "Currently, async scheduling is only supported with EAGLE/MTP/..." up to 0.32.0, "not supported by the
    V1 model runner" in 0.33.0)."""
    key = version.key()
    return method in _NO_ASYNC and _v("0.26.0") <= key and (key < _v("0.33.0") or not runner_v2)


def drafter_turns_async_off(method: str, version: Version, runner_v2: bool) -> bool:
    """Whether this drafter turns the async-scheduling default off."""
    key = version.key()
    if method == "draft_model":
        return key < _v("0.28.0")
    if method not in _NO_ASYNC:
        return False
    return key < _v("0.33.0") or not runner_v2


def lookahead_tokens(settings: SpeculativeSettings, version: Version) -> int:
    """KV slots the scheduler reserves per running sequence past its scheduled tokens."""
    k, method, key = settings.num_speculative_tokens, settings.method, version.key()
    if method == "dflash" and key >= _v("0.26.0"):
        return k + 1
    if eagle_family(method, version):
        return k
    if method == "draft_model" and key >= _v("0.15.0"):
        return k
    return 0


class DrafterCost(BaseModel):
    """What the drafter adds on one GPU (rank) of the engine."""

    model_config = ConfigDict(frozen=True)

    method: Method
    num_speculative_tokens: int
    draft_model: str | None
    weights_bytes: int = Field(description="drafter weights on one rank")
    weights_estimated: bool
    kv_layers: int = Field(description="attention layers the drafter adds to the KV cache spec")
    kv_bytes_per_token: int = Field(description="K+V bytes per token of those layers on one rank")
    lookahead_tokens: int = Field(description="extra KV slots per running sequence")
    rule: str = Field(description="the release rule applied (file: function)")
    notes: list[str] = Field(default=[])


def _decoder_layer_bytes(model: ModelSpec, tp: int, dtype_bytes: int, qkv_inputs: int = 1) -> float:
    """One dense decoder layer of ``model``'s shape on one rank (attention + gated MLP + norms).
    ``qkv_inputs`` 2: EAGLE3's first layer reads embeddings and hidden states together
    (``vllm 0.11.0 model_executor/models/llama_eagle3.py: LlamaDecoderLayer``, qkv_proj of 2 x hidden)."""
    heads = model.num_attention_heads * model.head_dim
    kv = 2 * model.num_kv_heads * model.head_dim
    attention = qkv_inputs * model.hidden_size * (heads + kv) + heads * model.hidden_size
    inter = model.intermediate_size or (model.moe.moe_intermediate_size if model.moe else 4 * model.hidden_size)
    mlp = (3 if model.mlp_gated else 2) * model.hidden_size * inter
    return (attention + mlp) / tp * dtype_bytes + 2 * model.hidden_size * dtype_bytes


def _mtp_layer_bytes(model: ModelSpec, tp: int, dtype_bytes: int) -> float:
    from planner.models.weights import estimate_weights

    # One MTP module is the target's last decoder layer plus eh_proj (2h x h); embeddings and the shared
    # head are the target's (vLLM shares identical copies).
    whole = estimate_weights(model, dtype=_dtype_name(dtype_bytes), tp=tp)
    embeds = 2 * math.ceil(model.vocab_size / 64) * 64 * model.hidden_size / tp * dtype_bytes
    per_layer = max(0.0, (sum(whole.bytes_per_stage) - embeds) / model.num_layers)
    return per_layer + 2 * model.hidden_size * model.hidden_size / tp * dtype_bytes


def _dtype_name(dtype_bytes: int) -> str:
    return {4: "float32", 2: "bfloat16"}.get(dtype_bytes, "bfloat16")


def drafter_cost(
    target: ModelSpec,
    settings: SpeculativeSettings,
    version: Version,
    *,
    kv: KvDtype,
    dtype: str,
    tp: int,
    draft: ModelSpec | None = None,
) -> DrafterCost:
    """The drafter's weights, KV layers and lookahead on one rank, for ``version``'s rules.

    ``draft``: the drafter's resolved spec (a draft model, an EAGLE head's config); None falls back to
    the target's shapes (EAGLE, MTP) and marks the weights estimated."""
    method = settings.method
    dtype_bytes = DTYPE_BYTES[dtype]
    lookahead = lookahead_tokens(settings, version)
    rule = (
        "v1/core/sched/scheduler.py: Scheduler.__init__ (num_lookahead_tokens)"
        if version.key() < _v("0.33.0")
        else "config/vllm.py: VllmConfig.num_lookahead_tokens"
    )
    common = {
        "method": method,
        "num_speculative_tokens": settings.num_speculative_tokens,
        "draft_model": settings.model,
        "lookahead_tokens": lookahead,
        "rule": rule,
    }
    if method in _NO_GPU:
        return DrafterCost(weights_bytes=0, weights_estimated=False, kv_layers=0, kv_bytes_per_token=0, **common)
    notes: list[str] = []
    if method in _HEADS:
        weights: float = 0
        if draft is not None:
            from planner.models.weights import estimate_weights

            weights = max(estimate_weights(draft, dtype=dtype, tp=tp).bytes_per_stage)
        else:
            notes.append(f"{method} head weights not known: not counted")
        return DrafterCost(
            weights_bytes=int(weights),
            weights_estimated=True,
            kv_layers=0,
            kv_bytes_per_token=0,
            notes=notes,
            **common,
        )
    if method == "draft_model":
        if draft is None:
            raise InvalidArgumentError(
                f"argument {_FLAG}: the draft model {settings.model!r} is needed to size it", flag=_FLAG
            )
        from planner.models.weights import estimate_weights

        draft_tp = settings.draft_tensor_parallel_size or tp
        estimate = estimate_weights(draft, dtype=dtype, tp=draft_tp, checkpoint_bytes=draft.checkpoint_bytes)
        layers = sum(1 for letter in draft.layer_pattern if letter in "FSC")
        per_token = attention_bytes_per_token(draft, kv, draft_tp) * layers
        if "S" in draft.layer_pattern or "C" in draft.layer_pattern:
            notes.append("draft model's sliding-window layers sized as full attention")
        return DrafterCost(
            weights_bytes=sum(estimate.bytes_per_stage),
            weights_estimated=estimate.estimated,
            kv_layers=layers,
            kv_bytes_per_token=per_token,
            notes=notes,
            **common,
        )
    if method == "mtp":
        n_predict = target.mtp_layers or 1
        if not target.mtp_layers:
            notes.append("the model's config lists no MTP layers: one assumed")
        mtp_weights = _mtp_layer_bytes(target, tp, dtype_bytes) * n_predict
        return DrafterCost(
            weights_bytes=int(mtp_weights),
            weights_estimated=True,
            kv_layers=n_predict,
            kv_bytes_per_token=attention_bytes_per_token(target, kv, tp) * n_predict,
            notes=notes,
            **common,
        )
    # EAGLE family (eagle, eagle3, dflash, dspark): a small head over the target's hidden states.
    shape = draft if draft is not None else target
    layers = draft.num_layers if draft is not None else 1
    per_token = attention_bytes_per_token(shape, kv, tp) * layers
    head_weights: float
    if draft is not None and draft.checkpoint_bytes:
        head_weights = float(draft.checkpoint_bytes) / tp * dtype_bytes / DTYPE_BYTES[draft.dtype]
        estimated = False
    else:
        head_weights = _decoder_layer_bytes(shape, tp, dtype_bytes, 2 if method == "eagle3" else 1) * layers
        fc_inputs = 3 if method == "eagle3" else 2
        head_weights += fc_inputs * target.hidden_size * target.hidden_size / tp * dtype_bytes
        if method == "eagle3":
            head_weights += _EAGLE3_DRAFT_VOCAB * target.hidden_size / tp * dtype_bytes
        estimated = True
        if draft is None:
            notes.append("drafter config not read: one decoder layer of the target's shape assumed")
    return DrafterCost(
        weights_bytes=int(head_weights),
        weights_estimated=estimated,
        kv_layers=layers,
        kv_bytes_per_token=per_token,
        notes=notes,
        **common,
    )
