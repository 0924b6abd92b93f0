"""JSON patch operations for containers rebuilt from a serving platform's fields.

The view's command line is the platform's words followed by the user's list (KubeAI ``spec.args``,
KServe ``predictor.model.args``, a Dynamo worker's ``args``). A flag the user wrote in that list is
edited in place; a flag the platform supplies, or one nobody wrote, is appended to the list: vLLM's
argparse takes the last occurrence (``vllm X.Y.Z vllm/utils: FlexibleArgumentParser`` keeps argparse's
last-wins ``store`` actions), so the appended value is the one vLLM runs with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.k8s.inspect import ContainerFinding
from planner.k8s.workloads import get_path
from planner.policy.patch import Operation, PatchError, pointer
from planner.vllm.argv import flag_edits
from planner.vllm.argv_emit import format_args


def platform_operations(found: ContainerFinding, changes: Mapping[str, str]) -> list[Operation]:
    """Operations that apply ``changes`` (dest -> value) through the container's platform field."""
    target = found.target
    command = found.container.command
    if target is None or command is None or not changes:
        return []
    words = found.container.words
    ops: list[Operation] = []
    appended: list[str] = []
    for dest, value in changes.items():
        for edit in flag_edits(words, command, {dest: value}):
            index = edit.index
            position = target.positions[index] if index is not None and index < len(target.positions) else None
            if edit.op == "replace" and position is not None:
                ops.append({"op": "replace", "path": pointer((*target.path, position)), "value": edit.words[0]})
            elif edit.op == "replace":
                appended += format_args({dest: value})  # the platform's word: override it by appending
            else:
                appended += edit.words
    if appended:
        if target.exists:
            ops += [{"op": "add", "path": pointer((*target.path, "-")), "value": word} for word in appended]
        else:
            ops.append({"op": "add", "path": pointer(target.path), "value": appended})
    return ops


def check_targets(result: Mapping[str, Any], containers: Sequence[ContainerFinding]) -> None:
    """Every platform list kv-planner wrote to is still a list of strings (raises PatchError)."""
    for found in containers:
        if found.target is None:
            continue
        value = get_path(result, found.target.path)
        if value is not None and (not isinstance(value, list) or not all(isinstance(w, str) for w in value)):
            raise PatchError(f"{pointer(found.target.path)} must be a list of strings")
