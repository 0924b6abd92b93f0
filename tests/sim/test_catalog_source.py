"""The simulator's metric catalogue, release by release, against vLLM's own source.

For every release recorded from its wheel (``tests/sim/vllm_metric_facts.json``, written and checked by
``scripts/vllm_facts.py``), the families a default ``vllm serve`` registers must be exactly the
catalogue's for the release the simulator maps that version to: names, types, extra label names, bucket
families; plus finish reasons and the label names of ``vllm:cache_config_info``.
"""

from __future__ import annotations

import ast
import re

import pytest

from planner.sim.cache_config import field_names
from planner.sim.versions import MODELLED_RELEASES, modelled_release, parse_version
from planner.vllm import metrics_catalog as catalog
from tests.sim import vllm_source as src

# Registered only with an option the simulator does not model (see planner/sim/catalog.py docstring),
# or, in the V0 engine, registered without any sample unless LoRA / speculative decoding is configured.
V0_NOT_MODELLED = {
    "vllm:lora_requests_info",
    "vllm:spec_decode_draft_acceptance_rate",
    "vllm:spec_decode_efficiency",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_emitted_tokens",
    "vllm:cache_config_info",
}


def _source_versions() -> list[str]:
    """Recorded releases that the simulator models (0.8.5 on)."""
    oldest = parse_version(MODELLED_RELEASES[0][0])
    return [v for v in src.available_versions() if parse_version(v) >= oldest]


def _expected_extra(labels: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(extra labels, override) from the labelnames expression vLLM wrote."""
    if labels in ("labelnames", ""):
        return (), None
    match = re.fullmatch(r"labelnames \+ \[(.*)\]", labels)
    if match:
        return tuple(ast.literal_eval(f"[{match.group(1)}]")), None
    return (), tuple(ast.literal_eval(labels))


def _bucket_family(expression: str | None) -> str | None:
    if expression is None:
        return None
    if "build_1_2_5_buckets(max_model_len)" in expression or "'request_tokens'" in expression:
        return "request_tokens"
    match = re.match(r"histogram_buckets\('(\w+)'", expression)
    if match:
        return match.group(1)
    values = tuple(float(v) for v in ast.literal_eval(expression))
    for family, buckets in catalog.STATIC_BUCKETS.items():
        if tuple(float(b) for b in buckets) == values:
            return family
    return f"unknown:{expression}"


@pytest.mark.parametrize("version", _source_versions())
def test_v1_families_match_the_source(version: str) -> None:
    release, parsed = modelled_release(version)
    source = {f.name: f for f in src.v1_families(version) if not f.conditions}
    modelled = {f.name: f for f in catalog.families(parsed, "v1")}
    assert sorted(modelled) == sorted(source), f"vLLM {version} (modelled as {release})"
    for name, family in modelled.items():
        seen = source[name]
        assert family.kind == seen.kind, name
        extra, override = _expected_extra(seen.labels)
        assert family.extra_labels == extra, name
        assert family.labels_override == override, name
        if family.kind == "histogram":
            # The kv-block residency family only appears behind --kv-cache-metrics (not modelled).
            assert family.buckets == _bucket_family(seen.buckets), name


@pytest.mark.parametrize("version", _source_versions())
def test_finish_reasons_and_cache_config_labels_match_the_source(version: str) -> None:
    release, parsed = modelled_release(version)
    assert catalog.finish_reasons(parsed) == src.finish_reason_strings(version)
    assert field_names(release) == src.cache_config_fields(version)
    has_engine = src.cache_config_has_engine_label(version)
    assert has_engine == (parsed >= parse_version("0.10.1"))


@pytest.mark.parametrize("version", [v for v in _source_versions() if parse_version(v) < (0, 11, 0)])
def test_v0_families_match_the_source(version: str) -> None:
    _, parsed = modelled_release(version)
    source = {f.name: f for f in src.v0_families(version) if not f.conditions}
    modelled = {f.name: f for f in catalog.families(parsed, "v0")}
    assert sorted(modelled) == sorted(set(source) - V0_NOT_MODELLED)
    for name, family in modelled.items():
        assert family.kind == source[name].kind, name


def test_every_modelled_release_has_its_source_checked() -> None:
    available = set(_source_versions())
    missing = [source for _, source in MODELLED_RELEASES if source not in available]
    assert not missing, f"modelled releases not recorded in {src.RECORD.name}: {missing}"


def test_static_buckets_match_the_0_33_bucket_module() -> None:
    for family, buckets in catalog.STATIC_BUCKETS.items():
        assert src.static_bucket_source("0.33.0", family) == [float(b) for b in buckets], family
