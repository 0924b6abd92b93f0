"""The Namespace/Node informer caches at their boundary: the real kubernetes client against a small
local server that speaks the API server's list + watch protocol (no cluster here)."""

from __future__ import annotations

import copy
import json
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import kubernetes
import pytest

from admission.webhook.app import Inventory
from admission.webhook.caches import KubernetesCache, _Informer
from planner.k8s.nodes import NodeInfo, node_info

NAMESPACES = [
    {
        "metadata": {
            "name": "ml",
            "labels": {"kv-planner.io/enabled": "true"},
            "annotations": {"kv-planner.io/mutation": "clamp"},
        }
    }
]
NODES = [
    {
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
        "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "48"}},
    }
]
EVENTS = {
    "namespaces": [
        {
            "type": "ADDED",
            "object": {
                "kind": "Namespace",
                "metadata": {
                    "name": "team-b",
                    "resourceVersion": "11",
                    "annotations": {"kv-planner.io/validation-action": "Enforce"},
                },
            },
        },
        {"type": "DELETED", "object": {"kind": "Namespace", "metadata": {"name": "ml", "resourceVersion": "12"}}},
    ],
    "nodes": [
        {
            "type": "ADDED",
            "object": {
                "kind": "Node",
                "metadata": {
                    "name": "gpu-2",
                    "resourceVersion": "11",
                    "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                },
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            },
        }
    ],
}


class _FakeApiServer(BaseHTTPRequestHandler):
    """List answers the current state; the first watch of a resource delivers EVENTS and applies them."""

    watches: ClassVar[list[str]] = []
    state: ClassVar[dict[str, dict[str, Any]]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        resource = url.path.rsplit("/", 1)[-1]
        query = parse_qs(url.query)
        if resource not in EVENTS:
            self.send_error(404)
            return
        state = _FakeApiServer.state.setdefault(
            resource, {i["metadata"]["name"]: i for i in (NAMESPACES if resource == "namespaces" else NODES)}
        )
        if query.get("watch") == ["true"]:
            first = not any(w.startswith(resource) for w in _FakeApiServer.watches)
            _FakeApiServer.watches.append(f"{resource}@{query.get('resourceVersion', ['?'])[0]}")
            events = EVENTS[resource] if first else []
            for event in events:
                name = event["object"]["metadata"]["name"]
                if event["type"] == "DELETED":
                    state.pop(name, None)
                else:
                    state[name] = event["object"]
            body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            time.sleep(0.2)  # then the watch ends, as a server-side timeout would end it
            return
        items = list(state.values())
        kind = "NamespaceList" if resource == "namespaces" else "NodeList"
        body = json.dumps(
            {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": items}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def api_server() -> Iterator[str]:
    _FakeApiServer.watches.clear()
    _FakeApiServer.state.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_list_then_watch_keeps_the_caches_current(api_server: str) -> None:
    configuration = kubernetes.client.Configuration()
    configuration.host = api_server
    cache = KubernetesCache(api_client=kubernetes.client.ApiClient(configuration))
    try:
        assert cache.wait_synced(10) and cache.ready()
        _wait(lambda: cache.namespace("team-b") is not None, "the watched namespace")
        _wait(lambda: cache.namespace("ml") is None, "the deleted namespace")
        assert cache.namespace("team-b") == {
            "labels": {},
            "annotations": {"kv-planner.io/validation-action": "Enforce"},
        }
        _wait(lambda: len(cache.nodes()) == 2, "the watched node")
        assert [n.name for n in cache.nodes()] == ["gpu-1", "gpu-2"]  # (by name, whatever the arrival order)
        assert cache.nodes_generation() >= 2  # (the list, then the watched node: the webhook re-reads)
        gpus = {n.name: n.gpus for n in cache.nodes()}
        assert gpus == {"gpu-1": {"nvidia.com/gpu": 4}, "gpu-2": {"nvidia.com/gpu": 8}}
        assert "namespaces@10" in _FakeApiServer.watches  # the watch resumed from the list's version
    finally:
        cache.stop()


def test_an_item_is_replaced_only_when_what_is_kept_of_it_changed() -> None:
    """An update to fields kv-planner does not keep (a Node's conditions), and the relist after each watch,
    keep the held object and the generation: the webhook's inventory keeps its version, so the node list
    (megabytes in a large cluster) is neither rebuilt nor sent to the workers again. A label change, a new
    node, a node dropped by a relist and a deletion are each a new version, pickled once."""
    informer = _Informer("nodes", lambda **_: None, node_info, threading.Event())

    class Nodes:
        def nodes(self) -> list[NodeInfo]:
            return list(informer.items().values())

        def nodes_generation(self) -> int:
            return informer.generation

    inventory = Inventory(Nodes())  # type: ignore[arg-type]
    node = copy.deepcopy(NODES[0])
    informer.relisted({"gpu-1": node_info(node)})
    version, encoded = inventory.for_worker(-1)
    assert encoded is not None and pickle.loads(encoded) == [node_info(node)]
    assert inventory.for_worker(-1) == (version, encoded) and inventory.for_worker(version) == (version, None)
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-07T08:00:00Z"}]
    node["metadata"]["resourceVersion"] = "12"
    informer.watched({"type": "MODIFIED", "raw_object": node})
    informer.relisted({"gpu-1": node_info(node)})
    informer.watched({"type": "DELETED", "raw_object": {"metadata": {"name": "never-seen"}}})
    assert inventory.for_worker(-1) == (version, encoded)  # (the same bytes object: pickled once)

    def names(known: int) -> list[str]:
        sent = inventory.for_worker(known)[1]
        return [] if sent is None else [n.name for n in pickle.loads(sent)]

    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-L40S"
    informer.watched({"type": "MODIFIED", "raw_object": node})
    assert inventory.current() == version + 1
    assert [n.labels["nvidia.com/gpu.product"] for n in pickle.loads(inventory.for_worker(version)[1] or b"")] == [
        "NVIDIA-L40S"
    ]
    other = {**node, "metadata": {**node["metadata"], "name": "gpu-2"}}
    informer.relisted({"gpu-1": node_info(node), "gpu-2": node_info(other)})
    assert inventory.current() == version + 2 and names(version) == ["gpu-1", "gpu-2"]
    informer.relisted({"gpu-2": node_info(other)})  # (a node gone while no watch ran)
    assert inventory.current() == version + 3 and names(version) == ["gpu-2"]
    informer.watched({"type": "DELETED", "raw_object": other})
    assert inventory.current() == version + 4 and names(version) == []
