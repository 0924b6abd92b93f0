"""Platform readers never crash on odd shapes: every subtree of every platform fixture replaced, one
at a time, by a value of the wrong type. The answer may be a skip or a warning, never an exception and
never KVP049 (kv-planner's own internal error)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.policy.check import check_policy, run_check
from planner.policy.manifests import Document, read_documents
from planner.policy.planning import CoreBackend

FIXTURES = Path(__file__).parent / "platforms"
POLICY = check_policy({"modelLookup": {"offline": True}})
BACKEND = CoreBackend()
ODD: list[Any] = [None, 7, "x", [], {}, [None], {"containers": 3}]


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if at:
        yield at
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _paths(sub, (*at, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _paths(sub, (*at, index))


def _replaced(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    result = copy.deepcopy(obj)
    node = result
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return result


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.yaml")))
def test_odd_shapes_never_crash(name: str) -> None:
    documents = read_documents((FIXTURES / name).read_text(), name)
    variants = 0
    for document in documents:
        paths = [p for p in _paths(document.content) if p[0] in ("spec", "metadata", "data")]
        for index, path in enumerate(paths):
            value = ODD[index % len(ODD)]
            odd = Document(index=0, source=name, line=1, content=_replaced(document.content, path, value))
            report = run_check([odd], policy=POLICY, backend=BACKEND)
            for entry in report.workloads:
                assert "KVP049" not in entry.codes, (path, value, entry.messages)
            variants += 1
    assert variants > 10
