"""Reading many targets: hangs, 500s, garbage, oversize pages, restarts, vanishing pods, budgets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.exporter.service import Exporter, ScrapeSettings
from admission.observations.targets import Target, parse_static_target
from planner.errors import PlannerInputError
from tests.exporter.conftest import PAGES, promtool_check

GOOD = next(p for p in PAGES if p.release == "0.19.0").text
OLD = next(p for p in PAGES if p.release == "0.8.5" and p.engine_kind == "v1").text


def _exporter(targets: list[Target], handler: Callable[[httpx.Request], object], **settings: object) -> Exporter:
    return Exporter(
        ScrapeSettings(**settings),
        targets=lambda: targets,  # type: ignore[arg-type]
        include_process_metrics=False,
        transport=httpx.MockTransport(handler),
    )  # type: ignore[arg-type]


async def _handler(request: httpx.Request) -> httpx.Response:
    host = request.url.host
    if host == "hang":
        await asyncio.sleep(30)
    if host == "error":
        return httpx.Response(500, text="internal error")
    if host == "garbage":
        return httpx.Response(200, text="this is { not prometheus\n" * 5 + "vllm:num_requests_running{ 1\n")
    if host == "html":
        return httpx.Response(200, text="<html>hello</html>")
    if host == "huge":
        return httpx.Response(200, content=b"#" * 5_000_000)
    if host == "refused":
        raise httpx.ConnectError("connection refused", request=request)
    if host == "old":
        return httpx.Response(200, text=OLD)
    return httpx.Response(200, text=GOOD)


def _target(name: str, **extra: object) -> Target:
    return Target(url=f"http://{name}:8000/metrics", namespace="ml", pod=name, workload="llm", **extra)  # type: ignore[arg-type]


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_each_failure_is_its_own_down_target_and_the_rest_are_read() -> None:
    names = ["good", "old", "hang", "error", "garbage", "html", "huge", "refused"]
    exporter = _exporter(
        [_target(n, planned_num_gpu_blocks=1000) for n in names],
        _handler,
        scrape_timeout_s=0.5,
        max_body_bytes=1_000_000,
    )
    snapshot = asyncio.run(exporter.snapshot(budget_s=2.0))
    by_pod = {o.target.pod: o for o in snapshot.targets}
    assert by_pod["good"].up and by_pod["old"].up
    assert {pod: by_pod[pod].error for pod in names[2:]} == {
        "hang": "timeout",
        "error": "http_status",
        "garbage": "parse",
        "html": "not_vllm",
        "huge": "too_large",
        "refused": "connect",
    }
    body, _ = asyncio.run(exporter.render(2.0))
    samples = _samples(body.decode())
    up = {labels["pod"]: value for labels, value in samples["kv_planner_target_up"]}
    assert up == {n: (1.0 if n in ("good", "old") else 0.0) for n in names}
    # A down target exports nothing but up/duration/errors: no stale zeros.
    for name, series in samples.items():
        if name in ("kv_planner_target_up", "kv_planner_scrape_duration_seconds", "kv_planner_scrape_errors_total"):
            continue
        assert not any(labels.get("pod") in names[2:] for labels, _ in series), name
    errors = {(labels["pod"], labels["reason"]): value for labels, value in samples["kv_planner_scrape_errors_total"]}
    assert errors[("hang", "timeout")] == 2.0  # two collections so far
    usage = {labels["pod"]: labels for labels, _ in samples["kv_planner_vllm_engine_info"]}
    assert usage["old"]["usage_metric"] == "vllm:gpu_cache_usage_perc"
    assert usage["good"]["usage_metric"] == "vllm:kv_cache_usage_perc"
    ratio = [v for labels, v in samples["kv_planner_kv_blocks_plan_ratio"] if labels["pod"] == "good"]
    assert ratio == [1.206, 1.206]  # two engines, 1206 blocks each, 1000 planned


def test_the_budget_bounds_a_collection_with_hanging_targets() -> None:
    targets = [_target(f"hang-{i}") for i in range(3)] + [_target("good")]

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host.startswith("hang"):
            await asyncio.sleep(30)
        return httpx.Response(200, text=GOOD)

    exporter = _exporter(targets, handler, scrape_timeout_s=20.0)
    snapshot = asyncio.run(exporter.snapshot(budget_s=0.3))  # the budget, not the 20 s per-target cap, decides
    assert [o.up for o in snapshot.targets] == [True, False, False, False]
    assert {o.error for o in snapshot.targets if not o.up} == {"timeout"}


@pytest.mark.parametrize(("header", "budget"), [(None, 9.5), ("3", 2.5), ("0.3", 0.1), ("nonsense", 9.5), ("-1", 9.5)])
def test_budget_comes_from_prometheus_header(header: str | None, budget: float) -> None:
    assert ScrapeSettings().budget(header) == pytest.approx(budget)


def test_vanished_targets_leave_no_series() -> None:
    targets = [_target("a"), _target("b"), _target("refused")]
    exporter = _exporter(targets, _handler)
    first = _samples(asyncio.run(exporter.render(2.0))[0].decode())
    assert {labels["pod"] for labels, _ in first["kv_planner_target_up"]} == {"a", "b", "refused"}
    del targets[1:]
    second = _samples(asyncio.run(exporter.render(2.0))[0].decode())
    pods = {labels.get("pod") for series in second.values() for labels, _ in series if "pod" in labels}
    assert pods == {"a"}


def test_a_counter_reset_passes_through_unchanged() -> None:
    restarted = "\n".join(
        line.rsplit(" ", 1)[0] + " 1.0" if line.startswith("vllm:num_preemptions_total") else line
        for line in GOOD.splitlines()
    )
    calls = iter([GOOD, restarted])

    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=next(calls))

    exporter = _exporter([_target("a")], handler)
    before = _samples(asyncio.run(exporter.render(2.0))[0].decode())["kv_planner_preemptions_total"]
    after = _samples(asyncio.run(exporter.render(2.0))[0].decode())["kv_planner_preemptions_total"]
    # The counter is exported as vLLM reports it; Prometheus' rate() treats the drop as a restart.
    assert all(v > 1 for _, v in before) and all(v == 1.0 for _, v in after)


def test_cardinality_is_bounded_by_max_targets() -> None:
    targets = [_target(f"pod-{i:03d}") for i in range(40)]
    exporter = _exporter(targets, _handler, max_targets=25)
    body, _ = asyncio.run(exporter.render(5.0))
    samples = _samples(body.decode())
    pods = {labels["pod"] for labels, _ in samples["kv_planner_target_up"]}
    assert len(pods) == 25 and "pod-000" in pods and "pod-039" not in pods
    assert samples["kv_planner_targets_dropped"][0][1] == 15
    series = sum(len(v) for k, v in samples.items() if k.startswith("kv_planner_"))
    # Per pod: 6 pod-level series + per engine (2 here): 10 gauges + 2 summaries x (3 quantiles + sum + count)
    # + 5 finish reasons + 2 summaries x (sum + count) + 4 token/prefix counters + 2 waiting reasons.
    assert series <= 25 * (6 + 2 * (10 + 2 * 5 + 5 + 2 * 2 + 4 + 2)) + 10


@pytest.mark.needs_prometheus
def test_exporter_output_passes_promtool(tmp_path: object) -> None:
    exporter = _exporter(
        [
            _target(n, planned_num_gpu_blocks=1000, max_num_seqs=64, max_model_len=8192)
            for n in ("good", "old", "error", "hang")
        ],
        _handler,
        scrape_timeout_s=0.3,
    )
    exporter.include_process_metrics = True
    # The retuner's and discovery's families are part of the same page.
    from admission.exporter.discovery import KubeDiscovery
    from admission.retuner import Retuner, RetunerSettings
    from tests.exporter.test_discovery import OPTED_IN, FakeCore, make_pod

    retuner = Retuner(RetunerSettings(persist=1, min_dwell_s=0), advisor=lambda _: 8)
    discovery = KubeDiscovery(FakeCore(OPTED_IN, [make_pod("a-1")]))
    discovery.relist()
    exporter.state.add_provider(retuner.families)
    exporter.state.add_provider(discovery.families)
    retuner.observe(asyncio.run(exporter.snapshot(1.0, record=False)), now=0)
    body, _ = asyncio.run(exporter.render(1.0))
    text = body.decode()
    assert "kv_planner_max_num_seqs_recommended" in text and "kv_planner_discovery_errors_total" in text
    result = promtool_check(text)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("ftp://x/metrics", "expected http"),
        ("http://h:port", "not a number"),
        ("h:1#max-num-seqs=abc", "must be an integer"),
        ("h:1#color=red", "unknown option"),
        ("h:1#planned-num-gpu-blocks=0", "positive"),
    ],
)
def test_bad_static_targets_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(PlannerInputError, match=fragment):
        parse_static_target(text)


def test_static_target_syntax() -> None:
    target = parse_static_target(
        "10.0.0.7:8000#namespace=ml&pod=qwen-0&workload=qwen&kind=StatefulSet"
        "&planned-num-gpu-blocks=4096&planned-num-gpu-blocks-low=3900&max_num_seqs=64&max-model-len=32768"
    )
    assert target.url == "http://10.0.0.7:8000/metrics"
    assert (target.namespace, target.pod, target.workload, target.workload_kind) == (
        "ml",
        "qwen-0",
        "qwen",
        "StatefulSet",
    )
    assert (target.planned_num_gpu_blocks, target.max_num_seqs, target.max_model_len) == (4096, 64, 32768)
    assert target.planned_num_gpu_blocks_low == 3900
    assert parse_static_target("https://vllm.example:443/custom/metrics").pod == "vllm.example:443/custom/metrics"
    assert parse_static_target("https://vllm.example:443/metrics").pod == "vllm.example:443"
