"""docs/development.md against the tree: every path it names exists, and its layout describes every
top-level folder of the repository and every package and module directly under planner/ and admission/."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "development.md"
# Directly under planner/ and admission/, these are plumbing rather than parts to describe.
PLUMBING = {"__init__.py", "__main__.py", "py.typed", "__pycache__"}


def layout() -> dict[str, str]:
    """The layout block as {path: description}: a line's first column holds one path, or several
    separated by ` | `; indented entries lie inside the last unindented folder."""
    block = DOC.read_text().split("## Layout", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    parent = ""
    last = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        match = re.match(r"^( *)(\S.*?)(?: {2,}(.*))?$", line)
        assert match, line
        indent, names, description = len(match.group(1)), match.group(2), match.group(3) or ""
        if indent > 2:  # a description's continuation line
            entries[last] += " " + line.strip()
            continue
        for name in names.split(" | "):
            path = f"{parent}{name.strip()}" if indent == 2 else name.strip()
            entries[path] = description
            last = path
        if indent == 0:
            parent = names.strip() if names.strip().endswith("/") else ""
    return entries


def tracked_top_level() -> set[str]:
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return {f.split("/")[0] + "/" for f in files if "/" in f}


def test_every_path_in_the_layout_exists() -> None:
    entries = layout()
    assert len(entries) > 20
    for path, description in entries.items():
        assert (REPO_ROOT / path).exists(), f"docs/development.md names {path}, which does not exist"
        # Files named inside a folder's description (`releases.py`, `data/gpus.yaml`) exist under it.
        if path.endswith("/"):
            for name in re.findall(r"\b[\w/]*\w\.py\b|\b\w+/[\w/]+\.(?:yaml|json)\b", description):
                assert list((REPO_ROOT / path).rglob(name)), f"{path}: {name} is not in that folder"


def test_the_layout_describes_every_top_level_folder_and_core_package() -> None:
    described = set(layout())
    top = tracked_top_level()
    assert not top - described, f"top-level folders missing from docs/development.md: {sorted(top - described)}"
    for package in ("planner", "admission"):
        children = {
            f"{package}/{p.name}/" if p.is_dir() else f"{package}/{p.name}"
            for p in (REPO_ROOT / package).iterdir()
            if p.name not in PLUMBING
        }
        missing = children - described
        assert not missing, f"{package}/ parts missing from docs/development.md: {sorted(missing)}"


BUILT = {".tools/"}


def test_every_path_named_in_the_text_exists() -> None:
    text = DOC.read_text().split("## Layout", 1)[1].split("```", 2)[2]
    named = {
        token
        for token in re.findall(r"`([^`\s]+)`", text)
        if re.fullmatch(r"\.?[\w.-]+(/[\w.-]+)*/?", token) and ("/" in token or re.search(r"\.(py|md|toml)$", token))
    }
    assert named
    # .tools/ is made by scripts/install-test-tools (the fast lane installs nothing): gitignored, not tracked.
    missing = sorted(token for token in named if not (REPO_ROOT / token).exists() and token not in BUILT)
    assert not missing, f"docs/development.md names paths that do not exist: {missing}"
