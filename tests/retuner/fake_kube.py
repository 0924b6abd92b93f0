"""A fake Kubernetes API at the kubernetes-client boundary: CoreV1Api and AppsV1Api methods the
retuner calls, answering with the client's own model objects and raising its ``ApiException``. Every
method requires the client's ``_request_timeout`` keyword: a call without a timeout fails the test.

Objects live in a dict keyed by (kind, namespace, name); every call is recorded, so tests can assert
that nothing was written where it must not be.
"""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException


def owner_ref(kind: str, name: str, uid: str, *, controller: bool = True) -> client.V1OwnerReference:
    return client.V1OwnerReference(api_version="apps/v1", kind=kind, name=name, uid=uid, controller=controller)


def vllm_template(args: list[str] | None = None) -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": "chat"}),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="vllm",
                    image="vllm/vllm-openai:v0.19.0",
                    args=args or ["--model", "m", "--max-num-seqs", "64"],
                )
            ]
        ),
    )


class FakeCluster:
    """Both APIs in one object (pass it as core_api and apps_api)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Any] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.patches: list[tuple[str, str, str, dict[str, Any]]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.fail_reads: int | None = None  # an HTTP status every read answers with, when set

    # --- building a cluster ---------------------------------------------------------------------------

    def deployment(self, namespace: str, name: str) -> tuple[str, str]:
        """A Deployment and its ReplicaSet; returns (rs name, rs uid)."""
        uid = str(uuid.uuid4())
        self.objects[("Deployment", namespace, name)] = client.V1Deployment(
            api_version="apps/v1",
            kind="Deployment",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            spec=client.V1DeploymentSpec(
                selector=client.V1LabelSelector(match_labels={"app": name}), template=vllm_template()
            ),
        )
        rs_name, rs_uid = f"{name}-5d8f7c9b4", str(uuid.uuid4())
        self.objects[("ReplicaSet", namespace, rs_name)] = client.V1ReplicaSet(
            metadata=client.V1ObjectMeta(
                name=rs_name,
                namespace=namespace,
                uid=rs_uid,
                labels={"pod-template-hash": "5d8f7c9b4"},
                owner_references=[owner_ref("Deployment", name, uid)],
            ),
            spec=client.V1ReplicaSetSpec(selector=client.V1LabelSelector(match_labels={"app": name})),
        )
        return rs_name, rs_uid

    def stateful_set(self, namespace: str, name: str) -> str:
        uid = str(uuid.uuid4())
        self.objects[("StatefulSet", namespace, name)] = client.V1StatefulSet(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            spec=client.V1StatefulSetSpec(
                selector=client.V1LabelSelector(match_labels={"app": name}),
                service_name=name,
                template=vllm_template(),
            ),
        )
        return uid

    def pod(
        self,
        namespace: str,
        name: str,
        owners: list[client.V1OwnerReference] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        # Default labels: {"app": <name up to the first dash>}, what the workloads above select.
        labels = labels if labels is not None else {"app": name.split("-", maxsplit=1)[0]}
        self.objects[("Pod", namespace, name)] = client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name, namespace=namespace, uid=str(uuid.uuid4()), labels=labels, owner_references=owners
            ),
            spec=client.V1PodSpec(containers=[client.V1Container(name="vllm", image="vllm/vllm-openai:v0.19.0")]),
        )

    # --- reads ----------------------------------------------------------------------------------------

    def _read(self, kind: str, name: str, namespace: str) -> Any:
        self.calls.append(("read", kind, f"{namespace}/{name}"))
        if self.fail_reads is not None:
            raise ApiException(status=self.fail_reads, reason="injected")
        try:
            return self.objects[(kind, namespace, name)]
        except KeyError:
            raise ApiException(status=404, reason="Not Found") from None

    def read_namespaced_pod(self, name: str, namespace: str, *, _request_timeout: Any) -> Any:
        return self._read("Pod", name, namespace)

    def read_namespaced_replica_set(self, name: str, namespace: str, *, _request_timeout: Any) -> Any:
        return self._read("ReplicaSet", name, namespace)

    def read_namespaced_deployment(self, name: str, namespace: str, *, _request_timeout: Any) -> Any:
        return self._read("Deployment", name, namespace)

    def read_namespaced_stateful_set(self, name: str, namespace: str, *, _request_timeout: Any) -> Any:
        return self._read("StatefulSet", name, namespace)

    # --- writes ---------------------------------------------------------------------------------------

    def patch_namespaced_deployment(
        self, name: str, namespace: str, body: dict[str, Any], *, _request_timeout: Any
    ) -> None:
        self.calls.append(("patch", "Deployment", f"{namespace}/{name}"))
        self.patches.append(("Deployment", namespace, name, body))

    def patch_namespaced_stateful_set(
        self, name: str, namespace: str, body: dict[str, Any], *, _request_timeout: Any
    ) -> None:
        self.calls.append(("patch", "StatefulSet", f"{namespace}/{name}"))
        self.patches.append(("StatefulSet", namespace, name, body))

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], *, _request_timeout: Any) -> None:
        self.calls.append(("create", "Event", namespace))
        self.events.append((namespace, body))

    @property
    def writes(self) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] != "read"]
