"""``--prometheus-url``: the same signals read from a real Prometheus (Debian binary) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from admission.exporter.promapi import PrometheusSource, workload_from_pod_name
from admission.exporter.service import Exporter, ScrapeSettings
from admission.observations.model import Snapshot
from admission.observations.targets import Target
from planner.sim import SimulatorSettings, start_simulator
from planner.sim.server import RunningSimulator

pytestmark = pytest.mark.needs_prometheus


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, list[RunningSimulator]]]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: run scripts/install-test-tools (Debian package prometheus)")
    sims = [
        start_simulator(
            SimulatorSettings(
                num_gpu_blocks=150, max_model_len=1024, vllm_version="0.19.0", data_parallel_size=2, time_scale=0.0
            )
        ),
        start_simulator(
            SimulatorSettings(num_gpu_blocks=120, max_model_len=1024, vllm_version="0.8.5", time_scale=0.0)
        ),
    ]
    pods = ["qwen-7b-6d4f8c9b7-x2x8k", "llama-8b-0"]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{sim.port}"], "labels": {"namespace": "ml", "pod": pod}}
                    for sim, pod in zip(sims, pods, strict=True)
                ],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for sim in sims:
            httpx.post(f"{sim.url}/v1/completions", json={"prompt": [3] * 100, "max_tokens": 20}).raise_for_status()
        yield url, sims
    finally:
        process.terminate()
        process.wait(10)
        for sim in sims:
            sim.stop()


def _snapshot(exporter: Exporter, budget_s: float) -> Snapshot:
    async def run() -> Snapshot:
        try:
            return await exporter.snapshot(budget_s)
        finally:
            await exporter.aclose()  # the client belongs to this event loop

    return asyncio.run(run())


def _wait_for_series(url: str, expression: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            result = httpx.get(f"{url}/api/v1/query", params={"query": expression}, timeout=2).json()
            if result.get("status") == "success" and len(result["data"]["result"]) >= count:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never returned {count} series for {expression}")


def test_prometheus_mode_reads_the_same_signals(stack: tuple[str, list[RunningSimulator]]) -> None:
    url, sims = stack
    _wait_for_series(url, "vllm:request_prompt_tokens_count", 3)
    metadata = [
        Target(
            url="",
            namespace="ml",
            pod="llama-8b-0",
            workload="llama-8b",
            planned_num_gpu_blocks=100,
            source="kubernetes",
        )
    ]
    exporter = Exporter(
        ScrapeSettings(),
        targets=lambda: metadata,
        prometheus=PrometheusSource(url, selector='job="vllm"'),
        source="prometheus",
        include_process_metrics=False,
    )
    snapshot = _snapshot(exporter, 5.0)
    by_pod = {o.target.pod: o for o in snapshot.targets}
    qwen, llama = by_pod["qwen-7b-6d4f8c9b7-x2x8k"], by_pod["llama-8b-0"]
    assert qwen.up and llama.up
    assert qwen.target.workload == "qwen-7b"  # from the pod name without discovery
    assert llama.target.planned_num_gpu_blocks == 100  # metadata from discovery is kept
    assert [e.engine for e in qwen.engines] == ["0", "1"]
    assert {e.usage_metric for e in qwen.engines} == {"vllm:kv_cache_usage_perc"}
    assert [e.usage_metric for e in llama.engines] == ["vllm:gpu_cache_usage_perc"]
    assert [e.num_gpu_blocks for e in qwen.engines + llama.engines] == [150, 150, 120]
    assert sum(e.prompt_tokens[-1][1] for e in qwen.engines if e.prompt_tokens) == 1
    # The histograms' sums too (exact mean lengths for the retuner): one 100-token prompt, 20 tokens out.
    assert sum(e.prompt_tokens_sum or 0 for e in qwen.engines) == 100
    assert sum(e.generation_tokens_sum or 0 for e in qwen.engines) == 20
    assert qwen.missing == [] and llama.missing == []

    sims[1].stop()  # the pod dies: Prometheus reports up == 0, its vLLM series go stale
    _wait_for_series(url, 'up{job="vllm"} == 0', 1)
    exporter = Exporter(
        ScrapeSettings(), prometheus=PrometheusSource(url, selector='job="vllm"'), include_process_metrics=False
    )
    snapshot = _snapshot(exporter, 5.0)
    down = {o.target.pod: (o.up, o.engines) for o in snapshot.targets}
    assert down["llama-8b-0"] == (False, [])


def test_an_unreachable_prometheus_marks_known_targets_down() -> None:
    target = Target(url="", namespace="ml", pod="a", workload="a", source="kubernetes")
    exporter = Exporter(
        ScrapeSettings(),
        targets=lambda: [target],
        prometheus=PrometheusSource(f"http://127.0.0.1:{_free_port()}"),
        include_process_metrics=False,
    )
    snapshot = _snapshot(exporter, 1.0)
    assert [(o.target.pod, o.up, o.error) for o in snapshot.targets] == [("a", False, "connect")]


@pytest.mark.parametrize(
    ("pod", "workload"),
    [("qwen-7b-6d4f8c9b7-x2x8k", "qwen-7b"), ("llama-0", "llama-0"), ("web-abcde", "web"), ("vllm", "vllm")],
)
def test_workload_from_pod_name(pod: str, workload: str) -> None:
    assert workload_from_pod_name(pod) == workload
