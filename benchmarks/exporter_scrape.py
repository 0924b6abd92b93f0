"""Benchmark: the exporter with default settings across 50 targets, one hung, one slow, one broken.

    python benchmarks/exporter_scrape.py [--targets 50] [--repeats 5] [--soak-seconds 60] [--interval 5]

Fleet: ``targets - 3`` simulated vLLM 0.19.0 pods with traffic on them (spread over
``--sim-processes`` helper processes, so their CPU is not counted and no single process renders every
page), one target that accepts the connection and never answers, one that answers a good page after
``--slow-delay`` seconds, and one whose page has conflicting ``# TYPE`` lines. The exporter runs in this
process behind its real HTTP server with ``ScrapeSettings()`` (the defaults).

1. Latency and CPU: one GET /metrics with Prometheus' default ``X-Prometheus-Scrape-Timeout-Seconds:
   10``, ``--repeats`` times after a warm-up: wall time and CPU seconds of this process (exporter,
   HTTP server and client) per scrape; medians, plus the ratio to the same run's scrape of a fleet
   without the three bad targets.
2. False downs: a scrape every ``--interval`` seconds for ``--soak-seconds`` (the cadence at which
   pooled connections meet vLLM's 5 s idle close): healthy targets reported down, summed over scrapes.

``--renders N`` instead renders the healthy fleet N times in this process, with no HTTP server and
per-target timeouts long enough for valgrind, and prints how many targets were up: run it under
``valgrind --tool=callgrind`` with two values of N, and the difference of the totals over the difference
of N is the instructions of one scrape (they do not depend on what else the machine runs).

Not a test: numbers depend on the machine; docs/benchmarks.md has them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from admission.exporter.server import ExporterConfig, build, start_exporter  # noqa: E402
from admission.exporter.service import ScrapeSettings  # noqa: E402
from admission.observations.targets import parse_static_target  # noqa: E402
from admission.retuner import RetunerSettings  # noqa: E402
from tests.exporter.helpers import hanging_server, page_server  # noqa: E402

HELPER = """
import sys, httpx
from planner.sim import SimulatorSettings, start_simulator
first, count = int(sys.argv[1]), int(sys.argv[2])
sims = []
for i in range(first, first + count):
    sim = start_simulator(SimulatorSettings(num_gpu_blocks=4000 + i, max_model_len=8192, max_num_seqs=64,
                                            vllm_version="0.19.0", time_scale=0.0, seed=i))
    for n in range(6):
        httpx.post(sim.url + "/v1/completions", json={"prompt": [n + 1] * (200 + 300 * n), "max_tokens": 50 + 40 * n},
                   timeout=60).raise_for_status()
    sims.append(sim)
print(" ".join(str(s.port) for s in sims), flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
"""

BROKEN_SUFFIX = b"# TYPE vllm:num_requests_running counter\n"


@contextlib.contextmanager
def simulators(count: int, processes: int) -> Iterator[list[str]]:
    helpers: list[subprocess.Popen[str]] = []
    share, extra = divmod(count, processes)
    start = 0
    try:
        for index in range(processes):
            size = share + (1 if index < extra else 0)
            if size == 0:
                continue
            helpers.append(
                subprocess.Popen(
                    [sys.executable, "-c", HELPER, str(start), str(size)],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            start += size
        urls: list[str] = []
        for helper in helpers:
            assert helper.stdout is not None
            urls += [f"http://127.0.0.1:{p}/metrics" for p in helper.stdout.readline().split()]
        if len(urls) != count:
            raise SystemExit("the simulator helpers did not start")
        yield urls
    finally:
        for helper in helpers:
            if helper.stdin:
                helper.stdin.close()
        for helper in helpers:
            helper.wait(30)


# One client for every scrape of the exporter (a new httpx client loads the CA bundle: ~35 ms of CPU that
# Prometheus would not spend); its request is counted in the CPU figure, its parse of the answer is not.
PROMETHEUS = httpx.Client(timeout=30, trust_env=False)


def scrape_once(url: str) -> tuple[float, float, dict[str, float]]:
    cpu, wall = time.process_time(), time.perf_counter()
    response = PROMETHEUS.get(f"{url}/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
    elapsed, used = time.perf_counter() - wall, time.process_time() - cpu
    response.raise_for_status()
    up = {}
    for line in response.text.splitlines():
        if line.startswith("kv_planner_target_up{"):
            pod = line.split('pod="', 1)[1].split('"', 1)[0]
            up[pod] = float(line.rsplit(" ", 1)[1])
    return elapsed, used, up


def _config(urls: list[str]) -> ExporterConfig:
    targets = [
        parse_static_target(f"{u}#namespace=bench&pod=pod-{i:02d}&workload=w{i % 5}&planned-num-gpu-blocks=4000")
        for i, u in enumerate(urls)
    ]
    return ExporterConfig(host="127.0.0.1", port=0, targets=targets, retuner=RetunerSettings(mode="off"))


def latency(urls: list[str], repeats: int) -> dict[str, object]:
    walls, cpus = [], []
    downs: dict[str, float] = {}
    with start_exporter(_config(urls)) as exporter:
        scrape_once(exporter.url)  # warm-up: imports, first connections
        for _ in range(repeats):
            wall, cpu, up = scrape_once(exporter.url)
            walls.append(wall)
            cpus.append(cpu)
            downs = {pod: value for pod, value in up.items() if value == 0}
    return {
        "targets": len(urls),
        "wall_s_median": round(statistics.median(walls), 3),
        "wall_s_max": round(max(walls), 3),
        "cpu_s_median": round(statistics.median(cpus), 3),
        "down_targets": sorted(downs),
    }


def soak(urls: list[str], healthy: set[str], seconds: float, interval: float) -> dict[str, object]:
    false_downs: dict[str, int] = {}
    scrapes = 0
    with start_exporter(_config(urls)) as exporter:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            tick = time.monotonic()
            _, _, up = scrape_once(exporter.url)
            scrapes += 1
            for pod, value in up.items():
                if pod in healthy and value == 0:
                    false_downs[pod] = false_downs.get(pod, 0) + 1
            time.sleep(max(0.0, interval - (time.monotonic() - tick)))
    return {
        "scrapes": scrapes,
        "interval_s": interval,
        "false_downs": sum(false_downs.values()),
        "targets_falsely_down": sorted(false_downs),
    }


def renders(urls: list[str], count: int) -> None:
    """``count`` scrapes in-process, each target allowed 60 s (under valgrind a read takes ~50x longer)."""
    config = _config(urls).model_copy(update={"scrape": ScrapeSettings(scrape_timeout_s=60, scrape_timeout_max_s=60)})
    exporter = build(config).exporter

    async def run() -> None:
        for _ in range(count):
            body, _ = await exporter.render(300.0)
            up = [line for line in body.decode().splitlines() if line.startswith("kv_planner_target_up{")]
            print(f"{sum(line.endswith(' 1.0') for line in up)} of {len(up)} targets up", flush=True)
        await exporter.aclose()

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sim-processes", type=int, default=4)
    parser.add_argument("--slow-delay", type=float, default=0.5)
    parser.add_argument("--soak-seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--renders", type=int, help="only render the healthy fleet this many times (for callgrind)")
    options = parser.parse_args()
    if options.renders is not None:
        with simulators(options.targets - 3, options.sim_processes) as sims:
            renders(sims, options.renders)
        return
    good = (ROOT / "tests/exporter/fixtures/vllm-0.19.0-v1-dp2.metrics").read_bytes()
    with (
        simulators(options.targets - 3, options.sim_processes) as sims,
        hanging_server() as hung,
        page_server(good, delay=options.slow_delay) as slow,
        page_server(good + BROKEN_SUFFIX) as broken,
    ):
        fleet = [*sims, slow.url, hung.url, broken.url]
        healthy = {f"pod-{i:02d}" for i in range(len(sims) + 1)}  # the simulators and the slow target
        bad = latency(fleet, options.repeats)
        clean = latency(sims, options.repeats)
        soaked = soak(fleet, healthy, options.soak_seconds, options.interval)
    report = {
        "fleet": bad,
        "healthy_only": clean,
        "ratios": {
            "wall_fleet_over_healthy": round(float(bad["wall_s_median"]) / float(clean["wall_s_median"]), 2),  # type: ignore[arg-type]
            "cpu_fleet_over_healthy": round(float(bad["cpu_s_median"]) / float(clean["cpu_s_median"]), 2),  # type: ignore[arg-type]
        },
        "soak": soaked,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
