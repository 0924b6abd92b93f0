"""The JSON snapshots of the YAML catalogs (planner.datafiles): current, used when current, never wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.datafiles import DATA_DIRS, SNAPSHOT, build_snapshot, main, read_yaml, stale_snapshots
from planner.errors import CatalogDataError


def test_the_committed_snapshots_match_the_yaml_files() -> None:
    """Regenerate with `python3 -m planner.datafiles` after editing a catalog YAML file."""
    assert stale_snapshots() == [], "a catalog YAML file changed: run python3 -m planner.datafiles"
    assert main(["--check"]) == 0
    for directory in DATA_DIRS:
        files = json.loads((directory / SNAPSHOT).read_text())["files"]
        assert sorted(files) == sorted(p.name for p in directory.glob("*.yaml"))


def _folder(tmp_path: Path, text: str) -> Path:
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / SNAPSHOT).write_text(build_snapshot(tmp_path))
    return tmp_path / "a.yaml"


def test_a_current_snapshot_is_read_instead_of_the_yaml(tmp_path: Path) -> None:
    path = _folder(tmp_path, "models:\n  - id: org/a\n    layers: 2\n")
    snapshot = json.loads((tmp_path / SNAPSHOT).read_text())
    assert snapshot["files"]["a.yaml"]["document"] == {"models": [{"id": "org/a", "layers": 2}]}
    # Mark the snapshot's copy: what read_yaml returns shows which one it read.
    snapshot["files"]["a.yaml"]["document"] = {"from": "snapshot"}
    (tmp_path / SNAPSHOT).write_text(json.dumps(snapshot))
    assert read_yaml(path, what="test catalog") == {"from": "snapshot"}


def test_a_file_edited_after_its_snapshot_is_parsed_again(tmp_path: Path) -> None:
    path = _folder(tmp_path, "value: 1\n")
    path.write_text("value: 2\n")
    assert read_yaml(path, what="test catalog") == {"value": 2}
    assert stale_snapshots((tmp_path,)) == [tmp_path / SNAPSHOT]


def test_a_folder_without_snapshot_reads_the_yaml(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("value: [1, 2.5, yes, null]\n")
    assert read_yaml(tmp_path / "a.yaml", what="test catalog") == {"value": [1, 2.5, True, None]}


def test_an_unreadable_file_is_a_catalog_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("models: [unclosed\n")
    with pytest.raises(CatalogDataError, match=r"test catalog bad\.yaml cannot be read"):
        read_yaml(tmp_path / "bad.yaml", what="test catalog")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(CatalogDataError, match="cannot be read"):
        read_yaml(tmp_path / "latin1.yaml", what="test catalog")
    with pytest.raises(CatalogDataError, match="cannot be read"):
        read_yaml(tmp_path / "missing.yaml", what="test catalog")


def test_documents_json_would_change_are_not_snapshotted(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("released: 2024-07-23\n")
    with pytest.raises(ValueError, match="does not survive JSON"):
        build_snapshot(tmp_path)
    (tmp_path / "a.yaml").write_text("1: integer key\n")
    with pytest.raises(ValueError, match="does not survive JSON"):
        build_snapshot(tmp_path)
