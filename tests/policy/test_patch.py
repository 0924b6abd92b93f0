"""JSON patch building blocks: pointer escaping, parents created, arrays never replaced whole."""

from __future__ import annotations

import pytest

from planner.k8s.detect import inspect_container
from planner.policy.patch import (
    PatchError,
    annotation_operations,
    apply_patch,
    arg_operations,
    changed_paths,
    check_result,
    escape,
    pointer,
)
from planner.vllm.argv import flag_edits

SPEC = ("spec", "template", "spec")


def test_pointer_escaping() -> None:
    assert escape("kv-planner.io/plan") == "kv-planner.io~1plan"
    assert escape("a~b/c") == "a~0b~1c"
    assert pointer(("metadata", "annotations", "kv-planner.io/plan")) == "/metadata/annotations/kv-planner.io~1plan"


@pytest.mark.parametrize(
    ("obj", "ops"),
    [
        (
            {"spec": {"template": {}}},
            [{"op": "add", "path": "/spec/template/metadata", "value": {"annotations": {"k/a": "1"}}}],
        ),
        (
            {"spec": {"template": {"metadata": {"labels": {}}}}},
            [{"op": "add", "path": "/spec/template/metadata/annotations", "value": {"k/a": "1"}}],
        ),
        (
            {"spec": {"template": {"metadata": {"annotations": {"k/a": "0"}}}}},
            [{"op": "add", "path": "/spec/template/metadata/annotations/k~1a", "value": "1"}],
        ),
        ({"spec": {"template": {"metadata": {"annotations": {"k/a": "1"}}}}}, []),
    ],
)
def test_annotation_operations(obj: dict, ops: list[dict]) -> None:  # type: ignore[type-arg]
    assert annotation_operations(obj, ("spec", "template", "metadata"), {"k/a": "1"}) == ops
    if ops:
        assert apply_patch(obj, ops)["spec"]["template"]["metadata"]["annotations"] == {"k/a": "1"}


def _ops(container: dict, changes: dict[str, str]) -> list[dict]:  # type: ignore[type-arg]
    found = inspect_container(0, container)
    assert found is not None and found.command is not None
    return arg_operations(SPEC, found, container, flag_edits(found.words, found.command, changes))


def test_arg_operations_replace_one_word_or_append() -> None:
    container = {"name": "v", "command": ["vllm", "serve", "m"], "args": ["--max-num-seqs", "512"]}
    assert _ops(container, {"max_num_seqs": "64", "max_model_len": "4096"}) == [
        {"op": "replace", "path": "/spec/template/spec/containers/0/args/1", "value": "64"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--max-model-len"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "4096"},
    ]


def test_arg_operations_on_command_only_and_image_without_args() -> None:
    command_only = {"name": "v", "command": ["vllm", "serve", "m", "--max-num-seqs=8"]}
    assert _ops(command_only, {"max_num_seqs": "4", "max_model_len": "1024"}) == [
        {"op": "replace", "path": "/spec/template/spec/containers/0/command/3", "value": "--max-num-seqs=4"},
        # the user writes --k=v: the added flag follows
        {"op": "add", "path": "/spec/template/spec/containers/0/command/-", "value": "--max-model-len=1024"},
    ]
    image_only = {"name": "v", "image": "vllm/vllm-openai:v0.19.0"}
    ops = _ops(image_only, {"max_model_len": "1024"})
    assert ops == [{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--max-model-len", "1024"]}]


def test_check_result_rejects_foreign_changes_and_bad_shapes() -> None:
    before = {"kind": "Deployment", "spec": {"replicas": 1, "template": {"spec": {"containers": [{"args": ["a"]}]}}}}
    allowed = ["/spec/template/spec/containers/0/args"]
    after = apply_patch(before, [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "b"}])
    check_result(before, after, allowed)
    foreign = apply_patch(before, [{"op": "replace", "path": "/spec/replicas", "value": 2}])
    with pytest.raises(PatchError, match="/spec/replicas"):
        check_result(before, foreign, allowed)
    not_string = apply_patch(before, [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": 3}])
    with pytest.raises(PatchError, match="list of strings"):
        check_result(before, not_string, allowed)


def test_patch_that_does_not_apply_raises() -> None:
    with pytest.raises(PatchError):
        apply_patch({"a": {}}, [{"op": "replace", "path": "/a/missing", "value": 1}])


def test_changed_paths() -> None:
    assert changed_paths({"a": [1, 2], "b": 1}, {"a": [1, 3, 4], "b": 1, "c": 0}) == ["/a/1", "/a/2", "/c"]
    assert changed_paths({"a": 1}, {"a": 1.0}) == ["/a"]
