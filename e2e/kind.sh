#!/usr/bin/env bash
# End-to-end test of the kv-planner chart on a kind cluster.
#
#   e2e/kind.sh                      # build the image, create a cluster, run every check, delete it
#   KEEP_CLUSTER=1 e2e/kind.sh       # keep the cluster afterwards (for poking around)
#   KIND_NODE_IMAGE=kindest/node:v1.30.x e2e/kind.sh   # pick the Kubernetes version (>= 1.30)
#   HELM=helm3 e2e/kind.sh           # run it with another helm binary (Helm 3 or 4)
#
# Needs docker (a running engine), kind, kubectl and helm. It cannot run where there is no Docker
# engine (the CI machines of this project); it is run by hand on a workstation.
#
# What it proves, in order:
#   1. the Dockerfile builds an image that `kind load` can use, and the chart installs with --wait;
#   2. `helm test` reaches the webhook through its Service over verified TLS;
#   3. Audit: a vLLM Deployment that cannot fit is admitted with a warning;
#   4. Enforce (namespace annotation): the same Deployment is denied, with the numbers;
#   5. mutation "fill": a Deployment that fits once limited gets --max-model-len and the plan annotation,
#      and applying the same manifest again changes nothing (idempotent; `kubectl diff` is empty);
#   6. a namespace that did not opt in is never touched;
#   7. with the webhook scaled to zero, creates still succeed (failurePolicy Ignore), and the API
#      server counts them in apiserver_admission_webhook_fail_open_count;
#   8. the self-signed CA survives `helm upgrade` (lookup of the existing Secret), and a policy-only
#      upgrade does not restart the webhook pods (the policy is reloaded from the ConfigMap);
#   9. `helm uninstall` leaves no webhook configuration behind, and creates keep working.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER:-kv-planner-e2e}
NODE_IMAGE=${KIND_NODE_IMAGE:-}
HELM=${HELM:-helm}
IMAGE_REPO=${IMAGE_REPO:-kv-planner}
IMAGE_TAG=${IMAGE_TAG:-e2e}
RELEASE=kv-planner
NS=kv-planner-system
APP_NS=kvp-e2e-apps
OTHER_NS=kvp-e2e-not-opted-in
MANIFESTS=e2e/manifests
CTX="kind-$CLUSTER"

log() { printf '\n==> %s\n' "$*"; }
pass() { printf '    ok: %s\n' "$*"; }
fail() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || fail "$1 is required on PATH"; }
k() { kubectl --context "$CTX" "$@"; }
h() { "$HELM" --kube-context "$CTX" "$@"; }

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    printf '\n--- diagnostics ---\n' >&2
    k -n "$NS" get pods -o wide >&2 || true
    k -n "$NS" logs -l app.kubernetes.io/component=webhook --tail=50 >&2 || true
  fi
  if [ "${KEEP_CLUSTER:-0}" = "1" ]; then
    printf 'cluster %s kept (kind delete cluster --name %s)\n' "$CLUSTER" "$CLUSTER"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  exit "$rc"
}

# Retry a command (quietly) for up to $1 seconds: caches in the webhook (namespace annotations) and
# endpoints converge within seconds, never instantly.
eventually() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 2
  done
}

webhook_ca() {
  k get mutatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}'
}

for tool in docker kind kubectl "$HELM"; do need "$tool"; done
docker info >/dev/null 2>&1 || fail "no Docker engine is reachable (docker info failed)"

log "kind cluster $CLUSTER"
trap cleanup EXIT
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" ${NODE_IMAGE:+--image "$NODE_IMAGE"} --wait 120s
fi
minor=$(k version -o json | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | tail -n 1)
[ "${minor:-0}" -ge 30 ] || fail "Kubernetes 1.$minor: the chart needs >= 1.30 (matchConditions)"
pass "Kubernetes 1.$minor"

log "build and load the image $IMAGE_REPO:$IMAGE_TAG"
docker build -t "$IMAGE_REPO:$IMAGE_TAG" .
kind load docker-image "$IMAGE_REPO:$IMAGE_TAG" --name "$CLUSTER"
docker run --rm "$IMAGE_REPO:$IMAGE_TAG" --help >/dev/null || fail "the image's entrypoint does not run"
[ "$(docker image inspect -f '{{.Config.User}}' "$IMAGE_REPO:$IMAGE_TAG")" = "10001:10001" ] \
  || fail "the image does not run as 10001:10001"
pass "image built, non-root, loaded into kind"

log "helm install (self-signed TLS, Audit, mutation fill)"
k create namespace "$NS" --dry-run=client -o yaml | k apply -f -
# The release namespace enforces the restricted Pod Security Standard: every chart pod must pass it.
k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted --overwrite
h install "$RELEASE" charts/ --namespace "$NS" --wait --timeout 5m \
  --set image.repository="$IMAGE_REPO" --set image.tag="$IMAGE_TAG" --set image.pullPolicy=Never \
  --set policy.modelLookup.offline=true
pass "installed; pods admitted under restricted Pod Security"

log "helm test"
h test "$RELEASE" --namespace "$NS" --logs
pass "the webhook answers over verified TLS"

log "opt a namespace in"
k create namespace "$APP_NS"
k label namespace "$APP_NS" kv-planner.io/enabled=true
k create namespace "$OTHER_NS"

log "Audit: a Deployment that cannot fit is admitted with a warning"
eventually 60 sh -c "kubectl --context $CTX -n $APP_NS apply --dry-run=server -f $MANIFESTS/vllm-too-big.yaml 2>&1 | grep -q KVP001" \
  || fail "no KVP001 warning from the webhook in Audit mode"
out=$(k -n "$APP_NS" apply -f "$MANIFESTS/vllm-too-big.yaml" 2>&1) || fail "Audit mode denied: $out"
printf '%s\n' "$out" | grep -q '^Warning: .*KVP001' || fail "no KVP001 warning: $out"
k -n "$APP_NS" get deployment vllm-llama-70b-on-one-l4 >/dev/null
k -n "$APP_NS" delete deployment vllm-llama-70b-on-one-l4 --wait=true >/dev/null
pass "admitted with: $(printf '%s\n' "$out" | grep '^Warning' | head -n 1)"

log "Enforce (namespace annotation): the same Deployment is denied"
k annotate namespace "$APP_NS" kv-planner.io/validation-action=Enforce --overwrite
# The webhook learns the annotation from its namespace watch: wait until a server-side dry run is denied.
eventually 60 sh -c "! kubectl --context $CTX -n $APP_NS apply --dry-run=server -f $MANIFESTS/vllm-too-big.yaml" \
  || fail "the webhook did not start denying after the Enforce annotation"
if out=$(k -n "$APP_NS" apply -f "$MANIFESTS/vllm-too-big.yaml" 2>&1); then
  fail "Enforce admitted a Deployment that cannot start: $out"
fi
printf '%s\n' "$out" | grep -q 'denied the request' || fail "unexpected error: $out"
printf '%s\n' "$out" | grep -q 'KVP001' || fail "the denial does not carry KVP001: $out"
pass "denied: $(printf '%s\n' "$out" | head -n 1 | cut -c1-160)"

log "mutation fill: a Deployment that fits once limited"
k -n "$APP_NS" apply -f "$MANIFESTS/vllm-fits.yaml"
args=$(k -n "$APP_NS" get deployment vllm-llama-8b-on-l4 -o jsonpath='{.spec.template.spec.containers[0].args}')
printf '%s\n' "$args" | grep -q -- '--max-model-len' || fail "no --max-model-len added: $args"
plan=$(k -n "$APP_NS" get deployment vllm-llama-8b-on-l4 -o jsonpath='{.spec.template.metadata.annotations.kv-planner\.io/plan}')
[ -n "$plan" ] || fail "no kv-planner.io/plan annotation on the pod template"
blocks=$(k -n "$APP_NS" get deployment vllm-llama-8b-on-l4 -o jsonpath='{.spec.template.metadata.annotations.kv-planner\.io/planned-num-gpu-blocks}')
[ "${blocks:-0}" -gt 0 ] || fail "no kv-planner.io/planned-num-gpu-blocks annotation"
generation=$(k -n "$APP_NS" get deployment vllm-llama-8b-on-l4 -o jsonpath='{.metadata.generation}')
k -n "$APP_NS" apply -f "$MANIFESTS/vllm-fits.yaml" >/dev/null
[ "$(k -n "$APP_NS" get deployment vllm-llama-8b-on-l4 -o jsonpath='{.metadata.generation}')" = "$generation" ] \
  || fail "re-applying the same manifest changed the Deployment (mutation not idempotent)"
k -n "$APP_NS" diff -f "$MANIFESTS/vllm-fits.yaml" >/dev/null || fail "kubectl diff is not empty after apply"
pass "args $args; $blocks planned KV blocks; re-apply is a no-op"

log "a namespace that did not opt in is never touched"
k -n "$OTHER_NS" apply -f "$MANIFESTS/vllm-fits.yaml" >/dev/null
args=$(k -n "$OTHER_NS" get deployment vllm-llama-8b-on-l4 -o jsonpath='{.spec.template.spec.containers[0].args}')
printf '%s\n' "$args" | grep -q -- '--max-model-len' && fail "a namespace without the opt-in label was mutated"
pass "unchanged: $args"

log "webhook down: failurePolicy Ignore fails open"
k -n "$NS" scale deployment "$RELEASE-webhook" --replicas=0
k -n "$NS" wait --for=delete pod -l app.kubernetes.io/component=webhook --timeout=120s
start=$SECONDS
k -n "$APP_NS" create deployment fail-open-probe --image=registry.k8s.io/pause:3.10 >/dev/null \
  || fail "a create in an opted-in namespace failed while the webhook was down"
elapsed=$((SECONDS - start))
[ "$elapsed" -le 10 ] || fail "the create took ${elapsed}s with the webhook down (timeoutSeconds is 2)"
k get --raw /metrics | grep '^apiserver_admission_webhook_fail_open_count' | grep -q 'kv-planner.io' \
  || fail "apiserver_admission_webhook_fail_open_count has no kv-planner series"
k -n "$NS" scale deployment "$RELEASE-webhook" --replicas=2
k -n "$NS" rollout status deployment "$RELEASE-webhook" --timeout=180s
pass "create admitted in ${elapsed}s and counted as fail-open"

log "helm upgrade keeps the self-signed CA"
ca_before=$(webhook_ca)
crt_before=$(k -n "$NS" get secret "$RELEASE-webhook-tls" -o jsonpath='{.data.tls\.crt}')
[ -n "$ca_before" ] || fail "no caBundle after install"
h upgrade "$RELEASE" charts/ --namespace "$NS" --reuse-values --set webhook.replicas=3 --wait --timeout 5m
[ "$(webhook_ca)" = "$ca_before" ] || fail "helm upgrade replaced the CA in the webhook configuration"
[ "$(k get validatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = "$ca_before" ] \
  || fail "the validating webhook's caBundle differs"
[ "$(k -n "$NS" get secret "$RELEASE-webhook-tls" -o jsonpath='{.data.tls\.crt}')" = "$crt_before" ] \
  || fail "helm upgrade regenerated the serving certificate"
[ "$(k -n "$NS" get secret "$RELEASE-webhook-tls" -o jsonpath='{.data.ca\.crt}')" = "$ca_before" ] \
  || fail "the Secret's ca.crt does not match the caBundle"
h test "$RELEASE" --namespace "$NS" >/dev/null
pass "CA and certificate unchanged after upgrade; helm test still passes"

log "a policy-only upgrade reloads without restarting the webhook"
pods_before=$(k -n "$NS" get pods -l app.kubernetes.io/component=webhook -o jsonpath='{.items[*].metadata.uid}')
h upgrade "$RELEASE" charts/ --namespace "$NS" --reuse-values --set policy.headroom=0.2 --wait --timeout 5m
[ "$(k -n "$NS" get pods -l app.kubernetes.io/component=webhook -o jsonpath='{.items[*].metadata.uid}')" = "$pods_before" ] \
  || fail "a policy change restarted the webhook pods"
k -n "$NS" get configmap "$RELEASE-policy" -o jsonpath='{.data.policy\.yaml}' | grep -q 'headroom: 0.2' \
  || fail "the policy ConfigMap was not updated"
pass "same pods, new policy"

log "helm uninstall leaves no webhook configuration"
h uninstall "$RELEASE" --namespace "$NS" --wait
left=$(k get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep -c "/$RELEASE\$" || true)
[ "$left" = "0" ] || fail "$left webhook configuration(s) left after helm uninstall"
left=$(k get mutatingwebhookconfigurations,validatingwebhookconfigurations \
  -l "app.kubernetes.io/instance=$RELEASE" -o name | wc -l)
[ "$left" -eq 0 ] || fail "$left labelled webhook configuration(s) left after helm uninstall"
start=$SECONDS
k -n "$APP_NS" create deployment after-uninstall --image=registry.k8s.io/pause:3.10 >/dev/null
[ $((SECONDS - start)) -le 5 ] || fail "creates are slow after uninstall (a dangling webhook?)"
pass "no webhook configuration left; creates are immediate"

printf '\nAll end-to-end checks passed on Kubernetes 1.%s with %s.\n' "$minor" "$("$HELM" version --short)"
