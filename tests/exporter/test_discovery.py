"""Kubernetes discovery at the client boundary: list, watch, 410 Gone, API errors, pod -> target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.exporter.discovery import KubeDiscovery
from admission.exporter.pods import pod_target


def make_pod(
    name: str,
    namespace: str = "llm",
    *,
    args: list[str] | None = None,
    phase: str = "Running",
    annotations: dict[str, str] | None = None,
    image: str = "vllm/vllm-openai:v0.19.0",
    owner: tuple[str, str] | None = ("ReplicaSet", "qwen-7b-6d4f8c9b7"),
    template_hash: str = "6d4f8c9b7",
    ip: str = "10.1.2.3",
) -> client.V1Pod:
    owners = (
        [client.V1OwnerReference(api_version="apps/v1", kind=owner[0], name=owner[1], uid="u1", controller=True)]
        if owner
        else None
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=namespace,
            annotations=annotations,
            labels={"pod-template-hash": template_hash},
            owner_references=owners,
            resource_version="7",
        ),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(name="sidecar", image="envoy:1"),
                client.V1Container(
                    name="vllm",
                    image=image,
                    args=args if args is not None else ["--model", "Qwen/Qwen2.5-7B-Instruct"],
                    ports=[client.V1ContainerPort(container_port=8000, name="http")],
                ),
            ]
        ),
        status=client.V1PodStatus(phase=phase, pod_ip=ip),
    )


class FakeCore:
    """CoreV1Api's list calls, answered from memory (label selectors of the form k=v)."""

    def __init__(self, namespaces: dict[str, dict[str, str]], pods: list[client.V1Pod]) -> None:
        self.namespaces = namespaces
        self.pods = pods
        self.fail_next: list[Exception] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def list_namespace(self, **kwargs: Any) -> client.V1NamespaceList:
        self.calls.append(("list_namespace", kwargs))
        if self.fail_next:
            raise self.fail_next.pop(0)
        key, _, value = kwargs["label_selector"].partition("=")
        items = [
            client.V1Namespace(metadata=client.V1ObjectMeta(name=n, labels=labels))
            for n, labels in self.namespaces.items()
            if labels.get(key) == value
        ]
        return client.V1NamespaceList(items=items)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> client.V1PodList:
        self.calls.append(("list_pods", kwargs))
        return client.V1PodList(items=list(self.pods), metadata=client.V1ListMeta(resource_version="100"))


class FakeWatch:
    """kubernetes.watch.Watch: each stream() plays the next script (events, then maybe an exception)."""

    def __init__(self, scripts: list[list[Any]], seen: list[dict[str, Any]]) -> None:
        self.scripts = scripts
        self.seen = seen

    def stream(self, func: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.seen.append(kwargs)
        script = self.scripts.pop(0) if self.scripts else []
        for item in script:
            if isinstance(item, Exception):
                raise item
            yield item

    def stop(self) -> None:
        pass


OPTED_IN = {"llm": {"kv-planner.io/enabled": "true"}, "other": {}, "batch": {"kv-planner.io/enabled": "true"}}


def test_pod_to_target_reads_flags_owner_and_annotations() -> None:
    plan = {
        "v": 1,
        "numGpuBlocks": 4000,
        "numGpuBlocksLow": 3700,
        "maxNumSeqs": 128,
        "maxModelLen": 16384,
        "gpu": "H100-80GB",
        "gpuCount": 2,
        "vllmVersion": "0.19.0",
    }
    pod = make_pod(
        "qwen-7b-6d4f8c9b7-x2x8k",
        args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--port", "8080", "--max-num-seqs=64", "--max-model-len", "32k"],
        annotations={"kv-planner.io/plan": json.dumps(plan), "kv-planner.io/planned-num-gpu-blocks": "4096"},
    )
    target = pod_target(client.ApiClient().sanitize_for_serialization(pod))
    assert target is not None
    assert target.url == "http://10.1.2.3:8080/metrics"
    assert (target.namespace, target.pod) == ("llm", "qwen-7b-6d4f8c9b7-x2x8k")
    assert (target.workload_kind, target.workload) == ("Deployment", "qwen-7b")
    assert target.planned_num_gpu_blocks == 4096
    assert target.planned_num_gpu_blocks_low == 3700  # the retuner's fallback (the band's low end)
    assert (target.max_num_seqs, target.max_model_len) == (64, 32000)  # the flags win over the plan
    assert (target.gpu, target.gpu_count, target.vllm_version) == ("H100-80GB", 2, "0.19.0")


def test_plan_annotation_fills_in_defaults_and_non_vllm_pods_are_skipped() -> None:
    plan = {"v": 1, "numGpuBlocks": 4000, "maxNumSeqs": 256, "maxModelLen": 32768}
    pod = client.ApiClient().sanitize_for_serialization(
        make_pod("a", annotations={"kv-planner.io/plan": json.dumps(plan)}, owner=("StatefulSet", "qwen"))
    )
    target = pod_target(pod)
    assert target is not None
    assert (target.planned_num_gpu_blocks, target.max_num_seqs, target.max_model_len) == (4000, 256, 32768)
    assert (target.workload_kind, target.workload, target.url) == (
        "StatefulSet",
        "qwen",
        "http://10.1.2.3:8000/metrics",
    )
    plain = client.ApiClient().sanitize_for_serialization(make_pod("web", image="nginx:1", args=["-g", "daemon off;"]))
    assert pod_target(plain) is None
    pending = client.ApiClient().sanitize_for_serialization(make_pod("p", phase="Pending"))
    assert pod_target(pending) is None


def test_relist_takes_pods_of_opted_in_namespaces_only() -> None:
    core = FakeCore(OPTED_IN, [make_pod("a-1"), make_pod("b-1", namespace="other"), make_pod("c-1", namespace="batch")])
    discovery = KubeDiscovery(core, watch_factory=lambda: FakeWatch([], []))
    discovery.relist()
    assert [t.key for t in discovery.targets()] == [("batch", "c-1"), ("llm", "a-1")]
    assert discovery.synced.is_set()


def test_watch_events_410_and_api_errors() -> None:
    core = FakeCore(OPTED_IN, [make_pod("a-1")])
    seen: list[dict[str, Any]] = []
    sleeps: list[float] = []
    scripts: list[list[Any]] = [
        # 1st watch: a pod appears, another stops running, then the server ends the stream.
        [
            {"type": "ADDED", "object": make_pod("a-2")},
            {"type": "MODIFIED", "object": make_pod("a-1", phase="Succeeded")},
            {"type": "ADDED", "object": make_pod("x-1", namespace="other")},
        ],
        # 2nd watch: our resourceVersion expired.
        [{"type": "DELETED", "object": make_pod("a-2")}, ApiException(status=410, reason="Gone")],
        # 3rd watch: the API server fails.
        [ApiException(status=500, reason="Internal Server Error")],
        [],
    ]
    discovery = KubeDiscovery(core, watch_factory=lambda: FakeWatch(scripts, seen), sleep=sleeps.append)

    discovery.run(max_cycles=1)
    assert [t.pod for t in discovery.targets()] == ["a-2"]  # a-1 left, x-1 is not opted in
    assert seen[0]["resource_version"] == "100"

    core.pods = [make_pod("a-1"), make_pod("a-2")]
    discovery.run(max_cycles=1)  # relist, then the watch hits 410 -> relist again next time
    assert discovery.errors == {"expired": 1}
    discovery.run(max_cycles=2)  # relist + watch that fails with 500, then relist + empty watch
    assert discovery.errors == {"expired": 1, "api_error": 1}
    # 1 s after each watch the server ended at once (cycles 1 and 4), 1 s of backoff after the 500.
    assert sleeps == [1.0, 1.0, 1.0]
    assert [t.pod for t in discovery.targets()] == ["a-1", "a-2"]


def test_api_errors_keep_the_last_known_targets() -> None:
    core = FakeCore(OPTED_IN, [make_pod("a-1")])
    sleeps: list[float] = []
    discovery = KubeDiscovery(core, watch_factory=lambda: FakeWatch([[]], []), sleep=sleeps.append)
    discovery.run(max_cycles=1)
    core.fail_next = [
        ApiException(status=403, reason="Forbidden"),
        ConnectionError("refused"),
        ConnectionError("refused"),
    ]
    discovery.run(max_cycles=3)
    assert [t.pod for t in discovery.targets()] == ["a-1"]
    assert discovery.errors == {"api_error": 1, "connection": 2}
    assert sleeps == [1.0, 1.0, 2.0, 4.0]  # a short watch's pause, then exponential backoff
    names = {f.name: f for f in discovery.families()}
    errors = {s.labels["reason"]: s.value for s in names["kv_planner_discovery_errors"].samples}
    assert errors == {"api_error": 1.0, "connection": 2.0, "expired": 0.0}
    assert "kv_planner_discovery_last_success_timestamp_seconds" in names


@pytest.mark.parametrize("selector", [None, "app=vllm"])
def test_pod_selector_is_passed_to_list_and_watch(selector: str | None) -> None:
    core = FakeCore(OPTED_IN, [])
    seen: list[dict[str, Any]] = []
    discovery = KubeDiscovery(
        core, pod_selector=selector, watch_factory=lambda: FakeWatch([[]], seen), sleep=lambda _: None
    )
    discovery.run(max_cycles=1)
    pod_calls = [kwargs for name, kwargs in core.calls if name == "list_pods"]
    assert pod_calls[0].get("label_selector") == selector
    assert seen[0].get("label_selector") == selector
