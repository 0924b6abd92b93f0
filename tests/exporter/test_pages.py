"""Normalizing /metrics pages of several vLLM releases (renamed metrics, engine label, missing labels)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.exporter.normalize import USAGE_NEW, USAGE_OLD, parse_page
from planner.errors import ScrapeError
from planner.sim.versions import modelled_release, parse_version
from planner.vllm import metrics_catalog as catalog
from tests.exporter.conftest import PAGES, Page
from tests.sim import vllm_source as src
from tests.sim.test_catalog_source import V0_NOT_MODELLED


def _families(text: str) -> set[str]:
    # prometheus_client's text format shows counters'/histograms' `_created` samples as gauge families.
    return {
        f.name
        for f in text_string_to_metric_families(text)
        if f.name.startswith("vllm:") and not f.name.endswith("_created")
    }


def test_fixtures_cover_the_renames() -> None:
    releases = {(p.release, p.engine_kind) for p in PAGES}
    assert {("0.8.5", "v1"), ("0.10.2", "v1"), ("0.12.0", "v1"), ("0.8.5", "v0")} <= releases
    assert any(len(p.engines) > 1 for p in PAGES)


def test_fixture_families_match_the_catalogue_and_the_source(page: Page) -> None:
    _, version = modelled_release(page.release)
    expected = {f.name for f in catalog.families(version, page.engine_kind)} | {catalog.CACHE_CONFIG_INFO}  # type: ignore[arg-type]
    assert _families(page.text) == expected
    source_version = {"0.8.5": "0.8.5.post1"}.get(page.release, page.release)
    if page.engine_kind == "v1":
        from_source = {f.name for f in src.v1_families(source_version) if not f.conditions}
    else:
        from_source = {f.name for f in src.v0_families(source_version) if not f.conditions} - V0_NOT_MODELLED
    assert _families(page.text) - {catalog.CACHE_CONFIG_INFO} == from_source


def test_pages_normalize_to_the_same_signals(page: Page) -> None:
    engines, missing = parse_page(page.text)
    assert [e.engine for e in engines] == list(page.engines)
    assert missing == []
    new_name = page.engine_kind == "v1" and parse_version(page.release) >= (0, 10, 1)
    for engine in engines:
        assert engine.model_name == "meta-llama/Llama-3.1-8B-Instruct"
        assert engine.num_gpu_blocks == page.num_gpu_blocks and engine.block_size == page.block_size
        assert engine.usage_metric == (USAGE_NEW if new_name else USAGE_OLD)
        assert engine.kv_cache_usage is not None and 0.5 < engine.kv_cache_usage <= 1.0
        assert engine.running is not None and engine.running > 0
        assert engine.waiting is not None and engine.waiting > 0
        assert engine.prompt_tokens is not None and engine.prompt_tokens[-1][1] > 0
    assert sum(e.preemptions_total or 0 for e in engines) == page.preemptions


def test_old_and_new_usage_names_agree_where_both_are_shown() -> None:
    both = next(p for p in PAGES if p.release == "0.10.2")
    samples = {
        f.name: f.samples[0].value
        for f in text_string_to_metric_families(both.text)
        if f.name in (USAGE_NEW, USAGE_OLD)
    }
    assert samples[USAGE_NEW] == samples[USAGE_OLD]
    without_new = "\n".join(line for line in both.text.splitlines() if USAGE_NEW not in line)
    engines, _ = parse_page(without_new)
    assert engines[0].usage_metric == USAGE_OLD and engines[0].kv_cache_usage == samples[USAGE_OLD]


def test_missing_signals_are_reported_not_zeroed() -> None:
    page = next(p for p in PAGES if p.release == "0.33.0")
    kept = [
        line for line in page.text.splitlines() if "cache_config_info" not in line and "num_preemptions" not in line
    ]
    engines, missing = parse_page("\n".join(kept))
    assert set(missing) == {"cache_config", "preemptions"}
    assert engines[0].num_gpu_blocks is None and engines[0].preemptions_total is None


def test_cache_config_before_start_up_counts_as_missing() -> None:
    page = next(p for p in PAGES if p.release == "0.12.0")
    text = page.text.replace(f'num_gpu_blocks="{page.num_gpu_blocks}"', 'num_gpu_blocks="None"')
    engines, missing = parse_page(text)
    assert engines[0].num_gpu_blocks is None and "cache_config" in missing


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<html>503 Service Unavailable</html>\n", "no vLLM metrics"),
        ("", "no vLLM metrics"),
        ('vllm:num_requests_running{engine="0",model_name="m"} banana\n', "bad sample value"),
        ('vllm:num_requests_running{engine="0",model_name="m} 1\n', "malformed"),
    ],
)
def test_garbage_pages_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(ScrapeError, match=fragment):
        parse_page(text)


def test_a_truncated_page_is_rejected() -> None:
    page = next(p for p in PAGES if p.release == "0.19.0")
    lines = page.text.splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_running{"))
    truncated = "\n".join(lines[:cut]) + "\n" + lines[cut][:30]
    with pytest.raises(ScrapeError):
        parse_page(truncated)


def test_next_signals_are_normalized_per_release() -> None:
    """Finish reasons, queue/e2e sums, tokens, prefix cache, waiting by reason (0.33 fixture), plus the
    option-only families (speculative decoding; KV offload in its 0.16-0.26 and 0.33 spellings)."""
    page = next(p for p in PAGES if p.release == "0.33.0")
    engine = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    spec = (
        f"vllm:spec_decode_num_drafts_total{{{engine}}} 10\n"
        f"vllm:spec_decode_num_draft_tokens_total{{{engine}}} 40\n"
        f"vllm:spec_decode_num_accepted_tokens_total{{{engine}}} 30\n"
    )
    legacy = (
        f'vllm:kv_offload_total_bytes_total{{{engine},transfer_type="GPU_to_CPU"}} 2048\n'
        f'vllm:kv_offload_total_bytes_total{{{engine},transfer_type="CPU_to_GPU"}} 1024\n'
        f'vllm:kv_offload_total_bytes_total{{{engine},transfer_type="CPU_to_DISK"}} 7\n'
    )
    flat = f"vllm:kv_offload_store_bytes_total{{{engine}}} 4096\nvllm:kv_offload_load_bytes_total{{{engine}}} 512\n"
    [base], _ = parse_page(page.text)
    assert base.finished is not None and set(base.finished) == {"stop", "length", "abort", "error", "repetition"}
    assert base.queue_time_count == base.e2e_latency_count == sum(base.finished.values()) > 0
    assert base.prompt_tokens_processed and base.generation_tokens_processed
    assert base.prefix_cache_queries is not None and base.waiting_by_reason is not None
    assert set(base.waiting_by_reason) == {"capacity", "deferred"}
    assert base.spec_decode_drafts is None and base.kv_offload_bytes is None  # absent, not zero
    [with_legacy], _ = parse_page(page.text + spec + legacy)
    assert (with_legacy.spec_decode_draft_tokens, with_legacy.spec_decode_accepted_tokens) == (40, 30)
    assert with_legacy.kv_offload_bytes == {"store": 2048, "load": 1024}
    [with_flat], _ = parse_page(page.text + legacy + flat)
    assert with_flat.kv_offload_bytes == {"store": 4096, "load": 512}  # 0.33's flat names win
    odd = page.text.replace('finished_reason="stop"', 'finished_reason="made-up"')
    [folded], _ = parse_page(odd)
    assert folded.finished is not None and "made-up" not in folded.finished and "other" in folded.finished
