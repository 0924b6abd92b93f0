"""Regenerate the vLLM /metrics fixture pages: ``python -m tests.exporter.make_fixtures``.

Each page is what the named vLLM release's metrics code emits (families, types, labels, buckets of
``vllm/v1/metrics/loggers.py`` or, for the V0 engine, ``vllm/engine/metrics.py``, and the
``CacheConfig`` labels of ``vllm:cache_config_info``), rendered by kv-planner's simulator after a
deterministic overloaded run. tests/sim/test_catalog_source.py checks the simulator's catalogue against
each release's source; tests/exporter/test_fixtures.py checks these files against it (and against the
source itself when it is on disk). The simulator's own info metric is removed: real pages lack it.
"""

from __future__ import annotations

import random
from pathlib import Path

from planner.sim import SimulatorSettings
from planner.sim.offline import OfflineRequest, run_offline
from planner.sim.versions import parse_version

FIXTURES = Path(__file__).parent / "fixtures"

# (release, engine kind, data parallel size, num_gpu_blocks)
PAGES = [
    ("0.8.5", "v0", 1, 1201),
    ("0.8.5", "v1", 1, 1202),
    ("0.10.2", "v1", 1, 1203),
    ("0.11.0", "v1", 1, 1204),
    ("0.12.0", "v1", 1, 1205),
    ("0.19.0", "v1", 2, 1206),
    ("0.33.0", "v1", 1, 1207),
]

SOURCES = {
    "v1": "vllm/v1/metrics/loggers.py (PrometheusStatLogger)",
    "v0": "vllm/engine/metrics.py (Metrics)",
}


def fixture_name(release: str, engine: str, dp: int) -> str:
    return f"vllm-{release}-{engine}{'-dp' + str(dp) if dp > 1 else ''}.metrics"


def workload(seed: int) -> list[OfflineRequest]:
    rng = random.Random(seed)
    return [
        OfflineRequest(prompt_tokens=rng.randrange(300, 1500), max_tokens=rng.randrange(100, 900), arrival_step=i // 8)
        for i in range(96)
    ]


def render(release: str, engine: str, dp: int, blocks: int) -> str:
    settings = SimulatorSettings(
        model="meta-llama/Llama-3.1-8B-Instruct",
        num_gpu_blocks=blocks,
        block_size=16,
        max_model_len=8192,
        max_num_seqs=32,
        max_num_batched_tokens=2048,
        vllm_version=release,
        engine_kind=engine,  # type: ignore[arg-type]
        data_parallel_size=dp,
        seed=11,
        time_scale=0.0,
    )
    # Taken mid-run (900 steps): requests running and queued, some finished, preemptions so far.
    result = run_offline(settings, workload(5), stop_after_steps=900)
    lines = [line for line in result.page.splitlines() if "kv_planner_simulator_info" not in line]
    source = SOURCES[engine] + (
        "; vllm/v1/metrics/perf.py (PerfMetricsProm)" if parse_version(release) >= (0, 17, 1) else ""
    )
    config = "vllm/config.py" if release == "0.8.5" else "vllm/config/cache.py"
    header = [
        f"# kv-planner exporter fixture: vLLM {release} /metrics, {engine.upper()} engine, data parallel {dp}.",
        f"# Derived from vLLM {release} source: {source}; {config} (CacheConfig -> vllm:cache_config_info).",
        "# Rendered by kv-planner's simulator (tests/exporter/make_fixtures.py); its catalogue is checked",
        "# against that source by tests/sim/test_catalog_source.py. Values: mid-run of a simulated overload.",
        f"# expect: num_gpu_blocks={blocks} block_size=16 preemptions={result.preemptions} "
        f"engines={','.join(str(i) for i in range(dp))}",
    ]
    return "\n".join(header + lines) + "\n"


def main() -> None:
    FIXTURES.mkdir(exist_ok=True)
    for release, engine, dp, blocks in PAGES:
        path = FIXTURES / fixture_name(release, engine, dp)
        path.write_text(render(release, engine, dp, blocks))
        print(path)


if __name__ == "__main__":
    main()
