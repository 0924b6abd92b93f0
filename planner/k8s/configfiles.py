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


MAX_ENV_FROM_KEYS = 1024  # ConfigMap keys taken into one container's environment (the env-entry cap, KVP071)
MAX_ENV_FROM_VALUE = 65_536  # characters of one value taken (the per-value cap, KVP072)


def with_configmap_env(
    container: Mapping[str, Any], namespace: str | None, configmaps: ConfigMaps
) -> Mapping[str, Any]:
    """``container`` with the environment it gets from known ConfigMaps written out as literal ``env``.

    Flags kept in a ConfigMap (``envFrom: [{configMapRef: ...}]`` with ``args: [--max-model-len,
    $(MAX_MODEL_LEN)]``, or ``vllm serve $MODEL $EXTRA_ARGS`` in a script; ``env[].valueFrom.configMapKeyRef``)
    are then read as vLLM gets them. The kubelet's order (``makeEnvironmentVariables``): ``envFrom`` sources
    first, a later one overriding an earlier one's keys, each key under its source's ``prefix``; then
    ``env``, which overrides them and may refer to them with ``$(NAME)``. Values taken from a ConfigMap are
    not expanded again (``$`` is escaped). ``envFrom`` is written out only when every source is a known
    ConfigMap (a Secret, or a ConfigMap not in the input, may set any name: it stays unknown), within
    :data:`MAX_ENV_FROM_KEYS` keys and :data:`MAX_ENV_FROM_VALUE` characters a value; a
    ``configMapKeyRef`` to a key that is not there stays unknown too."""
    env_from = container.get("envFrom")
    entries = container.get("env")
    changed = False
    literal: dict[str, str] = {}
    drop_env_from = False
    if isinstance(env_from, list) and env_from:
        sources = [_env_from_source(source, namespace, configmaps) for source in env_from]
        if all(found is not None for found in sources):
            for found in sources:
                assert found is not None
                prefix, data = found
                for key, value in data.items():
                    literal[prefix + key] = value
            if len(literal) <= MAX_ENV_FROM_KEYS and all(len(v) <= MAX_ENV_FROM_VALUE for v in literal.values()):
                drop_env_from = changed = True
            else:
                literal = {}
    kept: list[Any] = []
    for entry in entries if isinstance(entries, list) else []:
        taken = _config_map_key(entry, namespace, configmaps)
        if taken is not None:
            kept.append({"name": entry["name"], "value": _escaped(taken)})
            changed = True
        else:
            kept.append(entry)
    if not changed:
        return container
    out = dict(container)
    out["env"] = [{"name": name, "value": _escaped(value)} for name, value in literal.items()] + kept
    if drop_env_from:
        out.pop("envFrom", None)
    return out


def _env_from_source(
    source: Any, namespace: str | None, configmaps: ConfigMaps
) -> tuple[str, Mapping[str, str]] | None:
    if not isinstance(source, Mapping) or not isinstance(source.get("configMapRef"), Mapping):
        return None
    data = _config_map(source["configMapRef"].get("name"), namespace, configmaps)
    prefix = source.get("prefix")
    if data is None or (prefix is not None and not isinstance(prefix, str)):
        return None
    return prefix or "", data


def _config_map_key(entry: Any, namespace: str | None, configmaps: ConfigMaps) -> str | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        return None
    ref = entry.get("valueFrom")
    ref = ref.get("configMapKeyRef") if isinstance(ref, Mapping) else None
    if not isinstance(ref, Mapping):
        return None
    data = _config_map(ref.get("name"), namespace, configmaps)
    value = data.get(str(ref.get("key"))) if data is not None else None
    return value if value is not None and len(value) <= MAX_ENV_FROM_VALUE else None


def _config_map(name: Any, namespace: str | None, configmaps: ConfigMaps) -> Mapping[str, str] | None:
    if not isinstance(name, str):
        return None
    return configmaps.get((namespace, name)) or configmaps.get((None, name))


def _escaped(value: str) -> str:
    """A value the kubelet does not expand, written so that ``$(NAME)`` expansion leaves it as it is."""
    return value.replace("$", "$$")
