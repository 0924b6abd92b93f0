"""Every PromQL expression of the generated dashboards and rules, ready to send to Prometheus."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dashboards import generate


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    instant: bool

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel!r} / {self.ref_id}"


@dataclass(frozen=True)
class VariableQuery:
    dashboard: str
    name: str
    selector: str
    label: str


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>[a-zA-Z_]+)\)$")


def load_dashboards(root: Path) -> dict[str, dict[str, Any]]:
    return {
        name: json.loads((root / generate.SOURCE_DASHBOARDS / name).read_text()) for name in generate.DASHBOARD_FILES
    }


def panel_queries(dashboards: dict[str, dict[str, Any]]) -> list[PanelQuery]:
    out = []
    for name, data in dashboards.items():
        for panel in data["panels"]:
            for t in panel.get("targets", []):
                out.append(PanelQuery(name, panel["title"], t["refId"], t["expr"], bool(t.get("instant"))))
    return out


def variable_queries(dashboards: dict[str, dict[str, Any]]) -> list[VariableQuery]:
    out = []
    for name, data in dashboards.items():
        for var in data["templating"]["list"]:
            if var["type"] != "query":
                continue
            match = _LABEL_VALUES.match(var["query"])
            assert match, f"{name}: variable {var['name']} is not a label_values() query"
            out.append(VariableQuery(name, var["name"], match["selector"], match["label"]))
    return out


def rule_expressions(rules_text: str) -> list[tuple[str, str]]:
    """(record or alert name, expr) of every rule."""
    rules = yaml.safe_load(rules_text)
    return [(rule.get("record") or rule["alert"], rule["expr"]) for group in rules["groups"] for rule in group["rules"]]


def substitute(expr: str, *, rng: str, rate_interval: str, variables: dict[str, str] | None = None) -> str:
    """Replace Grafana's template variables the way Grafana does before it sends a query."""
    values = {"namespace": ".*", "model": ".*", "pod": ".*", **(variables or {})}
    out = expr.replace("$__rate_interval", rate_interval).replace("$__range", rng)
    for var, value in values.items():
        out = out.replace(f"${var}", value)
    assert "$" not in out, f"unsubstituted variable in {out}"
    return out
