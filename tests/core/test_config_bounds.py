"""A config.json is untrusted (any Hub repo a manifest names): every size and count it gives has a plausible bound
(planner/models/bounds.py, docs/security.md "Hugging Face Hub"), non-finite numbers are refused, and the JSON
reader turns every way ``json`` fails into a clear error. All are InvalidModelConfigError / ModelResolutionError
(exit 2, KVP040/KVP041), never an internal error or a long, memory-hungry computation.

Before: ``num_hidden_layers: 1000000000`` took minutes and GBs (layer_pattern, allocation.py); ``1e308`` raised
OverflowError, ``NaN`` / ``Infinity`` ValueError / OverflowError, a 5000-digit integer ValueError and a deep
``[[[...]]]`` RecursionError out of the parser.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from planner.errors import InvalidModelConfigError, ModelResolutionError
from planner.models import bounds
from planner.models.checkpoint import MAX_JSON_DEPTH, parse_header_json, read_json_file
from planner.models.config import parse_config

MODEL_CONFIGS = Path("/work/shared/model-configs")


def _llama(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    config.update(overrides)
    return config


# One field of each bound class, above its bound (the field is named in the message with its path).
OVER_BOUND = [
    ("num_hidden_layers", 10**9, bounds.MAX_LAYERS),
    ("num_hidden_layers", 4097, bounds.MAX_LAYERS),
    ("n_layer", 10**6, bounds.MAX_LAYERS),
    ("hidden_size", 10**30, bounds.MAX_WIDTH),
    ("intermediate_size", 2**21, bounds.MAX_WIDTH),
    ("num_attention_heads", 2**17, bounds.MAX_HEADS),
    ("num_key_value_heads", 2**40, bounds.MAX_HEADS),
    ("head_dim", 2**17, bounds.MAX_HEAD_DIM),
    ("vocab_size", 2**25, bounds.MAX_VOCAB),
    ("num_local_experts", 10**7, bounds.MAX_EXPERTS),
    ("num_experts_per_tok", 10**7, bounds.MAX_EXPERTS),
    ("max_position_embeddings", 10**40, bounds.MAX_POSITIONS),
    ("sliding_window", 2**31, bounds.MAX_POSITIONS),
    ("attention_chunk_size", 2**31, bounds.MAX_POSITIONS),
    ("mamba_d_conv", 10**6, bounds.MAX_SMALL),
]


@pytest.mark.parametrize(("key", "value", "bound"), OVER_BOUND)
def test_a_size_above_its_bound_is_a_clear_config_error(key: str, value: int, bound: bounds.Bound) -> None:
    started = time.monotonic()
    with pytest.raises(InvalidModelConfigError, match=rf"evil/x: config\.json field {key} is .* above the plausible"):
        parse_config(_llama(**{key: value}), model_id="evil/x")
    assert time.monotonic() - started < 1.0
    assert bound.limit < value


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("text_config", "num_hidden_layers", 10**9),
        ("vision_config", "hidden_size", 10**12),
        ("vision_config", "depth", 10**6),
        ("vision_config", "image_size", 10**9),
        ("vision_config", "image_grid_pinpoints", [[336, 10**12]]),
        ("quantization_config", "group_size", 10**12),
        ("quantization_config", "bits", 1000),
        ("rope_scaling", "factor", 1e308),
        ("linear_attn_config", "num_heads", 10**9),
    ],
)
def test_bounds_hold_in_every_section(section: str, key: str, value: Any) -> None:
    config = _llama(**{section: {key: value}})
    with pytest.raises(InvalidModelConfigError, match=rf"config\.json field {section}\.{key}"):
        parse_config(config, model_id="evil/x")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"])
def test_non_finite_sizes_are_clear_config_errors(key: str, value: float) -> None:
    with pytest.raises(InvalidModelConfigError, match=rf"field {key} must be a finite number"):
        parse_config(_llama(**{key: value}), model_id="evil/x")


def test_non_finite_numbers_anywhere_are_refused() -> None:
    with pytest.raises(InvalidModelConfigError, match=r"field rope_scaling\.low_freq_factor must be a finite"):
        parse_config(_llama(rope_scaling={"rope_type": "llama3", "low_freq_factor": float("nan")}), model_id="evil/x")
    with pytest.raises(InvalidModelConfigError, match=r"field rope_theta must be a finite"):
        parse_config(_llama(rope_theta=float("inf")), model_id="evil/x")


def test_1e308_layers_is_a_clear_error_not_an_overflow() -> None:
    with pytest.raises(InvalidModelConfigError, match=r"num_hidden_layers is 1e\+308, above the plausible bound"):
        parse_config(_llama(num_hidden_layers=1e308), model_id="evil/x")


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_hidden_layers", 2.5), ("hidden_size", "4096"), ("num_attention_heads", {"a": 1}), ("head_dim", 0.5)],
)
def test_sizes_must_be_whole_numbers(key: str, value: Any) -> None:
    with pytest.raises(InvalidModelConfigError, match=key):
        parse_config(_llama(**{key: value}), model_id="evil/x")


def test_a_mamba_head_fraction_is_refused() -> None:
    config = _llama(layer_types=["mamba", "full_attention"], num_hidden_layers=2, mamba_n_heads=0.5)
    with pytest.raises(InvalidModelConfigError, match="mamba_n_heads must be a whole number"):
        parse_config(config, model_id="evil/x")


@pytest.mark.parametrize(
    "extra",
    [
        {"attn_layer_period": 0},
        {"attn_layer_period": "x"},
        {"full_attention_interval": 0, "linear_num_value_heads": 8},
    ],
)
def test_layer_periods_are_checked(extra: dict[str, Any]) -> None:
    with pytest.raises(InvalidModelConfigError):
        parse_config(_llama(**extra), model_id="evil/x")


def test_llama4_no_rope_layers_shorter_than_the_model() -> None:
    config = _llama(model_type="llama4_text", attention_chunk_size=8192, no_rope_layers=[1, 0])
    with pytest.raises(InvalidModelConfigError, match="no_rope_layers must list 0 or 1 for each of the 32 layers"):
        parse_config(config, model_id="evil/x")


def test_a_value_the_spec_refuses_is_a_config_error() -> None:
    # A negative MoE top-k passes the magnitude bound; the spec's own constraint refuses it, as a config error.
    config = _llama(num_local_experts=8, num_experts_per_tok=-2, model_type="mixtral")
    with pytest.raises(InvalidModelConfigError, match="experts_per_token"):
        parse_config(config, model_id="evil/x")


def test_the_largest_plausible_model_still_parses_fast() -> None:
    config = _llama(num_hidden_layers=4096, hidden_size=2**20, intermediate_size=2**20, num_attention_heads=2**13)
    started = time.monotonic()
    spec = parse_config(config, model_id="big/x")
    assert spec.num_layers == 4096 and time.monotonic() - started < 1.0


@pytest.mark.skipif(not MODEL_CONFIGS.is_dir(), reason="the shared model-configs folder is not mounted")
def test_no_real_config_comes_near_a_bound() -> None:
    """Every released config in the shared folder passes with a 10x margin on every bounded field."""
    checked = 0
    for path in sorted(MODEL_CONFIGS.glob("*.json")):
        config = json.loads(path.read_text())
        bounds.check_config_bounds(config, model_id=path.name)
        stack: list[Any] = [config]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    bound = bounds.field_bound(key)
                    numbers = value if isinstance(value, list) else [value]
                    flat = [n for item in numbers for n in (item if isinstance(item, list) else [item])]
                    if bound is not None:
                        for number in flat:
                            if isinstance(number, (int, float)) and not isinstance(number, bool):
                                assert abs(number) * 10 <= bound.limit, (path.name, key, number)
                                checked += 1
                    stack.append(value)
            elif isinstance(node, list):
                stack.extend(node)
    assert checked > 100


# ------------------------------------------------------------------------------------------------
# The JSON reader


def _write(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    return path


def test_an_integer_of_5000_digits_is_not_valid_json(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"vocab_size": ' + b"9" * 5000 + b"}")
    with pytest.raises(ModelResolutionError, match=r"config\.json .* is not valid JSON \(Exceeds the limit"):
        read_json_file(path, what="config.json")


def test_nesting_past_the_recursion_limit_is_not_valid_json(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    with pytest.raises(ModelResolutionError, match=rf"nests deeper than {MAX_JSON_DEPTH} levels"):
        read_json_file(path, what="config.json")


def test_nesting_past_the_depth_bound_is_refused(tmp_path: Path) -> None:
    depth = MAX_JSON_DEPTH + 10  # json decodes it; later recursive code (json.dumps, deepcopy) might not
    path = _write(tmp_path, b'{"x": ' + b"[" * depth + b"]" * depth + b"}")
    with pytest.raises(ModelResolutionError, match=rf"nests deeper than {MAX_JSON_DEPTH} levels"):
        read_json_file(path, what="config.json")
    ok = _write(tmp_path, b'{"x": ' + b"[" * 8 + b"]" * 8 + b"}")
    assert read_json_file(ok, what="config.json") == {"x": [[[[[[[[]]]]]]]]}


@pytest.mark.parametrize(
    "raw",
    [b'{"a": ' + b"9" * 5000 + b"}", b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
    ids=["huge-int", "deep"],
)
def test_safetensors_headers_get_the_same_guard(raw: bytes) -> None:
    with pytest.raises(ModelResolutionError, match=r"model\.safetensors is not a safetensors file"):
        parse_header_json(raw, filename="model.safetensors")
