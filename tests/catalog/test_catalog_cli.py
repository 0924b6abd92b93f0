"""``planner gpus`` and ``planner models``: the JSON contract of DESIGN.md, tables, and bad names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.gpus import all_gpus
from planner.models.catalog import all_models

MiB = 1 << 20


def _run(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_gpus_json_contract() -> None:
    rows = json.loads(_run("gpus", "--output", "json").stdout)
    assert isinstance(rows, list)
    assert [row["name"] for row in rows] == [g.name for g in all_gpus()]
    for row in rows:
        assert isinstance(row["name"], str)
        assert isinstance(row["aliases"], list)
        assert isinstance(row["memory_bytes"], int) and row["memory_bytes"] > 0
        assert isinstance(row["bandwidth_bytes_per_s"], int) and row["bandwidth_bytes_per_s"] > 0
    by_name = {row["name"]: row for row in rows}
    assert by_name["A100-80GB"]["memory_bytes"] == 81050 * MiB
    assert by_name["A100-80GB"]["memory_gib"] == 79.15
    assert "NVIDIA A100-SXM4-80GB" in by_name["A100-80GB"]["aliases"]  # nvidia-smi / GFD spelling
    assert {p["name"] for p in by_name["A100-80GB"]["mig_profiles"]} >= {"1g.10gb", "3g.40gb", "7g.80gb"}


def test_gpus_one_gpu_by_any_name() -> None:
    row = json.loads(_run("gpus", "NVIDIA-H100-80GB-HBM3", "-o", "json").stdout)
    assert row["name"] == "H100-80GB"
    table = _run("gpus", "p4de.24xlarge").stdout
    assert "A100-80GB" in table and "3g.40gb" in table and "79.15 GiB" in table


def test_gpus_instance_types() -> None:
    rows = json.loads(_run("gpus", "--instance-types", "-o", "json").stdout)
    by_name = {row["name"]: row for row in rows}
    assert by_name["p4d.24xlarge"] == {
        "name": "p4d.24xlarge",
        "provider": "aws",
        "gpu": "A100-40GB",
        "count": 8,
    }
    assert by_name["a3-highgpu-8g"]["gpu"] == "H100-80GB"
    assert "g6e.12xlarge" in _run("gpus", "--instance-types").stdout


def test_gpus_table() -> None:
    table = _run("gpus").stdout
    for name in ("A100-80GB", "H100-80GB", "L40S", "MI300X", "RTX-4090"):
        assert name in table


@pytest.mark.parametrize(("name", "hint"), [("H100-SXM-80GB", "H100-80GB")])
def test_unknown_gpu_exits_2_with_suggestions(name: str, hint: str) -> None:
    result = CliRunner().invoke(app, ["gpus", name])
    assert result.exit_code == 2
    assert "Did you mean" in result.output and hint in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", ["A100", "a100"])
def test_an_ambiguous_gpu_name_is_called_ambiguous_and_lists_every_candidate(name: str) -> None:
    result = CliRunner().invoke(app, ["recommend", "--gpu", name, "--model", "meta-llama/Llama-3.1-8B-Instruct"])
    assert result.exit_code == 2
    assert f"Ambiguous GPU {name!r}" in result.output and "Unknown" not in result.output
    assert "A100-40GB" in result.output and "A100-80GB" in result.output


def test_models_json() -> None:
    rows = json.loads(_run("models", "-o", "json").stdout)
    assert len(rows) == len(all_models()) >= 50
    assert {"id", "architecture", "num_layers", "num_kv_heads", "head_dim", "layer_pattern", "source"} <= set(rows[0])
    one = json.loads(_run("models", "llama-3.1-8b-instruct", "-o", "json").stdout)
    assert one["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert one["checkpoint_bytes"] == 16_060_522_496


def test_models_table_and_detail() -> None:
    table = _run("models").stdout
    assert "Qwen/Qwen2.5-7B-Instruct" in table
    detail = _run("models", "deepseek-ai/DeepSeek-V3").stdout
    assert "kv_lora_rank 512" in detail and "verified" in detail


def test_unknown_model_exits_2() -> None:
    result = CliRunner().invoke(app, ["models", "meta-llama/Llama-3.1-9B-Instruct"])
    assert result.exit_code == 2
    assert "Did you mean" in result.output and "meta-llama/Llama-3.1-8B-Instruct" in result.output
