"""Hostile and broken targets (issue 11 item 5, issue 15 item 2): each one is down with its reason,
bounded in what it costs, and the other targets are unaffected."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from admission.exporter.quantiles import histogram_quantile, token_upper_bound
from admission.exporter.service import Exporter, ScrapeSettings, unique_targets
from admission.observations.model import TargetObservation
from admission.observations.targets import Target, parse_static_target
from tests.exporter.conftest import PAGES
from tests.exporter.test_scrape import _exporter, _samples, _target

GOOD = next(p for p in PAGES if p.release == "0.33.0").text
RUNNING = 'vllm:num_requests_running{engine="%d",model_name="%s"} 1\n'


def _hostile(name: str) -> str | bytes:
    if name == "series":  # 400,000 series in a ~13 MB page (issue 11), each a new engine
        return "".join(RUNNING % (i, "m") for i in range(400_000))
    if name == "engines":  # few samples, but more engines than any deployment has
        return "".join(RUNNING % (i, "m") for i in range(200))
    if name == "label":
        return RUNNING % (0, "x" * 100_000)
    if name == "type":  # promtool: "second TYPE line for metric name"
        return GOOD + "# TYPE vllm:num_requests_running counter\n"
    if name == "noise":  # a big page of families kv-planner does not read: only the vLLM ones matter
        return GOOD + "".join(f'other_metric{{id="{i}"}} {i}\n' for i in range(50_000))
    if name == "labels":  # one sample with 200 empty labels (460,000 of them held ~360 MiB)
        return "vllm:num_requests_running{" + ",".join(f'a{i}=""' for i in range(200)) + "} 1\n"
    if name == "pairs":  # under the sample bound, but 19,000 x 14 labels
        extra = ",".join(f'x{j}="v"' for j in range(13))
        return "".join(f'vllm:num_requests_running{{engine="{i % 8}",{extra},i="{i}"}} 1\n' for i in range(19_000))
    if name == "nan":  # one engine's prompt-length histogram is not made of counts
        bucket = 'vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="'
        return (
            "\n".join(
                line.rsplit(" ", 1)[0] + " NaN" if line.startswith(bucket) else line for line in GOOD.splitlines()
            )
            + "\n"
        )
    return GOOD


async def _handler(request: httpx.Request) -> httpx.Response:
    body = _hostile(request.url.host)
    return httpx.Response(200, content=body.encode() if isinstance(body, str) else body)


def test_each_bound_marks_only_its_target_down() -> None:
    names = ["good", "series", "engines", "label", "type", "noise", "labels", "pairs", "nan"]
    exporter = _exporter([_target(n) for n in names], _handler, max_body_bytes=32 << 20)
    snapshot = asyncio.run(exporter.snapshot(30.0))
    state = {o.target.pod: (o.up, o.error) for o in snapshot.targets}
    assert state == {
        "good": (True, None),
        "noise": (True, None),
        "series": (False, "too_many_series"),
        "engines": (False, "too_many_series"),
        "label": (False, "label_too_long"),
        "type": (False, "parse"),
        "labels": (False, "too_many_series"),
        "pairs": (False, "too_many_series"),
        "nan": (True, None),  # up: its other signals are good; the NaN histogram alone is left out
    }
    details = {o.target.pod: o.detail or "" for o in snapshot.targets}
    assert "20000 samples" in details["series"] and "64 engines" in details["engines"]
    assert "128 labels" in details["labels"] and "250000 labels" in details["pairs"]
    (nan,) = [o for o in snapshot.targets if o.target.pod == "nan"]
    assert nan.engines[0].prompt_tokens is None and nan.engines[0].generation_tokens is not None
    assert "TYPE" in details["type"]
    body = _samples(asyncio.run(exporter.render(30.0))[0].decode())
    # Nothing of the hostile pages reaches the output: no label value longer than a Kubernetes name.
    assert max(len(v) for samples in body.values() for labels, _ in samples for v in labels.values()) <= 253
    engines = {labels["pod"]: labels["engine"] for labels, _ in body["kv_planner_requests_running"]}
    assert set(engines) == {"good", "noise", "nan"}
    prompts = {labels["pod"] for labels, _ in body["kv_planner_prompt_tokens_quantile_count"]}
    assert prompts == {"good", "noise"}  # the NaN histogram rendered nothing (it made every scrape a 500)


def test_a_compressed_body_is_refused_and_none_is_asked_for() -> None:
    import gzip

    asked: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("accept-encoding", ""))
        if request.url.host == "bomb":  # 1 MiB that inflates to 1 GiB, sent although nobody asked for it
            return httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=gzip.compress(b" " * (64 << 20)))
        return httpx.Response(200, text=GOOD)

    snapshot = asyncio.run(_exporter([_target("bomb"), _target("good")], handler).snapshot(30.0))
    assert [(o.target.pod, o.up, o.error) for o in snapshot.targets] == [("bomb", False, "parse"), ("good", True, None)]
    assert "Content-Encoding 'gzip'" in (snapshot.targets[0].detail or "")
    assert set(asked) == {"identity"}


def test_a_page_read_past_its_targets_time_is_down_and_the_read_gives_way() -> None:
    # ~4.9 MB under every read bound: ~0.25 s of reading here (a healthy page: ~2 ms).
    big = "".join(RUNNING % (i % 8, f"{i}" + "m" * 200) for i in range(19_000))

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=big if request.url.host == "slow" else GOOD)

    async def read(timeout_s: float) -> tuple[list[TargetObservation], int]:
        ticks = 0

        async def ticker() -> None:  # runs only when the read gives the loop back
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        exporter = _exporter(
            [_target("slow")],
            handler,
            max_body_bytes=8 << 20,
            scrape_timeout_s=timeout_s,
            scrape_timeout_max_s=timeout_s,
        )
        snapshot = await exporter.snapshot(30.0)
        task.cancel()
        return snapshot.targets, ticks

    (whole,), ticks = asyncio.run(read(30.0))
    assert whole.up and ticks > 10  # the loop ran between the slices of the read (~0.25 s in 2 ms slices)
    # The read is part of the target's time: past it, the target is down (the page had arrived).
    (cut,), _ = asyncio.run(read(0.02))
    assert (cut.up, cut.error) == (False, "timeout") and "not read within" in (cut.detail or ""), cut.detail


def test_the_default_body_bound_refuses_a_13_mb_page() -> None:
    exporter = _exporter([_target("series"), _target("good")], _handler)
    snapshot = asyncio.run(exporter.snapshot(30.0))
    assert [(o.target.pod, o.up, o.error) for o in snapshot.targets] == [
        ("good", True, None),
        ("series", False, "too_large"),
    ]


def test_a_declared_oversize_body_is_refused_before_it_is_read() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Length": str(1 << 30)}, content=b"")

    snapshot = asyncio.run(_exporter([_target("big")], handler).snapshot(5.0))
    assert snapshot.targets[0].error == "too_large" and "Content-Length" in (snapshot.targets[0].detail or "")


def test_state_changes_are_logged_once_with_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    failing = {"flaky": True}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "flaky" and failing["flaky"]:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, text=GOOD)

    exporter = _exporter([_target("flaky"), _target("good")], handler)
    caplog.set_level(logging.INFO, logger="admission.exporter.targets")
    for flaky in (True, True, False, False, True):
        failing["flaky"] = flaky
        asyncio.run(exporter.snapshot(5.0))
    lines = [r.getMessage() for r in caplog.records if r.name == "admission.exporter.targets"]
    assert lines == [
        "target ml/flaky (http://flaky:8000/metrics) is down: reason=http_status: HTTP 503",
        "target ml/flaky (http://flaky:8000/metrics) is up again (was down: http_status)",
        "target ml/flaky (http://flaky:8000/metrics) is down: reason=http_status: HTTP 503",
    ]


def test_targets_differing_only_by_path_get_distinct_identities() -> None:
    a = parse_static_target("http://proxy:8000/a/metrics")
    b = parse_static_target("http://proxy:8000/b/metrics")
    assert a.pod != b.pod
    same = [
        Target(url="http://proxy:8000/a/metrics", namespace="ml", pod="p"),
        Target(url="http://proxy:8000/b/metrics", namespace="ml", pod="p"),
        Target(url="http://proxy:8000/b/metrics", namespace="ml", pod="p"),
    ]
    pods = [t.pod for t in unique_targets(same)]
    assert pods == ["p", "p/b/metrics", "p/b/metrics#2"]
    exporter = Exporter(ScrapeSettings(), targets=lambda: same, include_process_metrics=False)
    assert len({t.key for t in exporter.targets()[0]}) == 3


def test_a_long_context_prompt_median_is_not_capped_at_the_last_bucket() -> None:
    # 128K context: vLLM's 1-2-5 buckets stop at 100,000; every request here is longer.
    buckets = [(50_000.0, 0.0), (100_000.0, 0.0), (float("inf"), 10.0)]
    assert histogram_quantile(0.5, buckets) == 100_000.0  # PromQL's answer: the cap of issue 15
    upper = token_upper_bound(buckets, 131_072)
    assert upper == 131_072.0
    assert histogram_quantile(0.5, buckets, upper) == pytest.approx(115_536.0)
    assert token_upper_bound(buckets, None) == 200_000.0


class _IdleClosingServer:
    """An HTTP/1.1 server that answers one request per connection with keep-alive, then closes the
    connection without answering the next request on it: what a pooled connection meets when vLLM's
    5 s idle close races the next scrape."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.connections = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(self.body)}\r\nConnection: keep-alive\r\n\r\n"
                conn.sendall(head.encode() + self.body)
                conn.recv(65536)  # the next request on this connection: hang up without an answer
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


@pytest.fixture
def idle_closing() -> Iterator[_IdleClosingServer]:
    server = _IdleClosingServer(GOOD.encode())
    yield server
    server.close()


def test_a_connection_closed_by_the_server_is_retried_not_reported_down(idle_closing: _IdleClosingServer) -> None:
    target = Target(url=f"http://127.0.0.1:{idle_closing.port}/metrics", namespace="ml", pod="vllm-0")
    exporter = Exporter(ScrapeSettings(), targets=lambda: [target], include_process_metrics=False)

    async def two_scrapes() -> list[bool]:
        ups = []
        for _ in range(3):
            snapshot = await exporter.snapshot(5.0)
            ups.append(snapshot.targets[0].up)
        await exporter.aclose()
        return ups

    assert asyncio.run(two_scrapes()) == [True, True, True]
    assert idle_closing.connections >= 3  # each stale connection was replaced by a new one


def test_each_target_gets_a_timeout_derived_from_its_own_reads() -> None:
    from admission.exporter.timeouts import TargetTimeouts, TimeoutPolicy

    timeouts = TargetTimeouts(TimeoutPolicy(floor_s=1.0, cap_s=5.0, factor=4.0, window=3))
    assert timeouts.timeout_for("new") == 5.0  # nothing known yet: the cap
    timeouts.record("fast", 0.03)
    assert timeouts.timeout_for("fast") == 1.0  # fast pods get the floor
    timeouts.record("slow", 0.9)
    timeouts.record("slow", 1.2)
    assert timeouts.timeout_for("slow") == pytest.approx(4.8)  # normal slowness is not a down
    timeouts.record("slow", 3.0)
    assert timeouts.timeout_for("slow") == 5.0  # never above the cap
    timeouts.record("hung", None)
    assert timeouts.timeout_for("hung") == 1.0  # no success: the floor, whatever came before
    for _ in range(3):
        timeouts.record("slow", None)
    assert timeouts.timeout_for("slow") == 1.0  # a slow pod that hangs ages out of its history
    timeouts.record("slow", 0.5)
    assert timeouts.timeout_for("slow") == 2.0  # and earns its time back on its first success
    timeouts.forget_except({"fast"})
    assert timeouts.timeout_for("hung") == 5.0


def test_a_hung_target_costs_the_floor_after_its_first_read() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "hang":
            await asyncio.sleep(30)
        return httpx.Response(200, text=GOOD)

    exporter = _exporter([_target("hang"), _target("good")], handler, scrape_timeout_s=0.2, scrape_timeout_max_s=0.6)
    details = []
    for _ in range(2):
        snapshot = asyncio.run(exporter.snapshot(5.0))
        hung = next(o for o in snapshot.targets if o.target.pod == "hang")
        assert not hung.up and hung.error == "timeout"
        assert next(o for o in snapshot.targets if o.target.pod == "good").up
        details.append(hung.detail)
    assert details == ["no complete answer within 0.60 s", "no complete answer within 0.20 s"]
