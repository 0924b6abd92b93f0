"""Cluster state the webhook reads: Namespaces (policy overrides) and Nodes (GPU inventory).

The admission path makes no API calls (Kubernetes' webhook good practices): it reads in-memory caches
that background threads keep current with list + watch, like client-go informers. :class:`ClusterCache`
is the interface; tests use :class:`StaticCache`, the process uses :class:`KubernetesCache`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from admission import kubeapi
from planner.k8s.nodes import NodeInfo, node_info

log = logging.getLogger("kv_planner.webhook.caches")


class ClusterCache(Protocol):
    def namespace(self, name: str | None) -> Mapping[str, Any] | None:
        """The namespace's metadata (labels, annotations), or None when unknown."""
        ...

    def nodes(self) -> list[NodeInfo]:
        """The GPU inventory (may be empty)."""
        ...

    def nodes_generation(self) -> int:
        """A number that changes whenever :meth:`nodes` would return other nodes (read on every review, so
        O(1): a large cluster's node list is only rebuilt when it changed)."""
        ...

    def ready(self) -> bool:
        """True once the first list has completed (or when there is nothing to list)."""
        ...


class StaticCache:
    """Fixed namespaces and nodes (tests, ``--no-cluster`` runs)."""

    def __init__(
        self,
        namespaces: Mapping[str, Mapping[str, Any]] | None = None,
        nodes: Iterable[NodeInfo] = (),
    ) -> None:
        self._namespaces = dict(namespaces or {})
        self._nodes = list(nodes)

    def namespace(self, name: str | None) -> Mapping[str, Any] | None:
        return self._namespaces.get(name or "")

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def nodes_generation(self) -> int:
        return 0

    def ready(self) -> bool:
        return True


class _Informer:
    """List, then watch, one resource kind into a dict; relist after any error (bounded backoff)."""

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        convert: Callable[[Mapping[str, Any]], Any],
        stop: threading.Event,
    ) -> None:
        self.name = name
        self._list = list_fn
        self._convert = convert
        self._stop = stop
        self._items: dict[str, Any] = {}
        self.generation = 0  # changes with every change of the items (KubernetesCache.nodes_generation)
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def items(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._items)

    def get(self, key: str) -> Any:
        with self._lock:
            return self._items.get(key)

    # An item is replaced only when what kv-planner keeps of it changed. A Node is updated every few
    # minutes for fields kv-planner does not keep (conditions, heartbeats), and every item is listed again
    # when a watch ends; a new object for the same content would bump the generation and make the webhook
    # send its whole node inventory (megabytes in a large cluster) to every worker again. Only this
    # thread writes the items, so it compares outside the lock (the event loop's reads do not wait on it).

    def relisted(self, items: dict[str, Any]) -> None:
        kept = {name: self._kept(name, item) for name, item in items.items()}
        changed = kept.keys() != self._items.keys() or any(kept[name] is not self._items[name] for name in kept)
        with self._lock:
            self._items = kept
            if changed:
                self.generation += 1

    def watched(self, event: Mapping[str, Any]) -> None:
        obj = event.get("raw_object") or {}
        name = obj.get("metadata", {}).get("name")
        if not name:
            return
        converted = None if event.get("type") == "DELETED" else self._convert(obj)
        with self._lock:
            held = self._items.get(name)
            if converted is None:
                self._items.pop(name, None)
            else:
                self._items[name] = self._kept(name, converted)
            if self._items.get(name) is not held:
                self.generation += 1

    def _kept(self, name: str, item: Any) -> Any:
        """The item held for ``name`` when equal to ``item``, else ``item``."""
        held = self._items.get(name)
        return held if held is not None and held == item else item

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                listed = self._list(_preload_content=False)
                data = _json(listed)
                self.relisted({i["metadata"]["name"]: self._convert(i) for i in data.get("items", [])})
                self.synced.set()
                version = data.get("metadata", {}).get("resourceVersion")
                stream = kubeapi.new_watch()
                for event in stream.stream(
                    self._list, resource_version=version, timeout_seconds=300, _preload_content=False
                ):
                    if self._stop.is_set():
                        stream.stop()
                        break
                    self.watched(event)
                backoff = 1.0
            except Exception as error:  # the watch must survive API errors and restarts
                log.warning("%s informer: %s; relisting in %.0fs", self.name, error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)


def _json(response: Any) -> dict[str, Any]:
    data = response.data if hasattr(response, "data") else response
    parsed = json.loads(data) if isinstance(data, (bytes, str)) else data
    return parsed if isinstance(parsed, dict) else {}


def _namespace_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})}


class KubernetesCache:
    """Namespaces and Nodes from the API server (in-cluster config, else kubeconfig)."""

    def __init__(self, *, watch_nodes: bool = True, watch_namespaces: bool = True, api_client: Any = None) -> None:
        if api_client is None:
            kubeapi.load_config()
        core = kubeapi.core_api(api_client)
        self._stop = threading.Event()
        self._namespaces = (
            _Informer("namespaces", core.list_namespace, _namespace_meta, self._stop) if watch_namespaces else None
        )
        self._nodes = _Informer("nodes", core.list_node, node_info, self._stop) if watch_nodes else None
        for informer in (self._namespaces, self._nodes):
            if informer is not None:
                informer.thread.start()

    def namespace(self, name: str | None) -> Mapping[str, Any] | None:
        if self._namespaces is None or not name:
            return None
        value = self._namespaces.get(name)
        return value if isinstance(value, Mapping) else None

    def nodes(self) -> list[NodeInfo]:
        if self._nodes is None:
            return []
        # (by name: the order of a relist, or of watch events, is not a change)
        return sorted((n for n in self._nodes.items().values() if isinstance(n, NodeInfo)), key=lambda n: n.name)

    def nodes_generation(self) -> int:
        return self._nodes.generation if self._nodes is not None else 0

    def ready(self) -> bool:
        return all(i is None or i.synced.is_set() for i in (self._namespaces, self._nodes))

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for informer in (self._namespaces, self._nodes):
            if informer is not None and not informer.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def stop(self) -> None:
        self._stop.set()
