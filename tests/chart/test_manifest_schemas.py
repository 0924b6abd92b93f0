"""Every rendered object against its real schema.

- Built-in kinds: kubernetes-validate in strict mode (unknown fields are errors) at the lowest
  Kubernetes version the chart supports (Chart.yaml kubeVersion) and the newest the installed
  kubernetes-validate ships.
- Custom resources (ServiceMonitor, PrometheusRule, cert-manager Issuer/Certificate): the validators
  the npm packages @kubernetes-models/prometheus-operator and @kubernetes-models/cert-manager generate
  from those projects' API types (types, enums, patterns, required fields; they do not reject unknown
  fields). Installed into .tools/node by scripts/install-test-tools; run with node.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate.utils as kubernetes_validate
import pytest
import yaml

from tests.chart.chart_helpers import CHART, CUSTOM_KINDS, REPO_ROOT, SCENARIOS, render
from tests.conftest import missing, require_tool

pytestmark = [pytest.mark.needs_helm, pytest.mark.usefixtures("helm")]

# Render each scenario also as if cert-manager and the Prometheus Operator were installed, so that
# "auto" modes produce their custom resources too.
ALL_APIS = ("cert-manager.io/v1", "monitoring.coreos.com/v1")
RENDERINGS = [(name, files, apis) for name, files in SCENARIOS for apis in ((), ALL_APIS)]
NODE_MODULES = REPO_ROOT / ".tools" / "node" / "node_modules"


def min_kube_version() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    match = re.fullmatch(r">=\s*(\d+\.\d+)\.\d+(-0)?", chart["kubeVersion"])
    assert match, chart["kubeVersion"]
    return f"{match.group(1)}.0"


def kube_versions() -> list[str]:
    latest: str = kubernetes_validate.latest_version()
    return [min_kube_version(), latest]


def rendered_documents() -> dict[str, list[dict[str, Any]]]:
    return {f"{name}{'+crds' if apis else ''}": render(files, api_versions=apis) for name, files, apis in RENDERINGS}


def test_lowest_supported_version_has_schemas() -> None:
    shipped = {v.rsplit(".", 1)[0] for v in kubernetes_validate.all_versions()}
    assert min_kube_version().rsplit(".", 1)[0] in shipped


@pytest.mark.parametrize("version", kube_versions())
def test_builtin_objects_validate_strictly(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The library call behind the `kubernetes-validate --strict` CLI, in-process: the CLI re-reads the
    # (multi-megabyte) schema files for every document, here they are read once; and identical
    # documents (most of them, across scenarios) are validated once.
    monkeypatch.setattr(kubernetes_validate, "schema_contents", functools.cache(kubernetes_validate.schema_contents))
    unique: dict[str, tuple[str, dict[str, Any]]] = {}
    for label, docs in rendered_documents().items():
        for doc in docs:
            if doc["kind"] not in CUSTOM_KINDS:
                unique.setdefault(json.dumps(doc, sort_keys=True), (label, doc))
    problems: list[str] = []
    for label, doc in unique.values():
        where = f"{label}: {doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{where}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            # For a built-in kind a missing schema is a failure (the CLI would only warn).
            problems.append(f"{where}: {exc.message}")
    assert not problems, "\n".join(problems)
    assert len(unique) > 50


def test_strict_validation_is_not_vacuous() -> None:
    deployment = next(d for d in render() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRot"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="runAsNonRot"):
        kubernetes_validate.validate(deployment, min_kube_version(), strict=True)


def test_custom_resources_match_their_crd_types(tmp_path: Path) -> None:
    node = require_tool("node")
    if not (NODE_MODULES / "@kubernetes-models").is_dir():
        missing(f"{NODE_MODULES}/@kubernetes-models", "scripts/install-test-tools installs the CRD validators")
    custom: list[dict[str, Any]] = []
    for label, docs in rendered_documents().items():
        custom += [{"label": label, "object": d} for d in docs if d["kind"] in CUSTOM_KINDS]
    kinds = {c["object"]["kind"] for c in custom}
    assert kinds == {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}, kinds
    script = Path(__file__).with_name("validate_crs.mjs")
    proc = subprocess.run(
        [node, str(script), str(NODE_MODULES)],
        input=json.dumps(custom),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(custom)
    failures = [r for r in results if r["errors"]]
    assert not failures, json.dumps(failures, indent=1)


def test_crd_validators_catch_a_broken_object() -> None:
    """The validators are not vacuous: a wrong scrape interval and a Certificate without issuer fail."""
    node = require_tool("node")
    if not (NODE_MODULES / "@kubernetes-models").is_dir():
        missing(f"{NODE_MODULES}/@kubernetes-models", "scripts/install-test-tools installs the CRD validators")
    docs = render(set_values=("monitoring.serviceMonitor.enabled=true", "webhook.tls.mode=cert-manager"))
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    cert = next(d for d in docs if d["kind"] == "Certificate" and "issuerRef" in d["spec"])
    del cert["spec"]["issuerRef"]
    script = Path(__file__).with_name("validate_crs.mjs")
    proc = subprocess.run(
        [node, str(script), str(NODE_MODULES)],
        input=json.dumps([{"label": "broken", "object": monitor}, {"label": "broken", "object": cert}]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    results = json.loads(proc.stdout)
    assert "interval" in " ".join(results[0]["errors"])
    assert "issuerRef" in " ".join(results[1]["errors"])
