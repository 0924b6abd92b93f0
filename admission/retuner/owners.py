"""Which Deployment or StatefulSet a pod belongs to, resolved through the Kubernetes API.

The retuner writes to a workload (Events, the recommendation annotation, in apply mode a rollout)
because of what that workload's pods report. A pod's labels and ``ownerReferences`` are written by
whoever created the pod, so they prove nothing: a bare pod can carry ``pod-template-hash`` and an
owner reference naming another team's ReplicaSet. The owner chain is therefore read from the API, one
object at a time, and every link must match by UID:

* Pod -> its controller owner reference -> the ReplicaSet of that name, **fetched**, whose
  ``metadata.uid`` equals the reference's UID -> the ReplicaSet's own controller reference -> the
  Deployment, fetched, UID equal again;
* Pod -> StatefulSet, fetched, UID equal;
* and the ReplicaSet's (StatefulSet's) selector must select the pod, as its controller requires
  before it treats a pod as its own.

Anything else -- no controller, a name that does not exist, a UID that differs (the object was
replaced, or the reference was forged), a kind kv-planner does not patch, a Deployment or StatefulSet
that another controller manages (a LeaderWorkerSet's, KServe's) -- resolves to the pod itself,
which is never written to. Only namespaces in ``--retune-namespaces`` are looked at (the RBAC Roles
the chart renders cover exactly those). Results are cached for ``ttl_s`` (owners do not change during
a pod's life; a recreated object with the same name gets a new UID and fails the match). API errors
other than 404 are not cached and leave the pod unresolved for this round.

The kubernetes client objects (``CoreV1Api``/``AppsV1Api``-like) are passed in; tests use fakes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from admission.kubeapi import to_dict
from admission.retuner.kube import API_TIMEOUT_S

logger = logging.getLogger("admission.retuner")

Verdict = Literal["verified", "not_owned", "mismatch", "outside", "error"]


class Owner(BaseModel):
    """What a pod resolved to. ``verdict == "verified"`` is the only state that allows writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    kind: str
    name: str
    uid: str = ""
    verdict: Verdict
    detail: str = ""

    @property
    def verified(self) -> bool:
        return self.verdict == "verified"


def _status(error: BaseException) -> int | None:
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


def _controller(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in metadata.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A workload's label selector (``matchLabels`` + ``matchExpressions``) against a pod's labels."""
    if not selector:
        return False  # apps/v1 workloads always have one; an empty one must not adopt everything
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = str(expression.get("key", "")), str(expression.get("operator", ""))
        values = {str(v) for v in expression.get("values") or []}
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


class _Unresolved(Exception):
    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict: Verdict = verdict
        self.detail = detail


class OwnerResolver:
    def __init__(
        self,
        core_api: Any,
        apps_api: Any,
        namespaces: Iterable[str],
        *,
        ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core_api
        self.apps = apps_api
        self.namespaces = frozenset(namespaces)
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Owner]] = {}

    def resolve(self, namespace: str, pod: str) -> Owner:
        """The verified owner of ``namespace/pod`` (blocking: API reads on a cache miss)."""
        if namespace not in self.namespaces:
            return Owner(
                namespace=namespace, kind="Pod", name=pod, verdict="outside", detail="not in --retune-namespaces"
            )
        key = (namespace, pod)
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        try:
            owner = self._walk(namespace, pod)
        except _Unresolved as why:
            owner = Owner(namespace=namespace, kind="Pod", name=pod, verdict=why.verdict, detail=why.detail)
        if owner.verdict != "error":
            self._cache[key] = (now, owner)
        elif cached is not None:
            return cached[1]  # an API hiccup: the last answer stands until the API answers again
        if owner.verdict in ("mismatch",):
            logger.warning("pod %s/%s: %s; the retuner will not write for it", namespace, pod, owner.detail)
        return owner

    def forget_stale(self) -> None:
        now = self.clock()
        for key in [k for k, (at, _) in self._cache.items() if now - at >= self.ttl_s]:
            del self._cache[key]

    # --- the chain -------------------------------------------------------------------------------

    def _get(self, read: Callable[..., Any], kind: str, name: str, namespace: str) -> dict[str, Any]:
        try:
            return to_dict(read(name, namespace, _request_timeout=API_TIMEOUT_S))
        except Exception as error:
            if _status(error) == 404:
                raise _Unresolved("mismatch", f"{kind} {name} does not exist") from None
            raise _Unresolved("error", f"reading {kind} {name}: {error}") from None

    def _follow(
        self, child: Mapping[str, Any], namespace: str, expected: tuple[str, ...]
    ) -> tuple[str, dict[str, Any]]:
        """The child's controller, fetched, with its UID matching the reference."""
        ref = _controller(child.get("metadata") or {})
        if ref is None:
            raise _Unresolved("not_owned", "no controller owner")
        kind, name, uid = str(ref.get("kind", "")), str(ref.get("name", "")), str(ref.get("uid", ""))
        if kind not in expected or not str(ref.get("apiVersion", "")).startswith("apps/"):
            raise _Unresolved("not_owned", f"owned by {ref.get('apiVersion')} {kind}, which kv-planner does not patch")
        reader = {
            "ReplicaSet": self.apps.read_namespaced_replica_set,
            "Deployment": self.apps.read_namespaced_deployment,
            "StatefulSet": self.apps.read_namespaced_stateful_set,
        }[kind]
        owner = self._get(reader, kind, name, namespace)
        actual = str((owner.get("metadata") or {}).get("uid", ""))
        if not uid or actual != uid:
            raise _Unresolved("mismatch", f"owner reference to {kind} {name} has UID {uid!r}, the object {actual!r}")
        return kind, owner

    def _walk(self, namespace: str, pod_name: str) -> Owner:
        pod = self._get(self.core.read_namespaced_pod, "Pod", pod_name, namespace)
        kind, owner = self._follow(pod, namespace, ("ReplicaSet", "StatefulSet"))
        # The controller itself only keeps pods its selector matches (it releases the others), so a pod
        # it does not select is not its pod, whatever the reference says.
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if not selects((owner.get("spec") or {}).get("selector"), labels):
            raise _Unresolved("mismatch", f"the {kind}'s selector does not select the pod")
        if kind == "ReplicaSet":
            kind, owner = self._follow(owner, namespace, ("Deployment",))
        metadata = owner.get("metadata") or {}
        manager = _controller(metadata)
        if manager is not None:
            # E.g. a LeaderWorkerSet's StatefulSets, KServe's Deployments: their controller rewrites
            # them from its own spec, so a patch would be undone (and fought over). Not ours to patch.
            raise _Unresolved("not_owned", f"{kind} {metadata.get('name')} is managed by {manager.get('kind')}")
        return Owner(
            namespace=namespace,
            kind=kind,
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            verdict="verified",
        )
