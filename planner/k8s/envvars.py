"""Container environment and Kubernetes ``$(VAR)`` expansion, as the kubelet does it.

The kubelet (k8s.io/kubernetes third_party/forked/golang/expansion) expands ``$(VAR)`` in a
container's ``command``, ``args`` and ``env[].value`` from the variables defined before it; ``$$``
escapes a dollar, and a reference to an undefined variable is left as written. Values that come from
``valueFrom`` (Secrets, ConfigMaps, the downward API) or ``envFrom`` are not in the manifest, so they
stay unknown here (and so do references to them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.errors import InputCapError
from planner.k8s.workloads import is_mapping

# One container's expanded strings together (env values, command, args) are at most this many characters.
# Nested references (A=$(B)$(B)..., B=$(C)$(C)...) grow exponentially, so an unbounded expansion lets a
# 10 KB manifest allocate hundreds of MB. Reason code KVP074 (planner.policy.codes EXPANSION_TOO_LARGE).
MAX_EXPANSION_CHARS = 262_144
_EXPANSION_CODE = "KVP074"


class ExpansionBudget:
    """Characters of expansion output a container may still produce."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def spend(self, amount: int) -> None:
        self.left -= amount
        if self.left < 0:
            raise InputCapError(
                f"$(VAR) expansion of a container exceeds {self.limit} characters",
                code=_EXPANSION_CODE,
                limit=self.limit,
            )


def expand_k8s(text: str, env: Mapping[str, str], budget: ExpansionBudget | None = None) -> str:
    """Expand ``$(VAR)`` references in ``text`` (kubelet semantics).

    Raises :class:`InputCapError` when the output (with ``budget``: the container's outputs together)
    exceeds :data:`MAX_EXPANSION_CHARS`; the check runs before each piece is appended, so the memory used
    stays within the bound.
    """
    if "$" not in text:
        return text
    budget = budget or ExpansionBudget(MAX_EXPANSION_CHARS)
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":  # `$$` -> `$` (the escape)
            out.append("$")
            i += 2
            continue
        if nxt == "(":
            end = text.find(")", i + 2)
            if end != -1:
                name = text[i + 2 : end]
                if name in env:
                    budget.spend(len(env[name]))
                    out.append(env[name])
                else:
                    out.append(text[i : end + 1])
                i = end + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def new_budget(limit: int = MAX_EXPANSION_CHARS) -> ExpansionBudget:
    """A fresh expansion budget (one per container)."""
    return ExpansionBudget(limit)


def container_env(
    container: Mapping[str, Any], implicit: Mapping[str, str] | None = None, budget: ExpansionBudget | None = None
) -> dict[str, str]:
    """Literal ``env`` values of a container, each expanded with the ones before it.

    ``implicit`` holds variables the platform injects (e.g. LeaderWorkerSet's ``LWS_GROUP_SIZE``); the
    container's own ``env`` overrides them. Expansion output is bounded by ``budget`` (see expand_k8s).
    """
    budget = budget or ExpansionBudget(MAX_EXPANSION_CHARS)
    env: dict[str, str] = dict(implicit or {})
    entries = container.get("env")
    if not isinstance(entries, list):
        return env
    for entry in entries:
        if not is_mapping(entry):
            continue
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        value = entry.get("value")
        if isinstance(value, str):
            env[name] = expand_k8s(value, env, budget)
        elif value is None and "valueFrom" not in entry:
            env[name] = ""
        else:
            env.pop(name, None)  # valueFrom: unknown here
    return env


ANY_NAME = "*"  # in unknown_env_names: envFrom may set any name the manifest does not


def unknown_env_names(container: Mapping[str, Any]) -> frozenset[str]:
    """Names the container's environment has values for that the manifest does not show: ``valueFrom``
    entries (ConfigMaps, Secrets, the downward API), and with ``envFrom`` any name (:data:`ANY_NAME`). A
    script's ``${NAME:-default}`` then says nothing about what runs: the default is not taken as the value."""
    names: set[str] = set()
    entries = container.get("env")
    for entry in entries if isinstance(entries, list) else []:
        if is_mapping(entry) and isinstance(entry.get("name"), str) and "valueFrom" in entry:
            names.add(entry["name"])
    if container.get("envFrom"):
        names.add(ANY_NAME)
    return frozenset(names)


def string_list(value: Any) -> list[str] | None:
    """A ``command``/``args`` field as a list of strings (None when absent or not a list of strings)."""
    if not isinstance(value, list):
        return None
    if not all(isinstance(item, (str, int, float)) and not isinstance(item, bool) for item in value):
        return None
    return [str(item) for item in value]


def expand_all(words: Sequence[str], env: Mapping[str, str], budget: ExpansionBudget | None = None) -> list[str]:
    budget = budget or ExpansionBudget(MAX_EXPANSION_CHARS)
    return [expand_k8s(word, env, budget) for word in words]
