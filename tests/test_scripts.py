"""The test entry points themselves: `.ci/run`, `scripts/test` and `scripts/install-test-tools`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require_tool

SCRIPTS = [REPO_ROOT / ".ci" / "run", REPO_ROOT / "scripts" / "test", REPO_ROOT / "scripts" / "install-test-tools"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_script_passes_shellcheck(script: Path) -> None:
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    proc = subprocess.run(
        [require_tool("shellcheck"), str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_run_passes_its_arguments_to_the_test_script(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO_ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    recorder = tmp_path / "scripts" / "test"
    recorder.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    recorder.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run"), "--fast", "-k", "two words"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert proc.stdout.splitlines() == ["--fast", "-k", "two words"]


def test_fast_lane_installs_nothing_and_selects_the_quick_tests(tmp_path: Path) -> None:
    """`scripts/test --fast` runs ruff and a marker-filtered pytest, without pip or the tool installer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    # A python3 that records its arguments instead of running anything.
    fake = bin_dir / "python3"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> {log}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run([str(REPO_ROOT / "scripts" / "test"), "--fast", "-k", "golden"], env=env, timeout=60, check=True)
    calls = log.read_text().splitlines()
    assert not any("pip" in call or "mypy" in call for call in calls), calls
    quick = "-m pytest -m not slow and not needs_helm and not needs_prometheus"
    # --dist loadfile keeps a module on one worker: the README examples run in order in one folder.
    assert calls[-1] == f"{quick} -n auto --dist loadfile -k golden"
    assert any(call.startswith("-m ruff check") for call in calls)
