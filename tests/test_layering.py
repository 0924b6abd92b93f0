"""The layering of DESIGN.md, checked with import-linter (contracts in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def test_import_contracts_hold() -> None:
    executable = shutil.which("lint-imports")
    if executable is None:
        pytest.fail("lint-imports is missing: install the test extras (pip install -e '.[test]')")
    result = subprocess.run(
        [executable, "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "broken" not in result.stdout.split("Contracts:")[-1].replace("0 broken", "")


def test_core_import_does_not_load_web_or_cluster_libraries() -> None:
    code = (
        "import sys, planner.plan, planner.hub.resolve, planner.workload, planner.calibration.validate\n"
        "heavy = [m for m in ('fastapi', 'uvicorn', 'kubernetes', 'prometheus_client', 'starlette') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == ""


def _lint_copy(tmp_path: Path, upward_import: str | None) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("lint-imports")
    if executable is None:
        pytest.fail("lint-imports is missing: install the test extras (pip install -e '.[test]')")
    # The repository's own contract, checked on a copy of the two root packages.
    for package in ("planner", "admission"):
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    if upward_import is not None:
        (tmp_path / "planner" / "kv" / "_upward.py").write_text(upward_import + "\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [executable, "--no-cache", "--no-logo", "--contract", "core-layers", str(REPO_ROOT / "pyproject.toml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_core_layers_hold_on_a_copy_of_the_tree(tmp_path: Path) -> None:
    # The control for the next test: the copy itself is clean, so a failure there is the injected import.
    result = _lint_copy(tmp_path, upward_import=None)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_an_upward_import_in_the_core_breaks_the_layers_contract(tmp_path: Path) -> None:
    # kv (arithmetic) reaching up into policy (decisions) is the kind of edge the contract exists to stop.
    result = _lint_copy(tmp_path, upward_import="from planner.policy import outcome  # noqa: F401")
    assert result.returncode != 0
    assert "planner.kv is not allowed to import planner.policy" in result.stdout
    assert "planner.kv._upward -> planner.policy.outcome" in result.stdout


def test_admission_layers_contract_rejects_an_upward_import(tmp_path: Path) -> None:
    """The retuner importing the exporter (the cycle issue 16 found) breaks admission's layers contract."""
    executable = shutil.which("lint-imports")
    if executable is None:
        pytest.fail("lint-imports is missing: install the test extras (pip install -e '.[test]')")
    shutil.copytree(REPO_ROOT / "admission", tmp_path / "admission", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "admission" / "retuner" / "upward.py").write_text("import admission.exporter.service\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)])}
    result = subprocess.run(
        [executable, "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode != 0, result.stdout[-3000:]
    report = result.stdout.split("Contracts:")[-1] if "Contracts:" in result.stdout else result.stdout
    assert "admission.retuner.upward -> admission.exporter.service" in result.stdout, result.stdout[-3000:]
    assert "1 broken" in report, report
