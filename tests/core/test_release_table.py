"""The release table: parsing versions, picking rows, and the docs staying identical to the code."""

from __future__ import annotations

import pytest

from planner.errors import UnknownVllmVersionError
from planner.vllm.release_table import BEGIN, END, render
from planner.vllm.releases import Version, resolve_release
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.19.0", "0.19.0"),
        ("v0.10.1.1", "0.10.1"),
        ("0.8.5.post1", "0.8.5"),
        ("0.33", "0.33.0"),
        ("0.20.2+cu129", "0.20.2"),
    ],
)
def test_version_syntax(text: str, expected: str) -> None:
    assert str(Version.parse(text)) == expected


@pytest.mark.parametrize("text", ["latest", "", "1", "0.x.1"])
def test_bad_version_is_refused(text: str) -> None:
    with pytest.raises(UnknownVllmVersionError):
        Version.parse(text)


def test_rows_follow_the_checked_releases() -> None:
    assert resolve_release("0.19.0")[1].default_gpu_memory_utilization == 0.9
    assert resolve_release("0.20.2")[1].default_gpu_memory_utilization == 0.92
    assert resolve_release("0.17.1")[1].group_size_threshold == 1.25
    assert resolve_release("0.18.0")[1].group_size_threshold == 1.5
    assert resolve_release("0.21.0")[1].sliding_in_flight == "mnbt"
    assert resolve_release("0.26.0")[1].sliding_in_flight == "concurrent_batches"
    assert resolve_release("0.13.0")[1].max_model_len_auto is False
    assert resolve_release("0.14.0")[1].max_model_len_auto is True
    assert resolve_release(None)[1].since == "0.33.0"


def test_newer_release_is_planned_as_the_newest_with_a_warning() -> None:
    _, row, warnings = resolve_release("0.40.1")
    assert row.since == "0.33.0" and [w.code for w in warnings] == ["KVP104"]
    with pytest.raises(UnknownVllmVersionError):
        resolve_release("0.5.4")


def test_docs_table_is_generated_from_the_code() -> None:
    text = (REPO_ROOT / "docs" / "vllm-releases.md").read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render(), "docs/vllm-releases.md is stale: python -m planner.vllm.release_table"
