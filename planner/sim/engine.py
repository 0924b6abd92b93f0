"""One simulated vLLM engine: scheduler + block pool + speed model, stepped on a virtual clock.

The engine is plain synchronous code with no I/O and no wall clock, so a sequence of
``add_request``/``step`` calls always gives the same tokens, timings and counters for a given seed.
The serving layer (:mod:`planner.sim.runner`) drives it in real time, scaled by ``--time-scale``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from planner.sim.blocks import KVCacheManager
from planner.sim.scheduler import (
    PrefixCacheStats,
    Request,
    Scheduler,
    SchedulerLimits,
    SchedulerOutput,
    Status,
)

VOCAB_SIZE = 32000


class SpeedModel(BaseModel):
    """Seconds one engine step takes: ``base + per_token * scheduled tokens + per_context_token * context``.

    ``base`` is the fixed cost of a forward pass (reading the weights once: weights / bandwidth on a
    memory-bound decode), ``per_token`` the compute per scheduled token (prefill throughput),
    ``per_context_token`` the KV reads of attention (bytes per token / bandwidth) summed over the
    context of every scheduled request.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_s: float = Field(default=0.015, ge=0)
    per_token_s: float = Field(default=0.0001, ge=0)
    per_context_token_s: float = Field(default=0.0, ge=0)

    def step_seconds(self, out: SchedulerOutput) -> float:
        context = sum(request.num_computed_tokens for request, _ in out.scheduled)
        return self.base_s + self.per_token_s * out.num_scheduled_tokens + self.per_context_token_s * context


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_gpu_blocks: int = Field(ge=2)
    block_size: int = Field(ge=1)
    max_model_len: int = Field(ge=2)
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    reserve_full_prompt: bool = True
    prefix_stats_in_blocks: bool = False
    prefix_stats_skip_preempted: bool = True
    speed: SpeedModel = SpeedModel()
    eos_probability: float = Field(default=0.0, ge=0, lt=1)
    seed: int = 0
    check_invariants: bool = False


@dataclass
class FinishedStats:
    num_prompt_tokens: int
    num_generation_tokens: int
    max_tokens_param: int | None
    n: int
    finish_reason: str
    e2e_latency: float
    queued_time: float
    prefill_time: float
    inference_time: float
    decode_time: float
    num_preemptions: int
    num_cached_tokens: int


@dataclass
class StepStats:
    """What one step contributes to vLLM's metrics (SchedulerStats + IterationStats)."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    num_preempted: int = 0
    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    generation_tokens: int = 0
    time_to_first_token: list[float] = field(default_factory=list)
    inter_token_latency: list[float] = field(default_factory=list)
    finished: list[FinishedStats] = field(default_factory=list)

    @property
    def iteration_tokens(self) -> int:
        # vLLM observes prompt tokens of requests that got their first token plus generated tokens.
        return self.prompt_tokens + self.generation_tokens


@dataclass
class TokenEvent:
    request: Request
    token_id: int | None
    finish_reason: str | None


@dataclass
class StepResult:
    duration: float
    events: list[TokenEvent]
    stats: StepStats


class Engine:
    def __init__(self, config: EngineConfig, engine_index: int = 0) -> None:
        self.config = config
        self.engine_index = engine_index
        self.kv = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            enable_caching=config.enable_prefix_caching,
        )
        self.scheduler = Scheduler(
            self.kv,
            SchedulerLimits(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_model_len=config.max_model_len,
                enable_chunked_prefill=config.enable_chunked_prefill,
                long_prefill_token_threshold=config.long_prefill_token_threshold,
                reserve_full_prompt=config.reserve_full_prompt,
                prefix_stats_in_blocks=config.prefix_stats_in_blocks,
                prefix_stats_skip_preempted=config.prefix_stats_skip_preempted,
            ),
        )
        self.now = 0.0
        self._rngs: dict[str, random.Random] = {}
        self._counter = 0
        self.total_preemptions = 0
        self.steps = 0

    @property
    def has_work(self) -> bool:
        return bool(self.scheduler.running or self.scheduler.waiting)

    def add_request(self, request: Request) -> None:
        request.arrival_time = self.now
        # One RNG per request, seeded from the engine seed and the arrival order: generated tokens do
        # not depend on how requests interleave.
        self._rngs[request.request_id] = random.Random(f"{self.config.seed}:{self.engine_index}:{self._counter}")
        self._counter += 1
        self.scheduler.add(request)

    def abort(self, request: Request) -> None:
        if request.status is not Status.FINISHED:
            self.scheduler.remove(request)
            request.finish_reason = "abort"
            self._rngs.pop(request.request_id, None)

    def advance_idle(self, seconds: float) -> None:
        """Let virtual time pass while nothing runs (wall-clock idle time, scaled)."""
        if seconds > 0 and not self.has_work:
            self.now += seconds

    def step(self) -> StepResult:
        out = self.scheduler.schedule()
        for request in out.newly_admitted:
            request.scheduled_time = self.now  # vLLM's SCHEDULED event carries the schedule() time
        duration = self.config.speed.step_seconds(out)
        self.now += duration
        self.steps += 1
        stats = StepStats(num_preempted=len(out.preempted), prefix=out.prefix)
        self.total_preemptions += len(out.preempted)
        events: list[TokenEvent] = []
        for request, _count in out.scheduled:
            if request.num_computed_tokens < request.num_tokens:
                continue  # a prefill chunk (or recompute) that has not caught up yet: no token
            events.append(self._sample(request, stats))
            self.kv.cache_computed(request.seq, request.num_computed_tokens)
        stats.running = len(self.scheduler.running)
        stats.waiting = len(self.scheduler.waiting)
        stats.kv_cache_usage = self.kv.usage()
        if self.config.check_invariants:
            self.kv.check_invariants()
        return StepResult(duration, events, stats)

    def _sample(self, request: Request, stats: StepStats) -> TokenEvent:
        rng = self._rngs[request.request_id]
        token = rng.randrange(1, VOCAB_SIZE)
        now = self.now
        if request.first_token_time is None:
            stats.prompt_tokens += request.num_prompt_tokens
            stats.prompt_tokens_cached += max(0, request.num_cached_tokens)
            stats.time_to_first_token.append(now - request.arrival_time)
            request.first_token_time = now
        else:
            stats.inter_token_latency.append(now - (request.last_token_time or now))
        request.last_token_time = now
        request.append_output(token)
        stats.generation_tokens += 1
        reason = self._stop_reason(request, rng)
        if reason is not None:
            request.finish_reason = reason
            self.scheduler.remove(request)
            self._rngs.pop(request.request_id, None)
            stats.finished.append(self._finished_stats(request))
        return TokenEvent(request, token, reason)

    def _stop_reason(self, request: Request, rng: random.Random) -> str | None:
        generated = len(request.output_token_ids)
        if (
            self.config.eos_probability > 0
            and not request.ignore_eos
            and generated > request.min_tokens
            and rng.random() < self.config.eos_probability
        ):
            return "stop"
        if generated >= request.max_tokens or request.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def _finished_stats(self, request: Request) -> FinishedStats:
        scheduled = request.scheduled_time if request.scheduled_time is not None else request.arrival_time
        first = request.first_token_time if request.first_token_time is not None else self.now
        last = request.last_token_time if request.last_token_time is not None else self.now
        return FinishedStats(
            num_prompt_tokens=request.num_prompt_tokens,
            num_generation_tokens=len(request.output_token_ids),
            max_tokens_param=request.max_tokens_param,
            n=request.n,
            finish_reason=request.finish_reason or "length",
            e2e_latency=self.now - request.arrival_time,
            queued_time=scheduled - request.arrival_time,
            prefill_time=first - scheduled,
            inference_time=last - scheduled,
            decode_time=last - first,
            num_preemptions=request.num_preemptions,
            num_cached_tokens=max(0, request.num_cached_tokens),
        )
