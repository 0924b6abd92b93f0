"""Drives the simulated engines in real time inside the server's event loop.

Each engine (one per data-parallel rank) runs as an asyncio task: take a step on the virtual clock,
publish its tokens and metrics, then sleep ``step seconds x time_scale`` of wall time (``time_scale``
0 = no sleeping, only a yield). While an engine is idle its virtual clock follows the wall clock
(divided by ``time_scale``), so queue times of requests arriving later stay meaningful.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator

from planner.sim.engine import Engine, StepResult, TokenEvent
from planner.sim.scheduler import Request, Status
from planner.sim.settings import SimulatorSettings

logger = logging.getLogger("planner.sim")


class SimulatorRuntime:
    def __init__(self, settings: SimulatorSettings) -> None:
        from planner.sim.cache_config import CacheSettings
        from planner.sim.metrics import MetricsRecorder

        self.settings = settings
        config = settings.engine_config()
        self.engines = [Engine(config, index) for index in range(settings.data_parallel_size)]
        self.recorder = MetricsRecorder(
            release=settings.release,
            engine_kind=settings.engine_kind,
            model_name=settings.name,
            engine_indexes=list(range(settings.data_parallel_size)),
            max_model_len=settings.effective_max_model_len,
            cache=CacheSettings(
                num_gpu_blocks=settings.num_gpu_blocks,
                block_size=settings.block_size,
                gpu_memory_utilization=settings.gpu_memory_utilization,
                cache_dtype=settings.kv_cache_dtype,
                enable_prefix_caching=settings.prefix_caching,
                max_model_len=settings.effective_max_model_len,
                block_size_given=settings.block_size_given,
            ),
            info=simulator_info_labels(settings),
        )
        self.started_at = time.time()
        self._wake = [asyncio.Event() for _ in self.engines]
        self._idle_since = [time.monotonic() for _ in self.engines]
        self._tasks: list[asyncio.Task[None]] = []
        self._ids = itertools.count()
        self._rotation = itertools.count()
        self.failed: BaseException | None = None

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(index)) for index in range(len(self.engines))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def next_request_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):08x}"

    def _pick_engine(self) -> int:
        # vLLM's DP coordinator routes to the least loaded engine (waiting weighs more than running);
        # ties rotate, so sequential requests spread over idle engines.
        count = len(self.engines)
        start = next(self._rotation) % count
        loads = [
            (len(e.scheduler.waiting) * 4 + len(e.scheduler.running), (i - start) % count, i)
            for i, e in enumerate(self.engines)
        ]
        return min(loads)[2]

    async def generate(self, request: Request) -> AsyncIterator[TokenEvent]:
        """Submit a request and yield its token events until it finishes (aborts it if cancelled)."""
        if self.failed is not None:
            raise RuntimeError(f"the simulated engine failed: {self.failed}")
        queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        request.sink = queue
        index = self._pick_engine()
        engine = self.engines[index]
        if not engine.has_work and self.settings.time_scale > 0:
            engine.advance_idle((time.monotonic() - self._idle_since[index]) / self.settings.time_scale)
        engine.add_request(request)
        self._wake[index].set()
        try:
            while True:
                event = await queue.get()
                yield event
                if event.finish_reason is not None:
                    return
        finally:
            if request.status is not Status.FINISHED:
                # The client went away: free the request's blocks now and show it on the gauges now,
                # not at the engine's next step (an idle engine has none). vLLM V1 does not count a
                # client abort in vllm:request_success (vllm 0.19.0 vllm/v1/engine/output_processor.py:
                # abort_requests drops the request before its final stats); the simulator counts it in
                # its own kv_planner_simulator_aborted_requests_total.
                engine.abort(request)
                self.recorder.aborted(
                    index,
                    running=len(engine.scheduler.running),
                    waiting=len(engine.scheduler.waiting),
                    kv_cache_usage=engine.kv.usage(),
                )

    async def _run(self, index: int) -> None:
        engine = self.engines[index]
        wake = self._wake[index]
        try:
            while True:
                if not engine.has_work:
                    self._idle_since[index] = time.monotonic()
                    wake.clear()
                    await wake.wait()
                    continue
                result = engine.step()
                self._publish(index, result)
                if self.settings.time_scale > 0:
                    await asyncio.sleep(result.duration * self.settings.time_scale)
                else:
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # keep serving /metrics and /health; report the failure
            self.failed = error
            logger.exception("simulated engine %d failed", index)

    def _publish(self, index: int, result: StepResult) -> None:
        self.recorder.record(index, result.stats)
        for event in result.events:
            sink = event.request.sink
            if sink is not None:
                sink.put_nowait(event)

    def snapshot(self) -> dict[str, object]:
        """Engine state for tests and the docs: preemptions, usage, queue lengths per engine."""
        return {
            "engines": [
                {
                    "index": engine.engine_index,
                    "virtual_time_s": engine.now,
                    "steps": engine.steps,
                    "preemptions": engine.total_preemptions,
                    "running": len(engine.scheduler.running),
                    "waiting": len(engine.scheduler.waiting),
                    "kv_cache_usage": engine.kv.usage(),
                    "free_blocks": engine.kv.pool.num_free_blocks(),
                }
                for engine in self.engines
            ]
        }


def simulator_info_labels(settings: SimulatorSettings) -> dict[str, str]:
    from planner import __version__

    return {
        "version": __version__,
        "vllm_version": settings.vllm_version or settings.release,
        "modelled_release": settings.release,
        "vllm_engine": settings.engine_kind,
        "num_gpu_blocks": str(settings.num_gpu_blocks),
        "block_size": str(settings.block_size),
        "source": settings.source,
    }
