"""The generated flag table: known facts per release, and in sync with vLLM's source when it is here."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from planner.vllm.argv import flag_table

REPO = Path(__file__).resolve().parents[2]
VLLM_SRC = Path(os.environ.get("KV_PLANNER_VLLM_SRC", "/work/vllm-src"))


@pytest.mark.parametrize(
    ("release", "option", "expected"),
    [
        ("0.19.0", "--max-model-len", ("max_model_len", "value")),
        ("0.19.0", "--served-model-name", ("served_model_name", "multi")),
        ("0.19.0", "--enable-prefix-caching", ("enable_prefix_caching", "true")),
        ("0.19.0", "--no-enable-prefix-caching", ("enable_prefix_caching", "false")),
        ("0.19.0", "-tp", ("tensor_parallel_size", "value")),
        ("0.19.0", "--port", ("port", "value")),
        ("0.19.0", "--middleware", ("middleware", "value")),  # action="append": one value each time
        ("0.33.0", "--disable-prefix-caching", ("enable_prefix_caching", "false")),
        ("0.33.0", "--device-memory-utilization", ("gpu_memory_utilization", "value")),
        ("0.33.0", "--hf-token", ("hf_token", "optional")),
        ("0.10.1", "--swap-space", ("swap_space", "value")),
        ("0.8.5", "-O", ("compilation_config", "value")),
    ],
)
def test_known_options(release: str, option: str, expected: tuple[str, str]) -> None:
    assert flag_table(release).options[option] == expected


def test_removed_options_are_gone() -> None:
    assert "--swap-space" not in flag_table("0.18.0").options  # removed from CacheConfig by 0.18
    assert "--disable-prefix-caching" not in flag_table("0.26.0").options


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_vllm_flags", REPO / "scripts" / "gen_vllm_flags.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_vllm_flags"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("release", ["0.19.0"])
def test_table_matches_the_release_source(release: str) -> None:
    root = VLLM_SRC / release
    if not (root / "vllm" / "engine" / "arg_utils.py").is_file():
        pytest.skip(f"{root} is absent (unpack the vLLM wheel's vllm/*.py there)")
    assert _generator().serve_options(root) == flag_table(release).options
