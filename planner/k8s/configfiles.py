"""Read a file a container sees, when it comes from a ConfigMap known to kv-planner.

``vllm serve --config /etc/vllm/config.yaml`` usually mounts that file from a ConfigMap. ``planner
check`` sees the ConfigMaps of the same manifest stream; the webhook sees none (it makes no API calls),
so there the file's flags stay unknown and kv-planner says so.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import Any

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
    """A function path -> file content for files the container mounts from known ConfigMaps."""

    def read(path: str) -> str | None:
        path = posixpath.normpath(path)
        volumes = {v.get("name"): v for v in pod_spec.get("volumes") or [] if isinstance(v, Mapping)}
        for mount in container.get("volumeMounts") or []:
            if not isinstance(mount, Mapping):
                continue
            mount_path = posixpath.normpath(str(mount.get("mountPath", "")))
            volume = volumes.get(mount.get("name"))
            if not isinstance(volume, Mapping) or not isinstance(volume.get("configMap"), Mapping):
                continue
            source = volume["configMap"]
            data = configmaps.get((namespace, str(source.get("name")))) or configmaps.get(
                (None, str(source.get("name")))
            )
            if data is None:
                continue
            sub_path = mount.get("subPath")
            if sub_path:
                if path == mount_path:
                    return _item(data, source, str(sub_path))
                continue
            if not path.startswith(mount_path.rstrip("/") + "/"):
                continue
            return _item(data, source, path[len(mount_path.rstrip("/")) + 1 :])
        return None

    return read


def _item(data: Mapping[str, str], source: Mapping[str, Any], relative: str) -> str | None:
    items = source.get("items")
    if isinstance(items, list) and items:
        for item in items:
            if isinstance(item, Mapping) and item.get("path") == relative:
                return data.get(str(item.get("key")))
        return None
    return data.get(relative)
