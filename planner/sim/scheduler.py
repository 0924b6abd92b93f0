"""Continuous batching with chunked prefill and recompute preemption, as vLLM V1 schedules.

Modelled on vllm 0.19.0 ``vllm/v1/core/sched/scheduler.py: Scheduler.schedule`` (FCFS policy, one
KV-cache group, no speculative decoding, no KV connector):

1. *Running* requests first, in order. Each gets ``min(tokens it still needs, token budget)`` new
   tokens. If the block pool cannot hold them, the *newest* running request (``running[-1]``) is
   preempted -- all its blocks freed, ``num_computed_tokens`` reset to 0, put at the *front* of the
   waiting queue -- and the allocation retried, until it fits or the request preempted itself.
2. *Waiting* requests next, only if nothing was preempted in this step, while the running batch is
   below ``max_num_seqs`` and token budget remains. A request that does not fit stops admission
   (no preemption for waiting requests). From 0.19 the whole prompt must fit before admission
   (``--scheduler-reserve-full-isl``, default on); before, only the first chunk.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from planner.sim.blocks import Block, KVCacheManager, SequenceState


class Status(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """One request inside an engine. ``seq.token_ids`` is prompt + generated tokens."""

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    max_tokens_param: int | None = None
    n: int = 1
    arrival_time: float = 0.0
    status: Status = Status.WAITING
    num_computed_tokens: int = 0
    num_preemptions: int = 0
    num_cached_tokens: int = -1  # prefix-cache hit at first scheduling (-1 = not scheduled yet)
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    # Virtual-clock timestamps for vLLM's per-request histograms.
    scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    sink: Any = None  # where the serving layer wants token events (opaque to the engine)
    seq: SequenceState = field(init=False)

    def __post_init__(self) -> None:
        self.seq = SequenceState(self.request_id, list(self.prompt_token_ids))

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.seq.token_ids)

    def append_output(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.seq.token_ids.append(token_id)


@dataclass
class PrefixCacheStats:
    requests: int = 0
    queries: int = 0
    hits: int = 0


@dataclass
class SchedulerOutput:
    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    newly_admitted: list[Request] = field(default_factory=list)
    prefix: PrefixCacheStats = field(default_factory=PrefixCacheStats)

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    reserve_full_prompt: bool = True
    prefix_stats_in_blocks: bool = False
    prefix_stats_skip_preempted: bool = True


class Scheduler:
    def __init__(self, kv: KVCacheManager, limits: SchedulerLimits) -> None:
        self.kv = kv
        self.limits = limits
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        request.status = Status.WAITING
        self.waiting.append(request)

    def remove(self, request: Request) -> None:
        """Take a request out (finished or aborted) and free its blocks."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.kv.free(request.request_id)
        request.status = Status.FINISHED

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.kv.free(request.request_id)
        request.status = Status.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        out.preempted.append(request)

    def _new_token_count(self, wanted: int, budget: int) -> int:
        threshold = self.limits.long_prefill_token_threshold
        if 0 < threshold < wanted:
            wanted = threshold
        return min(wanted, budget)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.limits.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            wanted = request.num_tokens - request.num_computed_tokens
            count = self._new_token_count(wanted, budget)
            count = min(count, self.limits.max_model_len - 1 - request.num_computed_tokens)
            if count <= 0:
                index += 1
                continue
            blocks: list[Block] | None = None
            while True:
                blocks = self.kv.allocate_slots(request.seq, request.num_computed_tokens, count)
                if blocks is not None:
                    break
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is request:
                    break
            if blocks is None:
                break
            out.scheduled.append((request, count))
            budget -= count
            index += 1

        if not out.preempted:
            self._admit(out, budget)
        for request, count in out.scheduled:
            request.num_computed_tokens += count
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        limits = self.limits
        while self.waiting and budget > 0:
            if len(self.running) >= limits.max_num_seqs:
                break
            request = self.waiting[0]
            hits: list[Block] = []
            hit_tokens = 0
            if request.num_computed_tokens == 0:
                hits, hit_tokens = self.kv.computed_blocks(request.seq, request.num_tokens)
                self._record_prefix_query(request, len(hits), hit_tokens, out.prefix)
            wanted = request.num_tokens - hit_tokens
            if not limits.enable_chunked_prefill and wanted > budget:
                break
            count = self._new_token_count(wanted, budget)
            if limits.reserve_full_prompt and not self.kv.can_fit(request.request_id, request.num_tokens, hits):
                break
            if self.kv.allocate_slots(request.seq, hit_tokens, count, hits) is None:
                break
            self.waiting.popleft()
            self.running.append(request)
            request.status = Status.RUNNING
            request.num_computed_tokens = hit_tokens
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = hit_tokens
                out.newly_admitted.append(request)
            out.scheduled.append((request, count))
            budget -= count

    def _record_prefix_query(self, request: Request, hit_blocks: int, hit_tokens: int, stats: PrefixCacheStats) -> None:
        """Prefix-cache counters, counted per scheduling attempt as vLLM's get_computed_blocks does."""
        if not self.kv.enable_caching:
            return
        if self.limits.prefix_stats_skip_preempted and request.num_preemptions > 0:
            return
        stats.requests += 1
        if self.limits.prefix_stats_in_blocks:
            stats.queries += (request.num_tokens - 1) // self.kv.block_size
            stats.hits += hit_blocks
        else:
            stats.queries += request.num_tokens
            stats.hits += hit_tokens
