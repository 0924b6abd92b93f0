{{/*
Alerts on the webhook itself, from the API server's own admission metrics (they exist whatever the
webhook reports, and they see what the webhook cannot: calls that never reached it). The webhook
entries are named mutate.kv-planner.io and validate.kv-planner.io (label `name`).
*/}}
{{- define "kv-planner.webhook.alertGroup" -}}
{{- $sel := `name=~"(mutate|validate)\\.kv-planner\\.io"` -}}
{{- $a := .Values.monitoring.prometheusRule.webhookAlerts -}}
{{- $failClosed := eq .Values.webhook.failurePolicy "Fail" -}}
name: kv-planner.webhook.alerts
rules:
  - alert: KVPlannerWebhookFailingOpen
    # failurePolicy Ignore admitted objects without asking kv-planner: they were neither checked nor
    # given safe limits. Counter added in Kubernetes 1.24.
    expr: sum by (name) (increase(apiserver_admission_webhook_fail_open_count{ {{- $sel -}} }[10m])) > 0
    labels:
      severity: warning
    annotations:
      summary: The API server could not call the kv-planner webhook and admitted objects unchecked.
      description: >-
        {{ "{{ $value | humanize }}" }} admission requests for {{ "{{ $labels.name }}" }} failed open in the
        last 10 minutes (webhook down, slow or TLS mismatch). See the runbook in docs/chart.md.
  - alert: KVPlannerWebhookRejectedOnFailure
    # Only possible with failurePolicy Fail: requests rejected because the webhook could not answer.
    expr: sum by (name) (increase(apiserver_admission_webhook_rejection_count{ {{- $sel -}} ,error_type="calling_webhook_error"}[5m])) > 0
    labels:
      severity: critical
    annotations:
      summary: Requests are being rejected because the kv-planner webhook cannot be called.
      description: >-
        {{ "{{ $value | humanize }}" }} requests to {{ "{{ $labels.name }}" }} were rejected in 5 minutes
        because the call failed (failurePolicy Fail). Restore the webhook or set failurePolicy Ignore;
        emergency removal is in the runbook (docs/chart.md).
  - alert: KVPlannerWebhookErrors
    expr: |-
      (
        sum by (name) (rate(apiserver_admission_webhook_request_total{ {{- $sel -}} ,code!~"2.."}[5m]))
      /
        sum by (name) (rate(apiserver_admission_webhook_request_total{ {{- $sel -}} }[5m]))
      ) > {{ $a.errorRatioThreshold }}
    for: 10m
    labels:
      severity: warning
    annotations:
      summary: The kv-planner webhook answers with errors.
      description: >-
        {{ "{{ $value | humanizePercentage }}" }} of calls to {{ "{{ $labels.name }}" }} returned a
        non-2xx status over 10 minutes.
  - alert: KVPlannerWebhookSlow
    # The API server waits for the webhook on every matched create/update: p99 above the threshold
    # adds that latency to deployments and, near timeoutSeconds, turns into fail-open.
    expr: |-
      histogram_quantile(0.99,
        sum by (name, le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{ {{- $sel -}} }[5m]))
      ) > {{ $a.latencyThresholdSeconds }}
    for: 10m
    labels:
      severity: warning
    annotations:
      summary: The kv-planner webhook is slow.
      description: >-
        p99 admission latency of {{ "{{ $labels.name }}" }} seen by the API server is
        {{ "{{ $value | humanizeDuration }}" }} (threshold {{ $a.latencyThresholdSeconds }}s, timeout
        {{ .Values.webhook.timeoutSeconds }}s).
  {{- if include "kv-planner.promOperator.enabled" (dict "ctx" . "setting" .Values.monitoring.serviceMonitor.enabled) }}
  - alert: KVPlannerWebhookDown
    expr: absent(up{job="{{ include "kv-planner.webhook.name" . }}",namespace="{{ .Release.Namespace }}"} == 1)
    for: 5m
    labels:
      severity: {{ ternary "critical" "warning" $failClosed }}
    annotations:
      summary: No kv-planner webhook pod is up.
      description: >-
        Prometheus has scraped no healthy kv-planner webhook pod in {{ .Release.Namespace }} for 5 minutes.
        {{- if $failClosed }} With failurePolicy Fail, matched creates and updates are rejected.{{ else }} With failurePolicy Ignore, workloads are admitted unchecked.{{ end }}
  {{- end }}
{{- end -}}
