"""JSON patches (RFC 6902) built from the received object, checked by applying them in-process.

The API server rejects a request whose patch does not apply, whatever the webhook's failurePolicy
(k8s.io/apiserver mutating dispatcher: ``patchObj.Apply`` error -> internal error). So every patch here
is built from the object as received: keys are escaped (``kv-planner.io/plan`` ->
``kv-planner.io~1plan``), missing parents are created (``metadata``, ``annotations``), arrays owned by
others are never replaced (args get a ``replace`` of one word or an ``add`` of new words), and the
result is applied with the ``jsonpatch`` library and checked before anyone sees it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch

from planner.errors import KvPlannerError
from planner.k8s.detect import VllmContainer
from planner.k8s.workloads import Pointer, get_path
from planner.vllm.argv import ArgEdit

Operation = dict[str, Any]


class PatchError(KvPlannerError):
    """A patch kv-planner built does not apply or changes more than it may (a kv-planner bug)."""


def escape(token: str) -> str:
    """RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(tokens: Sequence[str | int]) -> str:
    return "".join("/" + escape(str(t)) for t in tokens)


def arg_operations(
    spec_path: Pointer, found: VllmContainer, container: Mapping[str, Any], edits: Sequence[ArgEdit]
) -> list[Operation]:
    """Operations that apply argv ``edits`` (indices into command + args) to one container."""
    base = (*spec_path, "containers", str(found.index))
    command = container.get("command")
    command_len = len(command) if isinstance(command, list) else 0  # (not a list: no words were read from it)
    has_args = isinstance(container.get("args"), list)
    ops: list[Operation] = []
    appended: list[str] = []

    def place(index: int) -> tuple[str, int]:
        return ("command", index) if index < command_len else ("args", index - command_len)

    for edit in edits:
        if edit.op == "replace" and edit.index is not None:
            field, at = place(edit.index)
            ops.append({"op": "replace", "path": pointer((*base, field, at)), "value": edit.words[0]})
        elif edit.index is None:
            appended += edit.words
        else:
            field, at = place(edit.index)
            for offset, word in enumerate(edit.words):
                ops.append({"op": "add", "path": pointer((*base, field, at + offset)), "value": word})
    if appended:
        if has_args:
            ops += [{"op": "add", "path": pointer((*base, "args", "-")), "value": w} for w in appended]
        elif command_len:
            ops += [{"op": "add", "path": pointer((*base, "command", "-")), "value": w} for w in appended]
        else:
            ops.append({"op": "add", "path": pointer((*base, "args")), "value": appended})
    return ops


def annotation_operations(obj: Mapping[str, Any], metadata_path: Pointer, values: Mapping[str, str]) -> list[Operation]:
    """Operations that set ``values`` as annotations under ``metadata_path``, creating what is missing.

    Keys whose current value already equals the wanted one produce no operation (idempotence).
    """
    metadata = get_path(obj, metadata_path)
    current = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    wanted = {k: v for k, v in values.items() if not (isinstance(current, Mapping) and current.get(k) == v)}
    if not wanted:
        return []
    ordered = dict(sorted(wanted.items()))
    if not isinstance(metadata, Mapping):
        return [{"op": "add", "path": pointer(metadata_path), "value": {"annotations": ordered}}]
    if not isinstance(current, Mapping):
        return [{"op": "add", "path": pointer((*metadata_path, "annotations")), "value": ordered}]
    return [
        {"op": "add", "path": pointer((*metadata_path, "annotations", key)), "value": value}
        for key, value in sorted(wanted.items())
    ]


def _tokens(path: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def _copy_along(root: dict[str, Any], ops: Sequence[Operation]) -> dict[str, Any]:
    """A copy of ``root`` in which only the containers on the patched paths are new objects.

    Admission reviews carry 30-60 KB objects and a patch touches a handful of paths; copying just
    those paths (structural sharing) keeps the received object intact at a fraction of a deep copy.
    """
    copied: set[int] = set()
    result = dict(root)
    copied.add(id(result))
    for op in ops:
        node: Any = result
        for token in _tokens(str(op.get("path", "")))[:-1]:
            if isinstance(node, dict) and isinstance(node.get(token), (dict, list)):
                child = node[token]
                if id(child) not in copied:
                    child = dict(child) if isinstance(child, dict) else list(child)
                    copied.add(id(child))
                    node[token] = child
                node = child
            elif (
                isinstance(node, list)
                and token.isdigit()
                and int(token) < len(node)
                and isinstance(node[int(token)], (dict, list))
            ):
                child = node[int(token)]
                if id(child) not in copied:
                    child = dict(child) if isinstance(child, dict) else list(child)
                    copied.add(id(child))
                    node[int(token)] = child
                node = child
            else:
                break
    return result


def apply_patch(obj: Mapping[str, Any], ops: Sequence[Operation]) -> dict[str, Any]:
    """Apply ``ops`` to a copy of ``obj`` (raises :class:`PatchError` when it does not apply).

    ``obj`` is never modified; the result shares the subtrees the patch does not touch (and the values
    the patch adds are copied), so treat it as read-only or deep-copy it before changing it.
    """
    try:
        target = _copy_along(dict(obj), ops)
        result = jsonpatch.JsonPatch(copy.deepcopy(list(ops))).apply(target, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, ValueError) as error:
        raise PatchError(f"patch does not apply: {error}") from None
    if not isinstance(result, dict):
        raise PatchError("patch result is not an object")
    return result


def _allowed(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def changed_paths(before: Any, after: Any, at: str = "") -> list[str]:
    """JSON pointers of the values that differ between two documents (lists compared by position).

    Shared subtrees (the same object on both sides, see :func:`apply_patch`) are skipped unread.
    """
    if before is after:
        return []
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        paths: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            sub = at + "/" + escape(str(key))
            if key not in before or key not in after:
                paths.append(sub)
            else:
                paths += changed_paths(before[key], after[key], sub)
        return paths
    if isinstance(before, list) and isinstance(after, list):
        paths = []
        for i in range(max(len(before), len(after))):
            sub = f"{at}/{i}"
            if i >= len(before) or i >= len(after):
                paths.append(sub)
            else:
                paths += changed_paths(before[i], after[i], sub)
        return paths
    return [] if before == after and type(before) is type(after) else [at]


def check_result(before: Mapping[str, Any], after: Mapping[str, Any], allowed_prefixes: Sequence[str]) -> None:
    """Raise :class:`PatchError` when ``after`` changed anything outside ``allowed_prefixes`` or broke the
    shape the API server will decode (string lists for command/args, string annotation values)."""
    changed = changed_paths(before, after)
    for path in changed:
        if not _allowed(path, allowed_prefixes):
            raise PatchError(f"patch changed {path}, which kv-planner does not own")
    for key in ("apiVersion", "kind"):
        if before.get(key) != after.get(key):
            raise PatchError(f"patch changed {key}")
    for path in changed:
        _check_changed(after, _tokens(path), path)


def _check_changed(after: Mapping[str, Any], tokens: list[str], path: str) -> None:
    """The changed value, or the string list / string map holding it, has the types the API server needs."""
    for i in range(len(tokens) - 1, -1, -1):
        key = tokens[i]
        if key in ("args", "command") and i >= 2 and tokens[i - 2] == "containers":
            words = get_path(after, tuple(tokens[: i + 1]))
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise PatchError(f"{path}: {key} must be a list of strings")
            return
        if key == "annotations":
            values = get_path(after, tuple(tokens[: i + 1]))
            if not isinstance(values, Mapping) or not all(isinstance(v, str) for v in values.values()):
                raise PatchError(f"{path}: annotations must map to strings")
            return
    _check_strings(get_path(after, tuple(tokens)), path)


def _check_strings(value: Any, at: str = "") -> None:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            path = f"{at}/{key}"
            in_container = at.rsplit("/", 2)[-2:-1] == ["containers"]
            words = isinstance(sub, list) and key in ("command", "args") and in_container
            if words and not all(isinstance(w, str) for w in sub):
                raise PatchError(f"{path} holds a non-string")
            if key == "annotations" and isinstance(sub, Mapping) and not all(isinstance(v, str) for v in sub.values()):
                raise PatchError(f"{path} holds a non-string value")
            _check_strings(sub, path)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            _check_strings(sub, f"{at}/{i}")
