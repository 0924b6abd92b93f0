"""The worked examples of DESIGN.md, reproduced exactly."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.cli import app
from planner.cli.estimate import kv_bytes_per_token
from planner.models.spec import ModelSpec

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _plain(layers: int, kv_heads: int, head_dim: int) -> ModelSpec:
    return ModelSpec(
        id="x",
        architecture="x",
        model_type="llama",
        num_layers=layers,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=32000,
        intermediate_size=1,
        derived_max_model_len=131072,
        layer_pattern="F" * layers,
    )


def test_32_layers_8_heads_128_dim_costs_128_kib_per_token() -> None:
    assert kv_bytes_per_token(_plain(32, 8, 128), "auto", 2) == 128 * KiB == 131_072


def test_estimate_cli_gives_4_gib_per_32k_sequence_and_32_gib_for_eight() -> None:
    result = CliRunner().invoke(
        app,
        [
            "estimate",
            "--layers",
            "32",
            "--kv-heads",
            "8",
            "--head-dim",
            "128",
            "--tokens",
            "32768",
            "--num-seqs",
            "8",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["bytes_per_token"] == 131_072
    assert data["sequences"] == [{"tokens": 32768, "bytes": 4 * GiB}]
    assert data["total_bytes"] == 32 * GiB


def test_qwen25_7b_instruct_costs_56_kib_per_token(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("Qwen--Qwen2.5-7B-Instruct")
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (28, 4, 128)
    assert kv_bytes_per_token(spec, "auto", None) == 56 * KiB == 57_344


def test_qwen25_7b_sequences_are_56_448_1792_mib_together_2296() -> None:
    result = CliRunner().invoke(
        app,
        [
            "estimate",
            "--layers",
            "28",
            "--kv-heads",
            "4",
            "--head-dim",
            "128",
            "--tokens",
            "1024,8192,32768",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [s["bytes"] for s in data["sequences"]] == [56 * MiB, 448 * MiB, 1792 * MiB]
    assert data["total_bytes"] == 2296 * MiB
