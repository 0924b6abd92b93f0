"""Read a file a container sees, when it comes from a ConfigMap known to kv-planner.

``vllm serve --config /etc/vllm/config.yaml`` usually mounts that file from a ConfigMap. ``planner
check`` sees the ConfigMaps of the same manifest stream; the webhook sees none (it makes no API calls),
so there the file's flags stay unknown and kv-planner says so.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

from planner.k8s.workloads import as_list

ConfigMaps = Mapping[tuple[str | None, str], Mapping[str, str]]
"""(namespace, name) -> data of the ConfigMaps available."""


def configmaps_from_documents(documents: list[Any]) -> dict[tuple[str | None, str], dict[str, str]]:
    found: dict[tuple[str | None, str], dict[str, str]] = {}
    for doc in documents:
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
            meta = doc.get("metadata") or {}
            data = doc.get("data") or {}
            if isinstance(meta, Mapping) and isinstance(meta.get("name"), str) and isinstance(data, Mapping):
                namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
                # (the API keeps only strings in data; any other value is not a file the pod sees)
                found[(namespace, meta["name"])] = {str(k): v for k, v in data.items() if isinstance(v, str)}
    return found


def file_reader(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    namespace: str | None,
    configmaps: ConfigMaps,
) -> Callable[[str], str | None]:
    """A function path -> file content for files the container mounts from known ConfigMaps.

    The mount that wins is the one a container runtime applies last: the deepest mount path holding the
    file (a Secret mounted with ``subPath`` over ``/scripts/start.sh`` shadows the ``/scripts`` ConfigMap).
    When that mount is not a known ConfigMap, or its path depends on the pod (``subPathExpr``), the file is
    unknown: kv-planner never reads one file while the pod runs another."""
    volumes = {v.get("name"): v for v in as_list(pod_spec.get("volumes")) if isinstance(v, Mapping)}
    mounts = [m for m in as_list(container.get("volumeMounts")) if isinstance(m, Mapping)]

    def read(path: str) -> str | None:
        path = posixpath.normpath(path)
        best: tuple[int, Mapping[str, Any], str] | None = None  # (depth of the mount path, mount, relative)
        for mount in mounts:
            mount_path = posixpath.normpath(str(mount.get("mountPath", "")))
            if mount.get("subPath") or mount.get("subPathExpr"):
                if path != mount_path:
                    continue
                relative = ""
            elif path.startswith(mount_path.rstrip("/") + "/"):
                relative = path[len(mount_path.rstrip("/")) + 1 :]
            else:
                continue
            depth = len(mount_path)
            if best is None or depth >= best[0]:
                best = (depth, mount, relative)
        if best is None:
            return None
        _, mount, relative = best
        volume = volumes.get(mount.get("name"))
        if (
            mount.get("subPathExpr")
            or not isinstance(volume, Mapping)
            or not isinstance(volume.get("configMap"), Mapping)
        ):
            return None
        source = volume["configMap"]
        data = configmaps.get((namespace, str(source.get("name")))) or configmaps.get((None, str(source.get("name"))))
        if data is None:
            return None
        return _item(data, source, str(mount["subPath"]) if mount.get("subPath") else relative)

    return read


def _item(data: Mapping[str, str], source: Mapping[str, Any], relative: str) -> str | None:
    items = source.get("items")
    if isinstance(items, list) and items:
        for item in items:
            if isinstance(item, Mapping) and item.get("path") == relative:
                return data.get(str(item.get("key")))
        return None
    return data.get(relative)
