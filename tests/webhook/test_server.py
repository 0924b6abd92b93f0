"""The webhook process over real TLS: uvicorn serving the real app on 127.0.0.1 with a test CA.

Covers the HTTP contract (400/413 for bad input, never 500, ?timeout= honoured), /healthz, /readyz,
/metrics on its own plain port, TLS 1.2 minimum (a TLS 1.1 client is refused by the server), certificate
reload when the files change, and policy reload.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.webhook.handler import Reviewer, namespace_of, parse_review
from planner.policy.model import parse_policy
from planner.policy.planning import CoreBackend
from tests.webhook.golden_cases import GOLDEN
from tests.webhook.serving import Running, issue, post, running, start, wait_for

REVIEW = json.loads((GOLDEN / "deployment-image-args.in.json").read_text())["review"]
__all__ = ["running"]  # the fixture


def test_mutate_over_tls_and_metrics(running: Running) -> None:
    with running.client() as client:
        assert client.get("/healthz").text == "ok"
        response = post(client, REVIEW, "/mutate?timeout=10s")
        assert response.status_code == 200
        body = response.json()["response"]
        assert body["uid"] == REVIEW["request"]["uid"] and body["allowed"] and body["patchType"] == "JSONPatch"
        validate = post(client, REVIEW, "/validate").json()["response"]
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
        response = post(client, body, headers=headers)
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
        end = time.monotonic() + 3
        while time.monotonic() < end:  # a runaway planning step burns CPU (a sleep would count as starved)
            sum(range(1000))
        return super().plan(*args, **kwargs)


@pytest.mark.slow
def test_timeout_is_honoured_and_fails_open(tmp_path: Path) -> None:
    for handle in start(tmp_path, backend=_Slow):
        with handle.client() as client:
            started = time.monotonic()
            response = post(client, REVIEW, "/mutate?timeout=1s")
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


def _tls_reloads(running: Running) -> float:
    for family in text_string_to_metric_families(httpx.get(running.metrics_url).text):
        for sample in family.samples:
            if sample.name == "kv_planner_webhook_reloads_total" and sample.labels == {"file": "tls", "result": "ok"}:
                return sample.value
    return 0.0


def test_certificate_reload_when_files_change(running: Running) -> None:
    assert _served_common_name(running) == "server"
    cert_file, key_file = issue(running.ca, running.tmp, "rotated")
    shutil.copy(key_file, running.tmp / "tls.key.new")
    shutil.copy(cert_file, running.tmp / "tls.crt.new")
    # Replace both files atomically, as the kubelet swaps a Secret volume.
    (running.tmp / "tls.key.new").replace(running.tmp / "tls.key")
    (running.tmp / "tls.crt.new").replace(running.tmp / "tls.crt")
    wait_for(lambda: _served_common_name(running) == "rotated", "the rotated certificate")
    # (the reload loop counts a reload just after the new chain is in force: a handshake can see the new
    # certificate a moment before the counter moves)
    wait_for(lambda: _tls_reloads(running) >= 1, "the reload counted")
    # A broken rotation keeps the last good certificate.
    (running.tmp / "tls.crt").write_text("not a certificate")
    time.sleep(0.5)
    assert _served_common_name(running) == "rotated"


def test_policy_reload(running: Running) -> None:
    with running.client() as client:
        assert "patch" in post(client, REVIEW).json()["response"]
        (running.tmp / "policy.yaml").write_text("mutation: 'off'\n")
        wait_for(lambda: running.webhook.policy.policy.mutation == "off", "the policy reload")
        assert "patch" not in post(client, REVIEW).json()["response"]
        (running.tmp / "policy.yaml").write_text("mutation: [broken\n")  # a bad file keeps the old policy
        wait_for(lambda: running.webhook.policy.last_error is not None, "the failed reload")
        assert running.webhook.policy.policy.mutation == "off"


def test_the_server_answers_exactly_what_the_reviewer_does(running: Running) -> None:
    """The workers plan with the fork server's warmed backend (shared memos, reviews routed by workload):
    every golden review gets, byte for byte, the answer of a fresh in-process reviewer, twice over."""
    reviewer = Reviewer(backend=CoreBackend())
    policy = parse_policy({"mutation": "fill"})
    with running.client() as client:
        for path in sorted(GOLDEN.glob("*.in.json")):
            review = json.loads(path.read_text())["review"]
            request = parse_review(json.dumps(review).encode()).request
            namespace = request.namespace or namespace_of(request.object or {})
            decision = reviewer.decide(request, policy.for_namespace(namespace), [])
            expected = reviewer.respond(request, "mutate", decision).body
            for _ in range(2):
                assert post(client, review, "/mutate?timeout=10s").content == expected, path.name
