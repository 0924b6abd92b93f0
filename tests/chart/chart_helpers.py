"""Helpers for the Helm chart tests: the real `helm` binaries, rendering with caching, scenario lists.

`helm template` takes about 0.1 s; every (values files, --set, API versions) combination is rendered
once per session and shared by the tests that inspect it.
"""

from __future__ import annotations

import copy
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import find_tool, require_tool

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
NAMESPACE = "kv-planner-system"
RELEASE = "kvp"
# Built-in kinds are validated with kubernetes-validate; these are custom resources.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer", "ClusterIssuer"}

# Every scenario: the default values plus each charts/ci/*-values.yaml.
SCENARIOS: list[tuple[str, tuple[str, ...]]] = [("defaults", ())] + [
    (path.name.removesuffix("-values.yaml"), (str(path),)) for path in CI_VALUES
]


HELM = find_tool("helm")


def helm_binaries() -> list[Any]:
    """pytest params (for the indirect `binary` fixture) of every Helm major version the chart supports."""
    return [pytest.param("helm", id="helm4"), pytest.param("helm3", id="helm3")]


class RenderError(Exception):
    """`helm template` failed; the message is Helm's stderr."""


@cache
def _render_text(
    values_files: tuple[str, ...],
    set_values: tuple[str, ...],
    api_versions: tuple[str, ...],
    namespace: str,
    helm: str,
) -> str:
    cmd = [helm, "template", RELEASE, str(CHART), "--namespace", namespace]
    for path in values_files:
        cmd += ["--values", path]
    for item in set_values:
        # "json:key=value" goes through --set-json (typed numbers such as -0.1, lists, objects).
        cmd += ["--set-json", item.removeprefix("json:")] if item.startswith("json:") else ["--set", item]
    for api in api_versions:
        cmd += ["--api-versions", api]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return proc.stdout


def render(
    values_files: tuple[str, ...] = (),
    set_values: tuple[str, ...] = (),
    api_versions: tuple[str, ...] = (),
    namespace: str = NAMESPACE,
    helm: str | None = None,
) -> list[dict[str, Any]]:
    """Render the chart and return its documents (fresh copies: tests may modify them)."""
    binary = helm or HELM
    assert binary is not None
    return copy.deepcopy(_render_docs(values_files, set_values, api_versions, namespace, binary))


@cache
def _render_docs(*key: Any) -> list[dict[str, Any]]:
    text = _render_text(*key)
    # libyaml when PyYAML has it: the dashboards make the output large and the pure-Python parser slow.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc]


def helm_template_error(*set_values: str, values_files: tuple[str, ...] = (), helm: str | None = None) -> str:
    """Render with values that must be rejected and return Helm's message."""
    try:
        render(values_files, tuple(set_values), helm=helm)
    except RenderError as exc:
        return str(exc)
    pytest.fail(f"helm template accepted {set_values} {values_files}")


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def component(docs: list[dict[str, Any]], kind: str, comp: str) -> dict[str, Any]:
    found = [
        d
        for d in docs
        if d["kind"] == kind and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == comp
    ]
    assert len(found) == 1, f"expected one {kind} of component {comp}, found {len(found)}"
    return found[0]


def require_helm() -> str:
    return require_tool("helm")
