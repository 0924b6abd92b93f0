"""e2e/kind.sh cannot run here (no Docker engine): check that it parses and passes shellcheck, and that
the decisions it expects from the webhook are the ones `planner check` makes offline with the policy
the chart renders (the same decision code the webhook runs)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chart_helpers import REPO_ROOT, render
from tests.conftest import missing, require_tool

SCRIPT = REPO_ROOT / "e2e" / "kind.sh"
MANIFESTS = REPO_ROOT / "e2e" / "manifests"


def test_script_parses_and_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    shellcheck = require_tool("shellcheck")
    proc = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout


def test_script_is_executable_and_strict() -> None:
    text = SCRIPT.read_text()
    assert SCRIPT.stat().st_mode & 0o111
    assert "set -euo pipefail" in text
    assert "trap cleanup EXIT" in text  # the cluster is deleted on every exit path


def chart_policy(tmp_path: Path, *set_values: str) -> Path:
    docs = render(set_values=("policy.modelLookup.offline=true", *set_values))
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-policy"))
    path = tmp_path / "policy.yaml"
    path.write_text(cm["data"]["policy.yaml"])
    return path


def planner_check(policy: Path) -> dict[str, Any]:
    planner = shutil.which("planner")
    if planner is None:
        missing("the `planner` command", "pip install . installs it")
    proc = subprocess.run(
        [planner, "check", "-f", str(MANIFESTS), "--policy", str(policy), "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.stdout, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def decisions(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in result["workloads"]}


@pytest.mark.needs_helm
def test_manifests_get_the_decisions_the_script_expects(tmp_path: Path, helm: str) -> None:
    names = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in MANIFESTS.glob("*.yaml")}
    assert names == {"vllm-llama-70b-on-one-l4", "vllm-llama-8b-on-l4"}
    audit = decisions(planner_check(chart_policy(tmp_path)))
    assert audit["vllm-llama-70b-on-one-l4"]["decision"] == "warn"
    assert "KVP001" in audit["vllm-llama-70b-on-one-l4"]["codes"]
    fits = audit["vllm-llama-8b-on-l4"]
    assert fits["decision"] == "mutate"
    added = [op["value"] for op in fits["patch"] if op["op"] == "add" and "/args" in op["path"]]
    assert "--max-model-len" in added  # what kind.sh looks for in the stored Deployment
    assert "kv-planner.io/planned-num-gpu-blocks" in json.dumps(fits["patch"])
    enforce = decisions(planner_check(chart_policy(tmp_path, "policy.validationAction=Enforce")))
    assert enforce["vllm-llama-70b-on-one-l4"]["decision"] == "deny"
    assert enforce["vllm-llama-8b-on-l4"]["decision"] == "mutate"
