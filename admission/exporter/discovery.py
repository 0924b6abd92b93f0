"""Find vLLM pods through the Kubernetes API: list, then watch, relisting on expiry or error.

Namespaces opt in with the label ``kv-planner.io/enabled=true`` (``--namespace-selector``); pods can be
narrowed with ``--pod-selector``. The loop (one daemon thread):

1. list the opted-in namespaces and the matching pods -> the target set (replaced atomically);
2. watch pods from the list's ``resourceVersion`` for ``resync_s`` seconds, applying ADDED / MODIFIED /
   DELETED events;
3. when the watch ends, relist (this also picks up namespaces that opted in or out); a ``410 Gone``
   (resourceVersion too old) relists at once; any other API error keeps the last known targets,
   counts the error and retries with exponential backoff (capped).

The kubernetes client is passed in (``CoreV1Api``-like object and a watch factory), so tests drive this
code at the client boundary with fakes; nothing else in the exporter talks to the API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from admission.exporter.pods import pod_target
from admission.kubeapi import new_watch
from admission.kubeapi import to_dict as _to_dict
from admission.observations.targets import Target

logger = logging.getLogger("admission.exporter.discovery")

DEFAULT_NAMESPACE_SELECTOR = "kv-planner.io/enabled=true"


class WatchLike(Protocol):
    def stream(self, func: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]: ...

    def stop(self) -> None: ...


def _status(error: BaseException) -> int | None:
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


class KubeDiscovery:
    def __init__(
        self,
        core_api: Any,
        *,
        namespace_selector: str = DEFAULT_NAMESPACE_SELECTOR,
        pod_selector: str | None = None,
        resync_s: float = 60.0,
        watch_factory: Callable[[], WatchLike] | None = None,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.core = core_api
        self.namespace_selector = namespace_selector
        self.pod_selector = pod_selector or None
        self.resync_s = resync_s
        self.max_backoff_s = max_backoff_s
        self._watch_factory = watch_factory or _default_watch
        self._sleep = sleep
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], Target] = {}
        self._namespaces: set[str] = set()
        self._resource_version: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: WatchLike | None = None
        self.synced = threading.Event()
        self.errors: dict[str, int] = {}
        self.watch_restarts = 0
        self.last_success: float | None = None

    # --- state ----------------------------------------------------------------------------------

    def targets(self) -> list[Target]:
        with self._lock:
            return sorted(self._pods.values(), key=lambda t: t.key)

    def _count_error(self, reason: str) -> None:
        with self._lock:
            self.errors[reason] = self.errors.get(reason, 0) + 1

    # --- one relist --------------------------------------------------------------------------------

    def relist(self) -> None:
        """List namespaces and pods; replace the target set. Raises the client's errors."""
        namespaces = self.core.list_namespace(label_selector=self.namespace_selector)
        names = {str((_to_dict(ns).get("metadata") or {}).get("name", "")) for ns in namespaces.items or []}
        kwargs: dict[str, Any] = {}
        if self.pod_selector:
            kwargs["label_selector"] = self.pod_selector
        pods = self.core.list_pod_for_all_namespaces(**kwargs)
        found: dict[tuple[str, str], Target] = {}
        for pod in pods.items or []:
            target = self._target(_to_dict(pod), names)
            if target is not None:
                found[target.key] = target
        metadata = _to_dict(pods.metadata) if getattr(pods, "metadata", None) is not None else {}
        with self._lock:
            self._namespaces = names
            self._pods = found
            self._resource_version = metadata.get("resourceVersion") or metadata.get("resource_version")
            self.last_success = time.time()
        self.synced.set()

    def _target(self, pod: dict[str, Any], namespaces: set[str]) -> Target | None:
        namespace = (pod.get("metadata") or {}).get("namespace")
        if namespace not in namespaces:
            return None
        try:
            return pod_target(pod)
        except Exception:  # one odd pod must not stop discovery
            logger.exception("could not read pod %s", (pod.get("metadata") or {}).get("name"))
            return None

    def apply_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        pod = _to_dict(event.get("object"))
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        version = metadata.get("resourceVersion")
        with self._lock:
            namespaces = set(self._namespaces)
        target = None if kind == "DELETED" else self._target(pod, namespaces)
        with self._lock:
            if version:
                self._resource_version = str(version)
            if target is None:
                self._pods.pop(key, None)
            else:
                self._pods[key] = target

    # --- the loop ----------------------------------------------------------------------------------

    def watch_once(self) -> None:
        """Watch pods until the server ends the stream; raises on API errors (410 included)."""
        watch = self._watch_factory()
        self._watch = watch
        kwargs: dict[str, Any] = {"timeout_seconds": max(1, int(self.resync_s)), "allow_watch_bookmarks": True}
        if self._resource_version:
            kwargs["resource_version"] = self._resource_version
        if self.pod_selector:
            kwargs["label_selector"] = self.pod_selector
        for event in watch.stream(self.core.list_pod_for_all_namespaces, **kwargs):
            if self._stop.is_set():
                watch.stop()
                return
            kind = event.get("type")
            if kind == "ERROR":
                raw = event.get("raw_object") or event.get("object") or {}
                code = raw.get("code") if isinstance(raw, dict) else None
                raise _WatchError(code if isinstance(code, int) else None, str(raw))
            if kind == "BOOKMARK":
                version = (_to_dict(event.get("object")).get("metadata") or {}).get("resourceVersion")
                if version:
                    with self._lock:
                        self._resource_version = str(version)
                continue
            self.apply_event(event)

    def run(self, max_cycles: int | None = None) -> None:
        """Relist + watch until stopped (``max_cycles`` bounds it for tests)."""
        backoff = 1.0
        need_list = True
        cycles = 0
        while not self._stop.is_set() and (max_cycles is None or cycles < max_cycles):
            cycles += 1
            started = time.monotonic()
            try:
                if need_list:
                    self.relist()
                self.watch_once()
                need_list = True  # the stream ended normally: relist to refresh namespaces
                with self._lock:
                    self.watch_restarts += 1
                backoff = 1.0
                if time.monotonic() - started < 1.0:
                    self._sleep(1.0)  # a server that ends watches at once must not be hammered
            except Exception as error:
                status = _status(error)
                if status == 410:  # Gone: our resourceVersion is too old; relist now
                    self._count_error("expired")
                    with self._lock:
                        self.watch_restarts += 1
                        self._resource_version = None
                    need_list = True
                    continue
                self._count_error("api_error" if status is not None else "connection")
                logger.warning(
                    "discovery: %s (keeping %d known targets; retry in %.0f s)", error, len(self._pods), backoff
                )
                need_list = True
                self._sleep(backoff)
                backoff = min(self.max_backoff_s, backoff * 2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="kv-planner-discovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    # --- metrics -------------------------------------------------------------------------------------

    def families(self) -> Iterable[Metric]:
        errors = CounterMetricFamily(
            "kv_planner_discovery_errors", "Kubernetes API errors in discovery.", labels=["reason"]
        )
        with self._lock:
            for reason in ("api_error", "connection", "expired"):
                errors.add_metric([reason], float(self.errors.get(reason, 0)))
            restarts = float(self.watch_restarts)
            last = self.last_success
        restarts_family = CounterMetricFamily(
            "kv_planner_discovery_watch_restarts", "Pod watches that ended and were restarted."
        )
        restarts_family.add_metric([], restarts)
        out: list[Metric] = [errors, restarts_family]
        if last is not None:
            success = GaugeMetricFamily(
                "kv_planner_discovery_last_success_timestamp_seconds",
                "When the last successful pod list finished (Unix time).",
            )
            success.add_metric([], last)
            out.append(success)
        return out


class _WatchError(Exception):
    def __init__(self, status: int | None, detail: str) -> None:
        super().__init__(f"watch error {status}: {detail[:200]}")
        self.status = status


def _default_watch() -> WatchLike:
    result: WatchLike = new_watch()
    return result
