"""Every field of every sample manifest replaced by a value of the wrong type: the decision is still a
decision (allow/warn/deny/mutate/skip with its codes), never "could not read the object" (KVP049).

Custom resources the API server does not type-check reach the webhook with any shape (`env: 7`), and
benchmarks/webhook_fuzz.py found these as "allowed unchecked" reviews.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.policy.decide import decide
from planner.policy.model import Policy
from planner.policy.planning import CoreBackend

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((REPO / "tests" / "k8s" / "manifests").glob("*.yaml")), REPO / "examples" / "deployment.yaml"]
WRONG_TYPES: list[Any] = ["x", 7, [1], {"a": 1}, None, True]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _replaced(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    parent: Any = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copied


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_wrong_types_anywhere_never_end_in_an_internal_error(source: Path) -> None:
    backend = CoreBackend()
    policy = Policy(validation_action="Enforce", mutation="fill").for_namespace("ml")
    failures = []
    for document in (d for d in yaml.safe_load_all(source.read_text()) if isinstance(d, dict)):
        for path in list(_paths(document)):
            for value in WRONG_TYPES:
                result = decide(_replaced(document, path, value), policy=policy, backend=backend)
                if any("KVP049" in warning for warning in result.warnings):
                    failures.append(f"{'/'.join(map(str, path))} = {value!r}: {result.warnings}")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize(
    ("image", "annotation"),
    [
        ("vllm/vllm-openai:v0.19." + "9" * 10_000, None),
        ("vllm/vllm-openai:" + "1" * 10_000, None),
        ("vllm/vllm-openai:v0.19.0", "0." + "7" * 10_000 + ".0"),
    ],
)
def test_a_version_with_thousands_of_digits_is_no_version_not_an_internal_error(
    image: str, annotation: str | None
) -> None:
    # int() refuses strings over 4,300 digits (CPython's DoS guard): found by benchmarks/webhook_fuzz.py.
    document = yaml.safe_load((REPO / "examples" / "deployment.yaml").read_text().split("---")[1])
    document["spec"]["template"]["spec"]["containers"][0]["image"] = image
    if annotation is not None:
        document["metadata"]["annotations"] = {"kv-planner.io/vllm-version": annotation}
    policy = Policy(validation_action="Enforce", mutation="fill").for_namespace("ml")
    result = decide(document, policy=policy, backend=CoreBackend())
    assert not any("KVP049" in warning for warning in result.warnings), result.warnings
