"""The simulator over real HTTP on 127.0.0.1: vLLM's API shapes, errors and /metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner.sim import SimulatorSettings, start_simulator
from planner.sim.app import OWNED_BY
from planner.sim.runtime import SimulatorRuntime
from planner.sim.server import RunningSimulator


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    settings = SimulatorSettings(
        model="org/model-7b",
        num_gpu_blocks=129,
        block_size=16,
        max_model_len=1024,
        max_num_seqs=8,
        vllm_version="0.19.0",
        time_scale=0.0,
        seed=3,
    )
    with start_simulator(settings) as running:
        yield running


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_completion_returns_openai_shape(sim: RunningSimulator) -> None:
    response = httpx.post(
        f"{sim.url}/v1/completions", json={"model": "org/model-7b", "prompt": list(range(1, 41)), "max_tokens": 7}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
        "prompt_tokens_details": None,
    }


def test_chat_streaming_sends_sse_chunks_and_usage(sim: RunningSimulator) -> None:
    payload = {
        "messages": [{"role": "user", "content": "How big is a KV block?"}],
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{sim.url}/v1/chat/completions", json=payload) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert len(contents) == 5 and all(contents)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5


def test_chat_without_max_tokens_runs_to_the_context_limit(sim: RunningSimulator) -> None:
    response = httpx.post(
        f"{sim.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30
    )
    usage = response.json()["usage"]
    assert usage["total_tokens"] == 1024


def test_models_health_version(sim: RunningSimulator) -> None:
    models = httpx.get(f"{sim.url}/v1/models").json()
    assert models["data"][0]["id"] == "org/model-7b"
    assert models["data"][0]["owned_by"] == OWNED_BY
    assert models["data"][0]["max_model_len"] == 1024
    assert httpx.get(f"{sim.url}/health").status_code == 200
    assert httpx.get(f"{sim.url}/version").json() == {"version": "0.19.0"}


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v1/completions", {"prompt": list(range(1, 1100)), "max_tokens": 1}, 400, "maximum context length"),
        ("/v1/completions", {"prompt": "a b c", "max_tokens": 5000}, 400, "'max_tokens' is too large"),
        ("/v1/completions", {"prompt": "x", "model": "other"}, 404, "does not exist"),
        ("/v1/completions", {"prompt": [99999999]}, 400, "out of vocabulary"),
        ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n=1"),
        ("/v1/completions", {"max_tokens": 3}, 400, "prompt"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ],
)
def test_bad_requests_get_vllm_style_4xx(
    sim: RunningSimulator, path: str, body: dict[str, object], status: int, fragment: str
) -> None:
    response = httpx.post(f"{sim.url}{path}", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert fragment in error["message"] and error["code"] == status


def test_garbage_body_is_a_400(sim: RunningSimulator) -> None:
    response = httpx.post(
        f"{sim.url}/v1/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


def test_metrics_page_is_vllm_shaped(sim: RunningSimulator) -> None:
    # Two requests that end by length, made here: under pytest-xdist the module's other tests (which
    # make such requests too) may run on another worker with its own simulator.
    for _ in range(2):
        httpx.post(f"{sim.url}/v1/completions", json={"model": "org/model-7b", "prompt": [5] * 10, "max_tokens": 3})
    text = httpx.get(sim.metrics_url).text
    families = _families(text)
    assert ("vllm:kv_cache_usage_perc" in families) and ("vllm:gpu_cache_usage_perc" not in families)
    for name, samples in families.items():
        if not name.startswith("vllm:") or name == "vllm:cache_config_info":
            continue
        for sample_name, labels, _ in samples:
            # No extra labels: model_name + engine + the family's own (vLLM's exact label sets).
            assert {"model_name", "engine"} <= set(labels) or name == "vllm:admission_rejections", sample_name
            assert (
                set(labels) - {"model_name", "engine", "le", "finished_reason", "source", "sleep_state", "reason"}
                == set()
            ), sample_name
    info = families["vllm:cache_config_info"][0][1]
    assert info["num_gpu_blocks"] == "129" and info["block_size"] == "16" and info["engine"] == "0"
    simulator = families["kv_planner_simulator_info"][0][1]
    assert simulator["modelled_release"] == "0.19.0"
    success = {
        labels["finished_reason"]: value
        for _, labels, value in families["vllm:request_success"]
        if _.endswith("_total")
    }
    assert set(success) == {"stop", "length", "abort", "error", "repetition"}
    assert success["length"] >= 2


def test_counters_match_the_requests_served() -> None:
    settings = SimulatorSettings(
        num_gpu_blocks=65, max_model_len=512, time_scale=0.0, vllm_version="0.12.0", enable_prefix_caching=False
    )
    with start_simulator(settings) as running:
        for i in range(3):
            httpx.post(
                f"{running.url}/v1/completions", json={"prompt": [i + 1] * 30, "max_tokens": 10}
            ).raise_for_status()
        families = _families(httpx.get(running.metrics_url).text)

    def value(family: str, sample: str) -> float:
        return next(v for n, _, v in families[family] if n == sample)

    assert value("vllm:prompt_tokens", "vllm:prompt_tokens_total") == 90
    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") == 30
    assert value("vllm:request_prompt_tokens", "vllm:request_prompt_tokens_count") == 3
    assert value("vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum") == 90
    assert value("vllm:num_requests_running", "vllm:num_requests_running") == 0


@pytest.mark.parametrize(
    ("version", "engine", "present", "absent"),
    [
        ("0.8.5", "v1", ["vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries"], ["vllm:kv_cache_usage_perc"]),
        ("0.10.2", "v1", ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"], []),
        (
            "0.33.0",
            "v1",
            ["vllm:kv_cache_usage_perc", "vllm:request_num_preemptions"],
            ["vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"],
        ),
        ("0.10.2", "v0", ["vllm:gpu_cache_usage_perc"], ["vllm:kv_cache_usage_perc"]),
    ],
)
def test_release_selects_the_metric_set(version: str, engine: str, present: list[str], absent: list[str]) -> None:
    settings = SimulatorSettings(
        num_gpu_blocks=40, max_model_len=256, vllm_version=version, engine_kind=engine, time_scale=0.0
    )  # type: ignore[arg-type]
    with start_simulator(settings) as running:
        families = _families(httpx.get(running.metrics_url).text)
    for name in present:
        assert name in families
    for name in absent:
        assert name not in families
    engines = {labels.get("engine") for _, labels, _ in families["vllm:num_requests_running"]}
    assert engines == ({"0"} if engine == "v1" else {None})


@pytest.mark.slow
def test_data_parallel_engines_get_their_own_label_and_cache() -> None:
    settings = SimulatorSettings(num_gpu_blocks=40, max_model_len=256, data_parallel_size=2, time_scale=0.001)
    with start_simulator(settings) as running:
        with ThreadPoolExecutor(4) as pool:  # concurrent, so the least-loaded routing spreads them
            list(
                pool.map(
                    lambda i: httpx.post(
                        f"{running.url}/v1/completions", timeout=30, json={"prompt": [i + 1] * 20, "max_tokens": 200}
                    ),
                    range(4),
                )
            )
        families = _families(httpx.get(running.metrics_url).text)
        snapshot = running.snapshot()
    infos = [labels for _, labels, _ in families["vllm:cache_config_info"]]
    assert sorted(i["engine"] for i in infos) == ["0", "1"]
    assert len(snapshot["engines"]) == 2 and all(e["steps"] > 0 for e in snapshot["engines"])


def test_runtime_reports_engine_state(sim: RunningSimulator) -> None:
    snapshot = sim.call(SimulatorRuntime.snapshot)
    assert snapshot["engines"][0]["free_blocks"] == 128


def test_a_client_that_disconnects_frees_its_blocks() -> None:
    import time

    settings = SimulatorSettings(num_gpu_blocks=65, max_model_len=1024, time_scale=0.05)
    with start_simulator(settings) as running:
        with httpx.stream(
            "POST",
            f"{running.url}/v1/completions",
            timeout=30,
            json={"prompt": [7] * 200, "max_tokens": 500, "stream": True},
        ) as response:
            lines = response.iter_lines()
            next(line for line in lines if line.startswith("data:"))
            assert running.snapshot()["engines"][0]["free_blocks"] < 64
        for _ in range(200):  # bounded: ~10 s
            engine = running.snapshot()["engines"][0]
            if engine["running"] == 0 and engine["waiting"] == 0:
                break
            time.sleep(0.05)
        assert engine["free_blocks"] == 64 and engine["running"] == 0
