"""Random invocations of every command with hostile values: never a traceback, never "internal error".

Each invocation runs in-process through typer's runner (the same error boundary as the console script)
and must end in 0 (fits / ok), 1 (does not fit / would deny), 2 (bad input) or 3 (model unavailable).
Exit 70 (internal error) or an escaped exception is a kv-planner bug. Hypothesis runs derandomized
(the profile in tests/conftest.py), so a failure reproduces.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import app

ALLOWED_EXITS = {0, 1, 2, 3}
REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted(str(p) for p in (REPO / "tests" / "k8s" / "manifests").glob("*.yaml"))

# Values a hurried user or a script types: zero, negatives, huge, fractional, empty, unit slips, junk.
NUMBERS = st.sampled_from(
    [
        "0",
        "-1",
        "-5",
        "1",
        "2",
        "7",
        "64",
        "1e309",
        "nan",
        "inf",
        "-inf",
        "0.0",
        "0.5",
        "1.5",
        "0.99",
        "1.0",
        "99999999999999999999",
        "",
        " ",
        "abc",
        "32k",
        "32K",
        "20G",
        "1Mi",
        "auto",
        "-0",
        "0x10",
        "1_000",
        "３",
    ]
)
WORDS = st.sampled_from(
    [
        "auto",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "bfloat16",
        "float16",
        "float32",
        "int8",
        "awq",
        "gptq",
        "",
        " ",
        "x" * 300,
        "A100-80GB",
        "a100",
        "H100-80GB",
        "L4",
        "T4",
        "RTX-4090",
        "MI300X",
        "nope",
        "../etc/passwd",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "google/gemma-3-27b-it",
        "json",
        "yaml",
        "table",
        "args",
        "0.19.0",
        "0.6.0",
        "99.0.0",
        "v0.11.2",
        "1",
        "-1",
    ]
)

RECOMMEND_NUMERIC = [
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--block-size",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--headroom",
    "--cpu-offload-gb",
    "--num-gpu-blocks-override",
    "--max-loras",
    "--max-lora-rank",
    "--gpu-memory",
]
RECOMMEND_WORDS = ["--gpu", "--model", "--kv-cache-dtype", "--dtype", "--quantization", "--vllm-version", "--output"]
ESTIMATE_NUMERIC = ["--layers", "--kv-heads", "--head-dim", "--dtype-bytes", "--num-seqs", "--tokens"]


def _options(numeric: list[str], words: list[str]) -> st.SearchStrategy[list[str]]:
    pairs = [
        st.tuples(st.sampled_from(flags), values) for flags, values in ((numeric, NUMBERS), (words, WORDS)) if flags
    ]
    return st.lists(st.one_of(*pairs), min_size=0, max_size=5).map(lambda chosen: [part for p in chosen for part in p])


@st.composite
def invocations(draw: st.DrawFn) -> list[str]:
    command = draw(
        st.sampled_from(
            ["recommend", "recommend-model", "estimate", "gpus", "models", "check", "validate", "calibrate"]
        )
    )
    if command == "check":
        files = draw(
            st.lists(st.sampled_from([*MANIFESTS, "-", "/nonexistent.yaml", str(REPO / "charts")]), max_size=2)
        )
        return ["check", *(part for f in files for part in ("-f", f)), *draw(_options([], ["--gpu", "--output"]))]
    if command in ("validate", "calibrate"):
        paths = draw(st.lists(st.sampled_from([*MANIFESTS, "/nonexistent.jsonl", str(REPO / "README.md")]), max_size=2))
        return [command, *paths, *draw(_options([], ["--gpu", "--model", "--output"]))]
    if command == "recommend":
        return ["recommend", *draw(_options(RECOMMEND_NUMERIC, RECOMMEND_WORDS))]
    if command == "recommend-model":
        base = ["recommend", "--gpu", draw(st.sampled_from(["A100-80GB", "L4", "H100-80GB"]))]
        base += ["--model", draw(st.sampled_from(["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B"]))]
        return [*base, *draw(_options(RECOMMEND_NUMERIC, RECOMMEND_WORDS))]
    if command == "estimate":
        return ["estimate", *draw(_options(ESTIMATE_NUMERIC, ["--model", "--kv-cache-dtype", "--output"]))]
    return [command, *draw(st.lists(WORDS, max_size=2)), *draw(_options([], ["--output"]))]


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _offline() -> None:
    # Never reach out to the Hub from a fuzz case: unknown names must fail fast and cleanly.
    os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 2,000 invocations: about a minute alone, several on a loaded machine
@settings(max_examples=2000, suppress_health_check=list(HealthCheck), deadline=None, derandomize=True)
@given(argv=invocations())
def test_random_invocations_never_end_in_an_internal_error(
    runner: CliRunner, argv: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    result = runner.invoke(
        app, argv, env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(Path(tmp_path_factory.getbasetemp()) / "hf")}
    )
    output = result.output
    assert result.exit_code in ALLOWED_EXITS, f"planner {' '.join(argv)!r} exited {result.exit_code}:\n{output}"
    assert "Traceback" not in output and "internal error" not in output, f"planner {argv!r}:\n{output}"
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), f"planner {argv!r} raised {result.exception!r}"
