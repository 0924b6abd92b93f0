"""Pod templates of every workload kind, ownership, opt-out, and the shapes of odd objects."""

from __future__ import annotations

from typing import Any

import pytest

from planner.k8s.gpus import GpuCatalog
from planner.k8s.inspect import inspect_workload
from planner.k8s.workloads import owned_by_controller, pod_templates, without_managed_fields

SPEC = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.19.0", "args": ["m"]}]}


def _template() -> dict[str, Any]:
    return {"metadata": {"labels": {"a": "b"}}, "spec": SPEC}


@pytest.mark.parametrize(
    ("obj", "spec_paths"),
    [
        ({"kind": "Deployment", "spec": {"template": _template()}}, [("spec", "template", "spec")]),
        ({"kind": "StatefulSet", "spec": {"template": _template()}}, [("spec", "template", "spec")]),
        ({"kind": "DaemonSet", "spec": {"template": _template()}}, [("spec", "template", "spec")]),
        ({"kind": "ReplicaSet", "spec": {"template": _template()}}, [("spec", "template", "spec")]),
        ({"kind": "Job", "spec": {"template": _template()}}, [("spec", "template", "spec")]),
        (
            {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": _template()}}}},
            [("spec", "jobTemplate", "spec", "template", "spec")],
        ),
        ({"kind": "Pod", "spec": SPEC}, [("spec",)]),
        (
            {"kind": "LeaderWorkerSet", "spec": {"leaderWorkerTemplate": {"size": 4, "workerTemplate": _template()}}},
            [("spec", "leaderWorkerTemplate", "workerTemplate", "spec")],
        ),
        ({"kind": "ServingRuntime", "spec": SPEC}, [("spec",)]),
        (
            {"kind": "RayService", "spec": {"rayClusterConfig": {"headGroupSpec": {"template": _template()}}}},
            [("spec", "rayClusterConfig", "headGroupSpec", "template", "spec")],
        ),
        ({"kind": "Service", "spec": {"ports": []}}, []),
        ({"kind": "Deployment", "spec": {"template": {"spec": {"containers": "not-a-list"}}}}, []),
        ({"kind": 7}, []),
    ],
)
def test_templates_per_kind(obj: dict[str, Any], spec_paths: list[tuple[str, ...]]) -> None:
    assert [ref.spec_path for ref in pod_templates(obj)] == spec_paths


def test_lws_size_and_implicit_env() -> None:
    obj = {
        "kind": "LeaderWorkerSet",
        "spec": {"leaderWorkerTemplate": {"size": 3, "leaderTemplate": _template(), "workerTemplate": _template()}},
    }
    leader, worker = pod_templates(obj)
    assert (leader.name, leader.group_size, leader.implicit_env) == ("leader", 3, {"LWS_GROUP_SIZE": "3"})
    assert leader.peer_spec_path == worker.spec_path


def test_owned_pods_and_replicasets_are_skipped(catalog: GpuCatalog) -> None:
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "1", "controller": True}]
    pod = {"kind": "Pod", "metadata": {"name": "p", "ownerReferences": owner}, "spec": SPEC}
    assert owned_by_controller(pod)
    assert inspect_workload(pod, catalog=catalog).skip == "owned-by-controller"
    rs = {"kind": "ReplicaSet", "metadata": {"name": "r", "ownerReferences": owner}, "spec": {"template": _template()}}
    assert inspect_workload(rs, catalog=catalog).skip == "owned-by-controller"
    not_controller = {
        "kind": "Pod",
        "metadata": {"ownerReferences": [{"kind": "X", "controller": False}]},
        "spec": SPEC,
    }
    assert inspect_workload(not_controller, catalog=catalog).skip is None


@pytest.mark.parametrize(
    ("kind", "owner"),
    [
        # An ownerReference is what the author wrote: one to the tenant's own ConfigMap kept a 70B pod on one
        # GPU unchecked ("owned by a controller whose template was reviewed").
        ("Pod", {"apiVersion": "v1", "kind": "ConfigMap", "name": "mine"}),
        # A controller kv-planner has no reader for (Argo Rollouts owns ReplicaSets): its template was not
        # reviewed either.
        ("ReplicaSet", {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "r"}),
        # A reviewed kind under another API group is not that kind.
        ("Pod", {"apiVersion": "example.com/v1", "kind": "ReplicaSet", "name": "x"}),
    ],
)
def test_children_of_other_controllers_are_checked_but_not_changed(
    kind: str, owner: dict[str, Any], catalog: GpuCatalog
) -> None:
    refs = [{**owner, "uid": "1", "controller": True}]
    spec = SPEC if kind == "Pod" else {"template": _template()}
    found = inspect_workload(
        {"kind": kind, "metadata": {"name": "o", "ownerReferences": refs}, "spec": spec}, catalog=catalog
    )
    assert found.skip is None
    (container,) = found.vllm_containers
    assert not container.writable and owner["kind"] in (container.no_write or "")


def test_a_job_of_a_cronjob_is_checked_and_may_be_changed(catalog: GpuCatalog) -> None:
    refs = [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "1", "controller": True}]
    job = {"kind": "Job", "metadata": {"name": "j", "ownerReferences": refs}, "spec": {"template": _template()}}
    (container,) = inspect_workload(job, catalog=catalog).vllm_containers
    assert container.writable  # the CronJob controller creates Jobs, it does not keep them in line


@pytest.mark.parametrize(
    "owner",
    [
        {"apiVersion": "batch/v1", "kind": "Job"},
        {"apiVersion": "apps/v1", "kind": "StatefulSet"},
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"},
    ],
)
def test_children_of_reviewed_controllers_are_skipped(owner: dict[str, Any], catalog: GpuCatalog) -> None:
    refs = [{**owner, "name": "x", "uid": "1", "controller": True}]
    pod = {"kind": "Pod", "metadata": {"name": "p", "ownerReferences": refs}, "spec": SPEC}
    assert inspect_workload(pod, catalog=catalog).skip == "owned-by-controller"


@pytest.mark.parametrize("value", ["true", "yes", ""])
def test_opt_out_annotation(value: str, catalog: GpuCatalog) -> None:
    obj = {
        "kind": "Deployment",
        "metadata": {"annotations": {"kv-planner.io/skip": value}},
        "spec": {"template": _template()},
    }
    assert inspect_workload(obj, catalog=catalog).skip == "opted-out"


def test_opt_out_false_is_not_an_opt_out(catalog: GpuCatalog) -> None:
    obj = {
        "kind": "Deployment",
        "metadata": {"annotations": {"kv-planner.io/skip": "false"}},
        "spec": {"template": _template()},
    }
    assert inspect_workload(obj, catalog=catalog).skip is None


def test_non_vllm_image_without_command_is_not_vllm(catalog: GpuCatalog) -> None:
    obj = {
        "kind": "Deployment",
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx:1.27", "args": ["--model", "x"]},
                        {"name": "tool", "image": "vllm/vllm-openai:v0.19.0", "command": ["python3", "-c", "print(1)"]},
                    ]
                }
            }
        },
    }
    assert inspect_workload(obj, catalog=catalog).vllm_containers == []


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.10.1.1", "0.10.1"),  # DESIGN: X.Y.Z
        ("vllm/vllm-openai:0.19.0", "0.19.0"),
        ("docker.io/vllm/vllm-openai:v0.8.5.post1", "0.8.5"),
        ("registry.local:5000/dockerhub/vllm/vllm-openai:v0.19.0", "0.19.0"),  # a mirror keeping the path
        ("registry.local:5000/ml/vllm-openai:v0.19.0", None),  # renamed: could be any derivative
        ("rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521", "0.8.5"),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai@sha256:0123abcd", None),
        ("vllm/vllm-openai", None),
        ("myorg/server:1.2.3", None),
    ],
)
def test_image_versions(image: str, version: str | None) -> None:
    from planner.k8s.detect import image_version

    assert image_version(image) == version


def test_managed_fields_are_left_out_and_nothing_else_moves() -> None:
    plain = {"kind": "Deployment", "metadata": {"name": "llm"}, "spec": {}}
    assert without_managed_fields(plain) is plain  # nothing to leave out: the same object
    assert without_managed_fields({"metadata": "not a mapping"}) == {"metadata": "not a mapping"}
    obj = {
        "apiVersion": "apps/v1",
        "metadata": {"name": "llm", "managedFields": [{"manager": "kubectl"}], "labels": {"app": "x"}},
        "spec": {"replicas": 1},
    }
    slim = without_managed_fields(obj)
    assert list(slim) == ["apiVersion", "metadata", "spec"] and list(slim["metadata"]) == ["name", "labels"]
    assert slim["spec"] is obj["spec"]  # (a shallow copy: only the metadata is rebuilt)
    assert obj["metadata"]["managedFields"] == [{"manager": "kubectl"}]  # the input is not modified
