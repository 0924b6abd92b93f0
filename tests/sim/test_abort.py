"""Client aborts (issue 15 item 4): the request's blocks are freed and the gauges show it at once, on an
engine that has nothing else to do; the abort is counted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner.sim import SimulatorSettings, start_simulator
from planner.sim.server import RunningSimulator


@pytest.fixture
def slow_sim() -> Iterator[RunningSimulator]:
    # time_scale 1: a 2,000-token generation takes many wall seconds, far longer than the client waits.
    settings = SimulatorSettings(
        model="org/model-7b", num_gpu_blocks=257, block_size=16, max_model_len=4096, vllm_version="0.19.0", seed=1
    )
    with start_simulator(settings) as running:
        yield running


def _gauges(sim: RunningSimulator) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{sim.url}/metrics").text):
        for sample in family.samples:
            if sample.name in (
                "vllm:num_requests_running",
                "vllm:kv_cache_usage_perc",
                "kv_planner_simulator_aborted_requests_total",
            ):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def _wait_for(sim: RunningSimulator, check: object) -> dict[str, float]:
    gauges = _gauges(sim)
    for _ in range(200):  # polls until the state is reached; the suite's timeout bounds a failure
        if check(gauges):  # type: ignore[operator]
            return gauges
        time.sleep(0.05)
        gauges = _gauges(sim)
    return gauges


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_client_that_goes_away_frees_its_blocks_without_another_request(
    slow_sim: RunningSimulator, stream: bool
) -> None:
    payload = {"model": "org/model-7b", "prompt": list(range(1, 501)), "max_tokens": 2000, "stream": stream}
    if stream:
        with httpx.stream("POST", f"{slow_sim.url}/v1/completions", json=payload, timeout=10.0) as response:
            next(response.iter_bytes())  # the first tokens arrived: the request runs; now hang up
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{slow_sim.url}/v1/completions", json=payload, timeout=1.0)
    gauges = _wait_for(
        slow_sim,
        lambda g: g["vllm:num_requests_running"] == 0 and g["kv_planner_simulator_aborted_requests_total"] == 1,
    )
    assert gauges["vllm:num_requests_running"] == 0
    assert gauges["vllm:kv_cache_usage_perc"] == 0.0
    assert gauges["kv_planner_simulator_aborted_requests_total"] == 1
