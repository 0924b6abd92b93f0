"""The probe against a deterministic fake server: staircase, bisection, verdicts and hard limits."""

from __future__ import annotations

import asyncio
import re

import pytest

from planner.errors import ScrapeError
from planner.probe import ProbeConfig, run_probe
from planner.probe.report import ProbeStep
from planner.probe.runner import (
    QUICK_MAX_DURATION_S,
    QUICK_PROMPT_TOKENS,
    _Lengths,
    _Run,
    effective_max_duration,
)
from planner.workload import parse_workload

from .conftest import probe, wait_idle

pytestmark = pytest.mark.slow  # real servers and load: seconds per test


def test_ramp_then_bisection_finds_the_servers_capacity(fake_server) -> None:
    server = fake_server(capacity=5, max_model_len=256)
    report = probe(server, start_concurrency=1, max_concurrency=16)
    tried = [s.concurrency for s in report.steps]
    assert tried == [1, 2, 4, 8, 6, 5]  # doubling, first failure at 8, then bisection 6 -> 5
    assert report.safe_concurrency == 5
    assert report.stop_reason == "limit-crossed"
    by_level = {s.concurrency: s for s in report.steps}
    assert all(by_level[c].passed and by_level[c].preemptions == 0 for c in (1, 2, 4, 5))
    assert all(not by_level[c].passed and by_level[c].preemptions > 0 for c in (6, 8))
    assert "preemptions > 0" in by_level[6].reasons[0]
    # Every request the probe counts reached the server, and none is left running.
    wait_idle(server.state)
    assert report.requests_sent == server.state.started
    assert server.state.max_active <= 8


def test_explicit_levels_stop_at_the_first_failure(fake_server) -> None:
    server = fake_server(capacity=4, max_model_len=256)
    report = probe(server, levels=[2, 3, 6, 8])
    assert [s.concurrency for s in report.steps] == [2, 3, 6]
    assert report.safe_concurrency == 3
    assert report.stop_reason == "limit-crossed"


def test_reaching_max_concurrency_without_trouble(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256)
    report = probe(server, max_concurrency=3)
    assert [s.concurrency for s in report.steps] == [1, 2, 3]
    assert report.safe_concurrency == 3
    assert report.stop_reason == "max-concurrency"
    assert report.steps[-1].kv_cache_usage_max is not None
    assert report.num_gpu_blocks == 1000 and report.block_size == 16
    assert report.planner is not None  # fixed 248 + 8 token requests on 1000 blocks of 16
    assert report.planner.max_num_seqs == 999 // 16


def test_request_budget_is_a_hard_limit(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256)
    report = probe(server, max_requests=10, max_concurrency=64)
    wait_idle(server.state)
    assert report.requests_sent == 10 == server.state.started
    assert report.stop_reason == "max-requests"


def test_token_budget_counts_prompt_and_output(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256)
    per_request = 256  # the default prompt fills the context: 248 + 8
    report = probe(server, max_tokens=7 * per_request + 100, max_concurrency=64)
    wait_idle(server.state)
    assert report.requests_sent == 7 == server.state.started
    assert report.tokens_sent == 7 * per_request
    assert report.stop_reason == "max-tokens"


def test_time_limit_cancels_requests_in_flight(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256, token_delay_s=0.05)
    report = probe(server, max_duration_s=1.0, output_tokens=200, max_concurrency=4)
    assert report.stop_reason == "max-duration"
    wait_idle(server.state)
    assert server.state.cancelled > 0  # the server saw the clients go away
    assert report.duration_s < 30


def test_stop_event_returns_a_partial_report(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=256, token_delay_s=0.01)

    async def run() -> object:
        stop = asyncio.Event()

        def progress(message: str) -> None:
            if message.startswith("concurrency 2:") and "warming" in message:
                stop.set()  # what Ctrl-C does in the CLI

        config = ProbeConfig(
            endpoint=server.url, output_tokens=50, sample_interval_s=0.02, start_concurrency=1, max_concurrency=8
        )
        return await run_probe(config, stop=stop, progress=progress)

    report = asyncio.run(run())
    assert report.interrupted and report.stop_reason == "interrupted"
    assert [s.concurrency for s in report.steps] == [1]
    assert report.safe_concurrency == 1
    wait_idle(server.state)


def test_old_metric_names_are_read(fake_server) -> None:
    server = fake_server(capacity=3, max_model_len=256, metric_names="old")
    report = probe(server, max_concurrency=4)
    assert report.safe_concurrency == 3
    assert all(s.kv_cache_usage_max is not None for s in report.steps)


def test_without_metrics_steps_are_judged_on_latency_only(fake_server) -> None:
    server = fake_server(capacity=1, max_model_len=256, metric_names="none")
    report = probe(server, max_concurrency=2)
    assert report.warnings and "no metrics" in report.warnings[0]
    assert all(s.preemptions is None and s.passed for s in report.steps)
    assert report.safe_concurrency == 2
    assert report.planner is None


def test_failing_requests_stop_the_probe(fake_server) -> None:
    server = fake_server(max_model_len=256, fail_status=500)
    report = probe(server, max_concurrency=8)
    assert report.stop_reason == "errors"
    assert report.safe_concurrency is None
    assert "simulated failure" in report.steps[0].reasons[0]


def test_workload_lengths_are_drawn_from_the_profile(fake_server) -> None:
    server = fake_server(capacity=100, max_model_len=512)
    profile = parse_workload(
        {"prompt_tokens": {"p10": 50, "p50": 100, "p90": 200}, "output_tokens": {"p50": 6, "max": 10}}
    )
    report = probe(server, workload=profile, max_concurrency=4)
    prompts = server.state.prompts
    assert len(prompts) == report.requests_sent
    assert min(prompts) >= 1 and max(prompts) < 512
    assert 70 < sorted(prompts)[len(prompts) // 2] < 140  # the median follows p50 = 100
    assert "workload" in report.lengths


def test_unreachable_endpoint_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="cannot reach"):
        asyncio.run(run_probe(ProbeConfig(endpoint="http://127.0.0.1:9", max_concurrency=1)))


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"preemptions": 2.0}, ["2 preemptions > 0"]),
        ({"ttft_p95_s": 3.0}, ["TTFT p95 3.000 s > 2 s"]),
        ({"itl_p95_s": 0.2}, ["ITL p95 200.0 ms > 100 ms"]),
        ({"preemptions": 0.0, "ttft_p95_s": 1.0, "itl_p95_s": 0.05}, []),
    ],
)
def test_verdict_rules(step: dict[str, float], expected: list[str]) -> None:
    config = ProbeConfig(endpoint="http://x", ttft_limit_s=2.0, itl_limit_s=0.1)
    run = _Run.__new__(_Run)
    run.config = config
    probe_step = ProbeStep(concurrency=1, requests_completed=3, duration_s=1.0, passed=True, **step)
    assert run._violations(probe_step, []) == expected


@pytest.mark.slow
def test_ttft_limit_fails_a_level(fake_server) -> None:
    # TTFT = 0.5 s per request in flight: 0.5 s at 1, 1.0 s at 2 (limit 0.75 s; margins of 250 ms).
    server = fake_server(capacity=100, max_model_len=256, ttft_per_request_s=0.5)
    report = probe(server, levels=[1, 2], ttft_limit_s=0.75, warmup_requests=0, requests_per_step=2)
    assert [s.passed for s in report.steps] == [True, False]
    assert "TTFT p95" in report.steps[1].reasons[0]
    assert report.safe_concurrency == 1


def test_default_levels_bracket_the_planners_limit(fake_server) -> None:
    # No --start/--max-concurrency: the staircase runs from a quarter of the planner's limit for the server's
    # own KV blocks to twice it, instead of 1..64 whatever the server.
    server = fake_server(capacity=100, max_model_len=256)
    report = probe(server)
    assert report.planner is not None
    limit = report.planner.max_num_seqs
    tried = [s.concurrency for s in report.steps]
    assert tried[0] == max(1, limit // 4)
    # Up to twice the limit (the ramp stops earlier where a level fails and bisection begins).
    assert limit <= max(tried) <= min(4096, 2 * limit)


def test_quick_mode_shortens_prompts_rounds_and_the_time_limit() -> None:
    config = ProbeConfig(endpoint="http://127.0.0.1:9", quick=True)
    lengths = _Lengths(config, max_len=131_072)
    prompt, output = lengths.next()
    assert prompt == QUICK_PROMPT_TOKENS and output == config.output_tokens
    assert "--quick" in lengths.description
    assert effective_max_duration(config) == QUICK_MAX_DURATION_S < 120
    assert effective_max_duration(config.model_copy(update={"max_duration_s": 30.0})) == 30.0


def test_the_plot_has_whole_concurrency_ticks_and_no_negative_counts(tmp_path) -> None:
    from planner.probe.plot import plot_report
    from planner.probe.report import ProbeLimits, ProbeReport

    steps = [
        ProbeStep(concurrency=c, requests_completed=4, duration_s=1.0, preemptions=0.0, passed=True, ttft_p95_s=0.1)
        for c in (1, 2, 3)
    ]
    report = ProbeReport(
        endpoint="http://sim",
        metrics_url=None,
        model="m",
        max_model_len=256,
        lengths="fixed",
        limits=ProbeLimits(
            preemption_limit=0, ttft_limit_s=None, itl_limit_s=None, max_requests=1, max_tokens=1, max_duration_s=1
        ),
        steps=steps,
        safe_concurrency=3,
        stop_reason="max-concurrency",
        requests_sent=12,
        tokens_sent=100,
        duration_s=3.0,
    )
    svg = plot_report(report, tmp_path / "probe.svg").read_text()
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert labels, "tick labels are kept as text"
    assert not [label for label in labels if label.startswith(("−", "-"))]  # no negative axis
    assert not [label for label in labels if re.fullmatch(r"\d+\.\d*[1-9]\d*", label.strip())]  # no half requests
