"""Reading vLLM /metrics pages and workload sources (a page, a saved file, a real Prometheus)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from planner.errors import ScrapeError, WorkloadProfileError
from planner.probe.metrics import parse_metrics
from planner.probe.sources import load_workload_source
from planner.sim import SimulatorSettings, start_simulator
from tests.conftest import require_tool

NEW_PAGE = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:num_preemptions_total{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5.0
vllm:num_requests_running{engine="1",model_name="m"} 6.0
vllm:num_requests_running{engine="0",model_name="other"} 100.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{engine="0",le="100.0",model_name="m"} 2.0
vllm:request_prompt_tokens_bucket{engine="0",le="1000.0",model_name="m"} 8.0
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:request_prompt_tokens_bucket{engine="1",le="100.0",model_name="m"} 0.0
vllm:request_prompt_tokens_bucket{engine="1",le="1000.0",model_name="m"} 10.0
vllm:request_prompt_tokens_bucket{engine="1",le="+Inf",model_name="m"} 10.0
vllm:request_prompt_tokens_count{engine="0",model_name="m"} 10.0
vllm:request_prompt_tokens_sum{engine="0",model_name="m"} 4000.0
# TYPE vllm:request_generation_tokens histogram
vllm:request_generation_tokens_bucket{engine="0",le="100.0",model_name="m"} 15.0
vllm:request_generation_tokens_bucket{engine="0",le="+Inf",model_name="m"} 20.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2048"} 1.0
"""

OLD_PAGE = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 2.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0
"""


def test_new_names_and_data_parallel_engines() -> None:
    snap = parse_metrics(NEW_PAGE, model_name="m")
    assert snap.kv_cache_usage == 0.75  # the fullest engine
    assert snap.preemptions_total == 7.0 and snap.running == 11.0 and snap.waiting == 1.0
    assert snap.num_gpu_blocks == 2048 and snap.block_size == 16
    assert snap.prompt_buckets == [(100.0, 2.0), (1000.0, 18.0), (math.inf, 20.0)]
    assert snap.prefix_cache_hits == 250.0 and snap.prefix_cache_queries == 1000.0
    assert parse_metrics(NEW_PAGE).running == 111.0  # without the filter every model counts


def test_old_names() -> None:
    snap = parse_metrics(OLD_PAGE)
    assert snap.kv_cache_usage == 0.5 and snap.preemptions_total == 2.0
    assert snap.num_gpu_blocks is None and snap.block_size == 16  # "None" before the KV cache exists
    assert snap.running is None


def test_garbage_is_a_scrape_error() -> None:
    with pytest.raises(ScrapeError, match="not a Prometheus text page"):
        parse_metrics("this is { not metrics")


def test_saved_metrics_page_as_workload_with_observed_prefix_credit(tmp_path: Path) -> None:
    page = tmp_path / "vllm-metrics.txt"
    page.write_text(NEW_PAGE)
    plain = load_workload_source(str(page))
    assert plain.prefix_cache_hit_rate == 0.0
    credited = load_workload_source(str(page), observed_prefix_credit=True, target_risk=0.05)
    assert credited.prefix_cache_hit_rate == 0.25 and credited.target_risk == 0.05
    assert credited.prompt_distribution.cdf([1000], cap=4096)[0] == pytest.approx(0.9)


def test_yaml_file_goes_through_the_workload_loader(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"prompt_tokens": 100, "output_tokens": 10}))
    assert load_workload_source(str(path)).prompt_distribution.description == "fixed 100"


def test_live_metrics_page_of_the_simulator() -> None:
    with start_simulator(SimulatorSettings(num_gpu_blocks=400, max_model_len=1024, time_scale=0.0)) as sim:
        with pytest.raises(WorkloadProfileError, match="not finished any request"):
            load_workload_source(sim.metrics_url)
        for prompt, output in ((100, 10), (300, 30), (700, 5)):
            response = httpx.post(
                f"{sim.url}/v1/completions",
                timeout=30,
                json={"prompt": list(range(1, prompt + 1)), "max_tokens": output},
            )
            assert response.status_code == 200
        profile = load_workload_source(sim.metrics_url)
    # vLLM's buckets are 1-2-5 series: 100 -> (50, 100], 300 -> (200, 500], 700 -> (500, 1000].
    assert profile.prompt_distribution.cdf([100, 500, 1000], cap=1024).tolist() == pytest.approx([1 / 3, 2 / 3, 1])
    assert profile.output_distribution.cdf([5, 10, 50], cap=1024).tolist() == pytest.approx([1 / 3, 2 / 3, 1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def prometheus_and_simulator(tmp_path: Path) -> Iterator[tuple[str, str]]:
    binary = require_tool("prometheus")
    with start_simulator(
        SimulatorSettings(num_gpu_blocks=400, max_model_len=1024, time_scale=0.0, served_model_name="sim-model")
    ) as sim:
        port = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "vllm",
                            "static_configs": [{"targets": [f"127.0.0.1:{sim.port}"], "labels": {"namespace": "ml"}}],
                        }
                    ],
                }
            )
        )
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield sim.url, f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def _samples(prometheus: str, query: str) -> list[object]:
    try:
        answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}, timeout=5).json()
    except (httpx.HTTPError, json.JSONDecodeError):
        return []
    result: list[object] = answer.get("data", {}).get("result", [])
    return result


@pytest.mark.needs_prometheus
@pytest.mark.slow
def test_workload_from_a_real_prometheus(prometheus_and_simulator: tuple[str, str]) -> None:
    sim_url, prometheus = prometheus_and_simulator
    count = 'sum(vllm:request_prompt_tokens_count{namespace="ml"})'
    for _ in range(300):  # bounded wait (30 s) for the first scrapes, before any request
        if _samples(prometheus, count):
            break
        time.sleep(0.1)
    else:
        pytest.fail("prometheus never scraped the simulator")
    time.sleep(1.5)  # one more scrape at zero so increase() sees the whole load
    for prompt in (40, 40, 40, 400):
        httpx.post(
            f"{sim_url}/v1/completions", timeout=30, json={"prompt": list(range(1, prompt + 1)), "max_tokens": 8}
        ).raise_for_status()
    for _ in range(300):  # until the scrapes show all four requests
        samples = _samples(prometheus, count)
        if samples and float(samples[0]["value"][1]) >= 4:  # type: ignore[index]
            break
        time.sleep(0.1)
    else:
        pytest.fail("prometheus never saw the requests")
    profile = load_workload_source(prometheus, window="10m", model_name="sim-model", namespace="ml")
    # 40 tokens -> bucket (20, 50]; 400 -> (200, 500]: three quarters at or below 50.
    assert profile.prompt_distribution.cdf([50], cap=1024)[0] == pytest.approx(0.75, abs=0.01)
    assert profile.output_distribution.cdf([10], cap=1024)[0] == pytest.approx(1.0)
    with pytest.raises(WorkloadProfileError, match="no requests"):
        load_workload_source(prometheus, window="10m", model_name="no-such-model")
