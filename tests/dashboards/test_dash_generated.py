"""The committed dashboards and rules are the generator's output, and the chart's copies are identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from dashboards import generate
from dashboards.params import DEFAULT_PARAMS, Params


def test_committed_files_are_up_to_date(repo_root: Path) -> None:
    assert generate.stale(repo_root) == [], "run `python -m dashboards.generate` and commit the result"


@pytest.mark.parametrize("name", [*generate.DASHBOARD_FILES, generate.RULES_FILE])
def test_chart_copy_is_byte_identical(repo_root: Path, name: str) -> None:
    if name == generate.RULES_FILE:
        source, copy = generate.SOURCE_RULES / name, generate.CHART_RULES / name
    else:
        source, copy = generate.SOURCE_DASHBOARDS / name, generate.CHART_DASHBOARDS / name
    assert (repo_root / source).read_bytes() == (repo_root / copy).read_bytes()


def test_check_mode_reports_a_hand_edited_copy(tmp_path: Path) -> None:
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert generate.main(["--check", "--root", str(tmp_path)]) == 0
    copy = tmp_path / generate.CHART_DASHBOARDS / "fleet-capacity.json"
    copy.write_text(copy.read_text().replace("Fleet capacity", "Fleet capacity (edited)"))
    assert generate.stale(tmp_path) == [generate.CHART_DASHBOARDS / "fleet-capacity.json"]
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1


def test_output_is_deterministic() -> None:
    assert generate.artifacts() == generate.artifacts()


def test_parameters_reach_the_rules_and_the_dashboards() -> None:
    short = Params(kv_near_full_ratio=0.8, kv_near_full_for="30s", headroom=0.25)
    files = generate.artifacts(short)
    rules = yaml.safe_load(files[generate.SOURCE_RULES / generate.RULES_FILE])
    near_full = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "KVPlannerKVCacheNearFull")
    assert near_full["for"] == "30s"
    assert near_full["expr"].endswith("> 0.8")
    pressure = json.loads(files[generate.SOURCE_DASHBOARDS / "kv-cache-pressure.json"])
    usage = next(p for p in pressure["panels"] if p.get("title") == "KV cache usage")
    steps = [s["value"] for s in usage["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert steps == [None, 0.75, 0.8]
    assert files != generate.artifacts(DEFAULT_PARAMS)


@pytest.mark.parametrize(
    "bad",
    [{"kv_near_full_for": "15 minutes"}, {"headroom": 1.0}, {"kv_near_full_ratio": 1.5}, {"unknown": 1}],
)
def test_bad_parameters_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Params(**bad)
