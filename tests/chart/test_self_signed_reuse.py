"""The self-signed CA on `helm upgrade`: reused from the existing Secret, renewed only near expiry.

`lookup` needs an API server. This test serves the few read-only endpoints Helm uses while rendering
(`/version`, discovery, GET of the webhook's Secret) from a small HTTP server on 127.0.0.1, and renders
with `helm template --dry-run=server`, the same code path `helm upgrade` takes to render. The real
upgrade on a real cluster is exercised by e2e/kind.sh.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from tests.chart.chart_helpers import CHART, RELEASE, helm_binaries

pytestmark = [pytest.mark.needs_helm, pytest.mark.usefixtures("helm")]

NAMESPACE = "kv-upgrade"
SECRET = f"{RELEASE}-kv-planner-webhook-tls"
# Kinds the chart renders, as discovery must list them for Helm to map manifests to resources.
RESOURCES = {
    "v1": [
        ("configmaps", "ConfigMap"),
        ("secrets", "Secret"),
        ("serviceaccounts", "ServiceAccount"),
        ("services", "Service"),
        ("pods", "Pod"),
    ],
    "apps/v1": [("deployments", "Deployment")],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget")],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole"),
        ("clusterrolebindings", "ClusterRoleBinding"),
        ("roles", "Role"),
        ("rolebindings", "RoleBinding"),
    ],
    "admissionregistration.k8s.io/v1": [
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
    ],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy")],
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


class FakeApiServer(BaseHTTPRequestHandler):
    """Read-only: discovery, and GET of the one Secret in `secrets` (everything else is NotFound)."""

    secrets: ClassVar[dict[str, dict[str, Any]]] = {}
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self.requests.append(path)
        body = self.route(path)
        if body is None:
            self.reply(
                404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            )
        else:
            self.reply(200, body)

    def route(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            groups = []
            for gv in RESOURCES:
                if "/" in gv:
                    group, version = gv.split("/")
                    entry = {"groupVersion": gv, "version": version}
                    groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        gv = path.removeprefix("/api/").removeprefix("/apis/")
        if gv in RESOURCES:
            return {
                "kind": "APIResourceList",
                "groupVersion": gv,
                "resources": [
                    {
                        "name": name,
                        "singularName": kind.lower(),
                        "kind": kind,
                        "namespaced": kind not in CLUSTER_SCOPED,
                        "verbs": ["get", "list"],
                    }
                    for name, kind in RESOURCES[gv]
                ],
            }
        prefix = f"/api/v1/namespaces/{NAMESPACE}/secrets/"
        if path.startswith(prefix):
            return self.secrets.get(path.removeprefix(prefix))
        return None

    def reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "users": [{"name": "fake", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": NAMESPACE}}],
            }
        )
    )
    yield path
    server.shutdown()
    server.server_close()


def render_against_cluster(helm: str, kubeconfig: Path, existing: dict[str, Any] | None) -> list[dict[str, Any]]:
    FakeApiServer.secrets = {SECRET: existing} if existing else {}
    FakeApiServer.requests = []
    proc = subprocess.run(
        [
            helm,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--dry-run=server",
            "--disable-openapi-validation",
            "--kubeconfig",
            str(kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}" in FakeApiServer.requests  # lookup happened
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def tls_state(docs: list[dict[str, Any]]) -> tuple[dict[str, str], str, set[str]]:
    secret = next(d for d in docs if d["kind"] == "Secret")
    bundles = {
        h["clientConfig"]["caBundle"] for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]
    }
    return secret["data"], secret["metadata"]["annotations"]["kv-planner.io/tls-not-after"], bundles


def as_live_secret(docs: list[dict[str, Any]], not_after: str | None) -> dict[str, Any]:
    """The Secret of a previous release, as the API server would return it."""
    secret: dict[str, Any] = json.loads(json.dumps(next(d for d in docs if d["kind"] == "Secret")))
    secret["metadata"]["namespace"] = NAMESPACE
    # Helm's ownership marks, as on any object a release installed (Helm 4 checks them on upgrade).
    annotations = {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NAMESPACE}
    if not_after is not None:
        annotations["kv-planner.io/tls-not-after"] = not_after
    secret["metadata"]["annotations"] = annotations
    return secret


def rfc3339(delta: dt.timedelta) -> str:
    return (dt.datetime.now(dt.timezone.utc) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("binary", helm_binaries(), indirect=True)
def test_upgrade_reuses_a_valid_ca_and_renews_near_expiry(binary: str, kubeconfig: Path) -> None:
    fresh = render_against_cluster(binary, kubeconfig, None)
    data, _, bundles = tls_state(fresh)
    assert bundles == {data["ca.crt"]}

    # A Secret from a previous release, valid for years: reused byte for byte, annotation included.
    previous = as_live_secret(fresh, rfc3339(dt.timedelta(days=3000)))
    again = render_against_cluster(binary, kubeconfig, previous)
    data2, not_after2, bundles2 = tls_state(again)
    assert data2 == previous["data"]
    assert not_after2 == previous["metadata"]["annotations"]["kv-planner.io/tls-not-after"]
    assert bundles2 == {previous["data"]["ca.crt"]}

    # Inside renewBeforeDays (90 by default): a new CA and certificate.
    expiring = as_live_secret(fresh, rfc3339(dt.timedelta(days=30)))
    renewed, renewed_not_after, renewed_bundles = tls_state(render_against_cluster(binary, kubeconfig, expiring))
    assert renewed["ca.crt"] != expiring["data"]["ca.crt"] and renewed["tls.key"] != expiring["data"]["tls.key"]
    assert renewed_bundles == {renewed["ca.crt"]}
    assert dt.datetime.fromisoformat(renewed_not_after) > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=3000)

    # Not made by this chart (no annotation) or incomplete: never trusted, regenerated.
    foreign = as_live_secret(fresh, None)
    assert tls_state(render_against_cluster(binary, kubeconfig, foreign))[0]["ca.crt"] != foreign["data"]["ca.crt"]
    partial = as_live_secret(fresh, rfc3339(dt.timedelta(days=3000)))
    del partial["data"]["tls.key"]
    assert tls_state(render_against_cluster(binary, kubeconfig, partial))[0]["ca.crt"] != partial["data"]["ca.crt"]
    assert base64.b64decode(renewed["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
