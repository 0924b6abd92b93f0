"""End to end on a real Prometheus: every panel, variable and rule of the shipped dashboards and rules
returns data, and the preemption alert fires.

A Prometheus (the Debian 2.42 binary) on 127.0.0.1 scrapes, every second, simulated vLLM servers of
four releases (new metric names, old names only, both, and the V0 engine; one with two data-parallel
engines) and the kv-planner exporter, with the shipped rules at shortened `for:` durations. A load
generator overflows the simulators' small KV caches, so they preempt and queue.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dash_e2e_stack import (
    ADMISSION,
    Load,
    Process,
    PrometheusAPI,
    Sim,
    SimSpec,
    finite_values,
    free_port,
    http_ok,
    prometheus_config,
    start_prometheus,
    start_sim,
    wait_until,
)
from dash_queries import load_dashboards, panel_queries, rule_expressions, substitute, variable_queries

from dashboards.params import Params
from dashboards.prometheus_rules import alert_signals, render_rules

pytestmark = [pytest.mark.slow, pytest.mark.needs_prometheus, pytest.mark.timeout(420)]

SIMS = (
    SimSpec("team-a", "llama-new-0", "demo/llama-8b", "0.33.0", ("--data-parallel-size", "2")),
    SimSpec("team-a", "llama-old-0", "demo/llama-8b", "0.8.5"),  # old metric names only (V1 engine)
    SimSpec("team-b", "qwen-both-0", "demo/qwen-7b", "0.10.2"),  # old and new names side by side
    SimSpec("team-b", "qwen-v0-0", "demo/qwen-7b", "0.8.5", ("--vllm-engine", "v0")),  # V0 engine
)
# A small cache (64 blocks x 16 tokens = 1,024 tokens) against up to 24 sequences of up to 720 tokens.
NUM_GPU_BLOCKS, MAX_NUM_SEQS, MAX_MODEL_LEN = 64, 24, 1008
CACHE = (
    "--num-gpu-blocks", str(NUM_GPU_BLOCKS), "--block-size", "16", "--max-num-seqs", str(MAX_NUM_SEQS),
    "--max-model-len", str(MAX_MODEL_LEN), "--enable-prefix-caching",
)  # fmt: skip
# What the webhook would have planned for each pod; the V0 pod got 25% more blocks than vLLM allocates.
PLANNED_BLOCKS = {"llama-new-0": 62, "llama-old-0": 62, "qwen-both-0": 64, "qwen-v0-0": 80}
TIME_SCALE = 0.05  # 20x faster than real time
SHORT = Params(
    kv_near_full_for="10s",
    preemptions_for="10s",
    queue_for="10s",
    plan_deviation_for="10s",
    exporter_down_for="10s",
    target_down_for="10s",
    recommendation_pending_for="10s",
)
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval gives for a 1s scrape interval, rounded up


def exporter_target(sim: Sim) -> str:
    """A static exporter target with what discovery would read from the pod and its annotations."""
    workload = sim.spec.pod.split("-")[0]
    return (
        f"{sim.url}/metrics#namespace={sim.spec.namespace}&pod={sim.spec.pod}&workload={workload}"
        f"&planned-num-gpu-blocks={PLANNED_BLOCKS[sim.spec.pod]}&max-num-seqs={MAX_NUM_SEQS}"
        f"&max-model-len={MAX_MODEL_LEN}&gpu=L4&gpu-count=1&vllm-version={sim.spec.vllm_version}"
    )


@dataclass
class Stack:
    api: PrometheusAPI
    sims: list[Sim]
    processes: list[Process]
    load: Load
    started: float

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.processes)


@pytest.fixture(scope="module")
def stack(prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    processes: list[Process] = []
    load: Load | None = None
    api: PrometheusAPI | None = None
    try:
        sims = [start_sim(spec, tmp, seed=i, time_scale=TIME_SCALE, cache=CACHE) for i, spec in enumerate(SIMS)]
        processes += [sim.process for sim in sims]
        for sim in sims:
            wait_until(f"{sim.url}/health", functools.partial(http_ok, f"{sim.url}/health"), timeout=60)

        exporter_port = free_port()
        exporter = Process(
            "exporter",
            [
                *ADMISSION, "exporter",
                "--host", "127.0.0.1",
                "--port", str(exporter_port),
                # recommend quickly: observe every 2 s, act on 2 observations, no dwell time
                "--retune", "recommend",
                "--retune-interval", "2",
                "--retune-persist", "2",
                "--retune-min-dwell", "0",
                "--retune-min-requests", "5",
                "--log-level", "warning",
                *[arg for sim in sims for arg in ("--targets", exporter_target(sim))],
            ],
            tmp / "exporter.log",
        )  # fmt: skip
        exporter.start()
        processes.append(exporter)
        wait_until("the exporter", lambda: http_ok(f"http://127.0.0.1:{exporter_port}/healthz"), timeout=60)

        rules_file = tmp / "kv-planner.rules.yaml"
        rules_file.write_text(render_rules(SHORT))
        config = prometheus_config(
            sims, exporter_port, rules_file, {"namespace": "kv-planner", "pod": "kv-planner-exporter-0"}
        )
        prometheus, base = start_prometheus(prometheus_bin, config, tmp)
        processes.append(prometheus)
        wait_until("Prometheus ready", lambda: http_ok(f"{base}/-/ready"), timeout=60)
        api = PrometheusAPI(base)
        wait_until("every target up", lambda: _all_targets_up(api, len(sims) + 1), timeout=60)

        started = time.time()
        load = Load([s.url for s in sims], [s.spec.model for s in sims], concurrency=12, max_seconds=300)
        load.start()
        yield Stack(api, sims, processes, load, started)
    finally:
        if load is not None:
            load.stop()
        if api is not None:
            api.close()
        for process in reversed(processes):
            process.stop()


def _all_targets_up(api: PrometheusAPI, expected: int) -> bool:
    targets = api.get("/api/v1/targets")["activeTargets"]
    return len(targets) == expected and all(t["health"] == "up" for t in targets)


@pytest.fixture(scope="module")
def loaded(stack: Stack) -> Stack:
    """The stack once the preemption alert fires (bounded wait), i.e. after sustained preemptions."""
    try:
        wait_until(
            "KVPlannerPreemptionsSustained to fire",
            lambda: bool(stack.api.firing("KVPlannerPreemptionsSustained")),
            timeout=120,
            interval=2,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nload: {stack.load.completed} requests\n{stack.logs()}") from exc
    assert all(p.alive() for p in stack.processes), stack.logs()
    return stack


def test_preemption_alert_fires_for_overloaded_pods(loaded: Stack) -> None:
    firing = loaded.api.firing("KVPlannerPreemptionsSustained")
    pods = {a["labels"]["pod"] for a in firing}
    assert pods <= {s.spec.pod for s in loaded.sims}
    assert pods, firing
    assert all(a["labels"]["severity"] == "warning" and a["annotations"]["runbook"] for a in firing)
    assert loaded.load.completed > 0


def test_plan_deviation_alert_fires_for_the_mismatched_pod(loaded: Stack) -> None:
    wait_until(
        "KVPlannerKVBlocksDeviateFromPlan to fire",
        lambda: bool(loaded.api.firing("KVPlannerKVBlocksDeviateFromPlan")),
        timeout=60,
        interval=2,
    )
    firing = loaded.api.firing("KVPlannerKVBlocksDeviateFromPlan")
    assert {(a["labels"]["pod"], float(a["value"])) for a in firing} == {("qwen-v0-0", NUM_GPU_BLOCKS / 80)}
    assert not loaded.api.firing("KVPlannerExporterDown")
    assert not loaded.api.firing("KVPlannerTargetScrapeFailing")


def wait_for_data(what: str, empty_queries: Callable[[], list[str]]) -> None:
    """Ask until ``empty_queries`` (the queries still without data) is empty, for at most 90 s.

    Some series appear only after the load has run a while (the retuner recommends after
    --retune-persist observations, then Prometheus scrapes the exporter), later still on a loaded machine.
    """
    empty: list[str] = []

    def answered() -> bool:
        empty[:] = empty_queries()
        return not empty

    try:
        wait_until(what, answered, timeout=90, interval=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still without data:\n" + "\n".join(empty)) from exc


def test_every_panel_returns_data(loaded: Stack, repo_root: Path) -> None:
    queries = panel_queries(load_dashboards(repo_root))

    def empty_panels() -> list[str]:
        now = time.time()
        rng = f"{int(now - loaded.started) + 1}s"
        empty = []
        for q in queries:
            expr = substitute(q.expr, rng=rng, rate_interval=RATE_INTERVAL)
            # Grafana runs instant targets at the end of the range and range targets over it.
            result = loaded.api.instant(expr) if q.instant else loaded.api.range(expr, loaded.started, now, 2)
            if finite_values(result) == 0:
                empty.append(f"{q.where}: {expr} -> {result}")
        return empty

    wait_for_data("every panel to return data", empty_panels)


def test_every_template_variable_lists_every_simulated_pod(loaded: Stack, repo_root: Path) -> None:
    expected = {
        "namespace": {s.spec.namespace for s in loaded.sims},
        "model_name": {s.spec.model for s in loaded.sims},
        "pod": {s.spec.pod for s in loaded.sims},
    }
    for v in variable_queries(load_dashboards(repo_root)):
        selector = substitute(v.selector, rng="1m", rate_interval=RATE_INTERVAL)
        assert set(loaded.api.label_values(v.label, selector)) == expected[v.label], v


def test_every_rule_returns_data(loaded: Stack) -> None:
    recorded = [name for name, _ in rule_expressions(render_rules(SHORT)) if ":" in name]
    assert len(recorded) == 8

    def empty_signals() -> list[str]:
        empty = [f"recorded series {name} is empty" for name in recorded if not finite_values(loaded.api.instant(name))]
        for alert, signals in alert_signals(SHORT).items():
            for expr in signals:
                if finite_values(loaded.api.instant(expr)) == 0:
                    empty.append(f"{alert} compares {expr}, which has no data: it could never fire")
        return empty

    wait_for_data("every rule to return data", empty_signals)


def test_one_series_per_pod_whatever_the_vllm_release(loaded: Stack) -> None:
    usage = loaded.api.instant("kv_planner:kv_cache_usage:ratio")
    seen: dict[tuple[str, str], int] = {}
    for series in usage:
        key = (series["metric"]["pod"], series["metric"].get("engine", ""))
        seen[key] = seen.get(key, 0) + 1
    assert all(count == 1 for count in seen.values()), seen
    assert {pod for pod, _ in seen} == {s.spec.pod for s in loaded.sims}
    # vLLM scraped directly wins over the exporter's copy of the same pod.
    assert {series["metric"]["job"] for series in usage} == {"vllm"}
    assert {engine for pod, engine in seen if pod == "llama-new-0"} == {"0", "1"}
    # One inter-token latency histogram per engine: the new name, or the old one where only it exists.
    itl = loaded.api.instant('count by (pod) (kv_planner:inter_token_latency_seconds_bucket:rate5m{le="+Inf"})')
    per_pod = {series["metric"]["pod"]: int(series["value"][1]) for series in itl}
    assert per_pod == {"llama-new-0": 2, "llama-old-0": 1, "qwen-both-0": 1, "qwen-v0-0": 1}
