"""vLLM command lines parsed as vLLM's FlexibleArgumentParser + argparse would parse them."""

from __future__ import annotations

import pytest

from planner.errors import InvalidArgumentError
from planner.units import AUTO
from planner.vllm.argv import flag_table, locate, parse_args, parse_command

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("argv", "entrypoint", "start"),
    [
        (["vllm", "serve", MODEL], "serve", 2),
        (["/usr/local/bin/vllm", "serve", MODEL], "serve", 2),
        (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL], "api_server", 3),
        (["python", "-u", "-m", "vllm.entrypoints.openai.api_server"], "api_server", 4),
        (["/usr/bin/python3.12", "-m", "vllm.entrypoints.cli.main", "serve", MODEL], "serve", 4),
    ],
)
def test_locate_entrypoints(argv: list[str], entrypoint: str, start: int) -> None:
    assert locate(argv) == (entrypoint, start)


@pytest.mark.parametrize("argv", [["vllm"], ["vllm", "chat"], ["python3", "-m", "http.server"], ["sh", "-c", "x"], []])
def test_locate_rejects_other_commands(argv: list[str]) -> None:
    assert locate(argv) is None


def test_positional_model_and_flags_in_both_spellings() -> None:
    command = parse_command(
        ["vllm", "serve", MODEL, "--max_model_len=32k", "--max-num-seqs", "64", "-tp", "2"], version="0.19.0"
    )
    assert command is not None
    assert command.model == MODEL and command.model_source == "positional" and command.model_index == 2
    assert command.values == {"max_model_len": "32k", "max_num_seqs": "64", "tensor_parallel_size": "2"}
    args = command.serving_args()
    assert (args.max_model_len, args.max_num_seqs, args.tensor_parallel_size) == (32000, 64, 2)
    assert command.errors == []


def test_binary_suffix_and_auto() -> None:
    command = parse_args([MODEL, "--max-model-len", "32K", "--kv-cache-memory-bytes=20G"], version="0.33.0")
    assert command.serving_args().max_model_len == 32768
    assert command.serving_args().kv_cache_memory_bytes == 20 * 2**30
    for value in ("auto", "-1"):
        auto = parse_args([MODEL, "--max-model-len", value], version="0.33.0")
        assert auto.errors == []
        assert auto.serving_args().max_model_len == AUTO


def test_duplicates_last_wins_and_all_occurrences_kept() -> None:
    command = parse_args([MODEL, "--max-num-seqs", "64", "--max_num_seqs=128"], version="0.19.0")
    assert [f.value for f in command.flags if f.dest == "max_num_seqs"] == ["64", "128"]
    assert command.serving_args().max_num_seqs == 128
    assert command.last("max_num_seqs") is not None and command.last("max_num_seqs").index == 3


def test_unambiguous_prefix_accepted_ambiguous_refused() -> None:
    command = parse_args([MODEL, "--gpu-memory-util", "0.95", "--kv-cache-mem", "8G"], version="0.19.0")
    assert command.values["gpu_memory_utilization"] == "0.95"
    assert command.values["kv_cache_memory_bytes"] == "8G"
    assert command.flags[0].written == "--gpu-memory-util"
    ambiguous = parse_args([MODEL, "--max-num", "8"], version="0.19.0")
    assert any(e.startswith("ambiguous option: --max-num could match") for e in ambiguous.errors)


def test_abbreviation_with_underscores_is_normalised_first() -> None:
    # FlexibleArgumentParser turns _ into - before argparse matches prefixes.
    command = parse_args([MODEL, "--max_model=4096"], version="0.19.0")
    assert command.values == {"max_model_len": "4096"}
    assert command.flags[0].written == "--max_model"


def test_boolean_optional_action_pairs() -> None:
    on = parse_args([MODEL, "--enable-prefix-caching"], version="0.19.0")
    off = parse_args([MODEL, "--enable-prefix-caching", "--no-enable-prefix-caching"], version="0.19.0")
    assert on.serving_args().enable_prefix_caching is True
    assert off.serving_args().enable_prefix_caching is False


def test_enable_disable_pairs_only_from_0_33() -> None:
    new = parse_args([MODEL, "--disable-prefix-caching"], version="0.33.0")
    assert new.errors == [] and new.serving_args().enable_prefix_caching is False
    inverse = parse_args([MODEL, "--enable-hybrid-kv-cache-manager"], version="0.33.0")
    assert inverse.values == {"disable_hybrid_kv_cache_manager": False}
    old = parse_args([MODEL, "--disable-prefix-caching"], version="0.19.0")
    assert old.unknown == ["--disable-prefix-caching"]
    assert old.errors == ["unrecognized arguments: --disable-prefix-caching"]


def test_short_options_and_attached_values() -> None:
    command = parse_args([MODEL, "-tp", "4", "-pp=2", "-dp", "2", "-qfp8"], version="0.19.0")
    args = command.serving_args()
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.data_parallel_size) == (4, 2, 2)
    assert args.quantization == "fp8"
    assert args.gpus_total == 16


def test_optimization_level_shorthand() -> None:
    command = parse_args([MODEL, "-O3"], version="0.19.0")
    assert command.values == {"optimization_level": "3"}
    spaced = parse_args([MODEL, "-O", "0"], version="0.19.0")
    assert spaced.values == {"optimization_level": "0"}


def test_multi_value_option_is_greedy_like_argparse() -> None:
    command = parse_args(["--served-model-name", "a", "b", "--port", "8000", MODEL], version="0.19.0")
    assert command.values["served_model_name"] == ["a", "b"]
    assert command.model == MODEL


def test_dotted_json_arguments_are_merged() -> None:
    command = parse_args(
        [
            MODEL,
            "--compilation-config",
            '{"level": 1}',
            "--compilation-config.level",
            "3",
            "--compilation_config.cudagraph_capture_sizes+",
            "1,2",
        ],
        version="0.33.0",
    )
    assert command.values["compilation_config"] == {"level": 3, "cudagraph_capture_sizes": ["1", "2"]}


def test_dotted_values_read_human_integers_from_0_20() -> None:
    """vllm/utils/argparse_utils.py: a dotted value that is not JSON is tried as ``human_readable_int`` in 0.20.2
    and 0.33.0; 0.19.0 keeps the text (``--hf-overrides.max_position_embeddings 32k`` sets the string "32k")."""
    argv = [MODEL, "--hf-overrides.max_position_embeddings", "32k", "--hf-overrides.rope_scaling.rope_type", "yarn"]
    old = parse_args(argv, version="0.19.0").values["hf_overrides"]
    assert old == {"max_position_embeddings": "32k", "rope_scaling": {"rope_type": "yarn"}}
    for version in ("0.20.2", "0.33.0"):
        new = parse_args(argv, version=version).values["hf_overrides"]
        assert new == {"max_position_embeddings": 32000, "rope_scaling": {"rope_type": "yarn"}}


def test_serve_model_option_moved_from_0_12_and_refused_before() -> None:
    argv = ["vllm", "serve", "--model", MODEL, "-tp", "2"]
    new = parse_command(argv, version="0.19.0")
    assert new is not None and new.model == MODEL and new.model_source == "--model" and new.errors == []
    old = parse_command(argv, version="0.10.1.1")
    assert old is not None and old.model == MODEL
    assert any("refuses `vllm serve --model`" in e for e in old.errors)
    # The image entrypoint may be the api_server module, which takes --model: not an error there.
    assert parse_args(["--model", MODEL], version="0.10.1.1").errors == []


def test_api_server_uses_model_option() -> None:
    command = parse_command(
        ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--max-model-len", "8192"],
        version="0.10.1.1",
    )
    assert command is not None and command.entrypoint == "api_server" and command.model == MODEL


def test_missing_value_and_unknown_flags_are_errors() -> None:
    command = parse_args([MODEL, "--max-num-seqs", "--enforce-eager", "--made-up-flag"], version="0.19.0")
    assert "argument --max-num-seqs: expected one argument" in command.errors
    assert command.unknown == ["--made-up-flag"]
    assert command.values == {"enforce_eager": True}


def test_explicit_value_on_store_true_is_an_error() -> None:
    command = parse_args([MODEL, "--enforce-eager=yes"], version="0.19.0")
    assert command.errors and "ignored explicit argument" in command.errors[0]


def test_negative_numbers_are_values() -> None:
    command = parse_args([MODEL, "--max-model-len", "-1"], version="0.19.0")
    assert command.values == {"max_model_len": "-1"}


def test_double_dash_ends_options() -> None:
    command = parse_args(["--max-num-seqs", "8", "--", MODEL], version="0.19.0")
    assert command.model == MODEL and command.values == {"max_num_seqs": "8"}


def test_config_yaml_expanded_with_cli_precedence() -> None:
    files = {
        "/etc/vllm/config.yaml": "max-model-len: 8K\nmax_num_seqs: 7\nenforce-eager: true\n"
        "served-model-name: [a, b]\nspeculative-config: {model: draft, num_speculative_tokens: 3}\n"
    }
    command = parse_args(
        [MODEL, "--config", "/etc/vllm/config.yaml", "--max-num-seqs", "9"],
        version="0.19.0",
        read_config=files.get,
    )
    assert command.config_loaded
    values = command.values
    assert values["max_model_len"] == "8K" and values["max_num_seqs"] == "9" and values["enforce_eager"] is True
    assert values["served_model_name"] == ["a", "b"]
    assert command.serving_args().speculative_config == '{"model": "draft", "num_speculative_tokens": 3}'
    assert [f.source for f in command.flags if f.dest == "max_num_seqs"] == ["config", "argv"]


def test_config_false_booleans_per_release() -> None:
    files = {"c.yaml": "enable-prefix-caching: false\n"}
    new = parse_args([MODEL, "--config", "c.yaml"], version="0.33.0", read_config=files.get)
    old = parse_args([MODEL, "--config", "c.yaml"], version="0.19.0", read_config=files.get)
    assert new.values == {"enable_prefix_caching": False}
    assert old.values == {}


def test_config_not_available_is_reported_not_guessed() -> None:
    command = parse_args([MODEL, "--config", "/etc/vllm/config.yaml"], version="0.19.0")
    assert command.config_file == "/etc/vllm/config.yaml" and not command.config_loaded


def test_config_model_key_used_for_serve() -> None:
    command = parse_args(["--config", "c.yaml"], version="0.19.0", read_config={"c.yaml": f"model: {MODEL}"}.get)
    assert command.model == MODEL and command.model_source == "config"


def test_bad_config_yaml_raises_input_error() -> None:
    with pytest.raises(InvalidArgumentError):
        parse_args([MODEL, "--config", "c.yaml"], read_config={"c.yaml": "a: [b"}.get)


def test_invalid_values_raise_with_the_flag_name() -> None:
    command = parse_args([MODEL, "--max-num-seqs", "lots"], version="0.19.0")
    with pytest.raises(InvalidArgumentError, match="--max-num-seqs"):
        command.serving_args()
    zero = parse_args([MODEL, "--max-num-seqs", "0"], version="0.19.0")
    with pytest.raises(InvalidArgumentError, match="--max-num-seqs"):
        zero.serving_args()


def test_env_is_kept_for_vllm_variables_only() -> None:
    command = parse_args([MODEL])
    args = command.serving_args(env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "HF_TOKEN": "secret"})
    assert args.env == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}


def test_flag_table_release_selection() -> None:
    assert flag_table("0.19.0").release == "0.19.0"
    assert flag_table("v0.19.1").release == "0.19.0"
    assert flag_table("0.33").release == "0.33.0"
    assert flag_table("0.1.0").release == flag_table("0.0.1").release  # older than all: the oldest
    assert flag_table(None).release == flag_table("99.0.0").release
