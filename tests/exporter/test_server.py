"""The exporter over real HTTP on 127.0.0.1, reading real simulator processes' pages."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from admission.exporter.server import ExporterConfig, start_exporter
from admission.observations.targets import parse_static_target
from admission.retuner import RetunerSettings
from planner.sim import SimulatorSettings, start_simulator
from tests.exporter.conftest import promtool_check
from tests.exporter.helpers import error_server, hanging_server


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


@pytest.mark.slow
def test_exporter_serves_a_mixed_fleet_within_the_announced_budget() -> None:
    new = SimulatorSettings(num_gpu_blocks=300, max_model_len=2048, vllm_version="0.19.0", time_scale=0.0)
    old = SimulatorSettings(num_gpu_blocks=200, max_model_len=2048, vllm_version="0.8.5", time_scale=0.0)
    with (
        start_simulator(new) as sim_new,
        start_simulator(old) as sim_old,
        hanging_server() as hang,
        error_server() as broken,
    ):
        for sim in (sim_new, sim_old):
            httpx.post(f"{sim.url}/v1/completions", json={"prompt": [5] * 64, "max_tokens": 8}).raise_for_status()
        targets = [
            parse_static_target(
                f"{sim_new.metrics_url}#namespace=ml&pod=new-0&workload=new&planned-num-gpu-blocks=250"
            ),
            parse_static_target(f"{sim_old.metrics_url}#namespace=ml&pod=old-0&workload=old"),
            parse_static_target(f"{hang.url}#namespace=ml&pod=hang-0&workload=hang"),
            parse_static_target(f"{broken.url}#namespace=ml&pod=broken-0&workload=broken"),
        ]
        config = ExporterConfig(host="127.0.0.1", port=0, targets=targets, retuner=RetunerSettings(mode="off"))
        with start_exporter(config) as exporter:
            assert httpx.get(f"{exporter.url}/healthz").text == "ok\n"
            assert httpx.get(f"{exporter.url}/readyz").status_code == 200
            response = httpx.get(
                f"{exporter.url}/metrics", timeout=10, headers={"X-Prometheus-Scrape-Timeout-Seconds": "2"}
            )
    assert response.status_code == 200
    samples = _samples(response.text)
    up = {labels["pod"]: value for labels, value in samples["kv_planner_target_up"]}
    assert up == {"new-0": 1.0, "old-0": 1.0, "hang-0": 0.0, "broken-0": 0.0}
    errors = {labels["pod"]: labels["reason"] for labels, _ in samples["kv_planner_scrape_errors_total"]}
    assert errors == {"hang-0": "timeout", "broken-0": "http_status"}
    assert samples["kv_planner_collect_budget_seconds"][0][1] == 1.5
    blocks = {labels["pod"]: value for labels, value in samples["kv_planner_kv_blocks_total"]}
    assert blocks == {"new-0": 300.0, "old-0": 200.0}
    ratio = samples["kv_planner_kv_blocks_plan_ratio"]
    assert [(labels["pod"], value) for labels, value in ratio] == [("new-0", 1.2)]
    result = promtool_check(response.text)
    assert result.returncode == 0, result.stdout + result.stderr


def test_discovery_mode_scrapes_the_pods_the_api_lists() -> None:
    from tests.exporter.test_discovery import OPTED_IN, FakeCore, FakeWatch, make_pod

    settings = SimulatorSettings(num_gpu_blocks=77, max_model_len=512, time_scale=0.0)
    with start_simulator(settings) as sim:
        pod = make_pod(
            "qwen-7b-6d4f8c9b7-x2x8k",
            ip="127.0.0.1",
            args=["--model", "m", "--port", str(sim.port), "--max-num-seqs", "12"],
            annotations={
                "kv-planner.io/planned-num-gpu-blocks": "70",
                "kv-planner.io/plan": '{"v":1,"gpu":"L4","gpuCount":1,"vllmVersion":"0.19.0"}',
            },
        )
        core = FakeCore(OPTED_IN, [pod])
        config = ExporterConfig(host="127.0.0.1", port=0, discover=True, retuner=RetunerSettings(mode="off"))
        from admission.exporter.server import RunningExporter, build

        parts = build(config, core_api=core, apps_api=object())
        assert parts.discovery is not None
        parts.discovery._watch_factory = lambda: FakeWatch([], [])  # a watch that ends at once
        parts.discovery._sleep = lambda _: time.sleep(0.05)
        with RunningExporter(parts).start() as exporter:
            assert parts.discovery.synced.wait(10)
            assert httpx.get(f"{exporter.url}/readyz").status_code == 200
            samples = _samples(httpx.get(f"{exporter.url}/metrics", timeout=10).text)
    up = [
        (labels["namespace"], labels["pod"], labels["workload"], value)
        for labels, value in samples["kv_planner_target_up"]
    ]
    assert up == [("llm", "qwen-7b-6d4f8c9b7-x2x8k", "qwen-7b", 1.0)]
    assert samples["kv_planner_max_num_seqs_configured"][0][1] == 12
    assert samples["kv_planner_kv_blocks_plan_ratio"][0][1] == 1.1
    assert "kv_planner_discovery_errors_total" in samples
    plan = samples["kv_planner_plan_info"][0][0]
    assert (plan["gpu"], plan["gpu_count"], plan["vllm_version"]) == ("L4", "1", "0.19.0")
