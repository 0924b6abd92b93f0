"""The shipped calibration data itself: every record traceable to the exact public log it came from,
internally consistent, and as broad as issue 12 asks (the accuracy figures mean little on a narrow set)."""

from __future__ import annotations

import re
from collections import Counter

from planner.calibration.dataset import Startup, dataset_files, load_dataset
from planner.errors import UnknownModelError
from planner.models.catalog import lookup_model
from planner.models.spec import ModelSpec
from planner.vllm.releases import Version

# A file in a repository is cited at a commit, so the numbers can be re-read from exactly that text.
_PINNED_BLOB = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/.+")
_HELD_OUT = "llm-d-incubation/llm-d-planner"  # its accuracy logs beyond ../shared are the separate evaluation's


def _model(startup: Startup) -> ModelSpec:
    d = startup.deployment
    try:
        return lookup_model(d.model)
    except UnknownModelError:  # a quantized variant planned through its base model
        assert d.base_model is not None, startup.id
        return lookup_model(d.base_model)


def test_every_record_cites_its_exact_log_once() -> None:
    urls = Counter(startup.source.url for startup in load_dataset())
    assert [url for url, count in urls.items() if count > 1] == []
    for url in urls:
        assert url.startswith("https://"), url
        if "github.com" in url and "/blob/" in url:
            assert _PINNED_BLOB.match(url), f"not pinned to a commit: {url}"


def test_the_held_out_corpus_contributes_only_the_shared_reports() -> None:
    """llm-d-planner's accuracy logs appear only as the shared reports (benchmark-logs.jsonl, ids r###)."""
    for path in dataset_files():
        for line in path.read_text().splitlines():
            if _HELD_OUT in line:
                assert path.name == "benchmark-logs.jsonl", path.name
                assert re.search(r'"id": "r\d{3}"', line), line[:80]


def test_gpu_count_matches_the_parallel_layout() -> None:
    for startup in load_dataset():
        d = startup.deployment
        if d.nodes == 1:
            assert d.gpus == d.tp * d.pp, startup.id


def test_the_set_is_as_broad_as_issue_12_asks() -> None:
    startups = load_dataset()
    models = {_model(s).id for s in startups}
    releases = {s.deployment.vllm for s in startups}
    gpus = {s.deployment.gpu for s in startups}
    assert len(startups) >= 80
    assert len(models) >= 30
    assert len(releases) >= 5 and any(Version.parse(r).key() >= (0, 20, 0) for r in releases)
    assert len(gpus) >= 3
    specs = [_model(s) for s in startups]
    assert any(s.deployment.kv_dtype and s.deployment.kv_dtype.startswith("fp8") for s in startups), "fp8 KV"
    assert any(spec.moe is not None for spec in specs), "MoE"
    assert any(spec.mla is not None for spec in specs), "MLA"
    assert any("S" in spec.layer_pattern for spec in specs), "sliding window"
    assert any(spec.mamba is not None for spec in specs), "Mamba / linear-attention hybrid"
    assert any(spec.vision is not None for spec in specs), "vision"
