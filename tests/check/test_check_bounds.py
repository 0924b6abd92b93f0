"""``planner check`` on hostile or empty input: a clear error and exit 2, never an endless read, a
RecursionError or a silent pass (docs/security.md, "planner check")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from planner.policy import manifests

pytestmark = pytest.mark.timeout(300)


def _check(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from planner.cli import main; main()", "check", *args],
        check=False,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_endless_input_is_cut_at_the_bound() -> None:
    """Before: ``-f /dev/zero`` read (and grew) without end."""
    result = _check("-f", "/dev/zero")
    assert result.returncode == 2
    assert "larger than 64 MiB" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "a:\n" + "".join("  " * i + "b:\n" for i in range(1, 3000)),
        '{"a":' * 100_000 + "1" + "}" * 100_000,
    ],
    ids=["flow-yaml", "block-yaml", "json"],
)
def test_deep_nesting_is_a_document_error_not_a_recursion_error(tmp_path: Path, text: str) -> None:
    """Before: a YAML nested 100,000 levels ended in RecursionError."""
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    result = _check("-f", str(path))
    assert result.returncode == 2, result.stderr
    assert "nested" in result.stderr and "Traceback" not in result.stderr


def test_alias_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    documents = manifests.read_documents("\n".join(lines) + "\n", "bomb.yaml")
    assert len(documents) == 1 and documents[0].error is not None and "aliases" in documents[0].error


@pytest.mark.parametrize("where", ["file", "stdin"])
def test_empty_input_fails(tmp_path: Path, where: str) -> None:
    """Before: a Helm render that produced nothing passed with exit 0."""
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing rendered\n---\n")
    result = _check("-f", str(path)) if where == "file" else _check("-f", "-", stdin=b"")
    assert result.returncode == 2
    assert "no Kubernetes objects" in result.stderr
