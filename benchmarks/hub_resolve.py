"""Benchmark: how long resolve_model takes on each path, against the test suite's local Hub on 127.0.0.1.

Run: python benchmarks/hub_resolve.py [--repeats 20] [--shards 4]
Serves a Llama-3.1-8B-shaped BF16 checkpoint (virtual shards: headers only) and times, median of the
repeats: a cold lookup (empty cache: model_info, config download, one range request per shard), a
lookup from a new process with a warm cache (model_info + HEAD of config.json; headers from the
on-disk summary), an offline lookup (cache only), and a repeat in the same process (memory).
Figures go in docs/models.md. Not part of the test suite (timings on shared machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "hub"))

from hub_builders import big_llama_layout, config_bytes, header_only, llama_config
from hub_fake_server import Blob, FakeHub, Repo

from planner.hub.resolve import clear_resolution_cache, resolve_model

REPO = "bench/llama-8b"


def publish(hub: FakeHub, shards: int) -> None:
    layout = big_llama_layout(32, 4096, 14336, 128256, 32, 8)
    names = list(layout)
    files: dict[str, bytes | Blob] = {}
    weight_map: dict[str, str] = {}
    for n in range(shards):
        shard = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: layout[k] for k in names[n::shards]}
        header, size = header_only(part)
        files[shard] = Blob.of(header, size=size)
        weight_map.update(dict.fromkeys(part, shard))
    files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}).encode()
    files["config.json"] = config_bytes(
        llama_config(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
        )
    )
    hub.add(Repo(REPO)).commit(files)


def median_ms(repeats: int, setup: Callable[[], None], run: Callable[[], object]) -> float:
    samples = []
    for _ in range(repeats):
        setup()
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kv-planner-bench-"))
    os.environ["HF_HOME"] = str(home)
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        with FakeHub().running() as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            publish(hub, args.shards)

            def cold() -> None:
                clear_resolution_cache()
                shutil.rmtree(home, ignore_errors=True)

            results = {
                "cold (empty cache)": median_ms(args.repeats, cold, lambda: resolve_model(REPO)),
                "new process, warm cache": median_ms(args.repeats, clear_resolution_cache, lambda: resolve_model(REPO)),
                "offline (cache only)": median_ms(
                    args.repeats, clear_resolution_cache, lambda: resolve_model(REPO, offline=True)
                ),
                "same process (memory)": median_ms(args.repeats, lambda: None, lambda: resolve_model(REPO)),
            }
            requests = len(hub.requests)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"{REPO}: {args.shards} shards, {args.repeats} repeats, {requests} HTTP requests in total")
    for label, value in results.items():
        print(f"  {label:<26} {value:9.3f} ms (median)")


if __name__ == "__main__":
    main()
