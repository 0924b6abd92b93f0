"""Decision time for workloads whose vLLM release is known vs unknown (planner/policy/versions.py).

    python benchmarks/unknown_release.py [--workloads 60] [--markdown]

An unknown release is planned for every release row kv-planner knows (17 light plans, summed up and
memoized per model/GPU/args). Cold: each workload seen for the first time (a distinct context length);
warm: the same workloads again. In-process `decide`, one thread; pin it with `taskset -c 1`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from planner.policy.check import check_policy
from planner.policy.decide import decide
from planner.policy.planning import CoreBackend

IMAGES = {
    "known (vllm/vllm-openai:v0.19.0)": "vllm/vllm-openai:v0.19.0",
    "unknown (:latest)": "vllm/vllm-openai:latest",
}


def _workload(image: str, length: int) -> dict[str, Any]:
    container = {
        "name": "vllm",
        "image": image,
        "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", str(length)],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    pod = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "containers": [container]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": "team"},
        "spec": {"template": {"spec": pod}},
    }


def _ms(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=60)
    parser.add_argument("--markdown", action="store_true")
    options = parser.parse_args()
    policy = check_policy({"modelLookup": {"offline": True}, "validationAction": "Audit"}).for_namespace("team")
    rows = []
    for label, image in IMAGES.items():
        backend = CoreBackend()
        decide(_workload(image, 1000), policy=policy, backend=backend)  # imports, catalogs
        workloads = [_workload(image, 2000 + 37 * i) for i in range(options.workloads)]
        timings: dict[str, list[float]] = {"cold": [], "warm": []}
        for phase in ("cold", "warm"):
            for workload in workloads:
                started = time.perf_counter()
                decide(workload, policy=policy, backend=backend)
                timings[phase].append(time.perf_counter() - started)
        rows.append((label, timings))
    if options.markdown:
        print("| release | cold median / p90 (ms) | warm median / p90 (ms) |")
        print("|---|---:|---:|")
    for label, timings in rows:
        cold, warm = timings["cold"], timings["warm"]
        cells = (
            f"{statistics.median(cold) * 1000:.1f} / {_ms(cold, 0.9):.1f}",
            f"{statistics.median(warm) * 1000:.2f} / {_ms(warm, 0.9):.2f}",
        )
        print(
            f"| {label} | {cells[0]} | {cells[1]} |"
            if options.markdown
            else f"{label}: cold {cells[0]}, warm {cells[1]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
