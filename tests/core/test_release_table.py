"""The release table: parsing versions, picking rows, and the docs staying identical to the code."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.errors import UnknownVllmVersionError
from planner.plan.engine import mamba_blocks_and_alignment
from planner.vllm.release_table import BEGIN, END, render
from planner.vllm.releases import RELEASES, Version, resolve_release
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


def test_every_minor_release_has_its_own_row() -> None:
    # A row read in that release's own source for every minor 0.6-0.33.
    minors = {tuple(int(part) for part in row.since.split(".")[:2]) for row in RELEASES}
    assert {(0, minor) for minor in range(6, 34)} <= minors
    for row in RELEASES:
        read = row.evidence.split(":", 1)[0]
        assert read.split(".")[:2] == row.since.split(".")[:2], (row.since, read)


def test_newer_release_is_planned_as_the_newest_with_a_warning() -> None:
    _, row, warnings = resolve_release("0.40.1")
    assert row.since == "0.33.0" and [w.code for w in warnings] == ["KVP104"]
    with pytest.raises(UnknownVllmVersionError):
        resolve_release("0.5.4")


def test_docs_table_is_generated_from_the_code() -> None:
    text = (REPO_ROOT / "docs" / "vllm-releases.md").read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render(), "docs/vllm-releases.md is stale: python -m planner.vllm.release_table"


@pytest.mark.parametrize(
    "version", ["0.9.2", "0.16.0", "0.22.1", "0.23.0", "0.24.0", "0.25.1", "0.27.1", "0.28.0", "0.29.0", "0.32.0"]
)
def test_gap_releases_have_their_own_checked_row(version: str) -> None:
    # Each was read in its own wheel (vllm X.Y.Z), not borrowed from the older neighbour's row.
    _, row, _ = resolve_release(version)
    assert row.since.rsplit(".", 1)[0] == version.rsplit(".", 1)[0]  # that minor's row, or its patch row
    assert version in row.evidence.split(":", 1)[0].split(" and ")


def test_changes_inside_the_0_21_to_0_26_gap_land_where_the_source_has_them() -> None:
    # vllm 0.22.1 v1/core/kv_cache_utils.py: _check_enough_kv_cache_memory says "model's" and mentions
    # the CPU backend (0.21.0: "models's").
    assert resolve_release("0.21.0")[1].fit_error_style == "e3"
    assert resolve_release("0.22.1")[1].fit_error_style == "e4"
    # vllm 0.25.1 config/cache.py: CacheDType gains int4_per_token_head (absent in 0.24.0).
    assert "int4_per_token_head" not in resolve_release("0.24.0")[1].kv_cache_dtypes
    assert "int4_per_token_head" in resolve_release("0.25.1")[1].kv_cache_dtypes
    # vllm 0.25.1 v1/kv_cache_interface.py: the window still adds max_num_batched_tokens; 0.26.0 adds
    # max_in_flight_tokens.
    assert resolve_release("0.25.1")[1].sliding_in_flight == "mnbt"
    assert resolve_release("0.26.0")[1].sliding_in_flight == "concurrent_batches"


def test_mxfp4_trtllm_intermediate_alignment_moved_in_0_27() -> None:
    # vllm fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size, TRT-LLM branch:
    # round_up(intermediate_size, 256) in 0.26.0, 128 in 0.27.1.
    assert resolve_release("0.26.0")[1].mxfp4_blackwell_intermediate_align == 256
    assert resolve_release("0.27.1")[1].mxfp4_blackwell_intermediate_align == 128
    assert resolve_release("0.32.0")[1].mxfp4_blackwell_intermediate_align == 128


def test_0_16_plans_as_0_15() -> None:
    # Read in 0.16.0: fit check, sampler and MLA block sizes are still 0.15's (they change in 0.17/0.18).
    fields = set(resolve_release("0.15.1")[1].model_dump()) - {"since", "evidence"}
    old, new = resolve_release("0.15.1")[1], resolve_release("0.16.0")[1]
    assert {f: getattr(new, f) for f in fields} == {f: getattr(old, f) for f in fields}
    assert new.fit_check == "first_group_global" and new.sampler_kernel == "sort_scatter"


def test_0_28_turns_hybrid_prefix_caching_on_with_align_for_every_model() -> None:
    # vllm 0.28.0 engine/arg_utils.py: prefix caching defaults to is_prefix_caching_supported (true for
    # hybrids; 0.27.1 still excluded them), and model_executor/models/config.py
    # MambaModelConfig.verify_and_update_config picks "align" for every model (0.27.1: "all" where
    # supported). v1/kv_cache_interface.py MambaSpec: align keeps 2 blocks (no prefill checkpoint field
    # before 0.29, none set for Mamba2 before 0.32).
    old, new = resolve_release("0.27.1")[1], resolve_release("0.28.0")[1]
    assert (old.hybrid_prefix_caching_default, old.mamba_prefix_mode) == (False, "all_or_align")
    assert (new.hybrid_prefix_caching_default, new.mamba_prefix_mode) == (True, "align_2")
    model = SimpleNamespace(layer_pattern="MMA", model_type="nemotron_h", mla=None, mamba=None)
    gpu = SimpleNamespace(architecture="hopper")
    pc_on = SimpleNamespace(enable_prefix_caching=True)
    assert mamba_blocks_and_alignment(model, gpu, old, pc_on) == (None, 16)  # type: ignore[arg-type]
    assert mamba_blocks_and_alignment(model, gpu, new, pc_on) == (2, 16)  # type: ignore[arg-type]


def test_0_28_has_the_160_gib_batch_tier() -> None:
    # vllm 0.28.0 engine/arg_utils.py get_batch_defaults: >= 160 GiB -> 16384 tokens / 1024 seqs.
    assert max(b.min_memory_gib for b in resolve_release("0.27.1")[1].batch_defaults) == 70
    tiers = resolve_release("0.28.0")[1].batch_defaults
    assert (tiers[0].min_memory_gib, tiers[0].max_num_batched_tokens, tiers[0].max_num_seqs) == (160, 16384, 1024)
    assert "nvfp4_4over6" in resolve_release("0.28.0")[1].kv_cache_dtypes
