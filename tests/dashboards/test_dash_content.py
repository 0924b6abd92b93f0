"""What the dashboards and rules query: real vLLM names, no hidden fallbacks, PromQL that Prometheus
2.42 parses, links between the dashboards, and every name documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from dash_queries import load_dashboards, panel_queries, rule_expressions, substitute, variable_queries

from dashboards import generate
from dashboards import names as n
from dashboards.common import FLEET_UID, PRESSURE_UID

# Identifiers in PromQL that name a series: vLLM's (with a colon), kv-planner's rules (colon) and
# exporter metrics (kv_planner_ prefix).
_NAME = re.compile(r"(?<![\w:])((?:vllm|kv_planner):[a-zA-Z0-9_:]+|kv_planner_[a-z0-9_]+)")
_HISTOGRAMS = {
    n.VLLM_PROMPT_TOKENS,
    n.VLLM_GENERATION_TOKENS,
    n.VLLM_TTFT,
    n.VLLM_ITL,
    n.VLLM_ITL_OLD,
    n.VLLM_QUEUE_TIME,
    n.VLLM_E2E_LATENCY,
}


def known_names() -> set[str]:
    values = {v for k, v in vars(n).items() if k.isupper() and isinstance(v, str)}
    return values | {f"{h}_{suffix}" for h in _HISTOGRAMS for suffix in ("bucket", "count", "sum")}


@pytest.fixture(scope="module")
def dashboards(repo_root: Path) -> dict[str, dict[str, Any]]:
    return load_dashboards(repo_root)


@pytest.fixture(scope="module")
def rules_text(repo_root: Path) -> str:
    return (repo_root / generate.SOURCE_RULES / generate.RULES_FILE).read_text()


def all_expressions(dashboards: dict[str, dict[str, Any]], rules_text: str) -> list[tuple[str, str]]:
    out = [(q.where, q.expr) for q in panel_queries(dashboards)]
    out += [(f"{v.dashboard} / variable {v.name}", v.selector) for v in variable_queries(dashboards)]
    out += rule_expressions(rules_text)
    return out


def test_only_known_metric_names(dashboards: dict[str, dict[str, Any]], rules_text: str) -> None:
    known = known_names()
    for where, expr in all_expressions(dashboards, rules_text):
        for name in _NAME.findall(expr):
            assert name in known, f"{where}: {name} is not a known vLLM / kv-planner name"


def test_counters_are_queried_with_total(dashboards: dict[str, dict[str, Any]], rules_text: str) -> None:
    # prometheus_client exposes vLLM's counters with _total; the bare name matches nothing.
    for where, expr in all_expressions(dashboards, rules_text):
        for bare in (
            "vllm:num_preemptions",
            "vllm:prefix_cache_hits",
            "vllm:prefix_cache_queries",
            "vllm:request_success",
            "vllm:prompt_tokens",
            "vllm:generation_tokens",
        ):
            assert not re.search(re.escape(bare) + r"(?![_\w])", expr), f"{where}: {bare} without _total"


def test_no_constant_fallbacks(repo_root: Path) -> None:
    for rel, text in generate.artifacts().items():
        assert not re.search(r"vector\s*\(", text), f"{rel} hides missing data behind vector(...)"
        assert "absent(" not in text, rel


def test_every_signal_covers_old_and_new_vllm_names(rules_text: str) -> None:
    rules = dict(rule_expressions(rules_text))
    assert n.VLLM_KV_USAGE in rules[n.REC_KV_USAGE] and n.VLLM_KV_USAGE_OLD in rules[n.REC_KV_USAGE]
    assert n.VLLM_ITL in rules[n.REC_ITL_BUCKETS] and n.VLLM_ITL_OLD in rules[n.REC_ITL_BUCKETS]
    assert n.VLLM_PREFIX_HITS in rules[n.REC_PREFIX_HIT] and n.VLLM_PREFIX_HITS_OLD in rules[n.REC_PREFIX_HIT]


def test_dashboards_link_to_each_other(dashboards: dict[str, dict[str, Any]]) -> None:
    pressure, fleet = dashboards["kv-cache-pressure.json"], dashboards["fleet-capacity.json"]
    assert [link["url"] for link in pressure["links"]] == [f"/d/{FLEET_UID}"]
    assert [link["url"] for link in fleet["links"]] == [f"/d/{PRESSURE_UID}"]
    for d in (pressure, fleet):
        assert all(link["includeVars"] and link["keepTime"] for link in d["links"])
    table = next(p for p in fleet["panels"] if p.get("title") == "vLLM workloads")
    pod_links = [
        prop["value"][0]["url"]
        for o in table["fieldConfig"]["overrides"]
        if o["matcher"] == {"id": "byName", "options": "pod"}
        for prop in o["properties"]
        if prop["id"] == "links"
    ]
    assert (
        pod_links and pod_links[0].startswith(f"/d/{PRESSURE_UID}?") and "var-pod=${__data.fields.pod}" in pod_links[0]
    )


def test_template_variables(dashboards: dict[str, dict[str, Any]]) -> None:
    for data in dashboards.values():
        variables = {v["name"]: v for v in data["templating"]["list"]}
        assert list(variables) == ["datasource", "namespace", "model", "pod"]
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for name in ("namespace", "model", "pod"):
            assert variables[name]["includeAll"] and variables[name]["multi"]
            assert variables[name]["query"].startswith("label_values(kv_planner:requests_running:sum")
        assert variables["namespace"]["allValue"] == variables["model"]["allValue"] == ".*"
        # "All" pods = the pods of the selected models, so per-pod series without model_name follow it.
        assert "allValue" not in variables["pod"]


def test_every_expression_parses_with_this_prometheus(
    dashboards: dict[str, dict[str, Any]], rules_text: str, promtool: str, tmp_path: Path
) -> None:
    # promtool parses recording-rule expressions with the installed Prometheus's (2.42) PromQL parser.
    rules = [
        {"record": f"kv_planner_test:expr_{i}", "expr": substitute(expr, rng="1h", rate_interval="1m")}
        for i, (_, expr) in enumerate(all_expressions(dashboards, rules_text))
    ]
    path = tmp_path / "expressions.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "parse", "rules": rules}]}))
    run = subprocess.run(
        [promtool, "check", "rules", str(path)], check=False, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules)} rules found" in run.stdout


def test_every_name_is_documented(repo_root: Path, rules_text: str) -> None:
    doc = (repo_root / "docs" / "dashboards.md").read_text()
    for name in known_names() - {f"{h}_{s}" for h in _HISTOGRAMS for s in ("bucket", "count", "sum")}:
        if ":" in name or name.startswith("kv_planner_"):
            assert f"`{name}" in doc, f"{name} is not in docs/dashboards.md"
    for group in yaml.safe_load(rules_text)["groups"]:
        for rule in group["rules"]:
            assert f"`{rule.get('record') or rule['alert']}`" in doc
    for data in load_dashboards(repo_root).values():
        for panel in data["panels"]:
            if panel["type"] != "row":
                assert panel["title"] in doc, f"panel {panel['title']!r} is not in docs/dashboards.md"
