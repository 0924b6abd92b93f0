"""The decision pool's sizing and routing, without processes (pool.py): workers from the CPU limit, reviews of
one workload to one worker when it is free, within the same per-namespace share; the fork server's warm-up."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from admission.webhook.handler import Reviewer
from admission.webhook.pool import (
    DecisionPool,
    Undecided,
    _cgroup2_quota,
    _cpu_seconds,
    _Worker,
    cpu_limit,
    workers_for,
)
from admission.webhook.worker import WARM_GPUS, WARM_MODELS, warm_popular, warm_profiles
from planner.policy.planning import CoreBackend


def test_workers_follow_the_cpu_limit() -> None:
    assert [workers_for(c) for c in (0.5, 1, 2, 2.5, 8)] == [3, 3, 3, 4, 9]
    assert _cgroup2_quota("max 100000\n") is None
    assert _cgroup2_quota("150000 100000\n") == 1.5
    assert 0 < cpu_limit() <= 1024


def _pool_of_three() -> DecisionPool:
    pool = DecisionPool(3, CoreBackend)
    pool._idle = [_Worker(process=None, sock=None, slot=slot) for slot in range(3)]  # type: ignore[arg-type]
    return pool


def test_a_workload_goes_to_its_worker_when_that_one_is_free() -> None:
    async def run() -> None:
        pool = _pool_of_three()
        try:
            keys = [f"ml/apps/Deployment/llm-{i}" for i in range(12)]
            for key in keys:
                worker = await pool._acquire("ml", 1.0, key)
                assert worker.slot == pool._slot_of(key)
                pool._give_back("ml", worker)
            # Its worker busy (held by another namespace): any free worker takes the review.
            key = keys[0]
            busy = await pool._acquire("other", 1.0, key)
            worker = await pool._acquire("ml", 1.0, key)
            assert worker is not busy and worker.slot != pool._slot_of(key)
        finally:
            pool.close()

    asyncio.run(run())


def test_routing_keeps_the_per_namespace_share() -> None:
    async def run() -> None:
        pool = _pool_of_three()
        try:
            held = [await pool._acquire("ml", 1.0, f"k{i}") for i in range(2)]
            # The third worker is free and may be this key's, but one namespace holds at most two of three.
            free = next(w for w in pool._idle)
            key = next(f"k{i}" for i in range(100) if pool._slot_of(f"k{i}") == free.slot)
            with pytest.raises(Undecided):
                await pool._acquire("ml", 0.05, key)
            assert await pool._acquire("other", 1.0, key) is free
            assert len(held) == 2
        finally:
            pool.close()

    asyncio.run(run())


class _Counting:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def decide(self, request: Any, policy: Any, inventory: Any) -> None:
        spec = request.object["spec"]["template"]["spec"]
        self.seen.append((spec["containers"][0]["args"][1], spec["nodeSelector"]["nvidia.com/gpu.product"]))


def test_the_fork_server_warms_popular_models_within_its_time() -> None:
    reviewer = _Counting()
    assert warm_popular(reviewer, seconds=60) == WARM_MODELS * len(WARM_GPUS)  # type: ignore[arg-type]
    models = {model for model, _ in reviewer.seen}
    assert len(models) == WARM_MODELS and "meta-llama/Llama-3.1-8B-Instruct" in models
    assert {gpu for _, gpu in reviewer.seen} == set(WARM_GPUS)
    assert warm_popular(_Counting(), seconds=0) == 0  # type: ignore[arg-type]


def test_the_processes_collect_rarely_and_skip_what_start_up_loaded() -> None:
    # (in a child: the collector's settings are the whole process's)
    code = (
        "import gc; from admission.webhook import heap; heap.settle(); "
        "assert gc.get_threshold()[0] == heap.YOUNG > 700 and gc.get_freeze_count() > 1000; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_fork_server_plans_one_profiled_review() -> None:
    decision = warm_profiles(Reviewer(backend=CoreBackend()))
    assert decision is not None and any("workload profile" in f.message for f in decision.findings)


_BURN_THEN_WAIT = """
import sys, time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


def test_a_workers_cpu_time_is_read_from_its_cpu_clock() -> None:
    """An overrun is told from the worker's CPU time (did it compute, or was it starved?). It is read from
    the process's CPU clock, to the nanosecond, not from /proc/<pid>/stat in 10 ms ticks; a process that is
    gone, and a pid that names no process of its own (0, -1: the caller's clock), read as None."""
    burner = subprocess.Popen(
        [sys.executable, "-c", _BURN_THEN_WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert burner.stdout is not None and burner.stdout.readline() == "burnt\n"  # now idle: stable readings
        used = _cpu_seconds(burner.pid)
        assert used is not None and 0.3 <= used < 1.0
        assert used != round(used, 2)  # (finer than the 10 ms ticks of /proc)
        with open(f"/proc/{burner.pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        assert abs(used - ticks) <= 0.02  # (the same count; /proc rounds it to its ticks)
    finally:
        burner.communicate("")
    assert _cpu_seconds(burner.pid) is None
    assert _cpu_seconds(0) is None and _cpu_seconds(-1) is None
