"""The frictions a new user met in their first ten minutes (issue 18), one test each.

Each runs the real console entry point in a subprocess at an 80-column terminal width, as a user's
shell would, and checks what a person reads: the exit code, stdout and stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def planner(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "HF_HUB_OFFLINE": "1"}
    env.pop("TERMINAL_WIDTH", None)
    return subprocess.run(
        [sys.executable, "-c", "from planner.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_non_positive_max_num_seqs_is_a_usage_error_naming_the_flag(value: str) -> None:
    result = planner("recommend", "--gpu", "A100-80GB", "--model", LLAMA_8B, "--max-num-seqs", value)
    assert result.returncode == 2, result.stderr
    assert (
        "--max-num-seqs" in result.stderr and value in result.stderr and "greater than or equal to 1" in result.stderr
    )
    assert "internal error" not in result.stderr


def test_the_catalog_table_explains_its_columns_and_the_next_step() -> None:
    result = planner("recommend", "--gpu", "A100-80GB")
    assert result.returncode == 0
    assert "--max-num-seqs @4k" in result.stdout  # integer limits, not raw fractional concurrency
    assert "10% of the KV blocks kept free" in result.stdout  # the headroom applied, and said
    assert "Next: planner recommend --gpu A100-80GB --model" in result.stdout


def test_the_catalog_json_keeps_raw_concurrency_and_adds_the_safe_limits() -> None:
    payload = json.loads(planner("recommend", "--gpu", "A100-80GB", "-o", "json").stdout)
    assert payload["headroom"] == 0.1
    row = next(m for m in payload["models"] if m["id"] == LLAMA_8B)
    assert row["max_concurrency_4096"] > row["max_num_seqs_4096"] >= 1


def test_flags_the_catalog_table_ignores_are_named() -> None:
    result = planner("recommend", "--gpu", "A100-80GB", "--workload", '{"prompt_tokens": {"p50": 100}}')
    assert result.returncode == 0
    assert "--workload is ignored without --model" in result.stderr


def test_the_catalog_json_note_is_a_whole_sentence() -> None:
    payload = json.loads(planner("recommend", "--gpu", "A100-80GB", "-o", "json").stdout)
    notes = [m["note"] for m in payload["models"] if m["note"] and m["note"].startswith("Model weights")]
    assert notes, "a model too big for one A100-80GB is in the catalog"
    assert all("GiB per GPU) do not fit" in note for note in notes)  # not cut at "(131."


def test_output_args_prints_nothing_when_only_another_setup_fits() -> None:
    result = planner("recommend", "--gpu", "A100-80GB", "--model", "meta-llama/Llama-3.1-70B-Instruct", "-o", "args")
    assert result.returncode == 1
    assert result.stdout == ""  # never the alternative's --tensor-parallel-size on stdout
    assert "does not fit as asked" in result.stderr and "--tensor-parallel-size" in result.stderr


def test_output_args_prints_the_arguments_when_it_fits() -> None:
    result = planner("recommend", "--gpu", "A100-80GB", "--model", LLAMA_8B, "-o", "args")
    assert result.returncode == 0
    assert result.stdout.startswith("--max-model-len ")


def test_a_kv_budget_in_bytes_without_a_unit_is_questioned() -> None:
    result = planner("recommend", "--gpu", "A100-80GB", "--model", LLAMA_8B, "--kv-cache-memory-bytes", "20")
    assert "is 20 bytes (under 1 MiB)" in result.stderr and "write a unit" in result.stderr


def test_gpu_memory_replacing_a_catalog_card_is_said() -> None:
    result = planner("recommend", "--gpu", "A100-80GB", "--gpu-memory", "40GiB", "--model", LLAMA_8B)
    assert result.returncode in (0, 1)
    assert "--gpu-memory 40GiB replaces A100-80GB's 79.15 GiB" in result.stderr


def test_a_headroom_that_leaves_no_sequence_is_said() -> None:
    result = planner("recommend", "--gpu", "L4", "--model", LLAMA_8B, "--max-model-len", "32K", "--headroom", "0.99")
    assert "leaves no room for even one sequence" in result.stderr


def test_checking_a_chart_directory_says_to_render_it_first() -> None:
    result = planner("check", "-f", str(REPO / "charts"))
    assert result.returncode == 2
    assert "is a Helm chart" in result.stderr and "helm template" in result.stderr


def test_python_m_admission_accepts_dash_h() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "admission", "-h"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0 and "webhook" in result.stdout


def test_help_never_cuts_flag_names_at_80_columns() -> None:
    text = planner("recommend", "--help").stdout
    for flag in ("--max-num-batched-tokens", "--gpu-memory-utilization", "--disable-hybrid-kv-cache-manager"):
        assert flag in text
    assert "…" not in text


def test_per_token_bytes_are_not_labelled_tp1_under_tensor_parallelism() -> None:
    result = planner("recommend", "--gpu", "H100-80GB", "--model", "meta-llama/Llama-3.1-70B-Instruct", "-tp", "4")
    assert "TP=1" not in result.stdout
    assert "per token (whole model, across 4 GPUs)" in result.stdout


def test_hybrid_kv_groups_are_counted_not_repeated() -> None:
    result = planner("recommend", "--gpu", "H100-80GB", "--model", "google/gemma-3-27b-it")
    groups = next(line for line in result.stdout.splitlines() if "groups" in line)
    assert " x" in groups and groups.count("sliding_window") == 1
    # The budget and KV-layout tables stay narrow with the groups counted (the "What would fit" table after
    # them is as wide as its longest suggested change).
    plan_part = result.stdout.split("What would fit")[0]
    table_lines = [line for line in plan_part.splitlines() if line[:1] in "┌│└┏┃┡┗"]
    assert max(len(line) for line in table_lines) <= 100


DEEP_YAML = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "-f", str(REPO / "examples" / "deployment.yaml"), "--policy", "{deep}"],
        ["check", "-f", "{deep}"],
        ["recommend", "--gpu", "L4", "--model", LLAMA_8B, "--workload", "{deep}"],
        ["recommend", "--gpu", "L4", "--model", LLAMA_8B, "--calibration", "{deep}"],
        ["recommend", "--gpu", "L4", "--model", LLAMA_8B, "--workload", "/dev/zero"],
        ["recommend", "--gpu", "L4", "--model", LLAMA_8B, "--calibration", "/dev/zero"],
        ["validate", "{deep}"],
        ["validate", "/dev/zero"],
        ["calibrate", "--fit", "{deep}"],
    ],
)
def test_hostile_input_files_are_usage_errors_not_internal_errors(argv: list[str], tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text(DEEP_YAML)
    result = planner(*(str(deep) if part == "{deep}" else part for part in argv))
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
