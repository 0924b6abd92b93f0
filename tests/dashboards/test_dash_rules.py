"""`promtool check rules` and `promtool test rules` on the generated rules.

Each alert has a firing and a not-firing case; the recording rules are checked on series of old and
new vLLM releases and of the exporter. The input series are written here. Most cases run on a copy of
the shipped rules without annotations (promtool compares annotations verbatim); one case checks the
rendered annotations of the shipped file itself.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate
from dashboards.params import DEFAULT_PARAMS, Params
from dashboards.prometheus_rules import SIGNALS, alert_signals, build_rules

NS = 'namespace="llm"'
V1 = 'model_name="m", engine="0", job="vllm"'
# Labels of the per-pod recording rules.
POD_MODEL = 'namespace="llm", pod="%s", model_name="m"'


def vlabels(pod: str, extra: str = "") -> str:
    """Labels of a vLLM V1 series as Prometheus scrapes it from a pod."""
    return f'{NS}, pod="{pod}", {V1}, instance="{pod}:8000"' + (f", {extra}" if extra else "")


EXPORTER_TARGET = 'job="kv-planner-exporter", instance="exp:9400"'


def xlabels(pod: str, extra: str = "") -> str:
    """Labels of an exporter per-pod series (honor_labels keeps the vLLM pod's namespace/pod)."""
    return f'{NS}, pod="{pod}", workload="w", {EXPORTER_TARGET}' + (f", {extra}" if extra else "")


def xengine(pod: str) -> str:
    """Labels of an exporter per-engine series."""
    return xlabels(pod, 'model_name="m", engine="0"')


def exporter_engine(metric: str, pod: str) -> str:
    return f"{metric}{{{xengine(pod)}}}"


def exporter_workload(metric: str, workload: str) -> str:
    return f'{metric}{{{NS}, workload="{workload}", {EXPORTER_TARGET}}}'


def vllm(metric: str, pod: str, extra: str = "") -> str:
    return f"{metric}{{{vlabels(pod, extra)}}}"


def exporter(metric: str, pod: str, extra: str = "") -> str:
    return f"{metric}{{{xlabels(pod, extra)}}}"


def series(name: str, values: str) -> dict[str, str]:
    return {"series": name, "values": values}


def alert(name: str, at: str, *firing: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": name,
        "exp_alerts": [{"exp_labels": labels} for labels in firing],
    }


def pod_labels(pod: str, severity: str = "warning", **extra: str) -> dict[str, str]:
    return {"severity": severity, "namespace": "llm", "pod": pod, "model_name": "m", **extra}


# --- recording rules ------------------------------------------------------------------------------
def usage_case() -> dict[str, Any]:
    """One usage series per pod and engine whatever the vLLM release; the exporter only fills gaps."""
    return {
        "interval": "1m",
        "input_series": [
            series(vllm("vllm:kv_cache_usage_perc", "new"), "0.5x10"),  # >= 0.12: new name only
            series(vllm("vllm:kv_cache_usage_perc", "both"), "0.6x10"),  # 0.10.2 / 0.11: both names
            series(vllm("vllm:gpu_cache_usage_perc", "both"), "0.6x10"),
            series(vllm("vllm:gpu_cache_usage_perc", "old"), "0.7x10"),  # <= 0.10.1: old name only
            series(exporter_engine("kv_planner_kv_cache_usage_ratio", "new"), "0.5x10"),
            series(exporter_engine("kv_planner_kv_cache_usage_ratio", "remote"), "0.8x10"),
        ],
        "promql_expr_test": [
            {
                "expr": "kv_planner:kv_cache_usage:ratio",
                "eval_time": "5m",
                "exp_samples": [
                    {"labels": f"kv_planner:kv_cache_usage:ratio{{{vlabels('new')}}}", "value": 0.5},
                    {"labels": f"kv_planner:kv_cache_usage:ratio{{{vlabels('both')}}}", "value": 0.6},
                    {"labels": f"kv_planner:kv_cache_usage:ratio{{{vlabels('old')}}}", "value": 0.7},
                    {
                        "labels": "kv_planner:kv_cache_usage:ratio{" + xengine("remote") + "}",
                        "value": 0.8,
                    },
                ],
            }
        ],
    }


def scheduler_case() -> dict[str, Any]:
    """Preemption rate, and running/waiting summed over data-parallel engines, per pod."""
    engine1 = 'model_name="m", engine="1", job="vllm"'
    return {
        "interval": "1m",
        "input_series": [
            series(vllm("vllm:num_preemptions_total", "a"), "0+60x10"),
            series(vllm("vllm:num_requests_running", "a"), "8x10"),
            series(f'vllm:num_requests_running{{{NS}, pod="a", {engine1}, instance="a:8000"}}', "4x10"),
            series(vllm("vllm:num_requests_waiting", "a"), "3x10"),
            series(f'vllm:num_requests_waiting{{{NS}, pod="a", {engine1}, instance="a:8000"}}', "2x10"),
            # a pod only the exporter sees (Prometheus does not scrape it directly)
            series(exporter_engine("kv_planner_preemptions_total", "remote"), "0+30x10"),
            series(exporter_engine("kv_planner_requests_waiting", "remote"), "7x10"),
        ],
        "promql_expr_test": [
            {
                "expr": "kv_planner:preemptions:rate5m",
                "eval_time": "6m",
                "exp_samples": [
                    {"labels": f"kv_planner:preemptions:rate5m{{{vlabels('a')}}}", "value": 1},
                    {"labels": f"kv_planner:preemptions:rate5m{{{xengine('remote')}}}", "value": 0.5},
                ],
            },
            {
                "expr": "kv_planner:requests_running:sum",
                "eval_time": "5m",
                "exp_samples": [
                    {
                        "labels": f"kv_planner:requests_running:sum{{{POD_MODEL % 'a'}}}",
                        "value": 12,
                    }
                ],
            },
            {
                "expr": "kv_planner:requests_waiting:sum",
                "eval_time": "5m",
                "exp_samples": [
                    {
                        "labels": f"kv_planner:requests_waiting:sum{{{POD_MODEL % 'a'}}}",
                        "value": 5,
                    },
                    {
                        "labels": f"kv_planner:requests_waiting:sum{{{POD_MODEL % 'remote'}}}",
                        "value": 7,
                    },
                ],
            },
        ],
    }


def prefix_and_latency_case() -> dict[str, Any]:
    """Prefix hit ratio and inter-token latency buckets from either name, never both for one pod."""
    buckets = ("0.05", "0.1", "+Inf")
    input_series = [
        series(vllm("vllm:prefix_cache_queries_total", "new"), "0+100x10"),
        series(vllm("vllm:prefix_cache_hits_total", "new"), "0+25x10"),
        series(vllm("vllm:gpu_prefix_cache_queries_total", "old"), "0+100x10"),
        series(vllm("vllm:gpu_prefix_cache_hits_total", "old"), "0+50x10"),
    ]
    for le in buckets:
        # 0.10.2 emits both ITL names; the old-only pod emits just the old one.
        input_series.append(series(vllm("vllm:inter_token_latency_seconds_bucket", "both", f'le="{le}"'), "0+60x10"))
        input_series.append(series(vllm("vllm:time_per_output_token_seconds_bucket", "both", f'le="{le}"'), "0+60x10"))
        input_series.append(series(vllm("vllm:time_per_output_token_seconds_bucket", "old", f'le="{le}"'), "0+120x10"))
    input_series.append(series(vllm("vllm:inter_token_latency_seconds_count", "both"), "0+60x10"))
    itl = "kv_planner:inter_token_latency_seconds_bucket:rate5m"
    return {
        "interval": "1m",
        "input_series": input_series,
        "promql_expr_test": [
            {
                "expr": "kv_planner:prefix_cache_hits:ratio_rate5m",
                "eval_time": "6m",
                "exp_samples": [
                    {
                        "labels": f"kv_planner:prefix_cache_hits:ratio_rate5m{{{POD_MODEL % 'new'}}}",
                        "value": 0.25,
                    },
                    {
                        "labels": f"kv_planner:prefix_cache_hits:ratio_rate5m{{{POD_MODEL % 'old'}}}",
                        "value": 0.5,
                    },
                ],
            },
            {
                "expr": f"count by (pod) ({itl})",
                "eval_time": "6m",
                "exp_samples": [
                    {"labels": '{pod="both"}', "value": 3},
                    {"labels": '{pod="old"}', "value": 3},
                ],
            },
            {
                "expr": f'{itl}{{pod="old", le="+Inf"}}',
                "eval_time": "6m",
                "exp_samples": [{"labels": itl + "{" + vlabels("old", 'le="+Inf"') + "}", "value": 2}],
            },
        ],
    }


# --- alerts ---------------------------------------------------------------------------------------
def near_full_case() -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [
            series(vllm("vllm:kv_cache_usage_perc", "hot"), "0.97x40"),
            series(vllm("vllm:kv_cache_usage_perc", "busy"), "0.9x40"),  # high but under the threshold
            series(vllm("vllm:gpu_cache_usage_perc", "spike"), "0.99x5 0.5x35"),  # old name, short burst
            series(vllm("vllm:gpu_cache_usage_perc", "old-hot"), "0.99x40"),  # old release, sustained
        ],
        "alert_rule_test": [
            alert("KVPlannerKVCacheNearFull", "10m"),
            alert("KVPlannerKVCacheNearFull", "20m", pod_labels("hot"), pod_labels("old-hot")),
        ],
    }


def preemptions_case() -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [
            series(vllm("vllm:num_preemptions_total", "thrash"), "0+30x40"),
            series(vllm("vllm:num_preemptions_total", "calm"), "0x40"),
            series(vllm("vllm:num_preemptions_total", "once"), "0x5 1x35"),  # one preemption: not sustained
        ],
        "alert_rule_test": [
            alert("KVPlannerPreemptionsSustained", "8m"),
            alert("KVPlannerPreemptionsSustained", "15m", pod_labels("thrash")),
            alert("KVPlannerPreemptionsSustained", "30m", pod_labels("thrash")),
        ],
    }


def queue_case() -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [
            series(vllm("vllm:num_requests_waiting", "full"), "3x20"),
            series(vllm("vllm:kv_cache_usage_perc", "full"), "0.95x20"),
            series(vllm("vllm:num_requests_waiting", "queue-only"), "3x20"),  # queue, cache not full
            series(vllm("vllm:kv_cache_usage_perc", "queue-only"), "0.5x20"),
            series(vllm("vllm:num_requests_waiting", "full-only"), "0x20"),  # full cache, no queue
            series(vllm("vllm:kv_cache_usage_perc", "full-only"), "0.99x20"),
        ],
        "alert_rule_test": [
            alert("KVPlannerRequestsQueuedWhileCacheFull", "3m"),
            alert("KVPlannerRequestsQueuedWhileCacheFull", "10m", pod_labels("full")),
        ],
    }


def plan_case() -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [
            series(exporter_engine("kv_planner_kv_blocks_plan_ratio", "below"), "0.8x30"),
            series(exporter_engine("kv_planner_kv_blocks_plan_ratio", "above"), "1.2x30"),
            series(exporter_engine("kv_planner_kv_blocks_plan_ratio", "close"), "1.05x30"),
        ],
        "alert_rule_test": [
            alert("KVPlannerKVBlocksDeviateFromPlan", "10m"),
            alert(
                "KVPlannerKVBlocksDeviateFromPlan",
                "20m",
                pod_labels("below", workload="w"),
                pod_labels("above", workload="w"),
            ),
        ],
    }


def exporter_case() -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [
            series('up{job="kv-planner-exporter", instance="10.0.0.1:9400"}', "0x10"),
            series('up{job="kv-planner-exporter", instance="10.0.0.2:9400"}', "1x10"),
            series('up{job="vllm", instance="10.0.0.3:8000"}', "0x10"),  # not the exporter
            series(exporter("kv_planner_target_up", "gone"), "0x10"),
            series(exporter("kv_planner_target_up", "fine"), "1x10"),
            series(exporter("kv_planner_target_up", "flaky"), "0 0 1 0 0 1 0 0 1 0"),
        ],
        "alert_rule_test": [
            alert("KVPlannerExporterDown", "3m"),
            alert(
                "KVPlannerExporterDown",
                "7m",
                {"severity": "warning", "job": "kv-planner-exporter", "instance": "10.0.0.1:9400"},
            ),
            alert("KVPlannerTargetScrapeFailing", "3m"),
            alert(
                "KVPlannerTargetScrapeFailing",
                "7m",
                {"severity": "warning", "namespace": "llm", "pod": "gone", "workload": "w"},
            ),
        ],
    }


def recommendation_case() -> dict[str, Any]:
    """The retuner publishes per workload; --max-num-seqs is read per pod."""

    def configured(pod: str, workload: str) -> str:
        return f'kv_planner_max_num_seqs_configured{{{NS}, pod="{pod}", workload="{workload}", {EXPORTER_TARGET}}}'

    return {
        "interval": "1m",
        "input_series": [
            series(exporter_workload("kv_planner_max_num_seqs_recommended", "lower"), "32x120"),
            series(configured("lower-a", "lower"), "64x120"),
            series(configured("lower-b", "lower"), "64x120"),
            series(exporter_workload("kv_planner_max_num_seqs_recommended", "same"), "64x120"),
            series(configured("same-a", "same"), "64x120"),
            # recommended for half an hour, then the retuner changed its mind
            series(exporter_workload("kv_planner_max_num_seqs_recommended", "brief"), "32x30 64x90"),
            series(configured("brief-a", "brief"), "64x120"),
        ],
        "alert_rule_test": [
            alert("KVPlannerMaxNumSeqsRecommendationPending", "30m"),
            alert(
                "KVPlannerMaxNumSeqsRecommendationPending",
                "80m",
                {"severity": "info", "namespace": "llm", "workload": "lower"},
            ),
        ],
    }


def finished_case() -> dict[str, Any]:
    """Finish reasons per pod (vLLM or, for pods only the exporter reads, the exporter), the share
    stopped by length, and its info alert: fires above the ratio, not at or below it."""
    reasons = {"long": ("0+90x60", "0+30x60"), "short": ("0+30x60", "0+90x60"), "half": ("0+60x60", "0+60x60")}
    input_series = []
    for pod, (length, stop) in reasons.items():
        input_series.append(series(vllm("vllm:request_success_total", pod, 'finished_reason="length"'), length))
        input_series.append(series(vllm("vllm:request_success_total", pod, 'finished_reason="stop"'), stop))
    input_series.append(
        series(
            exporter_engine("kv_planner_requests_finished_total", "remote").replace("}", ', finished_reason="stop"}'),
            "0+60x60",
        )
    )
    return {
        "interval": "1m",
        "input_series": input_series,
        "promql_expr_test": [
            {
                "expr": 'kv_planner:requests_finished:rate5m{finished_reason="stop"}',
                "eval_time": "10m",
                "exp_samples": [
                    {
                        "labels": f'kv_planner:requests_finished:rate5m{{{POD_MODEL % pod}, finished_reason="stop"}}',
                        "value": value,
                    }
                    for pod, value in (("half", 1), ("long", 0.5), ("remote", 1), ("short", 1.5))
                ],
            },
            {
                "expr": "kv_planner:requests_stopped_by_length:ratio_rate5m",
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": f"kv_planner:requests_stopped_by_length:ratio_rate5m{{{POD_MODEL % pod}}}", "value": v}
                    for pod, v in (("half", 0.5), ("long", 0.75), ("remote", 0), ("short", 0.25))
                ],
            },
        ],
        "alert_rule_test": [
            alert("KVPlannerRequestsStoppedByLength", "20m"),
            alert("KVPlannerRequestsStoppedByLength", "50m", pod_labels("long", "info")),
        ],
    }


CASES = [
    finished_case,
    usage_case,
    scheduler_case,
    prefix_and_latency_case,
    near_full_case,
    preemptions_case,
    queue_case,
    plan_case,
    exporter_case,
    recommendation_case,
]


def without_annotations(rules: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(rules)
    for group in stripped["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return stripped


def run_promtool_test(promtool: str, tmp_path: Path, rules_file: Path, tests: list[dict[str, Any]]) -> str:
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}))
    run = subprocess.run(
        [promtool, "test", "rules", str(test_file)], check=False, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_shipped_rules_pass_promtool_check(repo_root: Path, promtool: str) -> None:
    for rel in (generate.SOURCE_RULES, generate.CHART_RULES):
        run = subprocess.run(
            [promtool, "check", "rules", str(repo_root / rel / generate.RULES_FILE)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "SUCCESS: 16 rules found" in run.stdout


def test_alert_signals_are_what_the_alerts_compare() -> None:
    rules = {r["alert"]: r for g in build_rules(DEFAULT_PARAMS)["groups"] for r in g["rules"] if "alert" in r}
    signals = alert_signals(DEFAULT_PARAMS)
    assert set(signals) == set(rules)
    for name, exprs in signals.items():
        assert exprs and all(e in rules[name]["expr"] for e in exprs), name
        assert SIGNALS not in rules[name]


def test_every_alert_has_a_case() -> None:
    alerts = {r["alert"] for g in build_rules(DEFAULT_PARAMS)["groups"] for r in g["rules"] if "alert" in r}
    tested = {t["alertname"] for case in CASES for t in case().get("alert_rule_test", [])}
    assert tested == alerts
    for name in alerts:
        outcomes = [
            bool(t["exp_alerts"]) for case in CASES for t in case().get("alert_rule_test", []) if t["alertname"] == name
        ]
        assert True in outcomes and False in outcomes, f"{name} needs a firing and a not-firing case"


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_promtool_unit_tests(promtool: str, tmp_path: Path, case: Any) -> None:
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(without_annotations(build_rules(DEFAULT_PARAMS))))
    out = run_promtool_test(promtool, tmp_path, rules_file, [case()])
    assert "SUCCESS" in out


def test_annotations_render_on_the_shipped_file(repo_root: Path, promtool: str, tmp_path: Path) -> None:
    rules = build_rules(DEFAULT_PARAMS)
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "KVPlannerPreemptionsSustained")
    where = "llm/thrash (model m)"
    expected = {
        key: text.replace("{{ $labels.namespace }}/{{ $labels.pod }} (model {{ $labels.model_name }})", where).replace(
            '{{ printf "%.2g" $value }}', "0.5"
        )
        for key, text in rule["annotations"].items()
    }
    assert "{{" not in "".join(expected.values())
    case = preemptions_case()
    case["alert_rule_test"] = [
        {
            "eval_time": "15m",
            "alertname": "KVPlannerPreemptionsSustained",
            "exp_alerts": [{"exp_labels": pod_labels("thrash"), "exp_annotations": expected}],
        }
    ]
    run_promtool_test(promtool, tmp_path, repo_root / generate.SOURCE_RULES / generate.RULES_FILE, [case])


def test_durations_are_parameters(promtool: str, tmp_path: Path) -> None:
    quick = Params(kv_near_full_for="2m", preemptions_for="1m")
    rules_file = tmp_path / "quick.rules.yaml"
    rules_file.write_text(yaml.safe_dump(without_annotations(build_rules(quick))))
    case = near_full_case()
    case["alert_rule_test"] = [
        alert("KVPlannerKVCacheNearFull", "1m"),
        alert("KVPlannerKVCacheNearFull", "3m", pod_labels("hot"), pod_labels("spike"), pod_labels("old-hot")),
        alert("KVPlannerKVCacheNearFull", "10m", pod_labels("hot"), pod_labels("old-hot")),
    ]
    run_promtool_test(promtool, tmp_path, rules_file, [case])
