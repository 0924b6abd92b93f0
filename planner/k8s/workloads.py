"""Find the pod templates of a Kubernetes object (plain dicts), wherever its kind keeps them.

Built-in kinds keep one template at a known place; a LeaderWorkerSet has a leader and a worker template
(the leader falls back to the worker's when it has none); KServe keeps a pod spec inline in an
InferenceService predictor or a ServingRuntime. Other custom resources (and custom kinds that share a
built-in kind's name, such as Volcano's ``batch.volcano.sh`` Job) are searched for objects shaped like a
PodTemplateSpec (``{metadata, spec: {containers: [...]}}``) under ``spec``, lists included (JobSet's
``replicatedJobs``, Volcano's ``tasks``), within fixed bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Pointer = tuple[str, ...]

_TEMPLATE_AT: dict[str, Pointer] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "PodTemplate": ("template",),
}
SEARCH_DEPTH = 8  # levels below spec (JobSet: replicatedJobs/N/template/spec/template is 5)
SEARCH_NODES = 20_000  # mappings and lists one search visits (each once)
MAX_SEARCH_TEMPLATES = 64  # pod templates one custom resource is checked for
_NOT_CONTENT = frozenset(("apiVersion", "kind", "metadata", "status"))


class PodTemplateRef(BaseModel):
    """Where one pod template sits in an object (JSON pointer tokens from the object root)."""

    model_config = ConfigDict(frozen=True)

    name: str | None = Field(default=None, description="leader / worker for LeaderWorkerSets, else None")
    metadata_path: Pointer = Field(description="the template's metadata (may be absent in the object)")
    spec_path: Pointer = Field(description="the PodSpec")
    group_size: int = Field(default=1, description="pods per group (LeaderWorkerSet size), else 1")
    implicit_env: dict[str, str] = Field(default_factory=dict, description="variables the platform injects")
    peer_spec_path: Pointer | None = Field(
        default=None, description="LeaderWorkerSet: the other template's PodSpec (for the group's GPUs)"
    )
    plan_not_recorded: str | None = Field(
        default=None,
        description="why no plan annotation is written: the platform copies none from the resource to the pods "
        "(None: annotations under metadata_path reach the pods)",
    )


def without_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without ``metadata.managedFields`` (the same object when it has none; never modified).

    The API server's record of which client set which field holds an entry for every field of the object,
    so it is often as large as the spec itself (a key for each env variable), and no decision reads it.
    Decisions screen and inspect the object without it (``planner check`` and the webhook alike), and the
    webhook does not send it to its decision workers.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    # (key order kept: the metadata stays where it was, its other fields in their order)
    return {**obj, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else empty: manifest fields are untrusted and may hold any type
    (``env: 7`` in a custom resource that the API server does not type-check)."""
    return value if isinstance(value, list) else []


def is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, with the exact ``dict`` type tested first: decoded JSON holds plain
    dicts, and the ABC check alone was a third to a half of the loops over a container's env entries."""
    return type(value) is dict or isinstance(value, Mapping)


def get_path(obj: Any, path: Pointer) -> Any:
    """The value at ``path`` (None when any step is missing)."""
    current = obj
    for token in path:
        if isinstance(current, Mapping):
            current = current.get(token)
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return None
    return current


def is_pod_spec(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("containers"), list)


# Controllers whose pod template kv-planner reviews on the controller itself, so their children (a Pod
# of a ReplicaSet or Job, a ReplicaSet of a Deployment) need no review: the chart's CEL condition
# `not-managed-by-reviewed-owner` keeps exactly these (and the enabled platforms' kinds, whose children
# then never reach the webhook) away from it. Any other owner proves nothing: an ownerReference is
# whatever the object's author wrote, and the API server does not check it.
_REVIEWED_OWNERS: dict[str, frozenset[str]] = {
    "apps/v1": frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}),
    "batch/v1": frozenset({"Job"}),
    "leaderworkerset.x-k8s.io/v1": frozenset({"LeaderWorkerSet"}),
}


def controller_of(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(apiVersion, kind, name) of the ownerReference marked ``controller``, if there is one."""
    refs = get_path(obj, ("metadata", "ownerReferences"))
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def owned_by_controller(obj: Mapping[str, Any]) -> bool:
    """True when the controller owner is a kind whose template kv-planner reviews (a Pod of a
    ReplicaSet, a ReplicaSet of a Deployment): the owner's template was already reviewed."""
    owner = controller_of(obj)
    return owner is not None and owner[1] in _REVIEWED_OWNERS.get(owner[0], frozenset())


def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
    """The pod templates of ``obj`` in document order (empty for objects without pods)."""
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return []
    if not _builtin(obj):  # a custom resource that shares a kind's name (Volcano's batch.volcano.sh Job)
        return _search(obj)
    if kind == "Pod":
        return (
            [PodTemplateRef(metadata_path=("metadata",), spec_path=("spec",))] if is_pod_spec(obj.get("spec")) else []
        )
    if kind in _TEMPLATE_AT:
        base = _TEMPLATE_AT[kind]
        if is_pod_spec(get_path(obj, (*base, "spec"))):
            return [PodTemplateRef(metadata_path=(*base, "metadata"), spec_path=(*base, "spec"))]
        return []
    if kind == "CronJob":
        base = ("spec", "jobTemplate", "spec", "template")
        if is_pod_spec(get_path(obj, (*base, "spec"))):
            return [PodTemplateRef(metadata_path=(*base, "metadata"), spec_path=(*base, "spec"))]
        return []
    if kind == "LeaderWorkerSet":
        return _leader_worker(obj)
    if kind == "InferenceService":
        refs = []
        for component in ("predictor", "transformer", "explainer"):
            path = ("spec", component)
            if is_pod_spec(get_path(obj, path)):
                # (ComponentExtensionSpec.annotations: added to this component's pods only, KServe >= 0.11)
                refs.append(PodTemplateRef(name=component, metadata_path=path, spec_path=path))
        return refs
    if kind in ("ServingRuntime", "ClusterServingRuntime"):
        return (
            [PodTemplateRef(metadata_path=("metadata",), spec_path=("spec",))] if is_pod_spec(obj.get("spec")) else []
        )
    return _search(obj)


_BUILTIN_KINDS = frozenset((*_TEMPLATE_AT, "Pod", "CronJob"))
_BUILTIN_GROUPS = frozenset(("", "apps", "batch", "extensions"))


def _builtin(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is Kubernetes' own kind of its name (core, apps, batch), or any other kind: only
    Kubernetes' kinds keep their template where :data:`_TEMPLATE_AT` says."""
    if obj.get("kind") not in _BUILTIN_KINDS:
        return True
    api_version = obj.get("apiVersion")
    group = api_version.split("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""
    return group in _BUILTIN_GROUPS


def _leader_worker(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
    base = ("spec", "leaderWorkerTemplate")
    size_value = get_path(obj, (*base, "size"))
    size = size_value if isinstance(size_value, int) and size_value >= 1 else 1
    # LWS injects these into every pod of a group (leaderworkerset.x-k8s.io: LWS_GROUP_SIZE, ...).
    implicit = {"LWS_GROUP_SIZE": str(size)}
    leader = (*base, "leaderTemplate")
    worker = (*base, "workerTemplate")
    refs: list[PodTemplateRef] = []
    has_leader = is_pod_spec(get_path(obj, (*leader, "spec")))
    has_worker = is_pod_spec(get_path(obj, (*worker, "spec")))
    if has_leader:
        refs.append(
            PodTemplateRef(
                name="leader",
                metadata_path=(*leader, "metadata"),
                spec_path=(*leader, "spec"),
                group_size=size,
                implicit_env=implicit,
                peer_spec_path=(*worker, "spec") if has_worker else None,
            )
        )
    if has_worker:
        refs.append(
            PodTemplateRef(
                name="worker",
                metadata_path=(*worker, "metadata"),
                spec_path=(*worker, "spec"),
                group_size=size,
                implicit_env=implicit,
                peer_spec_path=(*leader, "spec") if has_leader else None,
            )
        )
    return refs


def _search(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
    """Custom resources: every PodTemplateSpec-shaped mapping under ``spec`` (or, for kinds without a
    ``spec``, under their top-level fields), in lists too (JobSet ``replicatedJobs[].template.spec.template``,
    Volcano ``tasks[].template``). Bounded: :data:`SEARCH_DEPTH` levels, :data:`SEARCH_NODES` mappings and
    lists visited, :data:`MAX_SEARCH_TEMPLATES` templates returned (one more when there are more, so that
    the caller can say so); each node is visited once."""
    found: list[PodTemplateRef] = []
    budget = [SEARCH_NODES]

    def walk(value: Any, path: Pointer, depth: int) -> None:
        if depth > SEARCH_DEPTH or len(found) > MAX_SEARCH_TEMPLATES or budget[0] <= 0:
            return
        if isinstance(value, list):
            budget[0] -= 1
            for index, item in enumerate(value):
                walk(item, (*path, str(index)), depth + 1)
            return
        if not isinstance(value, Mapping):
            return
        budget[0] -= 1
        if is_pod_spec(value.get("spec")) and ("metadata" in value or path[-1:] == ("template",)):
            start = 1 if path[:1] == ("spec",) else 0
            found.append(
                PodTemplateRef(
                    name="/".join(path[start:]) or None, metadata_path=(*path, "metadata"), spec_path=(*path, "spec")
                )
            )
            return
        for key in sorted(k for k in value if isinstance(k, str)):
            walk(value[key], (*path, key), depth + 1)

    if "spec" in obj:
        walk(obj.get("spec"), ("spec",), 0)
    else:  # kinds that keep their fields at the top level
        for key in sorted(k for k in obj if isinstance(k, str) and k not in _NOT_CONTENT):
            walk(obj[key], (key,), 0)
    return found
