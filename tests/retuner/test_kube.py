"""Events, the annotation and apply mode at the kubernetes-client boundary (fake AppsV1Api/CoreV1Api)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from admission.retuner.decide import Decision
from admission.retuner.kube import ANNOTATION, APPLIED, APPLY_BLOCKED, KubeWriter, WorkloadRef, container_patch
from admission.retuner.settings import RetunerSettings


def deployment(args: list[str] | None = None, command: list[str] | None = None) -> client.V1Deployment:
    container = client.V1Container(
        name="vllm",
        image="vllm/vllm-openai:v0.19.0",
        command=command,
        args=args
        if args is not None
        else ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "64", "--port=8000"],
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name="qwen", namespace="ml"),
        spec=client.V1DeploymentSpec(
            selector=client.V1LabelSelector(match_labels={"app": "qwen"}),
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(containers=[client.V1Container(name="proxy", image="envoy:1"), container])
            ),
        ),
    )


class FakeApps:
    def __init__(self, workload: client.V1Deployment) -> None:
        self.workload = workload
        self.patches: list[tuple[str, str, str, dict[str, Any]]] = []
        self.fail: Exception | None = None

    def read_namespaced_deployment(self, name: str, namespace: str, *, _request_timeout: Any) -> client.V1Deployment:
        return self.workload

    def read_namespaced_stateful_set(self, name: str, namespace: str, *, _request_timeout: Any) -> client.V1Deployment:
        return self.workload

    def patch_namespaced_deployment(
        self, name: str, namespace: str, body: dict[str, Any], *, _request_timeout: Any
    ) -> None:
        if self.fail:
            raise self.fail
        self.patches.append(("Deployment", namespace, name, body))

    def patch_namespaced_stateful_set(
        self, name: str, namespace: str, body: dict[str, Any], *, _request_timeout: Any
    ) -> None:
        self.patches.append(("StatefulSet", namespace, name, body))


class FakeCore:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], *, _request_timeout: Any) -> None:
        self.events.append((namespace, body))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


REF = WorkloadRef(namespace="ml", kind="Deployment", name="qwen", verified=True)
LOWER = Decision(
    action="lower",
    reason="PreemptionsPersist",
    current=64,
    recommended=32,
    message="PreemptionsPersist: lower --max-num-seqs 64 -> 32",
)


def writer(
    workload: client.V1Deployment | None = None, **settings: Any
) -> tuple[KubeWriter, FakeApps, FakeCore, Clock]:
    apps, core, clock = FakeApps(workload or deployment()), FakeCore(), Clock()
    settings.setdefault("namespaces", ("ml",))
    return KubeWriter(apps, core, RetunerSettings(mode="apply", **settings), clock=clock), apps, core, clock


def test_event_carries_the_stable_reason_on_the_workload() -> None:
    w, _, core, _ = writer()
    w.event(REF, LOWER.reason, LOWER.message)
    namespace, body = core.events[0]
    assert namespace == "ml"
    assert body["reason"] == "PreemptionsPersist" and body["type"] == "Normal"
    assert body["involvedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen", "namespace": "ml"}
    assert body["metadata"]["generateName"] == "qwen."


def test_annotation_is_a_merge_patch_of_metadata() -> None:
    w, apps, _, _ = writer()
    w.annotate(REF, 32)
    assert apps.patches == [("Deployment", "ml", "qwen", {"metadata": {"annotations": {ANNOTATION: "32"}}})]


def test_apply_edits_only_the_flag_in_the_users_spelling() -> None:
    w, apps, core, _ = writer()
    result = w.apply(REF, LOWER)
    assert result.result == "applied"
    kind, _, _, patch = apps.patches[0]
    assert kind == "Deployment"
    assert patch["spec"]["template"]["spec"]["containers"] == [
        {"name": "vllm", "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "32", "--port=8000"]}
    ]
    assert patch["metadata"]["annotations"][ANNOTATION] == "32"
    assert core.events[-1][1]["reason"] == APPLIED


def test_apply_adds_the_flag_when_absent_and_handles_vllm_serve_commands() -> None:
    patch = container_patch(
        client.ApiClient().sanitize_for_serialization(deployment(args=["serve", "m"], command=None)), 8
    )
    assert patch["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--max-num-seqs", "8"]
    patch = container_patch(
        client.ApiClient().sanitize_for_serialization(
            deployment(command=["vllm", "serve", "m", "--max_num_seqs=64"], args=[])
        ),
        8,
    )
    assert patch["spec"]["template"]["spec"]["containers"][0]["command"] == ["vllm", "serve", "m", "--max_num_seqs=8"]


def test_apply_refuses_shell_scripts() -> None:
    w, apps, core, _ = writer(deployment(command=["sh", "-c", "vllm serve m --max-num-seqs 64"], args=[]))
    result = w.apply(REF, LOWER)
    assert result.result == "blocked" and apps.patches == []
    assert core.events[-1][1]["reason"] == APPLY_BLOCKED and core.events[-1][1]["type"] == "Warning"


def test_apply_is_rate_limited_per_workload_and_per_hour() -> None:
    w, apps, _, clock = writer(apply_min_interval_s=600, apply_max_per_hour=2)
    assert w.apply(REF, LOWER).result == "applied"
    clock.now += 60
    blocked = w.apply(REF, LOWER)
    assert blocked.result == "blocked" and "minimum 600" in blocked.detail
    other = WorkloadRef(namespace="ml", kind="Deployment", name="other", verified=True)
    assert w.apply(other, LOWER).result == "applied"
    third = WorkloadRef(namespace="ml", kind="Deployment", name="third", verified=True)
    assert "limit 2" in w.apply(third, LOWER).detail
    clock.now += 3700
    assert w.apply(third, LOWER).result == "applied"
    assert len(apps.patches) == 3


def test_apply_never_leaves_the_policy_bounds() -> None:
    w, apps, _, _ = writer(min_seqs=40)
    result = w.apply(REF, LOWER)
    assert result.result == "blocked" and "policy bounds" in result.detail and apps.patches == []


@pytest.mark.parametrize("kind", ["LeaderWorkerSet", "Pod"])
def test_unsupported_workload_kinds_are_not_patched(kind: str) -> None:
    w, apps, _, _ = writer()
    result = w.apply(WorkloadRef(namespace="ml", kind=kind, name="x", verified=True), LOWER)
    assert result.result == "blocked" and apps.patches == []


def test_api_failures_are_reported_not_raised() -> None:
    w, apps, core, _ = writer()
    apps.fail = client.exceptions.ApiException(status=409, reason="Conflict")
    result = w.apply(REF, LOWER)
    assert result.result == "error"
    assert core.events[-1][1]["reason"] == APPLY_BLOCKED

    class BrokenCore:
        def create_namespaced_event(self, namespace: str, body: dict[str, Any], *, _request_timeout: Any) -> None:
            raise client.exceptions.ApiException(status=403, reason="Forbidden")

    quiet = KubeWriter(apps, BrokenCore(), RetunerSettings(namespaces=("ml",)))
    quiet.event(REF, "X", "y")  # logged, not raised


def test_a_rollback_of_our_own_probe_is_not_rate_limited() -> None:
    w, apps, _, clock = writer(apply_min_interval_s=3600, apply_max_per_hour=1)
    raise_ = LOWER.model_copy(update={"action": "raise", "current": 10, "recommended": 12})
    assert w.apply(REF, raise_).result == "applied"
    clock.now += 60
    rollback = LOWER.model_copy(update={"current": 12, "recommended": 10, "rollback": True})
    assert w.apply(REF, rollback).result == "applied"
    assert w.apply(REF, LOWER).result == "blocked"  # anything else still waits
    assert len(apps.patches) == 2
