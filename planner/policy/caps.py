"""Named bounds on what a manifest author can make kv-planner read (docs/security.md, "Input caps").

A manifest is untrusted input: its author can put 2,000 containers in a pod, a 200 KB GPU name in an
annotation, nested ``$(VAR)`` references that expand to hundreds of megabytes, or a 100,000-level
structure in front of the webhook. Every such dimension has a bound here, checked before any planning
work starts (:func:`screen`), so the cost of one review is bounded by the bounds, not by the manifest.
Going over a bound is the manifest's doing: the finding has a ``cannot-start`` severity, so Enforce denies
and Audit warns, each with its own reason code.

The walk is iterative (no recursion: depth is what it checks) and touches every node once. Most objects
are within every bound: a quicker pass over plain decoded JSON proves that first (:func:`_within`), and the
full walk, which says what is over and in which order, runs only when it cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from planner.errors import InputCapError
from planner.k8s.workloads import as_list, is_mapping
from planner.policy.codes import Code, Finding, finding

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_OWN_PREFIX = "kv-planner.io/"
_GPU_ANNOTATION = "kv-planner.io/gpu"  # matched against GPU names: bounded like a selector value
# Values kv-planner matches against GPU names (node selectors, node affinity, GPU annotations): a
# Kubernetes label value is at most 63 characters, so 256 leaves room for any real spelling.
_SELECTOR_KEYS = ("nodeSelector", "affinity")
_INTERESTING = frozenset((*_CONTAINER_LISTS, "annotations", *_SELECTOR_KEYS))
_SCALARS = frozenset((str, int, float, bool, type(None)))  # what decoded JSON holds besides dicts and lists


class InputCaps(BaseModel):
    """The bounds (policy ``limits``; trusted admins may change them, manifest authors cannot)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)

    max_containers: int = Field(default=64, ge=1, le=10_000, description="containers of all kinds per pod template")
    max_args: int = Field(default=1024, ge=1, le=100_000, description="command + args words (and env entries)")
    max_value_chars: int = Field(default=65_536, ge=64, le=10_000_000, description="one argument / env value")
    max_selector_chars: int = Field(default=256, ge=63, le=65_536, description="node selector / affinity values")
    max_annotation_chars: int = Field(default=16_384, ge=64, le=1_000_000, description="kv-planner.io/* values")
    max_expansion_chars: int = Field(default=262_144, ge=1024, le=100_000_000, description="$(VAR) output")
    max_model_name_chars: int = Field(default=256, ge=16, le=4096, description="--model / positional model")
    max_depth: int = Field(default=64, ge=8, le=1000, description="nesting of the object")


DEFAULT_CAPS = InputCaps()


def cap_error(code: Code, limit: int, text: str) -> InputCapError:
    return InputCapError(text, code=code.value, limit=limit)


def cap_finding(error: InputCapError, container: str | None = None) -> Finding:
    return finding(Code.parse(error.code), container, error.message)


def screen(obj: Any, caps: InputCaps = DEFAULT_CAPS) -> list[Finding]:
    """The bounds ``obj`` exceeds (empty when it is within all of them). Linear in the object's size.

    ``obj`` is decoded JSON/YAML (dicts, lists, scalars); only containers are pushed on the walk's stack,
    and only the keys kv-planner reads are looked at in each mapping.
    """
    return [] if _within(obj, caps) else _walk(obj, caps)


def _walk(obj: Any, caps: InputCaps) -> list[Finding]:
    """The full screen: every bound ``obj`` exceeds, each with the first place found over it."""
    found: dict[str, Finding] = {}

    def note(code: Code, limit: int, text: str) -> None:
        found.setdefault(code.value, finding(code, None, f"{text} (limit {limit}): not planned"))

    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > caps.max_depth:
            note(Code.TOO_DEEP, caps.max_depth, f"object nested deeper than {caps.max_depth} levels")
            continue
        if isinstance(value, dict):
            if not _INTERESTING.isdisjoint(value):
                _check_mapping(value, caps, note)
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return list(found.values())


def _within(obj: Any, caps: InputCaps) -> bool:
    """True when ``obj`` is plain decoded JSON within every bound (then :func:`screen` finds nothing).

    A level-by-level pass that looks only at exact types (a third of the full walk's cost on a 50 KB
    review); False for anything it does not prove, including values of other types (YAML dates, dict
    subclasses), which the full walk then screens.
    """
    if type(obj) is not dict:
        return False
    level: list[Any] = [obj]
    interesting: list[dict[Any, Any]] = []
    # (bound to locals: this loop visits every node of the review)
    notable, scalars, plain_dict, plain_list = _INTERESTING.isdisjoint, _SCALARS, dict, list
    depth = 0
    while level:
        depth += 1
        if depth > caps.max_depth:
            return False
        below: list[Any] = []
        push = below.append
        for value in level:
            if type(value) is plain_dict:
                if not notable(value):
                    interesting.append(value)
                children: Any = value.values()
            else:
                children = value
            for child in children:
                kind = type(child)
                if kind is plain_dict or kind is plain_list:
                    push(child)
                elif kind not in scalars:
                    return False
        level = below
    over: list[str] = []
    for mapping in interesting:
        _check_mapping(mapping, caps, lambda code, limit, text: over.append(text))
        if over:
            return False
    return True


def _check_mapping(value: Mapping[Any, Any], caps: InputCaps, note: Any) -> None:
    containers = [c for name in _CONTAINER_LISTS if name in value for c in as_list(value[name])]
    if len(containers) > caps.max_containers:
        note(Code.TOO_MANY_CONTAINERS, caps.max_containers, f"{len(containers)} containers in one pod")
    for container in containers[: caps.max_containers + 1]:  # (one past the cap is enough to tell)
        if isinstance(container, Mapping):
            _check_container(container, caps, note)
    annotations = value.get("annotations")
    if isinstance(annotations, Mapping):
        for name, text in annotations.items():
            if not (str(name).startswith(_OWN_PREFIX) and isinstance(text, str)):
                continue
            limit = caps.max_selector_chars if name == _GPU_ANNOTATION else caps.max_annotation_chars
            if len(text) > limit:
                note(Code.ANNOTATION_TOO_LONG, limit, f"annotation {name} has {len(text)} chars")
    for key in _SELECTOR_KEYS:
        selector = value.get(key)
        if selector is not None:
            longest = _longest_string(selector, caps.max_depth)
            if longest > caps.max_selector_chars:
                note(Code.VALUE_TOO_LONG, caps.max_selector_chars, f"a {key} value has {longest} chars")


def _check_container(container: Mapping[str, Any], caps: InputCaps, note: Any) -> None:
    words = as_list(container.get("command")) + as_list(container.get("args"))
    env = as_list(container.get("env"))
    if len(words) > caps.max_args or len(env) > caps.max_args:
        count = max(len(words), len(env))
        note(Code.TOO_MANY_ARGS, caps.max_args, f"a container has {count} arguments or env entries")
    values = [w for w in words if isinstance(w, str)]
    values += [value for e in env if is_mapping(e) and isinstance(value := e.get("value"), str)]
    image = container.get("image")
    if isinstance(image, str):
        values.append(image)
    longest = max(map(len, values), default=0)
    if longest > caps.max_value_chars:
        note(Code.VALUE_TOO_LONG, caps.max_value_chars, f"a container argument or env value has {longest} chars")


def _longest_string(value: Any, max_depth: int) -> int:
    longest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            continue
        if isinstance(item, str):
            longest = max(longest, len(item))
        elif isinstance(item, Mapping):
            for k, v in item.items():
                longest = max(longest, len(str(k)))
                stack.append((v, depth + 1))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return longest


def check_model_name(name: str, caps: InputCaps = DEFAULT_CAPS) -> None:
    """Raise :class:`InputCapError` (KVP075) for a model name longer than any Hub id or sane path."""
    if len(name) > caps.max_model_name_chars:
        raise cap_error(
            Code.MODEL_NAME_TOO_LONG, caps.max_model_name_chars, f"model name of {len(name)} chars: not planned"
        )
