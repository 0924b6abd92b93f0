"""Editing vLLM argv lists minimally, in the user's own spelling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.vllm.argv import ArgEdit, apply_edits, flag_edits, parse_args, parse_command, set_flag

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def test_replace_keeps_inline_spelling() -> None:
    argv = [MODEL, "--max_model_len=32k", "--max-num-seqs", "256"]
    command = parse_args(argv, version="0.19.0")
    assert set_flag(argv, command, "max_model_len", "8192") == [
        MODEL,
        "--max_model_len=8192",
        "--max-num-seqs",
        "256",
    ]
    assert set_flag(argv, command, "max_num_seqs", "64") == [
        MODEL,
        "--max_model_len=32k",
        "--max-num-seqs",
        "64",
    ]


def test_replace_edits_the_winning_duplicate_only() -> None:
    argv = [MODEL, "--max-num-seqs", "8", "--max-num-seqs", "512"]
    command = parse_args(argv, version="0.19.0")
    assert set_flag(argv, command, "max_num_seqs", "64") == [
        MODEL,
        "--max-num-seqs",
        "8",
        "--max-num-seqs",
        "64",
    ]


def test_replace_keeps_abbreviations_and_short_options() -> None:
    argv = [MODEL, "--gpu-memory-util", "0.95", "-tp", "2"]
    command = parse_args(argv, version="0.19.0")
    assert set_flag(argv, command, "gpu_memory_utilization", "0.9")[1:3] == ["--gpu-memory-util", "0.9"]
    assert set_flag(argv, command, "tensor_parallel_size", "4")[3:] == ["-tp", "4"]


def test_append_follows_the_users_style() -> None:
    underscores = [MODEL, "--max_num_seqs=8", "--enforce_eager"]
    command = parse_args(underscores, version="0.19.0")
    assert set_flag(underscores, command, "max_model_len", "4096")[-1] == "--max_model_len=4096"
    dashes = [MODEL, "--max-num-seqs", "8"]
    command = parse_args(dashes, version="0.19.0")
    assert set_flag(dashes, command, "max_model_len", "4096")[-2:] == ["--max-model-len", "4096"]
    bare = [MODEL]
    assert set_flag(bare, parse_args(bare), "max_model_len", "4096") == [MODEL, "--max-model-len", "4096"]


def test_append_goes_before_a_double_dash() -> None:
    argv = ["--max-num-seqs", "8", "--", MODEL]
    command = parse_args(argv, version="0.19.0")
    edits = flag_edits(argv, command, {"max_model_len": "4096", "gpu_memory_utilization": "0.9"})
    assert edits == [
        ArgEdit(op="insert", index=2, words=["--max-model-len", "4096"]),
        ArgEdit(op="insert", index=4, words=["--gpu-memory-utilization", "0.9"]),
    ]
    assert apply_edits(argv, edits) == [
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "4096",
        "--gpu-memory-utilization",
        "0.9",
        "--",
        MODEL,
    ]


def test_flag_from_config_is_overridden_on_the_command_line() -> None:
    argv = [MODEL, "--config", "c.yaml"]
    command = parse_args(argv, version="0.19.0", read_config={"c.yaml": "max-num-seqs: 512\n"}.get)
    assert set_flag(argv, command, "max_num_seqs", "64") == [*argv, "--max-num-seqs", "64"]


def test_edits_inside_a_full_command() -> None:
    argv = ["vllm", "serve", MODEL, "--max-model-len", "32768"]
    command = parse_command(argv, version="0.19.0")
    assert command is not None
    assert set_flag(argv, command, "max_model_len", "8192") == [
        "vllm",
        "serve",
        MODEL,
        "--max-model-len",
        "8192",
    ]


_FLAGS = st.sampled_from(
    [
        ("--max-num-seqs", "max_num_seqs"),
        ("--max_num_seqs", "max_num_seqs"),
        ("--max-model-len", "max_model_len"),
        ("--max_model_len", "max_model_len"),
        ("--gpu-memory-utilization", "gpu_memory_utilization"),
        ("--gpu-memory-util", "gpu_memory_utilization"),
        ("-tp", "tensor_parallel_size"),
        ("--dtype", "dtype"),
    ]
)
_VALUES = st.integers(min_value=1, max_value=999_999).map(str)


@st.composite
def argv_lists(draw: st.DrawFn) -> list[str]:
    words = [MODEL]
    for option, _ in draw(st.lists(_FLAGS, max_size=8)):
        value = draw(_VALUES)
        if draw(st.booleans()) and option.startswith("--"):
            words.append(f"{option}={value}")
        else:
            words += [option, value]
        if draw(st.booleans()):
            words.append(
                draw(st.sampled_from(["--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching"]))
            )
    return words


@pytest.mark.slow
@given(
    argv_lists(),
    st.dictionaries(st.sampled_from(["max_num_seqs", "max_model_len", "gpu_memory_utilization"]), _VALUES, min_size=1),
)
def test_edits_set_exactly_the_wanted_values(argv: list[str], changes: dict[str, str]) -> None:
    before = parse_args(argv, version="0.19.0")
    edited = apply_edits(argv, flag_edits(argv, before, changes))
    after = parse_args(edited, version="0.19.0")
    assert after.errors == []
    expected = {**before.values, **changes}
    assert after.values == expected
    # Minimal: every original word is still there, in order, unless it was the replaced value.
    assert len(edited) >= len(argv)
    changed = [i for i, (a, b) in enumerate(zip(argv, edited[: len(argv)], strict=True)) if a != b]
    assert len(changed) <= len(changes)
    # Idempotent: applying the same changes again changes nothing.
    assert apply_edits(edited, flag_edits(edited, after, changes)) == edited
