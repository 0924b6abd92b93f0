"""`helm lint` and `helm template` for every scenario, with Helm 4 and Helm 3, and values.schema.json
rejecting unsafe values with a message a person can act on."""

from __future__ import annotations

import subprocess

import pytest

from tests.chart.chart_helpers import CHART, SCENARIOS, RenderError, helm_binaries, helm_template_error, render

pytestmark = [pytest.mark.needs_helm, pytest.mark.usefixtures("helm")]

SCENARIO_PARAMS = [pytest.param(files, id=name) for name, files in SCENARIOS]


@pytest.mark.parametrize("binary", helm_binaries(), indirect=True)
@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_helm_lint_strict(binary: str, values_files: tuple[str, ...]) -> None:
    cmd = [binary, "lint", "--strict", str(CHART)]
    for path in values_files:
        cmd += ["--values", path]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_helm_template_renders(values_files: tuple[str, ...]) -> None:
    # (Helm 3 renders every scenario inside `helm lint` above.)
    docs = render(values_files)
    kinds = {d["kind"] for d in docs}
    # Every scenario installs the policy; the webhook scenarios install the webhook configurations.
    assert "ConfigMap" in kinds
    assert {"Deployment", "Service", "ServiceAccount"} <= kinds
    for doc in docs:
        assert doc["metadata"]["name"], doc
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]


# (id, --set arguments, fragments the message must contain in both Helm 4's and Helm 3's wording)
REJECTED_CASES: list[tuple[str, tuple[str, ...], list[str]]] = [
    ("unknown-top-level-key", ("bogus=1",), ["bogus"]),
    ("unknown-nested-key", ("webhook.failurePolicyy=Ignore",), ["failurePolicyy"]),
    ("failurePolicy", ("webhook.failurePolicy=Sometimes",), ["failurePolicy", "Ignore", "Fail"]),
    ("timeoutSeconds-over-cap", ("webhook.timeoutSeconds=30",), ["timeoutSeconds", "5"]),
    ("timeoutSeconds-zero", ("webhook.timeoutSeconds=0",), ["timeoutSeconds", "1"]),
    ("headroom", ("policy.headroom=2",), ["headroom", "0.99"]),
    ("headroom-negative", ("json:policy.headroom=-0.1",), ["headroom", "0"]),
    ("negative-lookup-budget", ("json:policy.modelLookup.timeoutSeconds=-1",), ["timeoutSeconds"]),
    ("namespace-override-headroom", ('json:policy.namespaces={"team-a": {"headroom": 1.5}}',), ["headroom"]),
    (
        "workload-target-risk",
        ('json:policy.workload={"prompt_tokens": {"p50": 800}, "target_risk": 2}',),
        ["target_risk"],
    ),
    ("validationAction", ("policy.validationAction=Maybe",), ["validationAction", "Enforce", "Audit"]),
    # YAML 1.1 reads an unquoted `off` as false: the schema says it wants a string.
    ("mutation-unquoted-off", ("policy.mutation=false",), ["mutation"]),
    ("retune", ("exporter.retune=always",), ["retune"]),
    ("two-retuners", ("exporter.replicas=2",), ["replicas"]),
    ("tls-mode", ("webhook.tls.mode=manual",), ["mode"]),
    ("privilege-escalation", ("containerSecurityContext.allowPrivilegeEscalation=true",), ["allowPrivilegeEscalation"]),
    ("root", ("podSecurityContext.runAsNonRoot=false",), ["runAsNonRoot"]),
    ("writable-root", ("containerSecurityContext.readOnlyRootFilesystem=false",), ["readOnlyRootFilesystem"]),
    ("privileged-port", ("webhook.port=443",), ["port"]),
    ("servicemonitor-enabled", ("monitoring.serviceMonitor.enabled=maybe",), ["enabled"]),
    ("image-digest", ("image.digest=latest",), ["digest"]),
    ("provided-without-secret", ("webhook.tls.mode=provided",), ["secretName"]),
    ("on-timeout", ("policy.onTimeout=maybe",), ["onTimeout"]),
    ("unknown-input-cap", ("policy.limits.maxWhatever=1",), ["maxWhatever"]),
    ("input-cap-too-small", ("policy.limits.maxDepth=1",), ["maxDepth"]),
    ("allow-repos-three-parts", ('json:policy.modelLookup.allowRepos=["a/b/c"]',), ["allowRepos"]),
    ("no-workers", ("webhook.workers=0",), ["workers"]),
    ("tls-1-1", ("webhook.tls.minVersion=1.1",), ["minVersion"]),
    ("unknown-http-key", ("webhook.http.headerTimeout=1",), ["headerTimeout"]),
]
# Least privilege for the retuner: writes only in listed namespaces, never cluster-wide. (These set
# keys the cases above also set, so they are not part of the all-at-once test.)
RBAC_REJECTED_CASES: list[tuple[str, tuple[str, ...], list[str]]] = [
    ("apply-without-namespaces", ("exporter.retune=apply",), ["rbac", "namespaces"]),
    ("annotate-without-namespaces", ("exporter.annotateRecommendations=true",), ["rbac", "namespaces"]),
    ("write-namespace-wildcard", ("exporter.rbac.namespaces[0]=*",), ["namespaces"]),
    ("write-namespace-kube-system", ("exporter.rbac.namespaces[0]=kube-system",), ["namespaces"]),
    ("cluster-wide-rbac-key", ("exporter.rbac.clusterWide=true",), ["clusterWide"]),
]
REJECTED = [
    pytest.param(values, fragments, id=ident) for ident, values, fragments in REJECTED_CASES + RBAC_REJECTED_CASES
]


@pytest.mark.parametrize(("set_values", "fragments"), REJECTED)
def test_schema_rejects_bad_values(set_values: tuple[str, ...], fragments: list[str]) -> None:
    message = helm_template_error(*set_values)
    assert "schema" in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"
    # Readable: a short list of findings, not a template trace or a Go panic.
    assert "goroutine" not in message and "panic" not in message
    assert len(message) < 1500, message


@pytest.mark.parametrize("binary", helm_binaries(), indirect=True)
def test_every_bad_value_is_reported_at_once(binary: str) -> None:
    """Helm 3 (gojsonschema) and Helm 4 (santhosh-tekuri/jsonschema) validate differently; both must
    reject every case above, and list them all in one message."""
    cases = [
        (values, fragments) for _, values, fragments in REJECTED_CASES if not any("provided" in item for item in values)
    ]
    message = helm_template_error(*[item for values, _ in cases for item in values], helm=binary)
    for values, fragments in cases:
        for fragment in fragments:
            assert fragment in message, f"{values}: {fragment!r} missing from: {message}"


@pytest.mark.parametrize("binary", helm_binaries(), indirect=True)
def test_schema_rejection_also_fails_helm_lint(binary: str) -> None:
    proc = subprocess.run(
        [binary, "lint", str(CHART), "--set", "webhook.timeoutSeconds=30"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "timeoutSeconds" in proc.stdout + proc.stderr


# Cross-field rules the JSON schema cannot express are checked by the templates with `fail`.
TEMPLATE_FAILURES = [
    pytest.param(
        ("policy.modelLookup.timeoutSeconds=2",),
        "must be below webhook.timeoutSeconds",
        id="model-lookup-slower-than-webhook",
    ),
    pytest.param(
        ("webhook.mutating.enabled=false", "webhook.validating.enabled=false"),
        "set webhook.enabled=false instead",
        id="no-webhook-entries",
    ),
    pytest.param(("webhook.metricsPort=8443",), "must differ", id="port-clash"),
    pytest.param(
        ("webhook.reviewBudgetSeconds=2",), "reviewBudgetSeconds (2) must be below", id="review-budget-over-timeout"
    ),
    pytest.param(
        ("webhook.tls.mode=provided", "webhook.tls.provided.secretName=s"), "caBundle", id="provided-without-ca"
    ),
    pytest.param(("exporter.source=targets",), "targets", id="targets-without-urls"),
    pytest.param(("exporter.source=prometheus",), "prometheusUrl", id="prometheus-without-url"),
]


@pytest.mark.parametrize(("set_values", "fragment"), TEMPLATE_FAILURES)
def test_templates_reject_inconsistent_values(set_values: tuple[str, ...], fragment: str) -> None:
    message = helm_template_error(*set_values)
    assert fragment in message, message


def test_accepts_quoted_off_and_clamp() -> None:
    docs = render(set_values=("policy.mutation=clamp", "exporter.retune=off"))
    assert docs
    with pytest.raises(RenderError):
        render(set_values=("policy.mutation=fil",))
