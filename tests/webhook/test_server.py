"""The webhook process over real TLS: uvicorn serving the real app on 127.0.0.1 with a test CA.

Covers the HTTP contract (400/413 for bad input, never 500, ?timeout= honoured), /healthz, /readyz,
/metrics on its own plain port, TLS 1.2 minimum (a TLS 1.1 client is refused by the server), certificate
reload when the files change, and policy reload.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from admission.webhook.caches import StaticCache
from admission.webhook.server import Webhook, WebhookSettings
from planner.policy.planning import CoreBackend
from tests.webhook.golden_cases import GOLDEN

REVIEW = json.loads((GOLDEN / "deployment-image-args.in.json").read_text())["review"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
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


def _issue(ca: trustme.CA, tmp: Path, name: str = "server") -> tuple[Path, Path]:
    cert = ca.issue_cert("127.0.0.1", "localhost", common_name=name)
    cert_file, key_file = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    return cert_file, key_file


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    yield from _start(tmp_path)


def _start(
    tmp_path: Path, backend: Any = CoreBackend, policy_text: str = "mutation: fill\n", **overrides: Any
) -> Iterator[Running]:
    ca = trustme.CA()
    cert_file, key_file = _issue(ca, tmp_path)
    shutil.copy(cert_file, tmp_path / "tls.crt")
    shutil.copy(key_file, tmp_path / "tls.key")
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text)
    settings = WebhookSettings(
        host="127.0.0.1",
        port=_free_port(),
        metrics_host="127.0.0.1",
        metrics_port=_free_port(),
        tls_cert_file=str(tmp_path / "tls.crt"),
        tls_key_file=str(tmp_path / "tls.key"),
        policy_file=str(policy),
        reload_interval=0.1,
        cluster=False,
        log_level="warning",
        body_limit=256 * 1024,
        **overrides,
    )
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

        _wait(ready, "the webhook to become ready")
    try:
        yield handle
    finally:
        webhook.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()


def _post(client: httpx.Client, body: Any, path: str = "/mutate", **kw: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **kw.pop("headers", {})}
    return client.post(path, content=content, headers=headers, **kw)


def test_mutate_over_tls_and_metrics(running: Running) -> None:
    with running.client() as client:
        assert client.get("/healthz").text == "ok"
        response = _post(client, REVIEW, "/mutate?timeout=10s")
        assert response.status_code == 200
        body = response.json()["response"]
        assert body["uid"] == REVIEW["request"]["uid"] and body["allowed"] and body["patchType"] == "JSONPatch"
        validate = _post(client, REVIEW, "/validate").json()["response"]
        assert validate["allowed"] and "patch" not in validate
    metrics = httpx.get(running.metrics_url).text
    assert 'kv_planner_webhook_requests_total{decision="mutate",endpoint="mutate"} 1.0' in metrics
    assert 'kv_planner_webhook_request_duration_seconds_count{decision="mutate",endpoint="mutate"} 1.0' in metrics
    with pytest.raises(httpx.HTTPError):  # metrics are not served on the TLS port
        httpx.get(running.url.replace("https", "http") + "/metrics", timeout=2)


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"", {}, 400),
        (b"{not json", {}, 400),
        (b"[]", {}, 400),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": REVIEW["request"]}
            ).encode(),
            {},
            400,
        ),
        (json.dumps({**REVIEW, "request": {**REVIEW["request"], "uid": ""}}).encode(), {}, 400),
        (json.dumps({**REVIEW, "request": {**REVIEW["request"], "operation": "PATCH"}}).encode(), {}, 400),
        (b"[" * 100_000 + b"]" * 100_000, {}, 400),  # deep nesting: no RecursionError 500
        (json.dumps(REVIEW).encode(), {"content-type": "text/plain"}, 400),
        (b"x" * (300 * 1024), {}, 413),
    ],
)
def test_bad_requests_are_4xx_never_5xx(running: Running, body: bytes, headers: dict[str, str], status: int) -> None:
    with running.client() as client:
        response = _post(client, body, headers=headers)
        assert response.status_code == status
        assert "error" in response.json()


def test_chunked_body_over_the_limit_is_413(running: Running) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * 8192

    with running.client() as client:
        response = client.post("/mutate", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413


class _Slow(CoreBackend):
    def plan(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(3)
        return super().plan(*args, **kwargs)


def test_timeout_is_honoured_and_fails_open(tmp_path: Path) -> None:
    for handle in _start(tmp_path, backend=_Slow):
        with handle.client() as client:
            started = time.monotonic()
            response = _post(client, REVIEW, "/mutate?timeout=1s")
            elapsed = time.monotonic() - started
        body = response.json()["response"]
        assert response.status_code == 200 and body["allowed"] and "patch" not in body
        assert body["warnings"][0].startswith("KVP051 review took longer than")
        assert elapsed < 3  # answered before the slow plan finished
        metrics = httpx.get(handle.metrics_url).text
        assert 'decision="timeout-allow"' in metrics
        assert 'kv_planner_webhook_worker_restarts_total{reason="overrun"} 1.0' in metrics


def test_tls_1_1_is_refused_and_1_2_accepted(running: Running) -> None:
    assert running.webhook.tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    port = running.webhook.settings.port
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
        old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
    # The same client does speak TLS 1.1 to a server that allows it, so a failure below is the webhook's.
    assert _tls11_server_accepts(old, running) == "TLSv1.1"
    with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLError) as refused:
        old.wrap_socket(raw)
    assert isinstance(refused.value, ssl.SSLEOFError) or "PROTOCOL_VERSION" in str(refused.value).upper()
    modern = ssl.create_default_context(cafile=str(running.ca_file))
    modern.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        modern.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.2"


def _tls11_server_accepts(client: ssl.SSLContext, running: Running) -> str | None:
    """Handshake ``client`` with a throwaway server that permits TLS 1.0+; the version agreed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = ssl.TLSVersion.TLSv1
        server.set_ciphers("DEFAULT:@SECLEVEL=0")
    server.load_cert_chain(running.tmp / "server.crt", running.tmp / "server.key")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(10)

        def accept() -> None:
            conn, _ = listener.accept()
            with conn, server.wrap_socket(conn, server_side=True):
                pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        with socket.create_connection(listener.getsockname()) as raw, client.wrap_socket(raw) as tls:
            version = tls.version()
        thread.join(timeout=10)
    return version


def _served_common_name(running: Running) -> str:
    context = ssl.create_default_context(cafile=str(running.ca_file))
    with (
        socket.create_connection(("127.0.0.1", running.webhook.settings.port)) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cert = tls.getpeercert()
    subject = dict(item[0] for item in cert["subject"])
    return str(subject["commonName"])


def test_certificate_reload_when_files_change(running: Running) -> None:
    assert _served_common_name(running) == "server"
    cert_file, key_file = _issue(running.ca, running.tmp, "rotated")
    shutil.copy(key_file, running.tmp / "tls.key.new")
    shutil.copy(cert_file, running.tmp / "tls.crt.new")
    # Replace both files atomically, as the kubelet swaps a Secret volume.
    (running.tmp / "tls.key.new").replace(running.tmp / "tls.key")
    (running.tmp / "tls.crt.new").replace(running.tmp / "tls.crt")
    _wait(lambda: _served_common_name(running) == "rotated", "the rotated certificate")
    assert 'kv_planner_webhook_reloads_total{file="tls",result="ok"}' in httpx.get(running.metrics_url).text
    # A broken rotation keeps the last good certificate.
    (running.tmp / "tls.crt").write_text("not a certificate")
    time.sleep(0.5)
    assert _served_common_name(running) == "rotated"


def test_policy_reload(running: Running) -> None:
    with running.client() as client:
        assert "patch" in _post(client, REVIEW).json()["response"]
        (running.tmp / "policy.yaml").write_text("mutation: 'off'\n")
        _wait(lambda: running.webhook.policy.policy.mutation == "off", "the policy reload")
        assert "patch" not in _post(client, REVIEW).json()["response"]
        (running.tmp / "policy.yaml").write_text("mutation: [broken\n")  # a bad file keeps the old policy
        _wait(lambda: running.webhook.policy.last_error is not None, "the failed reload")
        assert running.webhook.policy.policy.mutation == "off"
