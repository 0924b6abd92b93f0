"""The YAML data files shipped in the package (model and GPU catalogs), read through a JSON snapshot.

The catalogs are YAML written for people. Parsing them (~160 model entries, even with libyaml) cost a
cold ``planner recommend`` more than validating them, and PyYAML's import on top. So each data folder
carries ``_snapshot.json``: every YAML file's parsed document and the sha256 of its bytes, written by
``python3 -m planner.datafiles`` (``--check`` only compares). :func:`read_yaml` reads the file's bytes
(cheap), and takes the snapshot's document when the hash matches; a file edited since (a contributor
adding a model) is parsed with PyYAML as before. A stale snapshot is therefore slower, never wrong, and
tests/catalog/test_datafiles.py fails CI until it is regenerated.

Only documents that survive a JSON round trip unchanged are snapshotted (no dates, no integer keys):
the writer refuses anything else, so a snapshot document equals what PyYAML returns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from planner.errors import CatalogDataError

SNAPSHOT = "_snapshot.json"
FORMAT = 1
# Every folder whose YAML files a cold `planner` run reads (the writer's and the check's default).
DATA_DIRS = (
    Path(__file__).parent / "gpus" / "data",
    Path(__file__).parent / "models" / "data",
)


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


@functools.cache
def _snapshot(directory: Path) -> dict[str, Any]:
    """``{file name: {"sha256", "document"}}`` of a folder's snapshot; empty when it has none."""
    try:
        data = json.loads((directory / SNAPSHOT).read_bytes())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == FORMAT else None
    return files if isinstance(files, dict) else {}


def parse_yaml(raw: bytes) -> Any:
    """PyYAML's safe loader (libyaml's when PyYAML has it: the same documents, ~10x less CPU).

    Raises ``ValueError`` (with PyYAML's message) for text that is not UTF-8 or not YAML."""
    import yaml  # only when a file is not in its snapshot: the import alone costs a cold run ~20 ms

    try:
        return yaml.load(raw.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise ValueError(str(error)) from error


def read_yaml(path: Path, *, what: str) -> Any:
    """The document of a YAML file, from its folder's snapshot when that is current.

    Raises :class:`CatalogDataError` ("<what> <file> cannot be read: ...") when the file cannot be read
    or parsed."""
    try:
        raw = path.read_bytes()
        entry = _snapshot(path.parent).get(path.name)
        if isinstance(entry, dict) and entry.get("sha256") == _digest(raw) and "document" in entry:
            return entry["document"]
        return parse_yaml(raw)
    except (OSError, ValueError) as error:
        raise CatalogDataError(f"{what} {path.name} cannot be read: {error}") from error


def build_snapshot(directory: Path) -> str:
    """The snapshot text of every ``*.yaml`` file in ``directory``.

    Raises ``ValueError`` when a document would not survive JSON unchanged."""
    files: dict[str, Any] = {}
    for path in sorted(directory.glob("*.yaml")):
        raw = path.read_bytes()
        document = parse_yaml(raw)
        try:
            same = json.loads(json.dumps(document)) == document
        except TypeError:  # a date, a set ...
            same = False
        if not same:
            raise ValueError(f"{path}: the document does not survive JSON (dates or non-string keys?)")
        files[path.name] = {"sha256": _digest(raw), "document": document}
    # One value per line: two branches that edit different entries merge; on any conflict, take either
    # side and rerun `python3 -m planner.datafiles`.
    return json.dumps({"format": FORMAT, "files": files}, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def stale_snapshots(directories: tuple[Path, ...] = DATA_DIRS) -> list[Path]:
    """The snapshots that do not match their folder's YAML files."""
    stale = []
    for directory in directories:
        path = directory / SNAPSHOT
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != build_snapshot(directory):
            stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python3 -m planner.datafiles [--check]", file=sys.stderr)  # noqa: T201 - a generator script
        return 2
    if args == ["--check"]:
        stale = stale_snapshots()
        for path in stale:
            print(f"{path} is stale: run python3 -m planner.datafiles", file=sys.stderr)  # noqa: T201
        return 1 if stale else 0
    for directory in DATA_DIRS:
        (directory / SNAPSHOT).write_text(build_snapshot(directory), encoding="utf-8")
        print(f"wrote {directory / SNAPSHOT}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
