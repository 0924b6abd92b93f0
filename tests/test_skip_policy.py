"""The suite's skip policy (tests/conftest.py), run on a small test file in a pytest subprocess: skips
are counted by reason at the end; a skip without a reason fails; under CI a missing input fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SAMPLE = """
import pytest
from tests.conftest import missing

def test_stated():
    pytest.skip("a stated reason")

def test_stated_again():
    pytest.skip("a stated reason")

def test_bare():
    pytest.skip()

def test_missing_input():
    missing("the sample input", "made by nobody")

def test_extra_not_installed():
    pytest.importorskip("kv_planner_no_such_module")
"""


def run_sample(tmp_path: Path, *, ci: bool) -> str:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", str(sample)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_skips_are_summarised_by_reason_and_a_bare_skip_fails(tmp_path: Path) -> None:
    out = run_sample(tmp_path, ci=False)
    assert "skip reasons" in out
    assert "    2  a stated reason" in out
    assert "    1  the sample input is absent (made by nobody)" in out
    assert "    4  skipped in all" in out
    assert "test_bare was skipped without a reason" in out
    assert "1 failed, 4 skipped" in out


@pytest.mark.slow
def test_under_ci_a_missing_input_or_test_extra_fails(tmp_path: Path) -> None:
    out = run_sample(tmp_path, ci=True)
    assert "FAILED" in out and "test_missing_input" in out and "under CI=true this is a failure" in out
    assert "test_extra_not_installed" in out and "installs the test extras" in out
    assert "3 failed, 2 skipped" in out
