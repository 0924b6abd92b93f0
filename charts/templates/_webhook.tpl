{{/*
The self-signed CA and serving certificate, as a dict of base64 strings ("ca.crt", "tls.crt",
"tls.key") plus "notAfter" (RFC 3339). Rendered once per release (webhook-configurations.yaml uses it
for both the Secret and the caBundles, so they always match).

`helm upgrade` looks up the Secret of the previous release and reuses it while it is complete, was made
by this chart (it carries the kv-planner.io/tls-not-after annotation) and is valid for longer than
renewBeforeDays: the CA in the webhook configurations does not change on upgrades, so the API server
never meets a certificate it does not trust. `helm template` and client dry-runs cannot look anything
up and generate a fresh pair on every render (GitOps tools that render with `helm template` should
use cert-manager or provided certificates; see docs/chart.md).
*/}}
{{- define "kv-planner.tls.selfSigned" -}}
{{- $secretName := include "kv-planner.tls.secretName" . -}}
{{- $days := int .Values.webhook.tls.selfSigned.validityDays -}}
{{- $renewBeforeDays := int .Values.webhook.tls.selfSigned.renewBeforeDays -}}
{{- $layout := "2006-01-02T15:04:05Z07:00" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName -}}
{{- $result := dict -}}
{{- if and $existing (hasKey $existing "data") -}}
{{- $data := $existing.data -}}
{{- $annotations := $existing.metadata.annotations | default dict -}}
{{- $notAfter := index $annotations "kv-planner.io/tls-not-after" | default "" -}}
{{- if and $notAfter (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key") -}}
{{- $expires := toDate $layout $notAfter | unixEpoch | atoi -}}
{{- $renewAt := now | dateModify (printf "+%dh" (mul $renewBeforeDays 24)) | unixEpoch | atoi -}}
{{- if gt $expires $renewAt -}}
{{- $result = dict "ca.crt" (index $data "ca.crt") "tls.crt" (index $data "tls.crt") "tls.key" (index $data "tls.key") "notAfter" $notAfter -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $result -}}
{{- /* ECDSA P-256: as strong as RSA-3072 for this purpose, and generated in microseconds. */ -}}
{{- $ca := genCAWithKey (printf "%s-webhook-ca" (include "kv-planner.fullname" .)) $days (genPrivateKey "ecdsa") -}}
{{- $dnsNames := include "kv-planner.webhook.dnsNames" . | fromJsonArray -}}
{{- $cert := genSignedCertWithKey (index $dnsNames 2) nil $dnsNames $days $ca (genPrivateKey "ecdsa") -}}
{{- $notAfter := dateInZone $layout (now | dateModify (printf "+%dh" (mul $days 24))) "UTC" -}}
{{- $result = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) "notAfter" $notAfter -}}
{{- end -}}
{{- toYaml $result -}}
{{- end -}}

{{/*
The CEL matchConditions shared by both webhooks. Each returns true when the webhook should be called.
They cannot error: `object` is guarded against null (DELETE, which no rule matches anyway), every
optional field is tested with has() before it is read, and ownerReferences' apiVersion and kind are
required fields. An error would mean: request rejected under failurePolicy Fail, webhook skipped under
Ignore.
*/}}
{{- define "kv-planner.webhook.matchConditions" -}}
# The user opted this object out (kv-planner.io/skip: "true"): do not even call the webhook.
- name: not-opted-out
  expression: >-
    object == null || !has(object.metadata.annotations) ||
    !('kv-planner.io/skip' in object.metadata.annotations) ||
    object.metadata.annotations['kv-planner.io/skip'] != 'true'
# Objects whose controller is a kind this webhook already reviews (Pods of ReplicaSets, ReplicaSets of
# Deployments, StatefulSets of LeaderWorkerSets, ...): their pod template was reviewed on the owner, and
# patching the child would fight the owner's controller. The API server skips them, which also keeps
# pod churn (rollouts, zonal failures) off the webhook.
- name: not-managed-by-reviewed-owner
  expression: >-
    object == null || !has(object.metadata.ownerReferences) ||
    !object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true && (
    (r.apiVersion == 'apps/v1' && r.kind in ['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet']) ||
    (r.apiVersion == 'batch/v1' && r.kind == 'Job') ||
    (r.apiVersion.startsWith('leaderworkerset.x-k8s.io/') && r.kind == 'LeaderWorkerSet')
    {{- with .Values.webhook.platforms }}
    {{- if .kserve.enabled }} ||
    (r.apiVersion.startsWith('serving.kserve.io/') &&
     r.kind in ['InferenceService', 'ServingRuntime', 'LLMInferenceService'])
    {{- end }}
    {{- if .kubeai.enabled }} ||
    (r.apiVersion.startsWith('kubeai.org/') && r.kind == 'Model')
    {{- end }}
    {{- if .ray.enabled }} ||
    (r.apiVersion.startsWith('ray.io/') && r.kind in ['RayCluster', 'RayService', 'RayJob'])
    {{- end }}
    {{- if .aibrix.enabled }} ||
    r.apiVersion.startsWith('orchestration.aibrix.ai/')
    {{- end }}
    {{- if .dynamo.enabled }} ||
    (r.apiVersion.startsWith('nvidia.com/') &&
     r.kind in ['DynamoGraphDeployment', 'DynamoComponentDeployment'])
    {{- end }}
    {{- if .kaito.enabled }} ||
    (r.apiVersion.startsWith('kaito.sh/') && r.kind in ['Workspace', 'InferenceSet'])
    {{- end }}
    {{- end }}))
# Updates to an object that is being deleted (finalizers running) are not worth a plan.
- name: not-terminating
  expression: >-
    object == null || !has(object.metadata.deletionTimestamp)
{{- end -}}

{{/*
Rules: only the workload kinds the webhook understands, never subresources (so `scale` from an HPA
and `status` updates never reach it). Pods and Jobs on CREATE only: their pod template cannot change
afterwards, so an UPDATE can only be a metadata change, and a patch to the args would be rejected.
*/}}
{{- define "kv-planner.webhook.rules" -}}
- apiGroups: ["apps"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["deployments", "statefulsets", "daemonsets", "replicasets"]
  scope: Namespaced
- apiGroups: ["batch"]
  apiVersions: ["v1"]
  operations: ["CREATE"]
  resources: ["jobs"]
  scope: Namespaced
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["CREATE"]
  resources: ["pods"]
  scope: Namespaced
- apiGroups: ["leaderworkerset.x-k8s.io"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["leaderworkersets"]
  scope: Namespaced
{{- with .Values.webhook.platforms }}
{{- /* Serving platforms' own resources (docs/platforms.md). A rule for a resource whose CRD is not
installed matches nothing: harmless. ServingRuntimes and LLMInferenceServiceConfigs are templates: not
sent. The webhook reads neither (planner check reads them with the services of its input): it assumes
KServe's built-in runtimes, and an LLMInferenceService naming a preset in spec.baseRefs gets KVP078 and is
never denied on a plan made without it. */}}
{{- if .kserve.enabled }}
- apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1beta1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["inferenceservices"]
  scope: Namespaced
- apiGroups: ["serving.kserve.io"]
  apiVersions: ["v1alpha1", "v1alpha2"]
  operations: ["CREATE", "UPDATE"]
  resources: ["llminferenceservices"]
  scope: Namespaced
{{- end }}
{{- if .kubeai.enabled }}
- apiGroups: ["kubeai.org"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["models"]
  scope: Namespaced
{{- end }}
{{- if .ray.enabled }}
- apiGroups: ["ray.io"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["rayclusters", "rayservices", "rayjobs"]
  scope: Namespaced
{{- end }}
{{- if .aibrix.enabled }}
- apiGroups: ["orchestration.aibrix.ai"]
  apiVersions: ["v1alpha1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["rayclusterfleets", "stormservices", "rolesets"]
  scope: Namespaced
{{- end }}
{{- if .dynamo.enabled }}
- apiGroups: ["nvidia.com"]
  apiVersions: ["v1alpha1", "v1beta1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["dynamographdeployments"]
  scope: Namespaced
{{- end }}
{{- if .kaito.enabled }}
- apiGroups: ["kaito.sh"]
  apiVersions: ["v1alpha1", "v1beta1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["workspaces", "inferencesets"]
  scope: Namespaced
{{- end }}
{{- end }}
{{- end -}}

{{/*
Only namespaces that opted in, and never the control plane's own namespaces or the one the webhook runs
in (it must be able to heal itself while it is down). kubernetes.io/metadata.name is set by the API
server from the namespace's name and cannot be spoofed.
*/}}
{{- define "kv-planner.webhook.namespaceSelector" -}}
matchExpressions:
  - key: kv-planner.io/enabled
    operator: In
    values: ["true"]
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- $excluded := concat (list "kube-system" "kube-node-lease" .Release.Namespace) .Values.webhook.excludedNamespaces | uniq }}
      {{- toYaml $excluded | nindent 6 }}
{{- end -}}

{{/* One webhook entry: call with (dict "ctx" $ "name" "..." "path" "/mutate" "caBundle" "..." "mutating" true). */}}
{{- define "kv-planner.webhook.entry" -}}
{{- $v := .ctx.Values.webhook -}}
- name: {{ .name }}
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: {{ $v.failurePolicy }}
  timeoutSeconds: {{ $v.timeoutSeconds }}
  matchPolicy: Equivalent
  {{- if .mutating }}
  reinvocationPolicy: {{ $v.reinvocationPolicy }}
  {{- end }}
  clientConfig:
    service:
      name: {{ include "kv-planner.webhook.name" .ctx }}
      namespace: {{ .ctx.Release.Namespace }}
      path: {{ .path }}
      port: 443
    {{- if .caBundle }}
    caBundle: {{ .caBundle }}
    {{- end }}
  namespaceSelector:
    {{- include "kv-planner.webhook.namespaceSelector" .ctx | nindent 4 }}
  rules:
    {{- include "kv-planner.webhook.rules" .ctx | nindent 4 }}
  matchConditions:
    {{- include "kv-planner.webhook.matchConditions" .ctx | nindent 4 }}
{{- end -}}
