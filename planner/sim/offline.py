"""Run a simulated engine without a server: a list of requests in, vLLM's /metrics page out.

Deterministic (no wall clock, no threads): used to make the exporter's fixture pages and to study a
workload offline.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from planner.sim.scheduler import Request
from planner.sim.settings import SimulatorSettings

_MAX_STEPS = 1_000_000


class OfflineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int = Field(ge=1)
    max_tokens: int = Field(ge=1)
    arrival_step: int = Field(default=0, ge=0, description="engine step at which the request arrives")


class OfflineResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    page: str
    preemptions: int
    steps: int
    virtual_seconds: float


def run_offline(
    settings: SimulatorSettings, requests: Sequence[OfflineRequest], *, stop_after_steps: int | None = None
) -> OfflineResult:
    """Serve ``requests`` (round-robin over data-parallel engines) until all finish, or for
    ``stop_after_steps`` steps (a page taken mid-run); return the page."""
    from planner.sim.runtime import SimulatorRuntime

    runtime = SimulatorRuntime(settings)
    rng = random.Random(settings.seed)
    pending = sorted(enumerate(requests), key=lambda item: (item[1].arrival_step, item[0]))
    engines = runtime.engines
    step = 0
    limit = _MAX_STEPS if stop_after_steps is None else min(_MAX_STEPS, stop_after_steps)
    while step < limit:
        while pending and pending[0][1].arrival_step <= step:
            index, spec = pending.pop(0)
            prompt = [rng.randrange(1, 30000) for _ in range(spec.prompt_tokens)]
            engine = engines[index % len(engines)]
            engine.add_request(
                Request(
                    f"offline-{index}",
                    prompt,
                    max_tokens=spec.max_tokens,
                    ignore_eos=True,
                    max_tokens_param=spec.max_tokens,
                )
            )
        busy = [engine for engine in engines if engine.has_work]
        if not busy and not pending:
            break
        for engine in busy:
            runtime.recorder.record(engine.engine_index, engine.step().stats)
        step += 1
    return OfflineResult(
        page=runtime.recorder.exposition().decode(),
        preemptions=sum(engine.total_preemptions for engine in engines),
        steps=step,
        virtual_seconds=max(engine.now for engine in engines),
    )
