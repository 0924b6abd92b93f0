"""The safety invariants of the rendered chart, for every scenario where they apply."""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from planner.policy.model import load_policy
from tests.chart.chart_helpers import CHART, NAMESPACE, RELEASE, SCENARIOS, component, find, one, render, require_helm

pytestmark = [pytest.mark.needs_helm, pytest.mark.usefixtures("helm")]

SCENARIO_PARAMS = [pytest.param(files, id=name) for name, files in SCENARIOS]
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
HANDLED = {
    ("apps", "v1"): {"deployments", "statefulsets", "daemonsets", "replicasets"},
    ("batch", "v1"): {"jobs"},
    ("", "v1"): {"pods"},
    ("leaderworkerset.x-k8s.io", "v1"): {"leaderworkersets"},
    ("serving.kserve.io", "v1beta1"): {"inferenceservices"},
    ("serving.kserve.io", "v1alpha1"): {"llminferenceservices"},
    ("serving.kserve.io", "v1alpha2"): {"llminferenceservices"},
    ("kubeai.org", "v1"): {"models"},
    ("ray.io", "v1"): {"rayclusters", "rayservices", "rayjobs"},
    ("orchestration.aibrix.ai", "v1alpha1"): {"rayclusterfleets", "stormservices", "rolesets"},
    ("nvidia.com", "v1alpha1"): {"dynamographdeployments"},
    ("nvidia.com", "v1beta1"): {"dynamographdeployments"},
    ("kaito.sh", "v1alpha1"): {"workspaces", "inferencesets"},
    ("kaito.sh", "v1beta1"): {"workspaces", "inferencesets"},
}


def webhooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [hook for d in docs if d["kind"] in WEBHOOK_KINDS for hook in d["webhooks"]]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for d in docs:
        if d["kind"] == "Deployment":
            specs.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "Pod":
            specs.append((d["metadata"]["name"], d["spec"]))
    return specs


# --- admission webhook configurations -------------------------------------------------------------


def test_defaults_are_fail_open_and_fast() -> None:
    hooks = webhooks(render())
    assert {h["name"] for h in hooks} == {"mutate.kv-planner.io", "validate.kv-planner.io"}
    for hook in hooks:
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] == 2
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["matchPolicy"] == "Equivalent"
    mutating = one(render(), "MutatingWebhookConfiguration")["webhooks"][0]
    assert mutating["reinvocationPolicy"] == "Never"
    assert mutating["clientConfig"]["service"]["path"] == "/mutate"
    validating = one(render(), "ValidatingWebhookConfiguration")["webhooks"][0]
    assert validating["clientConfig"]["service"]["path"] == "/validate"


@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_webhook_scope_in_every_scenario(values_files: tuple[str, ...]) -> None:
    docs = render(values_files)
    values = yaml.safe_load(Path(values_files[0]).read_text()) if values_files else {}
    extra_excluded = values.get("webhook", {}).get("excludedNamespaces", [])
    hooks = webhooks(docs)
    assert hooks
    for hook in hooks:
        assert hook["timeoutSeconds"] <= 5
        assert hook["failurePolicy"] in ("Ignore", "Fail")
        assert hook["sideEffects"] == "None"
        service = hook["clientConfig"]["service"]
        assert service["namespace"] == NAMESPACE and service["port"] == 443
        # Rules: only the kinds the webhook handles, CREATE/UPDATE, never a subresource.
        for rule in hook["rules"]:
            assert rule["scope"] == "Namespaced"
            assert set(rule["operations"]) <= {"CREATE", "UPDATE"}
            for group in rule["apiGroups"]:
                for version in rule["apiVersions"]:
                    assert set(rule["resources"]) <= HANDLED[(group, version)], rule
            assert all("/" not in r and "*" not in r for r in rule["resources"]), rule
        # Namespace selector: opt-in label required, system and own namespaces excluded by name.
        expressions = hook["namespaceSelector"]["matchExpressions"]
        assert {"key": "kv-planner.io/enabled", "operator": "In", "values": ["true"]} in expressions
        by_name = [e for e in expressions if e["key"] == "kubernetes.io/metadata.name"]
        assert len(by_name) == 1 and by_name[0]["operator"] == "NotIn"
        assert set(by_name[0]["values"]) == {"kube-system", "kube-node-lease", NAMESPACE, *extra_excluded}
        assert "matchLabels" not in hook["namespaceSelector"]
        assert [c["name"] for c in hook["matchConditions"]] == [
            "not-opted-out",
            "not-managed-by-reviewed-owner",
            "not-terminating",
        ]


def test_release_namespace_is_always_excluded() -> None:
    for hook in webhooks(render(namespace="ops-tools")):
        names = next(
            e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"
        )["values"]
        assert "ops-tools" in names and "kube-system" in names and "kube-node-lease" in names


def test_pods_and_jobs_only_on_create() -> None:
    rules = webhooks(render())[0]["rules"]
    by_resource = {res: rule["operations"] for rule in rules for res in rule["resources"]}
    assert by_resource["pods"] == ["CREATE"] and by_resource["jobs"] == ["CREATE"]
    assert by_resource["deployments"] == ["CREATE", "UPDATE"]
    assert by_resource["leaderworkersets"] == ["CREATE", "UPDATE"]
    # Serving platforms are on by default (a rule for an absent CRD matches nothing), each can be off.
    platform_resources = {"inferenceservices", "llminferenceservices", "models", "rayclusters", "rayservices"}
    assert platform_resources | {"rayjobs", "rayclusterfleets", "stormservices", "dynamographdeployments"} <= set(
        by_resource
    )
    assert "servingruntimes" not in by_resource  # a template: checked with the InferenceService using it
    assert "kubeai.org/" in webhooks(render())[0]["matchConditions"][1]["expression"]
    off = webhooks(render(set_values=("webhook.platforms.kserve.enabled=false", "webhook.platforms.ray.enabled=false")))
    resources = {res for rule in off[0]["rules"] for res in rule["resources"]}
    assert not resources & {"inferenceservices", "llminferenceservices", "rayclusters", "rayservices", "rayjobs"}
    assert "models" in resources
    assert "serving.kserve.io/" not in off[0]["matchConditions"][1]["expression"]


def test_dynamo_rule_covers_both_served_versions() -> None:
    """Dynamo serves DynamoGraphDeployment as v1alpha1 and v1beta1 (the storage version, spec.components):
    both are sent as written, each read by its own shape (docs/platforms.md)."""
    rules = webhooks(render())[0]["rules"]
    dynamo = [rule for rule in rules if rule["apiGroups"] == ["nvidia.com"]]
    assert [(sorted(rule["apiVersions"]), rule["resources"]) for rule in dynamo] == [
        (["v1alpha1", "v1beta1"], ["dynamographdeployments"])
    ]


def test_kaito_rule_and_its_switch() -> None:
    """KAITO Workspaces and InferenceSets (kaito.sh v1alpha1, v1beta1) are sent; the StatefulSets and
    Workspaces KAITO makes of them are not while the platform is on."""
    hook = webhooks(render())[0]
    kaito = [rule for rule in hook["rules"] if rule["apiGroups"] == ["kaito.sh"]]
    assert [(sorted(rule["apiVersions"]), sorted(rule["resources"])) for rule in kaito] == [
        (["v1alpha1", "v1beta1"], ["inferencesets", "workspaces"])
    ]
    assert "kaito.sh/" in hook["matchConditions"][1]["expression"]
    off = webhooks(render(set_values=("webhook.platforms.kaito.enabled=false",)))[0]
    assert not [rule for rule in off["rules"] if rule["apiGroups"] == ["kaito.sh"]]
    assert "kaito.sh/" not in off["matchConditions"][1]["expression"]


def test_enforce_scenario_turns_the_knobs() -> None:
    docs = render((str(CHART / "ci" / "09-enforce-values.yaml"),))
    for hook in webhooks(docs):
        assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] == 5
    policy = yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-kv-planner-policy")["data"]["policy.yaml"])
    assert policy["validationAction"] == "Enforce" and policy["mutation"] == "clamp"
    assert policy["namespaces"]["research"] == {"validationAction": "Audit", "mutation": "off"}
    deployment = component(docs, "Deployment", "webhook")
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_HUB_OFFLINE"] == "1"


# --- policy ConfigMap ----------------------------------------------------------------------------


@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_policy_configmap_is_the_policy_block(values_files: tuple[str, ...], tmp_path: Path) -> None:
    docs = render(values_files)
    cm = one(docs, "ConfigMap", f"{RELEASE}-kv-planner-policy")
    policy = yaml.safe_load(cm["data"]["policy.yaml"])
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    override = (yaml.safe_load(Path(values_files[0]).read_text()) or {}).get("policy", {}) if values_files else {}
    expected = {**defaults, **override, "modelLookup": {**defaults["modelLookup"], **override.get("modelLookup", {})}}
    assert policy == expected
    # The webhook and `planner check --policy` load the file with planner.policy.model.load_policy.
    path = tmp_path / "policy.yaml"
    path.write_text(cm["data"]["policy.yaml"])
    loaded = load_policy(path)
    assert loaded.validation_action == policy["validationAction"]
    assert loaded.mutation == policy["mutation"]
    assert loaded.headroom == policy["headroom"]


def test_policy_is_mounted_as_a_directory_so_it_reloads() -> None:
    docs = render()
    spec = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "policy")
    assert "subPath" not in mount  # subPath mounts are never refreshed by the kubelet
    volume = next(v for v in spec["volumes"] if v["name"] == "policy")
    assert volume["configMap"]["name"] == f"{RELEASE}-kv-planner-policy"
    # No checksum annotation on the pod template: a policy change must not restart the webhook.
    template = component(docs, "Deployment", "webhook")["spec"]["template"]
    assert not any("checksum" in k for k in template["metadata"].get("annotations", {}))
    args = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--policy-file=/etc/kv-planner/policy/policy.yaml" in args


# --- pods: security, resources, availability --------------------------------------------------------


@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_every_pod_meets_restricted_pod_security(values_files: tuple[str, ...]) -> None:
    specs = pod_specs(render(values_files))
    assert specs
    for name, spec in specs:
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, name
        assert pod_sc["runAsUser"] > 0 and pod_sc["runAsGroup"] > 0, name
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        for volume in spec.get("volumes", []):
            assert set(volume) - {"name"} <= {"secret", "configMap", "emptyDir"}, (name, volume)
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["runAsNonRoot"] is True, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
            assert "privileged" not in sc, name
            resources = container["resources"]
            assert resources["requests"]["cpu"] and resources["requests"]["memory"], name
            assert resources["limits"]["memory"], name
            assert not container.get("ports") or all(p["containerPort"] > 1024 for p in container["ports"])


def test_webhook_deployment_is_highly_available() -> None:
    docs = render()
    deployment = component(docs, "Deployment", "webhook")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    selector = spec["selector"]["matchLabels"]
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for constraint in pod["topologySpreadConstraints"]:
        assert constraint["labelSelector"]["matchLabels"] == selector
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] >= 5
    assert pod["terminationGracePeriodSeconds"] > container["lifecycle"]["preStop"]["sleep"]["seconds"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    # The Service the API server calls selects exactly these pods and forwards 443 to the TLS port.
    service = component(docs, "Service", "webhook")
    assert service["spec"]["selector"] == selector
    assert {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"} in service["spec"]["ports"]


def test_custom_spread_constraints_get_the_pod_selector() -> None:
    docs = render(
        set_values=(
            "webhook.topologySpreadConstraints[0].maxSkew=1",
            "webhook.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "webhook.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        )
    )
    deployment = component(docs, "Deployment", "webhook")
    (constraint,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert constraint["whenUnsatisfiable"] == "DoNotSchedule"
    assert constraint["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_webhook_args_and_image() -> None:
    docs = render(set_values=("image.repository=registry.example.com/kv-planner", "image.tag=1.2.3"))
    container = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/kv-planner:1.2.3"
    assert container["args"] == [
        "webhook",
        "--port=8443",
        "--tls-cert-file=/etc/kv-planner/tls/tls.crt",
        "--tls-key-file=/etc/kv-planner/tls/tls.key",
        "--policy-file=/etc/kv-planner/policy/policy.yaml",
        "--metrics-port=9090",
        "--tls-min-version=1.2",
        "--workers=3",
        "--review-budget=1",
        "--max-waiting=32",
        "--worker-max-memory=209715200",
        "--request-timeout=10",
        "--keep-alive=5",
        "--max-connections=1000",
        "--max-pending-bytes=67108864",
    ]
    digest = "sha256:" + "a" * 64
    docs = render(set_values=("image.tag=1.2.3", f"image.digest={digest}"))
    container = component(docs, "Deployment", "exporter")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"kv-planner@{digest}"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    default = component(render(), "Deployment", "webhook")["spec"]["template"]["spec"]["containers"][0]
    assert default["image"] == f"kv-planner:{chart['appVersion']}"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            (),
            [
                "exporter",
                "--port=9400",
                "--discover",
                "--retune=recommend",
                "--retune-headroom=0.1",
                "--retune-events",
                "--no-retune-annotate",
            ],
        ),
        # typer list options repeat the flag: --targets=a --targets=b
        (
            (
                "exporter.source=targets",
                "exporter.targets[0]=http://a:8000/metrics",
                "exporter.targets[1]=http://b:8000/metrics",
                "exporter.retune=off",
            ),
            [
                "exporter",
                "--port=9400",
                "--targets=http://a:8000/metrics",
                "--targets=http://b:8000/metrics",
                "--retune=off",
            ],
        ),
        (
            (
                "exporter.source=prometheus",
                "exporter.prometheusUrl=http://prom:9090",
                "exporter.retune=apply",
                "json:policy.headroom=0.2",
                'json:policy.workload={"prompt_tokens": {"p50": 800}, "target_risk": 0.05}',
                "exporter.events.enabled=false",
                "exporter.annotateRecommendations=true",
                "exporter.rbac.namespaces[0]=team-a",
            ),
            [
                "exporter",
                "--port=9400",
                "--prometheus-url=http://prom:9090",
                "--retune=apply",
                "--retune-headroom=0.2",
                "--retune-target-risk=0.05",
                "--no-retune-events",
                "--retune-annotate",
                "--retune-namespaces=team-a",
            ],
        ),
    ],
)
def test_exporter_args(values: tuple[str, ...], expected: list[str]) -> None:
    container = component(render(set_values=values), "Deployment", "exporter")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["args"] == expected


def test_exporter_runs_once() -> None:
    spec = component(render(), "Deployment", "exporter")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}


# --- RBAC ------------------------------------------------------------------------------------------


def rules_of(docs: list[dict[str, Any]], comp: str) -> list[dict[str, Any]]:
    roles = [
        d
        for d in docs
        if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["labels"]["app.kubernetes.io/component"] == comp
    ]
    return [rule for role in roles for rule in role["rules"]]


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_no_wildcards_and_no_webhook_configuration_rights(values_files: tuple[str, ...]) -> None:
    docs = render(values_files)
    for d in docs:
        for rule in d.get("rules", []) if d["kind"] in ("ClusterRole", "Role") else []:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert not {
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
                "secrets",
                "clusterroles",
                "roles",
            } & set(rule["resources"]), rule
            assert not {"escalate", "bind", "impersonate", "delete", "deletecollection"} & set(rule["verbs"])


def test_webhook_reads_nodes_and_namespaces_only() -> None:
    docs = render()
    read = {"get", "list", "watch"}
    assert grants(rules_of(docs, "webhook")) == {("", r, v) for r in ("nodes", "namespaces") for v in read}
    binding = component(docs, "ClusterRoleBinding", "webhook")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{RELEASE}-kv-planner-webhook", "namespace": NAMESPACE}
    ]
    sa = component(docs, "ServiceAccount", "webhook")
    assert sa["automountServiceAccountToken"] is False  # mounted explicitly into the webhook pod only
    pod = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"] and pod["automountServiceAccountToken"] is True


def exporter_grants(*values: str) -> set[tuple[str, str, str]]:
    return grants(rules_of(render(set_values=values), "exporter"))


def test_exporter_default_writes_nothing() -> None:
    got = exporter_grants()
    assert {g for g in got if g[2] not in ("get", "list", "watch")} == set()
    for resource in ("pods", "nodes", "namespaces"):
        assert any(g[1] == resource and g[2] == "watch" for g in got), resource
    assert not {g for g in got if g[1] in ("deployments", "statefulsets", "replicasets", "leaderworkersets")}
    docs = render()
    assert not find(docs, "Role") and not find(docs, "RoleBinding")
    args = component(docs, "Deployment", "exporter")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--retune-namespaces")]


@pytest.mark.parametrize("values_files", SCENARIO_PARAMS)
def test_exporter_never_writes_cluster_wide(values_files: tuple[str, ...]) -> None:
    docs = render(values_files)
    for role in find(docs, "ClusterRole"):
        if role["metadata"]["labels"]["app.kubernetes.io/component"] == "exporter":
            assert {v for rule in role["rules"] for v in rule["verbs"]} <= {"get", "list", "watch"}, role


LISTED = ("exporter.rbac.namespaces[0]=team-a", "exporter.rbac.namespaces[1]=team-b")


def roles_by_namespace(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    return {r["metadata"]["namespace"]: grants(r["rules"]) for r in find(docs, "Role")}


@pytest.mark.parametrize(
    ("values", "patches"),
    [
        (("exporter.retune=recommend",), False),
        (("exporter.retune=recommend", "exporter.annotateRecommendations=true"), True),
        (("exporter.retune=apply",), True),
    ],
)
def test_exporter_patches_only_in_listed_namespaces_and_only_when_it_writes_workloads(
    values: tuple[str, ...], patches: bool
) -> None:
    docs = render(set_values=(*values, *LISTED))
    roles = roles_by_namespace(docs)
    assert sorted(roles) == ["team-a", "team-b"]
    for got in roles.values():
        patch = {g for g in got if g[2] == "patch"}
        assert patch == ({("apps", "deployments", "patch"), ("apps", "statefulsets", "patch")} if patches else set())
        # The owner chain the retuner verifies (Pod -> ReplicaSet -> Deployment | StatefulSet), read by name.
        assert {("", "pods", "get"), ("apps", "replicasets", "get"), ("apps", "deployments", "get")} <= got
        assert not {g for g in got if g[2] in ("list", "watch")}
    bindings = find(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert all(
        b["roleRef"]
        == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{RELEASE}-kv-planner-exporter-retuner"}
        for b in bindings
    )
    args = component(docs, "Deployment", "exporter")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--retune-namespaces")] == [
        "--retune-namespaces=team-a",
        "--retune-namespaces=team-b",
    ]


def test_exporter_events_only_when_enabled() -> None:
    roles = roles_by_namespace(render(set_values=("exporter.events.enabled=false", *LISTED)))
    assert roles and not {g for got in roles.values() for g in got if g[1] == "events"}
    with_events = roles_by_namespace(render(set_values=LISTED))
    assert all(("", "events", "create") in got for got in with_events.values())
    assert not find(render(set_values=("exporter.retune=off", *LISTED)), "Role")  # no retuner, no writes
    container = component(render(set_values=("exporter.events.enabled=false",)), "Deployment", "exporter")["spec"][
        "template"
    ]["spec"]["containers"][0]
    assert "--no-retune-events" in container["args"]


def test_apply_scenario_writes_in_its_two_namespaces_only() -> None:
    docs = render((str(CHART / "ci" / "11-apply-mode-values.yaml"),))
    assert sorted(roles_by_namespace(docs)) == ["team-a", "team-b"]
    cluster = one(docs, "ClusterRoleBinding", f"{RELEASE}-kv-planner-exporter-cluster")
    role = one(docs, "ClusterRole", cluster["roleRef"]["name"])
    # Prometheus mode: no pod listing either.
    assert grants(role["rules"]) == {("", r, v) for r in ("nodes", "namespaces") for v in ("get", "list", "watch")}
    pod = component(docs, "Deployment", "exporter")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True


def test_static_targets_without_retuner_need_no_token() -> None:
    docs = render((str(CHART / "ci" / "10-audit-values.yaml"),))
    assert (
        component(docs, "Deployment", "exporter")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    )
    assert one(docs, "ValidatingWebhookConfiguration") and not find(docs, "MutatingWebhookConfiguration")


# --- TLS -------------------------------------------------------------------------------------------


def load_cert(pem: bytes) -> Any:
    return x509.load_pem_x509_certificate(pem)


def test_self_signed_fresh_install() -> None:
    """Without a cluster `lookup` finds nothing: a fresh CA and serving certificate, consistent with the
    caBundle of both webhooks. (Reuse on `helm upgrade` needs a cluster: e2e/kind.sh proves it.)"""
    docs = render()
    secret = one(docs, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    for hook in webhooks(docs):
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == data["ca.crt"]
    ca, cert = load_cert(data["ca.crt"]), load_cert(data["tls.crt"])
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    service = f"{RELEASE}-kv-planner-webhook"
    assert f"{service}.{NAMESPACE}.svc" in sans and f"{service}.{NAMESPACE}.svc.cluster.local" in sans
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    not_after = dt.datetime.fromisoformat(secret["metadata"]["annotations"]["kv-planner.io/tls-not-after"])
    assert abs((not_after - cert.not_valid_after_utc).total_seconds()) < 120
    assert not_after - dt.datetime.now(dt.timezone.utc) > dt.timedelta(days=3000)
    # The pods mount exactly this Secret.
    volumes = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "tls")["secret"]["secretName"] == secret["metadata"]["name"]


def test_cert_manager_mode() -> None:
    for files, apis in (
        ((str(CHART / "ci" / "02-cert-manager-values.yaml"),), ()),
        ((), ("cert-manager.io/v1",)),
    ):  # "auto" detects the API
        docs = render(files, api_versions=apis)
        assert not find(docs, "Secret")
        certificate = one(docs, "Certificate", f"{RELEASE}-kv-planner-webhook")
        for d in docs:
            if d["kind"] in WEBHOOK_KINDS:
                assert d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
                    f"{NAMESPACE}/{certificate['metadata']['name']}"
                )
                assert "caBundle" not in d["webhooks"][0]["clientConfig"]
        assert f"{RELEASE}-kv-planner-webhook.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
        assert certificate["spec"]["issuerRef"]["name"] == f"{RELEASE}-kv-planner-ca"
        assert one(docs, "Certificate", f"{RELEASE}-kv-planner-ca")["spec"]["isCA"] is True
        assert {i["metadata"]["name"] for i in find(docs, "Issuer")} == {
            f"{RELEASE}-kv-planner-selfsigned",
            f"{RELEASE}-kv-planner-ca",
        }
        volumes = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]["volumes"]
        tls = next(v for v in volumes if v["name"] == "tls")
        assert tls["secret"]["secretName"] == certificate["spec"]["secretName"]


def test_cert_manager_with_existing_issuer() -> None:
    docs = render((str(CHART / "ci" / "03-cert-manager-issuer-values.yaml"),))
    assert not find(docs, "Issuer")
    (certificate,) = find(docs, "Certificate")
    assert certificate["spec"]["issuerRef"] == {
        "name": "internal-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


def test_provided_certificate() -> None:
    path = CHART / "ci" / "04-provided-cert-values.yaml"
    values = yaml.safe_load(path.read_text())["webhook"]["tls"]["provided"]
    docs = render((str(path),))
    assert not find(docs, "Secret") and not find(docs, "Certificate")
    for hook in webhooks(docs):
        assert hook["clientConfig"]["caBundle"] == values["caBundle"]
    load_cert(base64.b64decode(values["caBundle"]))
    volumes = component(docs, "Deployment", "webhook")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "tls")["secret"]["secretName"] == values["secretName"]
    test_pod = one(docs, "Pod")
    env = {e["name"]: e["value"] for e in test_pod["spec"]["containers"][0]["env"]}
    assert env["CA_BUNDLE_B64"] == values["caBundle"]


# --- monitoring, dashboards, network policy, helm test ------------------------------------------------


def test_prometheus_operator_objects_follow_the_api_or_the_switch() -> None:
    assert not find(render(), "ServiceMonitor") and not find(render(), "PrometheusRule")
    auto = render(api_versions=("monitoring.coreos.com/v1",))
    assert len(find(auto, "ServiceMonitor")) == 2 and one(auto, "PrometheusRule")
    forced = render((str(CHART / "ci" / "05-prometheus-operator-on-values.yaml"),))
    for monitor in find(forced, "ServiceMonitor"):
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        comp = monitor["metadata"]["labels"]["app.kubernetes.io/component"]
        service = component(forced, "Service", comp)
        assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
        assert any(p["name"] == "metrics" for p in service["spec"]["ports"])
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    off = render(
        (str(CHART / "ci" / "06-prometheus-operator-off-values.yaml"),), api_versions=("monitoring.coreos.com/v1",)
    )
    assert not find(off, "ServiceMonitor") and not find(off, "PrometheusRule")


def test_webhook_alerts_cover_fail_open_errors_and_latency() -> None:
    rule = one(render(set_values=("monitoring.prometheusRule.enabled=true",)), "PrometheusRule")
    group = next(g for g in rule["spec"]["groups"] if g["name"] == "kv-planner.webhook.alerts")
    exprs = {r["alert"]: r["expr"] for r in group["rules"]}
    assert "apiserver_admission_webhook_fail_open_count" in exprs["KVPlannerWebhookFailingOpen"]
    assert "apiserver_admission_webhook_request_total" in exprs["KVPlannerWebhookErrors"]
    assert "apiserver_admission_webhook_admission_duration_seconds_bucket" in exprs["KVPlannerWebhookSlow"]
    assert "calling_webhook_error" in exprs["KVPlannerWebhookRejectedOnFailure"]
    assert "KVPlannerWebhookDown" not in exprs  # only with the ServiceMonitor that produces `up`


def test_rules_files_are_wrapped_whole() -> None:
    files = sorted((CHART / "files" / "rules").glob("*.yaml"))
    assert files, "charts/files/rules/ holds the rules generated by dashboards/"
    expected = [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]
    rule = one(render(set_values=("monitoring.prometheusRule.enabled=true",)), "PrometheusRule")
    assert rule["spec"]["groups"][: len(expected)] == expected


def test_dashboards_configmaps() -> None:
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    docs = render((str(CHART / "ci" / "07-dashboards-on-values.yaml"),))
    maps = [d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(maps) == len(files)
    by_key = {key: (cm, value) for cm in maps for key, value in cm["data"].items()}
    for path in files:
        cm, text = by_key[path.name]
        assert json.loads(text) == json.loads(path.read_text())
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "vLLM"}
    off = render((str(CHART / "ci" / "08-dashboards-off-values.yaml"),))
    assert not [d for d in off if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]


def test_network_policy() -> None:
    assert not find(render(), "NetworkPolicy")
    docs = render((str(CHART / "ci" / "09-enforce-values.yaml"),))
    webhook_np = component(docs, "NetworkPolicy", "webhook")
    pods = component(docs, "Deployment", "webhook")["spec"]["selector"]["matchLabels"]
    assert webhook_np["spec"]["podSelector"]["matchLabels"] == pods
    https, metrics = webhook_np["spec"]["ingress"]
    assert https["ports"] == [{"port": "https", "protocol": "TCP"}] and "from" not in https
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert component(docs, "NetworkPolicy", "exporter")


def test_helm_test_hook() -> None:
    docs = render()
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert "hook-succeeded" in pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["WEBHOOK_HOST"] == f"{RELEASE}-kv-planner-webhook.{NAMESPACE}.svc"
    ca = next(v for v in spec["volumes"] if v["name"] == "ca")
    assert ca["secret"]["secretName"] == one(docs, "Secret")["metadata"]["name"]
    compile(spec["containers"][0]["args"][0], "helm-test", "exec")  # the inline script is valid Python


def test_uninstall_leaves_no_webhook_configuration() -> None:
    """The webhook configurations are plain release objects (no hook, no keep policy), so
    `helm uninstall` deletes them, first of all (Helm's uninstall order starts with them)."""
    for d in render():
        annotations = d["metadata"].get("annotations", {})
        if d["kind"] in WEBHOOK_KINDS:
            assert "helm.sh/hook" not in annotations
        assert annotations.get("helm.sh/resource-policy") != "keep", d["metadata"]["name"]


def test_labels_and_names() -> None:
    docs = render(set_values=("commonLabels.team=ml-platform",))
    for d in docs:
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["team"] == "ml-platform"
    # Service names are DNS labels (63 characters); so are label values. RBAC names may be longer.
    long = render(set_values=("fullnameOverride=" + "x" * 70, "nameOverride=" + "y" * 70))
    for d in long:
        if d["kind"] in ("Service", "ConfigMap", "Secret", "Deployment"):
            assert len(d["metadata"]["name"]) <= 63, d["metadata"]["name"]
        assert all(len(v) <= 63 for v in d["metadata"]["labels"].values()), d["metadata"]["labels"]


def notes(*set_values: str) -> str:
    cmd = [require_helm(), "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for item in set_values:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_say_how_to_opt_in_check_health_and_set_the_image() -> None:
    text = notes()
    assert "kubectl label namespace <namespace> kv-planner.io/enabled=true" in text
    assert f"helm test {RELEASE}" in text
    assert "--set image.repository=" in text and "docker push" in text  # the default image is not pullable
    assert "TLS self-signed" in text
    pushed = notes("image.repository=registry.example.com/kv-planner", "webhook.failurePolicy=Fail")
    assert "docker push" not in pushed
    assert "failurePolicy is Fail" in pushed and "docs/chart.md" in pushed


def test_components_can_be_disabled_independently() -> None:
    no_webhook = render(set_values=("webhook.enabled=false",))
    assert not [d for d in no_webhook if d["kind"] in (*WEBHOOK_KINDS, "Secret", "PodDisruptionBudget", "Pod")]
    assert component(no_webhook, "Deployment", "exporter")
    no_exporter = render(set_values=("exporter.enabled=false", "monitoring.serviceMonitor.enabled=true"))
    assert not [d for d in no_exporter if d["metadata"]["labels"].get("app.kubernetes.io/component") == "exporter"]
    assert [m["metadata"]["name"] for m in find(no_exporter, "ServiceMonitor")] == [f"{RELEASE}-kv-planner-webhook"]
