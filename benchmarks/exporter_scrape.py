"""Benchmark: one exporter scrape across 50 simulated vLLM targets, one of them hanging.

    python benchmarks/exporter_scrape.py [--targets 50] [--repeats 5] [--per-target-timeout 5]

49 simulators (vLLM 0.19.0 pages with traffic on them, in one helper process so their CPU is not
counted) and one target that accepts the connection and never answers. The exporter runs in this
process behind its real HTTP server; each repeat is one GET /metrics with Prometheus' default
``X-Prometheus-Scrape-Timeout-Seconds: 10``. Reported: wall time of the scrape and CPU seconds of this
process during it (median over repeats), for the per-target timeout given and for 1 s, plus the same
fleet without the hanging target. Not a test: numbers depend on the machine; docs/exporter.md has them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from admission.exporter.server import ExporterConfig, start_exporter  # noqa: E402
from admission.exporter.service import ScrapeSettings  # noqa: E402
from admission.observations.targets import parse_static_target  # noqa: E402
from admission.retuner import RetunerSettings  # noqa: E402
from tests.exporter.helpers import hanging_server  # noqa: E402

HELPER = """
import sys, time, httpx
from planner.sim import SimulatorSettings, start_simulator
sims = []
for i in range(int(sys.argv[1])):
    sim = start_simulator(SimulatorSettings(num_gpu_blocks=4000 + i, max_model_len=8192, max_num_seqs=64,
                                            vllm_version="0.19.0", time_scale=0.0, seed=i))
    for n in range(6):
        httpx.post(sim.url + "/v1/completions", json={"prompt": [n + 1] * (200 + 300 * n), "max_tokens": 50 + 40 * n},
                   timeout=60).raise_for_status()
    sims.append(sim)
print(" ".join(str(s.port) for s in sims), flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
"""


def scrape_once(url: str) -> tuple[float, float, int]:
    cpu, wall = time.process_time(), time.perf_counter()
    response = httpx.get(f"{url}/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"}, timeout=30)
    response.raise_for_status()
    return time.perf_counter() - wall, time.process_time() - cpu, response.text.count("\nkv_planner_target_up{")


def measure(urls: list[str], per_target_timeout: float, repeats: int) -> dict[str, float]:
    targets = [
        parse_static_target(f"{u}#namespace=bench&pod=pod-{i:02d}&workload=w{i % 5}&planned-num-gpu-blocks=4000")
        for i, u in enumerate(urls)
    ]
    config = ExporterConfig(
        host="127.0.0.1",
        port=0,
        targets=targets,
        retuner=RetunerSettings(mode="off"),
        scrape=ScrapeSettings(scrape_timeout_s=per_target_timeout),
    )
    walls, cpus = [], []
    with start_exporter(config) as exporter:
        scrape_once(exporter.url)  # warm-up: imports, connection pool
        for _ in range(repeats):
            wall, cpu, _count = scrape_once(exporter.url)
            walls.append(wall)
            cpus.append(cpu)
    return {
        "targets": len(urls),
        "per_target_timeout_s": per_target_timeout,
        "wall_s_median": statistics.median(walls),
        "cpu_s_median": statistics.median(cpus),
        "wall_s_max": max(walls),
        "cpu_s_max": max(cpus),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--per-target-timeout", type=float, default=5.0)
    options = parser.parse_args()
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER, str(options.targets - 1)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert helper.stdout is not None
        ports = helper.stdout.readline().split()
        if len(ports) != options.targets - 1:
            raise SystemExit("the simulator helper did not start")
        sims = [f"http://127.0.0.1:{p}/metrics" for p in ports]
        with hanging_server() as hang:
            results = [
                measure([*sims, hang.url], options.per_target_timeout, options.repeats),
                measure([*sims, hang.url], 1.0, options.repeats),
                measure(sims, options.per_target_timeout, options.repeats),
            ]
    finally:
        if helper.stdin:
            helper.stdin.close()
        helper.wait(30)
    results[2]["note"] = "no hanging target"  # type: ignore[assignment]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
