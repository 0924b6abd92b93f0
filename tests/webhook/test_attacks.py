"""Attacks by a manifest author on the real webhook (uvicorn over TLS, decision workers), one per class
of docs/security.md. Each names the bound it checks; none asserts a latency (benchmarks measure those),
but every test runs under a pytest timeout far above the answer times, so a freeze fails it.

The victim is a review that Enforce must deny (KVP002: the context does not fit); an attack must never
turn that answer into an allow.
"""

from __future__ import annotations

import copy
import json
import logging
import socket
import ssl
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.webhook.attack_backends import (
    ATTACKER_MODEL,
    CRASHING_MODEL,
    SLEEPY_MODEL,
    CrashingForAttacker,
    EndlessForAttacker,
    SleepyForAttacker,
)
from tests.webhook.golden_cases import GOLDEN
from tests.webhook.serving import Running, post, start, wait_for

pytestmark = pytest.mark.timeout(120)

VICTIM = json.loads((GOLDEN / "deployment-context-too-long-enforce.in.json").read_text())["review"]
ENFORCE = "validationAction: Enforce\nmutation: fill\n"


def _review(namespace: str, uid: str, mutate: Any = None) -> dict[str, Any]:
    review = copy.deepcopy(VICTIM)
    request = review["request"]
    request["uid"], request["namespace"] = uid, namespace
    request["object"]["metadata"]["namespace"] = namespace
    if mutate is not None:
        mutate(request["object"])
    return review


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def _answer(client: httpx.Client, review: dict[str, Any], timeout: str = "5s") -> dict[str, Any]:
    response = post(client, review, f"/mutate?timeout={timeout}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["response"]
    assert body["uid"] == review["request"]["uid"]
    return body


def _assert_victim_denied(body: dict[str, Any]) -> None:
    assert body["allowed"] is False
    assert body["status"]["message"].startswith("kv-planner: KVP002"), body


@pytest.fixture
def enforcing(tmp_path: Path) -> Iterator[Running]:
    # The API server's own request limit is 3 MiB: attacks up to that size reach the webhook.
    yield from start(tmp_path, backend=EndlessForAttacker, policy_text=ENFORCE, body_limit=3 * 2**20)


def test_an_overrunning_review_does_not_change_another_tenants_decision(enforcing: Running) -> None:
    """Before: one decision thread, and a review kept running past its deadline, so the next review (the
    victim's) came back "allowed unchecked" (KVP049): an Enforce deny became an allow."""

    def attacker(obj: dict[str, Any]) -> None:
        _container(obj)["args"][0] = ATTACKER_MODEL

    with enforcing.client() as client, ThreadPoolExecutor(4) as pool:
        attacks = [pool.submit(_answer, client, _review("tenant-a", f"attack-{i}", attacker)) for i in range(3)]
        wait_for(lambda: enforcing.webhook.pool.alive() >= 1, "workers")
        victim = pool.submit(_answer, client, _review("tenant-b", "victim"))
        health = pool.submit(client.get, "/healthz", timeout=5.0)
        _assert_victim_denied(victim.result())
        assert health.result().text == "ok"
        for attack in attacks:
            body = attack.result()
            # Enforce + onTimeout: deny (the default): the attacker is denied, not waved through.
            assert body["allowed"] is False and body["status"]["message"].startswith("kv-planner: KVP051"), body
        # The killed workers were replaced: the victim is still answered correctly afterwards.
        wait_for(lambda: enforcing.webhook.pool.alive() == enforcing.webhook.settings.workers, "replacement workers")
        _assert_victim_denied(_answer(client, _review("tenant-b", "victim-2")))
    metrics = httpx.get(enforcing.metrics_url).text
    assert 'kv_planner_webhook_worker_restarts_total{reason="overrun"}' in metrics
    assert 'kv_planner_webhook_unchecked_total{code="KVP051"' in metrics


def test_audit_stays_fail_open_on_timeout(tmp_path: Path) -> None:
    def attacker(obj: dict[str, Any]) -> None:
        _container(obj)["args"][0] = ATTACKER_MODEL

    for handle in start(tmp_path, backend=EndlessForAttacker, policy_text="validationAction: Audit\n"):
        with handle.client() as client:
            body = _answer(client, _review("tenant-a", "attack", attacker), timeout="1s")
        assert body["allowed"] is True and "patch" not in body
        assert body["warnings"][0].startswith("KVP051 "), body


def _deny_code(body: dict[str, Any]) -> str:
    assert body["allowed"] is False, body
    return str(body["status"]["message"].split(" ")[1])


def _gpu_annotation(value: str) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"] = {"kv-planner.io/gpu": value}

    return mutate


def _node_selector(value: str) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": value}

    return mutate


def _nested_env(levels: int) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        env = [{"name": "V0", "value": "x" * 1000}]
        env += [{"name": f"V{i}", "value": f"$(V{i - 1})$(V{i - 1})"} for i in range(1, levels)]
        _container(obj)["env"] = env
        _container(obj)["args"].append(f"--served-model-name=$(V{levels - 1})")

    return mutate


def _many_containers(count: int) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        containers = obj["spec"]["template"]["spec"]["containers"]
        containers.extend({**copy.deepcopy(containers[0]), "name": f"vllm-{i}"} for i in range(count))

    return mutate


def _many_args(count: int) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        _container(obj)["args"] += ["--disable-log-requests"] * count

    return mutate


def _long_arg(length: int) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        _container(obj)["args"] += ["--served-model-name", "m" * length]

    return mutate


def _deep(levels: int) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        value: dict[str, Any] = {}
        for _ in range(levels):
            value = {"a": value}
        obj["spec"]["template"]["metadata"]["labels"] = {"app": "llm"}
        obj["spec"]["template"]["spec"]["affinity"] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        # Catastrophic backtracking in GPU-name matching froze the whole webhook for seconds to minutes.
        (_gpu_annotation("-" * 12_000), "KVP073"),
        (_gpu_annotation(" " * 12_000 + "x"), "KVP073"),
        (_node_selector("-" * 12_000), "KVP072"),
        (_node_selector(" " * 200_000 + "x"), "KVP072"),
        # Nested $(VAR) references expanded to hundreds of MB.
        (_nested_env(17), "KVP074"),
        # 2,000 vLLM containers kept the decision thread busy for > 30 s.
        (_many_containers(2_000), "KVP070"),
        (_many_args(5_000), "KVP071"),
        (_long_arg(100_000), "KVP072"),
        (_deep(200), "KVP076"),
    ],
    ids=[
        "gpu-annotation-dashes",
        "gpu-annotation-spaces",
        "node-selector-dashes",
        "node-selector-200k-spaces",
        "nested-env-expansion",
        "2000-containers",
        "5000-args",
        "100k-argument",
        "200-levels-deep",
    ],
)
def test_input_over_a_cap_is_denied_under_enforce_and_the_victim_still_is(
    enforcing: Running, mutate: Any, code: str
) -> None:
    with enforcing.client() as client, ThreadPoolExecutor(2) as pool:
        attack = pool.submit(_answer, client, _review("tenant-a", "attack", mutate), "10s")
        victim = pool.submit(_answer, client, _review("tenant-b", "victim"))
        assert _deny_code(attack.result()) == code
        _assert_victim_denied(victim.result())


def test_a_malformed_object_is_no_internal_error(enforcing: Running) -> None:
    """Before: ``metadata.annotations`` as a string and a 5,000-character model name ended in KVP049."""

    def string_annotations(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"] = "not a map"
        obj["spec"]["template"]["metadata"]["annotations"] = "not a map either"

    def long_model(obj: dict[str, Any]) -> None:
        _container(obj)["args"][0] = "org/" + "m" * 5_000

    with enforcing.client() as client:
        body = _answer(client, _review("tenant-a", "strings", string_annotations))
        _assert_victim_denied(body)  # the annotations are ignored; the workload is still checked
        assert _deny_code(_answer(client, _review("tenant-a", "long", long_model))) == "KVP075"
    metrics = httpx.get(enforcing.metrics_url).text
    assert "kv_planner_webhook_unchecked_total{" not in metrics


def _half_request(running: Running) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(running.ca_file))
    raw = socket.create_connection(("127.0.0.1", running.webhook.settings.port))
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n")
    return tls


def test_half_sent_requests_do_not_lock_out_reviews(tmp_path: Path) -> None:
    """Before: 260 connections that sent half a header made every real review a 503."""
    for handle in start(tmp_path, policy_text=ENFORCE, max_connections=100):
        sockets = [_half_request(handle) for _ in range(260)]
        try:
            with handle.client() as client:
                _assert_victim_denied(_answer(client, _review("tenant-b", "victim")))
                assert client.get("/healthz", timeout=5.0).text == "ok"
        finally:
            for sock in sockets:
                sock.close()
        assert 'kv_planner_webhook_connections_dropped_total{reason="excess"}' in httpx.get(handle.metrics_url).text


def test_a_slow_client_is_dropped(tmp_path: Path) -> None:
    for handle in start(tmp_path, policy_text=ENFORCE, request_timeout=1.0):
        sock = _half_request(handle)
        sock.settimeout(60)
        with sock:
            # The server closes the connection (EOF) instead of waiting for the rest of the header.
            assert sock.recv(1024) == b""
        assert 'kv_planner_webhook_connections_dropped_total{reason="slow"}' in httpx.get(handle.metrics_url).text


def test_a_client_that_disconnects_mid_body_leaves_no_traceback(
    enforcing: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sock = _half_request(enforcing)
    sock.sendall(b"Content-Length: 100000\r\n\r\n" + b'{"apiVersion": ' + b" " * 1000)
    server = enforcing.webhook._running[0]
    wait_for(lambda: any(c.answering() for c in server.server_state.connections), "the request to reach the app")
    sock.close()
    with enforcing.client() as client:
        _assert_victim_denied(_answer(client, _review("tenant-b", "victim")))
    wait_for(lambda: 'reason="disconnected"' in httpx.get(enforcing.metrics_url).text, "the disconnect")
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def test_metrics_listener_follows_host(tmp_path: Path) -> None:
    """Before: the metrics port bound 0.0.0.0 whatever --host said."""
    from admission.webhook.server import Webhook, WebhookSettings

    for handle in start(tmp_path):
        settings = WebhookSettings(**{**handle.webhook.settings.model_dump(), "metrics_host": None})
        _, metrics = Webhook(settings).servers()
        assert metrics.config.host == "127.0.0.1"


def test_tls_1_3_only_and_aead_only_tls_1_2(tmp_path: Path) -> None:
    for handle in start(tmp_path, tls_min_version="1.3"):
        client = ssl.create_default_context(cafile=str(handle.ca_file))
        client.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", handle.webhook.settings.port)) as raw, pytest.raises(ssl.SSLError):
            client.wrap_socket(raw, server_hostname="127.0.0.1")
    for handle in start(tmp_path / "v12" if (tmp_path / "v12").mkdir() is None else tmp_path):
        offered = {c["name"] for c in handle.webhook.tls.context.get_ciphers() if c["protocol"] == "TLSv1.2"}
        assert offered and all(("GCM" in n or "CHACHA20" in n) and n.startswith("ECDHE") for n in offered)
        cbc = ssl.create_default_context(cafile=str(handle.ca_file))
        cbc.maximum_version = ssl.TLSVersion.TLSv1_2
        cbc.set_ciphers("ECDHE-RSA-AES128-SHA256:ECDHE-RSA-AES256-SHA")  # CBC suites only
        with socket.create_connection(("127.0.0.1", handle.webhook.settings.port)) as raw, pytest.raises(ssl.SSLError):
            cbc.wrap_socket(raw, server_hostname="127.0.0.1")


def test_request_bytes_held_at_once_are_bounded(tmp_path: Path) -> None:
    """Each connection may send up to the body limit; together they may not hold more than the bound."""
    for handle in start(tmp_path, policy_text=ENFORCE, body_limit=3 * 2**20, max_pending_bytes=2**20):
        with handle.client() as client:
            big = _review("tenant-a", "big")
            big["request"]["object"]["metadata"]["labels"]["padding"] = "x" * (2**20 + 1)
            response = post(client, big, "/mutate?timeout=2s")
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            _assert_victim_denied(_answer(client, _review("tenant-b", "victim")))  # the bytes were given back
        assert 'kv_planner_webhook_rejected_requests_total{reason="busy"} 1.0' in httpx.get(handle.metrics_url).text


def test_a_starved_review_is_answered_but_its_worker_is_kept(tmp_path: Path) -> None:
    """A review that is slow without burning CPU (a starved machine) is answered KVP051 in time, and its
    worker is not killed: it finishes, drops the answer and serves the next review."""

    def sleepy(obj: dict[str, Any]) -> None:
        _container(obj)["args"][0] = SLEEPY_MODEL

    for handle in start(tmp_path, backend=SleepyForAttacker, policy_text="validationAction: Audit\n", workers=1):
        with handle.client() as client:
            body = _answer(client, _review("tenant-a", "sleepy", sleepy), timeout="1s")
            assert body["allowed"] is True and body["warnings"][0].startswith("KVP051 "), body
            # The only worker comes back once it has finished: the next review is decided, not undecided.
            later = _answer(client, _review("tenant-b", "after"), timeout="10s")
            assert later["allowed"] is True and not later["warnings"][0].startswith("KVP051"), later
        metrics = httpx.get(handle.metrics_url).text
        assert 'reason="starved"' in metrics
        assert "kv_planner_webhook_worker_restarts_total{" not in metrics


def test_the_log_line_of_an_internal_error_says_what_went_wrong() -> None:
    from admission.webhook.app import _warning_with

    body = json.dumps(
        {
            "response": {
                "warnings": [
                    "KVP020 vllm: added --max-model-len 8192",
                    "KVP049 could not read the object (TypeError): allowed",
                ]
            }
        }
    ).encode()
    assert _warning_with(body, "KVP049") == "KVP049 could not read the object (TypeError): allowed"
    assert _warning_with(b"not json", "KVP049") == "no detail in the answer"


def test_a_worker_that_dies_mid_review_is_replaced_and_no_answer_is_lost(tmp_path: Path) -> None:
    """The worker's process ends while it decides (a native crash, the OOM killer): that review is allowed
    unchecked (KVP049, kv-planner's failure, never a deny), the worker is replaced, and every review after
    it, on the replacement too, is decided."""

    def crash(obj: dict[str, Any]) -> None:
        _container(obj)["args"][0] = CRASHING_MODEL

    for handle in start(tmp_path, backend=CrashingForAttacker, policy_text=ENFORCE, workers=1):
        with handle.client() as client:
            body = _answer(client, _review("tenant-a", "crash", crash))
            assert body["allowed"] is True and body["warnings"][0].startswith("KVP049 "), body
            for i in range(3):  # (the only worker's replacement takes over: each answer is a decision)
                _assert_victim_denied(_answer(client, _review("tenant-b", f"victim-{i}"), timeout="10s"))
        metrics = httpx.get(handle.metrics_url).text
        assert 'kv_planner_webhook_worker_restarts_total{reason="failed"} 1.0' in metrics


def test_a_worker_past_its_memory_bound_is_replaced_after_its_answer(tmp_path: Path) -> None:
    """``--worker-max-memory`` below any worker's size: every worker is replaced after each review, and
    every review is still decided (the bound costs restarts, never answers)."""
    for handle in start(tmp_path, policy_text=ENFORCE, workers=1, worker_max_rss=1):
        with handle.client() as client:
            for i in range(3):
                _assert_victim_denied(_answer(client, _review("tenant-a", f"victim-{i}"), timeout="10s"))
        metrics = httpx.get(handle.metrics_url).text
        assert 'kv_planner_webhook_worker_restarts_total{reason="memory"} 3.0' in metrics
