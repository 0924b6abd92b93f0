"""A real webhook for tests: uvicorn over TLS on 127.0.0.1 with a test CA, decision workers and all."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from admission.webhook.caches import StaticCache
from admission.webhook.server import Webhook, WebhookSettings
from admission.webhook.worker import shared_backend
from tests.webhook.golden_cases import GOLDEN

REVIEW = json.loads((GOLDEN / "deployment-image-args.in.json").read_text())["review"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Running:
    def __init__(self, webhook: Webhook, ca: trustme.CA, tmp: Path) -> None:
        self.webhook, self.ca, self.tmp = webhook, ca, tmp
        self.url = f"https://127.0.0.1:{webhook.settings.port}"
        self.metrics_url = f"http://127.0.0.1:{webhook.settings.metrics_port}/metrics"
        self.ca_file = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, verify=ssl.create_default_context(cafile=str(self.ca_file)), timeout=10.0
        )


def issue(ca: trustme.CA, tmp: Path, name: str = "server") -> tuple[Path, Path]:
    cert = ca.issue_cert("127.0.0.1", "localhost", common_name=name)
    cert_file, key_file = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    return cert_file, key_file


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    yield from start(tmp_path)


def start(
    tmp_path: Path, backend: Any = shared_backend, policy_text: str = "mutation: fill\n", **overrides: Any
) -> Iterator[Running]:
    ca = trustme.CA()
    cert_file, key_file = issue(ca, tmp_path)
    shutil.copy(cert_file, tmp_path / "tls.crt")
    shutil.copy(key_file, tmp_path / "tls.key")
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text)
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": free_port(),
        "metrics_host": "127.0.0.1",
        "metrics_port": free_port(),
        "tls_cert_file": str(tmp_path / "tls.crt"),
        "tls_key_file": str(tmp_path / "tls.key"),
        "policy_file": str(policy),
        "reload_interval": 0.1,
        "cluster": False,
        "log_level": "warning",
        "body_limit": 256 * 1024,
        # Tests run on shared, loaded machines: only the tests about budgets use a short one (?timeout=).
        "review_budget": 8.0,
        "workers": 2,  # (fewer processes to start on a loaded machine; the share rule is the same)
    }
    settings = WebhookSettings(**{**values, **overrides})
    webhook = Webhook(settings, cache=StaticCache(), backend_factory=backend)
    thread = threading.Thread(target=lambda: asyncio.run(webhook.serve()), daemon=True)
    thread.start()
    handle = Running(webhook, ca, tmp_path)
    with handle.client() as client:

        def ready() -> bool:
            try:
                return client.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        # Generous: a loaded CI machine forks the fork server, loads the catalogs and warms every worker.
        wait_for(ready, "the webhook to become ready", timeout=180.0)
    try:
        yield handle
    finally:
        webhook.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()


def post(client: httpx.Client, body: Any, path: str = "/mutate", **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **kw.pop("headers", {})}
    return client.post(path, content=content, headers=headers, **kw)
