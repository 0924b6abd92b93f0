"""The dashboards validate against Grafana's dashboard schema (grafana-foundation-sdk models), and the
validator rejects broken dashboards."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate
from dashboards.validate import SCHEMA_VERSION, check_files, lint, validate_dashboard

DASHBOARDS = sorted(generate.DASHBOARD_FILES)


def load(repo_root: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((repo_root / "dashboards" / name).read_text())
    return data


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_matches_the_schema(repo_root: Path, name: str) -> None:
    data = load(repo_root, name)
    assert validate_dashboard(data) == []
    assert lint(data) == []
    assert data["schemaVersion"] == SCHEMA_VERSION == 41


def _panel(data: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in data["panels"] if p.get("title") == title)


def _usage(data: dict[str, Any]) -> dict[str, Any]:
    return _panel(data, "KV cache usage")


def _table(data: dict[str, Any]) -> dict[str, Any]:
    return _panel(data, "Configured vs recommended limits")


# (what is broken, how, a fragment of the expected message)
BREAKAGES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("misspelled dashboard field", lambda d: d.update(shemaVersion=41), "$.shemaVersion: unknown field"),
    ("misspelled panel field", lambda d: _usage(d).update(fieldconfig={}), "fieldconfig: unknown field"),
    ("string grid width", lambda d: _usage(d)["gridPos"].update(w="12"), "expected an integer"),
    ("cursor sync out of range", lambda d: d.update(graphTooltip=7), "7 is not one of [0, 1, 2]"),
    (
        "timeseries legend mode",
        lambda d: _usage(d)["options"]["legend"].update(displayMode="sideways"),
        "'sideways' is not one of",
    ),
    (
        "unknown timeseries option",
        lambda d: _usage(d)["options"].update(legendd={}),
        "legendd: unknown field",
    ),
    (
        "unknown field config option",
        lambda d: _usage(d)["fieldConfig"]["defaults"]["custom"].update(lineWidthh=1),
        "lineWidthh: unknown field",
    ),
    ("query expression not a string", lambda d: _usage(d)["targets"][0].update(expr=5), "expected a string"),
    ("misspelled query field", lambda d: _usage(d)["targets"][0].update(exprr="up"), "exprr: unknown field"),
    ("unknown panel type", lambda d: _usage(d).update(type="graphh"), "not a core Grafana panel type"),
    (
        "threshold colour not a string",
        lambda d: _usage(d)["fieldConfig"]["defaults"]["thresholds"]["steps"][0].update(color=3),
        "expected a string",
    ),
    (
        "misspelled transformation field",
        lambda d: _table(d)["transformations"][0].update(idd="merge"),
        "idd: unknown field",
    ),
    (
        "variable refresh out of range",
        lambda d: d["templating"]["list"][1].update(refresh=9),
        "9 is not one of",
    ),
    ("panels not a list", lambda d: d.update(panels={}), "$.panels"),
]


@pytest.mark.parametrize(("what", "breakage", "message"), BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_broken_dashboard_fails(
    repo_root: Path, what: str, breakage: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = copy.deepcopy(load(repo_root, "kv-cache-pressure.json"))
    breakage(data)
    errors = validate_dashboard(data)
    assert errors, f"{what} was accepted"
    assert any(message in e for e in errors), errors


def test_non_object_fails() -> None:
    assert validate_dashboard([]) == ["$: a dashboard is a JSON object"]


@pytest.mark.parametrize(
    ("what", "breakage", "message"),
    [
        ("panel without description", lambda d: _usage(d).pop("description"), "no description"),
        ("panel without unit", lambda d: _usage(d)["fieldConfig"]["defaults"].pop("unit"), "no unit"),
        ("fixed datasource", lambda d: _usage(d)["datasource"].update(uid="prom-1"), "datasource"),
        ("duplicate panel id", lambda d: _usage(d).update(id=1), "duplicate id"),
        (
            "pod variable missing",
            lambda d: d["templating"].update(list=d["templating"]["list"][:3]),
            "'pod' is missing",
        ),
        ("old schema version", lambda d: d.update(schemaVersion=39), "schemaVersion"),
    ],
)
def test_lint_catches_what_the_schema_allows(
    repo_root: Path, what: str, breakage: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = copy.deepcopy(load(repo_root, "kv-cache-pressure.json"))
    breakage(data)
    assert validate_dashboard(data) == [], what
    assert any(message in e for e in lint(data)), what


def test_validator_command(repo_root: Path, tmp_path: Path) -> None:
    broken = load(repo_root, "fleet-capacity.json")
    broken["panels"][1]["gridPos"]["h"] = "tall"
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps(broken))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    good = [repo_root / "dashboards" / name for name in DASHBOARDS]
    assert check_files(good) == {}
    run = subprocess.run(
        [sys.executable, "-m", "dashboards.validate", *map(str, good), str(bad), str(garbage)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 1
    assert "broken.json: $.panels[1].grid_pos.h: expected an integer, got 'tall'" in run.stderr
    assert "garbage.json: cannot read JSON" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout.count("valid (Grafana 11.6 dashboard schema)") == 2
