"""Reading files and text a user or a tenant hands kv-planner: bounded in size, depth and node count.

Every YAML or JSON input the CLI and the webhook read (policy files, workload profiles, corrections files,
calibration records) goes through here, so that a file of /dev/zero, a document nested 100,000 levels deep
or a "billion laughs" of YAML aliases ends in a :class:`~planner.errors.PlannerInputError` naming the file
and the bound, never in an endless read, a RecursionError or an out-of-memory kill (docs/security.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerInputError

MAX_FILE_BYTES = 64 * 2**20  # far above any policy, profile or calibration file; reads stop here
MAX_DEPTH = 100  # no configuration kv-planner reads is more than a dozen levels deep
MAX_NODES = 2_000_000  # values after YAML aliases are expanded


def read_text(path: str | Path, *, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The file's text, at most ``limit`` bytes (a device or a huge file is an error, not an endless read)."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise PlannerInputError(f"{what} {file}: cannot read: {error.strerror or error}") from None
    if len(data) > limit:
        raise PlannerInputError(f"{what} {file}: larger than {limit // 2**20} MiB; is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerInputError(f"{what} {file}: not UTF-8 text") from None


# YAML a manifest carries inside a string (a workload annotation, a RayService's serveConfigV2, a --config
# file from a ConfigMap) is a few kilobytes of settings: far tighter bounds than for a file.
EMBEDDED_MAX_DEPTH = 32
EMBEDDED_MAX_NODES = 100_000


def shape_problem(value: Any, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> str | None:
    """Why ``value`` is too deep or too large to use, else None (walks iteratively: no recursion; a YAML
    alias is counted each time it is used, so a "billion laughs" stops at ``max_nodes``)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return f"more than {max_nodes:,} values (YAML aliases expanding?)"
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None


def count_values(value: Any, limit: int) -> int:
    """How many values ``value`` holds, aliases counted each time they are used; stops past ``limit``
    (returns ``limit + 1``), so the cost is bounded by the limit, not by what the aliases expand to."""
    stack: list[Any] = [value]
    count = 0
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return count
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _checked(value: Any, source: str) -> Any:
    problem = shape_problem(value)
    if problem is not None:
        raise PlannerInputError(f"{source}: {problem}")
    return value


def load_yaml(text: str, *, source: str) -> Any:
    """One YAML (or JSON) document, with its shape bounded."""
    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise PlannerInputError(f"{source}: nested deeper than the YAML reader can follow") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PlannerInputError(f"{source}: {where}not valid YAML: {problem}") from None
    return _checked(value, source)


def load_embedded_yaml(text: str, *, source: str) -> Any:
    """YAML a manifest carries in a string, bounded for that (:data:`EMBEDDED_MAX_DEPTH`,
    :data:`EMBEDDED_MAX_NODES`). Everything the text can cause is a :class:`PlannerInputError`: invalid
    YAML, nesting past the reader's recursion, integers past Python's digit limit, aliases expanding past
    the bound. (A crash here was answered "allowed unchecked" before, KVP049.)"""
    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise PlannerInputError(f"{source}: nested deeper than the YAML reader can follow") from None
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PlannerInputError(f"{source}: not valid YAML: {problem}") from None
    except ValueError as error:  # int("1" * 5000): Python's integer-string conversion limit
        raise PlannerInputError(f"{source}: {str(error)[:120]}") from None
    problem = shape_problem(value, max_depth=EMBEDDED_MAX_DEPTH, max_nodes=EMBEDDED_MAX_NODES)
    if problem is not None:
        raise PlannerInputError(f"{source}: {problem}")
    return value


def load_json(text: str, *, source: str) -> Any:
    """One JSON document, with its shape bounded."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise PlannerInputError(f"{source}: nested deeper than the JSON reader can follow") from None
    except ValueError as error:
        raise PlannerInputError(f"{source}: not JSON: {error}") from None
    return _checked(value, source)
