"""The generated flag table: known facts per release, generated from the wheels scripts/vllm_facts.py reads."""

from __future__ import annotations

import pytest

from planner.vllm.argv import flag_table
from planner.vllm.argv_flags import RELEASES
from tests.sim import vllm_source


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


def test_table_covers_the_releases_whose_wheels_were_read() -> None:
    """The table is generated from the same wheels as the recorded metric facts; `scripts/vllm_facts.py
    --check` re-reads them (about 7 GB, so not in every run) and fails when either file is stale."""
    read = [".".join(version.split(".")[:3]) for version in vllm_source.available_versions()]
    assert list(RELEASES) == read
