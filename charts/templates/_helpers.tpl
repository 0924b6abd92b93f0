{{/*
Names. Truncated to 51 characters: the longest suffix appended to the full name is "-webhook-tls"
(12 characters), and Service and Secret names must stay within the 63-character DNS label limit.
*/}}
{{- define "kv-planner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 51 | trimSuffix "-" -}}
{{- end -}}

{{- define "kv-planner.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 51 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 51 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 51 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kv-planner.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "kv-planner.labels" -}}
helm.sh/chart: {{ include "kv-planner.chart" . }}
app.kubernetes.io/name: {{ include "kv-planner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kv-planner
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "ctx" $ "component" "webhook"). */}}
{{- define "kv-planner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kv-planner.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kv-planner.componentLabels" -}}
{{ include "kv-planner.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kv-planner.webhook.name" -}}
{{- printf "%s-webhook" (include "kv-planner.fullname" .) -}}
{{- end -}}

{{- define "kv-planner.exporter.name" -}}
{{- printf "%s-exporter" (include "kv-planner.fullname" .) -}}
{{- end -}}

{{/* The image reference: a digest wins over a tag; the tag defaults to the chart's appVersion. */}}
{{- define "kv-planner.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
TLS mode actually used. "auto" picks cert-manager when its API is served by the cluster (known to
`helm install`/`upgrade`; `helm template` only knows it with --api-versions cert-manager.io/v1).
*/}}
{{- define "kv-planner.tls.mode" -}}
{{- $mode := .Values.webhook.tls.mode -}}
{{- if eq $mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}cert-manager{{- else -}}self-signed{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the serving certificate (tls.crt, tls.key, and ca.crt where known). */}}
{{- define "kv-planner.tls.secretName" -}}
{{- if eq (include "kv-planner.tls.mode" .) "provided" -}}
{{- required "webhook.tls.provided.secretName is required when webhook.tls.mode is provided" .Values.webhook.tls.provided.secretName -}}
{{- else -}}
{{- printf "%s-webhook-tls" (include "kv-planner.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The DNS names the API server uses to reach the webhook Service. */}}
{{- define "kv-planner.webhook.dnsNames" -}}
{{- $svc := include "kv-planner.webhook.name" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/*
Whether to render Prometheus Operator objects: "auto" follows the cluster's APIs, true forces them
(GitOps renders without a cluster), false never. Call with (dict "ctx" $ "setting" <value>).
*/}}
{{- define "kv-planner.promOperator.enabled" -}}
{{- $s := .setting -}}
{{- if kindIs "bool" $s -}}
{{- if $s -}}true{{- end -}}
{{- else if .ctx.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}
true
{{- end -}}
{{- end -}}

{{/*
Restricted Pod Security: the pod-level context, and the container-level context. Both come from
values constrained by values.schema.json (runAsNonRoot, no privilege escalation, read-only root,
all capabilities dropped, RuntimeDefault or Localhost seccomp); null UIDs are left out so that
platforms that assign UIDs (OpenShift) can.
*/}}
{{- define "kv-planner.podSecurityContext" -}}
{{- $sc := dict -}}
{{- range $k, $v := .Values.podSecurityContext -}}
{{- if not (kindIs "invalid" $v) -}}{{- $_ := set $sc $k $v -}}{{- end -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}

{{- define "kv-planner.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext -}}
{{- end -}}

{{/* Cross-field checks the JSON schema cannot express. */}}
{{- define "kv-planner.validate" -}}
{{- if .Values.webhook.enabled -}}
{{- if ge (float64 .Values.webhook.reviewBudgetSeconds) (float64 .Values.webhook.timeoutSeconds) -}}
{{- fail (printf "webhook.reviewBudgetSeconds (%v) must be below webhook.timeoutSeconds (%v): a review must be answered before the API server gives up" .Values.webhook.reviewBudgetSeconds .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if ge (float64 .Values.policy.modelLookup.timeoutSeconds) (float64 .Values.webhook.timeoutSeconds) -}}
{{- fail (printf "policy.modelLookup.timeoutSeconds (%v) must be below webhook.timeoutSeconds (%v): a slow model lookup must never become a webhook timeout" .Values.policy.modelLookup.timeoutSeconds .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if and (not .Values.webhook.mutating.enabled) (not .Values.webhook.validating.enabled) -}}
{{- fail "webhook.enabled is true but both webhook.mutating.enabled and webhook.validating.enabled are false; set webhook.enabled=false instead" -}}
{{- end -}}
{{- if eq (int .Values.webhook.port) (int .Values.webhook.metricsPort) -}}
{{- fail "webhook.port and webhook.metricsPort must differ" -}}
{{- end -}}
{{- if and (eq (include "kv-planner.tls.mode" .) "provided") (not .Values.webhook.tls.provided.caBundle) -}}
{{- fail "webhook.tls.provided.caBundle (base64 PEM of the CA) is required when webhook.tls.mode is provided" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.exporter.enabled (eq .Values.exporter.source "targets") (empty .Values.exporter.targets) -}}
{{- fail "exporter.source is targets but exporter.targets is empty" -}}
{{- end -}}
{{- if and .Values.exporter.enabled (eq .Values.exporter.source "prometheus") (empty .Values.exporter.prometheusUrl) -}}
{{- fail "exporter.source is prometheus but exporter.prometheusUrl is empty" -}}
{{- end -}}
{{- end -}}
