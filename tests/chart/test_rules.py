"""The rule groups inside the rendered PrometheusRule, checked and unit-tested with the real promtool.

`promtool check rules` parses every expression and annotation template; `promtool test rules` feeds
synthetic API-server series through the webhook alerts and checks that they fire (and stay quiet).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chart_helpers import CHART, CI_VALUES, one, render

pytestmark = [pytest.mark.needs_helm, pytest.mark.needs_prometheus, pytest.mark.usefixtures("helm")]

FORCED = ("monitoring.prometheusRule.enabled=true", "monitoring.serviceMonitor.enabled=true")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (scripts/install-test-tools)")
    return path


def rule_groups(*values_files: str, set_values: tuple[str, ...] = FORCED) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = one(render(values_files, set_values), "PrometheusRule")["spec"]["groups"]
    return groups


@pytest.mark.parametrize("values_file", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_promtool_check_rules(values_file: Path | None, tmp_path: Path) -> None:
    # --set (forcing the rules on) wins over every values file, so each scenario's rules are checked.
    groups = rule_groups(*((str(values_file),) if values_file else ()))
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    proc = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_rules_from_files_are_included() -> None:
    files = sorted((CHART / "files" / "rules").glob("*.yaml"))
    if not files:
        pytest.skip("charts/files/rules/ has no rules yet")
    names = {g["name"] for g in rule_groups()}
    for path in files:
        assert {g["name"] for g in yaml.safe_load(path.read_text())["groups"]} <= names


ALERT_TESTS = """
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # The API server failed open on the mutating webhook twice, 15 minutes in.
      - series: 'apiserver_admission_webhook_fail_open_count{name="mutate.kv-planner.io",type="admit"}'
        values: '0x15 2x15'
      # 10% of validating calls return 500; latency p99 ~ 0.5 s (buckets 0.25 / 0.5 / +Inf).
      - series: 'REQUESTS{name="validate.kv-planner.io",code="200",type="validating"}'
        values: '0+90x30'
      - series: 'REQUESTS{name="validate.kv-planner.io",code="500",type="validating"}'
        values: '0+10x30'
      - series: 'BUCKET{name="validate.kv-planner.io",le="0.25",type="validating"}'
        values: '0+10x30'
      - series: 'BUCKET{name="validate.kv-planner.io",le="0.5",type="validating"}'
        values: '0+100x30'
      - series: 'BUCKET{name="validate.kv-planner.io",le="+Inf",type="validating"}'
        values: '0+100x30'
      # Another webhook failing open must not page kv-planner's owners.
      - series: 'apiserver_admission_webhook_fail_open_count{name="other.example.com",type="admit"}'
        values: '0+1x30'
      # No webhook pod is up.
      - series: 'up{job="kvp-kv-planner-webhook",namespace="kv-planner-system",instance="10.0.0.1:9090"}'
        values: '0x30'
    alert_rule_test:
      - eval_time: 10m
        alertname: KVPlannerWebhookFailingOpen
        exp_alerts: []
      - eval_time: 20m
        alertname: KVPlannerWebhookFailingOpen
        exp_alerts:
          - exp_labels: {severity: warning, name: mutate.kv-planner.io}
            exp_annotations:
              summary: The API server could not call the kv-planner webhook and admitted objects unchecked.
              description: >-
                2 admission requests for mutate.kv-planner.io failed open in the last 10 minutes (webhook
                down, slow or TLS mismatch). See the runbook in docs/chart.md.
      - eval_time: 25m
        alertname: KVPlannerWebhookErrors
        exp_alerts:
          - exp_labels: {severity: warning, name: validate.kv-planner.io}
            exp_annotations:
              summary: The kv-planner webhook answers with errors.
              description: 10% of calls to validate.kv-planner.io returned a non-2xx status over 10 minutes.
      - eval_time: 25m
        alertname: KVPlannerWebhookSlow
        exp_alerts:
          - exp_labels: {severity: warning, name: validate.kv-planner.io}
            exp_annotations:
              summary: The kv-planner webhook is slow.
              description: >-
                p99 admission latency of validate.kv-planner.io seen by the API server is 497.2ms
                (threshold 0.25s, timeout 2s).
      - eval_time: 25m
        alertname: KVPlannerWebhookRejectedOnFailure
        exp_alerts: []
      - eval_time: 3m
        alertname: KVPlannerWebhookDown
        exp_alerts: []
      - eval_time: 10m
        alertname: KVPlannerWebhookDown
        exp_alerts:
          - exp_labels: {severity: warning}  # absent() of a filtered vector carries no labels
            exp_annotations:
              summary: No kv-planner webhook pod is up.
              description: >-
                Prometheus has scraped no healthy kv-planner webhook pod in kv-planner-system for 5
                minutes. With failurePolicy Ignore, workloads are admitted unchecked.
""".replace("BUCKET", "apiserver_admission_webhook_admission_duration_seconds_bucket").replace(
    "REQUESTS", "apiserver_admission_webhook_request_total"
)


def test_webhook_alerts_fire_on_api_server_series(tmp_path: Path) -> None:
    groups = [g for g in rule_groups() if g["name"] == "kv-planner.webhook.alerts"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "tests.yaml").write_text(ALERT_TESTS)
    proc = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fail_closed_makes_webhook_down_critical() -> None:
    groups = rule_groups(set_values=(*FORCED, "webhook.failurePolicy=Fail"))
    rules = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    assert rules["KVPlannerWebhookDown"]["labels"]["severity"] == "critical"
