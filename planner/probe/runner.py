"""The load probe: a bounded staircase of concurrent long requests against a live vLLM server.

For each concurrency level ``c`` the probe keeps exactly ``c`` streaming requests in flight (a
finished request is replaced at once: a closed loop, like ``c`` busy users), lets ``c`` requests
finish as a warm-up, then measures over the next ``requests_per_step`` completions: KV-cache usage,
preemptions, running/waiting requests (from ``/metrics``), time to first token, inter-token latency
and output throughput (from the streams). A step fails when preemptions or latency cross the limits.

Levels grow geometrically (``start``, ``x growth``...) up to ``max_concurrency``; after the first failing
level the probe bisects between the last passing and the first failing level, so the answer is
exact to one request. Going down, it first lets the extra requests finish (no new ones) so the
higher level's backlog does not leak into the lower level's window.

Safety (docs/probe.md): hard limits on requests sent, tokens sent (prompt + asked output) and wall
time; a stop event (Ctrl-C in the CLI) or any limit cancels every request in flight (the server
aborts a request whose client disconnects) and returns the partial report.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import PlannerInputError, ScrapeError, WorkloadProfileError
from planner.probe.client import TOKEN_ID_HIGH, TOKEN_ID_LOW, RequestResult, fetch_model, stream_completion
from planner.probe.metrics import MetricsSnapshot, scrape
from planner.probe.report import PlannerComparison, ProbeLimits, ProbeReport, ProbeStep, StopReason
from planner.workload import WorkloadProfile, capacity_for_blocks, parse_workload, risk_bounded_concurrency

FALLBACK_MAX_CONCURRENCY = 64  # staircase top when the server exposes no KV-cache facts
QUICK_PROMPT_TOKENS = 2048  # --quick: prompts of at most this many tokens (prefill is what takes the time)
QUICK_MAX_DURATION_S = 100.0  # --quick: the whole run, so it ends well inside two minutes


class ProbeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(description="base URL of the OpenAI-compatible server (with or without /v1)")
    metrics_url: str | None = Field(default=None, description="default: <endpoint>/metrics")
    model: str | None = Field(default=None, description="default: the first model the server lists")
    max_model_len: int | None = Field(default=None, ge=2, description="if the server does not report it")
    workload: WorkloadProfile | None = None
    prompt_tokens: int | None = Field(default=None, ge=1, description="without a workload (default: fill)")
    output_tokens: int = Field(default=256, ge=1, description="without a workload")
    levels: list[int] | None = Field(default=None, description="explicit concurrency levels, in order")
    start_concurrency: int | None = Field(
        default=None, ge=1, description="default: a quarter of the planner's limit for the server's KV blocks"
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=4096, description="default: twice the planner's limit (64 without metrics)"
    )
    quick: bool = Field(
        default=False,
        description="short requests (prompt <= QUICK_PROMPT_TOKENS), one round per level, no warm-up, 100 s",
    )
    growth: float = Field(default=2.0, gt=1.0, le=16.0)
    refine: bool = True
    warmup_requests: int | None = Field(default=None, ge=0, description="default: the concurrency")
    requests_per_step: int | None = Field(default=None, ge=1, description="default: max(4, 2 x concurrency)")
    max_requests: int = Field(default=1000, ge=1)
    max_tokens: int = Field(default=50_000_000, ge=1)
    max_duration_s: float = Field(default=600.0, gt=0)
    preemption_limit: float = Field(default=0.0, ge=0)
    ttft_limit_s: float | None = Field(default=None, gt=0)
    itl_limit_s: float | None = Field(default=None, gt=0)
    sample_interval_s: float = Field(default=0.5, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    headroom: float = Field(default=0.0, ge=0, lt=1, description="headroom for the planner comparison")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> ProbeConfig:
        if self.levels is not None and (not self.levels or min(self.levels) < 1):
            raise ValueError("levels must be a non-empty list of positive concurrencies")
        if self.start_concurrency and self.max_concurrency and self.start_concurrency > self.max_concurrency:
            raise ValueError("start_concurrency must not exceed max_concurrency")
        return self

    def staircase(self, planned_limit: int | None) -> tuple[int, int]:
        """(first level, top level): what the user gave, else bracketing the planner's limit for the server's
        own KV blocks and the probe's lengths (a quarter of it up to twice it), so the steps spend their
        time where the answer is; without metrics, 1 to 64."""
        if planned_limit is None:
            top = self.max_concurrency or FALLBACK_MAX_CONCURRENCY
            return min(self.start_concurrency or 1, top), top
        top = self.max_concurrency or min(4096, max(2, 2 * planned_limit))
        start = self.start_concurrency or max(1, min(planned_limit, top) // 4)
        return min(start, top), top


def effective_max_duration(config: ProbeConfig) -> float:
    """--quick bounds the whole run to QUICK_MAX_DURATION_S unless the user set a shorter limit."""
    return min(config.max_duration_s, QUICK_MAX_DURATION_S) if config.quick else config.max_duration_s


def base_url(endpoint: str) -> str:
    url = endpoint.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if not url.startswith(("http://", "https://")):
        raise PlannerInputError(f"--endpoint {endpoint!r} must be an http:// or https:// URL")
    return url


class _Lengths:
    """Prompt/output lengths of the probe's requests: from the workload, or fixed long ones."""

    def __init__(self, config: ProbeConfig, max_len: int) -> None:
        self.max_len = max_len
        self.rng = np.random.default_rng(config.seed)
        self.profile = config.workload
        self._buffer: list[tuple[int, int]] = []
        if self.profile is None:
            output = config.output_tokens
            prompt = config.prompt_tokens if config.prompt_tokens is not None else max_len - output
            if config.quick and config.prompt_tokens is None:
                prompt = min(prompt, QUICK_PROMPT_TOKENS)
            if prompt < 1 or prompt + output > max_len:
                raise PlannerInputError(
                    f"prompt {prompt} + output {output} tokens do not fit max_model_len {max_len}",
                    hint="lower --output-tokens / --prompt-tokens",
                )
            self.fixed = (prompt, output)
            fills = prompt + output >= max_len
            how = "fills the context" if fills else ("--quick: shorter than the context" if config.quick else "given")
            self.description = f"fixed: prompt {prompt} + output {output} tokens ({how})"
        else:
            self.description = (
                f"workload: prompt {self.profile.prompt_distribution.description}; "
                f"output {self.profile.output_distribution.description}"
            )

    def next(self) -> tuple[int, int]:
        if self.profile is None:
            return self.fixed
        if not self._buffer:
            m = self.max_len
            prompts = self.profile.prompt_distribution.sample(self.rng, 1024, cap=m)
            outputs = self.profile.output_distribution.sample(self.rng, 1024, cap=m)
            # vLLM refuses prompts of max_model_len tokens or more: the probe does not send them.
            pairs = zip(prompts.tolist(), outputs.tolist(), strict=True)
            self._buffer = [(p, max(1, min(o, m - p))) for p, o in pairs if p < m]
            if not self._buffer:
                raise WorkloadProfileError(f"the workload's prompts are all {m} tokens or longer")
        return self._buffer.pop()

    def comparison_profile(self) -> WorkloadProfile:
        if self.profile is None:
            prompt, output = self.fixed
            return parse_workload({"prompt_tokens": prompt, "output_tokens": output})
        # The probe's random prompts never hit the prefix cache: compare without the credit.
        return parse_workload({**self.profile.model_dump(), "prefix_cache_hit_rate": 0.0})


class _Sampler:
    """Scrapes /metrics every ``interval`` seconds (and on demand at window edges)."""

    def __init__(self, client: httpx.AsyncClient, url: str | None, interval: float, model: str) -> None:
        self.client, self.url, self.interval, self.model = client, url, interval, model
        self.samples: list[tuple[float, MetricsSnapshot]] = []
        self.last_error: str | None = None

    async def sample_now(self) -> MetricsSnapshot | None:
        if self.url is None:
            return None
        try:
            snapshot = await scrape(self.client, self.url, model_name=self.model)
        except ScrapeError as error:
            self.last_error = str(error)
            return None
        self.samples.append((time.monotonic(), snapshot))
        return snapshot

    async def loop(self) -> None:
        while True:
            await self.sample_now()
            await asyncio.sleep(self.interval)

    def window(self, start: float, end: float) -> list[MetricsSnapshot]:
        return [s for t, s in self.samples if start <= t <= end]


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _increase(first: float | None, last: float | None) -> float | None:
    if first is None or last is None:
        return None
    return last - first if last >= first else last  # a counter reset (server restart)


class _Run:
    def __init__(
        self,
        config: ProbeConfig,
        client: httpx.AsyncClient,
        *,
        base: str,
        model: str,
        lengths: _Lengths,
        sampler: _Sampler,
        stop: asyncio.Event,
        progress: Callable[[str], None],
    ) -> None:
        self.config, self.client, self.base, self.model = config, client, base, model
        self.lengths, self.sampler, self.stop, self.progress = lengths, sampler, stop, progress
        self.in_flight: set[asyncio.Task[RequestResult]] = set()
        self.requests_sent = 0
        self.tokens_sent = 0
        self.started = time.monotonic()
        self.deadline = self.started + effective_max_duration(config)
        self.halt: StopReason | None = None
        self.rng = np.random.default_rng(config.seed + 1)

    # -- requests ----------------------------------------------------------------------------------

    def _launch(self) -> bool:
        prompt, output = self.lengths.next()
        if self.requests_sent >= self.config.max_requests:
            self.halt = self.halt or "max-requests"
            return False
        if self.tokens_sent + prompt + output > self.config.max_tokens:
            self.halt = self.halt or "max-tokens"
            return False
        ids = self.rng.integers(TOKEN_ID_LOW, TOKEN_ID_HIGH, size=prompt).tolist()
        task = asyncio.create_task(stream_completion(self.client, self.base, self.model, ids, output))
        self.in_flight.add(task)
        self.requests_sent += 1
        self.tokens_sent += prompt + output
        return True

    async def _wait(self) -> list[RequestResult]:
        """Wait for at least one request to finish, the stop event or the deadline."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.halt = "max-duration"
            return []
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            done, _ = await asyncio.wait(
                {*self.in_flight, stopper}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopper.cancel()
        if self.stop.is_set():
            self.halt = "interrupted"
        elif time.monotonic() >= self.deadline:
            self.halt = "max-duration"
        finished = [task for task in self.in_flight if task in done]
        self.in_flight.difference_update(finished)
        results = []
        for task in finished:
            error = task.exception()
            if error is None:
                results.append(task.result())
            else:  # stream_completion records HTTP errors itself; anything else is recorded here
                message = f"{type(error).__name__}: {error}"
                results.append(RequestResult(0, 0, started=time.monotonic(), error=message))
        return results

    async def cancel_all(self) -> None:
        for task in self.in_flight:
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)
        self.in_flight.clear()

    # -- one level ---------------------------------------------------------------------------------

    async def run_step(self, c: int) -> ProbeStep | None:
        quick = self.config.quick
        warmup = (0 if quick else c) if self.config.warmup_requests is None else self.config.warmup_requests
        wanted = self.config.requests_per_step or (max(2, c) if quick else max(4, 2 * c))
        phase = "drain" if len(self.in_flight) > c else "warmup"
        warm_done = 0
        window: list[RequestResult] = []
        window_start = 0.0
        if phase == "warmup" and warmup == 0:
            window_start = time.monotonic()
            phase = "measure"
            await self.sampler.sample_now()
        self.progress(f"concurrency {c}: warming up ({warmup} requests), then measuring {wanted}")
        while self.halt is None:
            if phase != "drain":
                while len(self.in_flight) < c and self._launch():
                    pass
            if not self.in_flight:
                break  # a budget ran out and everything finished
            for result in await self._wait():
                if phase == "measure":
                    window.append(result)
                else:
                    warm_done += 1
            if phase == "drain" and len(self.in_flight) <= c:
                phase, warm_done = "warmup", 0
            if phase == "warmup" and warm_done >= warmup:
                phase, window_start = "measure", time.monotonic()
                await self.sampler.sample_now()
            if phase == "measure" and len(window) >= wanted:
                break
        if phase != "measure":
            return None
        await self.sampler.sample_now()  # the window's closing sample belongs to the window
        window_end = time.monotonic()
        partial = len(window) < wanted
        return self._summarise(c, window, window_start, window_end, partial)

    def _summarise(self, c: int, window: list[RequestResult], start: float, end: float, partial: bool) -> ProbeStep:
        ok = [r for r in window if r.ok]
        failed = [r for r in window if not r.ok]
        snaps = self.sampler.window(start, end)
        usage = [s.kv_cache_usage for s in snaps if s.kv_cache_usage is not None]
        preemptions = _increase(snaps[0].preemptions_total, snaps[-1].preemptions_total) if snaps else None
        duration = max(end - start, 1e-9)
        step = ProbeStep(
            concurrency=c,
            requests_completed=len(ok),
            requests_failed=len(failed),
            duration_s=duration,
            kv_cache_usage_max=max(usage) if usage else None,
            kv_cache_usage_mean=float(np.mean(usage)) if usage else None,
            preemptions=preemptions,
            requests_running_max=max((s.running for s in snaps if s.running is not None), default=None),
            requests_waiting_max=max((s.waiting for s in snaps if s.waiting is not None), default=None),
            ttft_p50_s=_percentile([r.ttft for r in ok if r.ttft is not None], 50),
            ttft_p95_s=_percentile([r.ttft for r in ok if r.ttft is not None], 95),
            itl_p50_s=_percentile([r.itl for r in ok if r.itl is not None], 50),
            itl_p95_s=_percentile([r.itl for r in ok if r.itl is not None], 95),
            output_tokens_per_s=sum(r.output_tokens for r in ok) / duration,
            passed=True,
            partial=partial,
        )
        step.reasons = self._violations(step, failed)
        step.passed = not step.reasons and step.requests_completed > 0
        return step

    def _violations(self, step: ProbeStep, failed: list[RequestResult]) -> list[str]:
        cfg = self.config
        reasons = []
        if step.preemptions is not None and step.preemptions > cfg.preemption_limit:
            reasons.append(f"{step.preemptions:.0f} preemptions > {cfg.preemption_limit:g}")
        ttft, itl = step.ttft_p95_s, step.itl_p95_s
        if cfg.ttft_limit_s is not None and ttft is not None and ttft > cfg.ttft_limit_s:
            reasons.append(f"TTFT p95 {ttft:.3f} s > {cfg.ttft_limit_s:g} s")
        if cfg.itl_limit_s is not None and itl is not None and itl > cfg.itl_limit_s:
            reasons.append(f"ITL p95 {itl * 1000:.1f} ms > {cfg.itl_limit_s * 1000:g} ms")
        if failed:
            reasons.append(f"{len(failed)} requests failed ({failed[0].error})")
        return reasons


class _Staircase:
    """Which level comes next: geometric ramp then bisection, or the explicit list."""

    def __init__(self, config: ProbeConfig, *, start: int, top: int) -> None:
        self.config, self.start, self.top = config, start, top
        self.explicit = list(config.levels) if config.levels else None
        self.passed: int | None = None  # highest level passed with all lower tries passing
        self.failed: int | None = None  # lowest failing level
        self.finished_reason: StopReason | None = None

    def first(self) -> int:
        return self.explicit.pop(0) if self.explicit else self.start

    def next(self, level: int, step: ProbeStep) -> int | None:
        if step.passed and not step.partial:
            self.passed = level if self.passed is None else max(self.passed, level)
        elif not step.passed and step.reasons:  # a step cut short before any verdict is no failure
            self.failed = level if self.failed is None else min(self.failed, level)
        if self.explicit is not None:
            if not step.passed or not self.explicit:
                self.finished_reason = "limit-crossed" if not step.passed else "max-concurrency"
                return None
            return self.explicit.pop(0)
        if self.failed is None:
            if level >= self.top:
                self.finished_reason = "max-concurrency"
                return None
            return min(self.top, max(level + 1, math.ceil(level * self.config.growth)))
        low = self.passed or 0
        if not self.config.refine or self.failed - low <= 1:
            self.finished_reason = "limit-crossed"
            return None
        return (low + self.failed) // 2


async def run_probe(
    config: ProbeConfig,
    *,
    stop: asyncio.Event | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProbeReport:
    """Run the staircase and return the report (partial when stopped early; never raises for a stop)."""
    stop = stop or asyncio.Event()
    say = progress or (lambda _message: None)
    base = base_url(config.endpoint)
    metrics_url = config.metrics_url or f"{base}/metrics"
    timeout = httpx.Timeout(config.request_timeout_s, connect=10.0)
    pool = max(config.max_concurrency or 4096, *(config.levels or [1])) + 8
    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        model, served_len = await fetch_model(client, base, config.model)
        max_len = config.max_model_len or served_len
        if max_len is None:
            raise PlannerInputError("the server does not report max_model_len: pass --max-model-len")
        lengths = _Lengths(config, max_len)
        sampler = _Sampler(client, metrics_url, config.sample_interval_s, model)
        first = await sampler.sample_now()
        warnings = []
        if first is None:
            warnings.append(f"no metrics ({sampler.last_error}): steps are judged on latency only")
        elif first.preemptions_total is None:
            warnings.append("the metrics page has no vllm:num_preemptions_total: preemptions not judged")
        run = _Run(config, client, base=base, model=model, lengths=lengths, sampler=sampler, stop=stop, progress=say)
        if first is not None and first.num_gpu_blocks and first.block_size:
            planner = _planner(first, max_len, lengths, config.headroom, warnings)
        else:
            planner = None
        start, top = config.staircase(planner.max_num_seqs if planner is not None else None)
        if config.levels is None:
            basis = f"the planner's limit {planner.max_num_seqs}" if planner is not None else "no KV facts on /metrics"
            say(f"levels {start} to {top} ({basis}); {lengths.description}")
        sampling = asyncio.create_task(sampler.loop())
        stairs = _Staircase(config, start=start, top=top)
        steps: list[ProbeStep] = []
        try:
            level: int | None = stairs.first()
            while level is not None and run.halt is None:
                step = await run.run_step(level)
                if step is None:
                    break
                steps.append(step)
                say(f"concurrency {level}: {'ok' if step.passed else 'FAIL ' + '; '.join(step.reasons)}")
                if step.requests_completed == 0 and step.requests_failed > 0:
                    run.halt = "errors"
                    break
                level = stairs.next(level, step)
        finally:
            await run.cancel_all()
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
        return ProbeReport(
            endpoint=base,
            metrics_url=metrics_url,
            model=model,
            max_model_len=max_len,
            num_gpu_blocks=first.num_gpu_blocks if first else None,
            block_size=first.block_size if first else None,
            lengths=lengths.description,
            limits=ProbeLimits(
                preemption_limit=config.preemption_limit,
                ttft_limit_s=config.ttft_limit_s,
                itl_limit_s=config.itl_limit_s,
                max_requests=config.max_requests,
                max_tokens=config.max_tokens,
                max_duration_s=effective_max_duration(config),
            ),
            steps=steps,
            safe_concurrency=_safe_below(stairs),
            stop_reason=run.halt or stairs.finished_reason or "limit-crossed",
            interrupted=run.halt == "interrupted",
            requests_sent=run.requests_sent,
            tokens_sent=run.tokens_sent,
            duration_s=time.monotonic() - run.started,
            planner=planner,
            warnings=warnings,
            quick=config.quick,
        )


def _safe_below(stairs: _Staircase) -> int | None:
    if stairs.passed is None or stairs.failed is None:
        return stairs.passed
    return stairs.passed if stairs.passed < stairs.failed else None


def _planner(
    first: MetricsSnapshot, max_len: int, lengths: _Lengths, headroom: float, warnings: list[str]
) -> PlannerComparison | None:
    assert first.num_gpu_blocks is not None and first.block_size is not None
    try:
        kv = capacity_for_blocks(first.num_gpu_blocks, first.block_size, max_len)
        advice = risk_bounded_concurrency(kv, lengths.comparison_profile(), headroom=headroom)
    except WorkloadProfileError as error:
        warnings.append(f"no planner comparison: {error}")
        return None
    return PlannerComparison(
        max_num_seqs=advice.max_num_seqs,
        risk=advice.risk,
        target_risk=advice.target_risk,
        headroom=headroom,
        worst_case_max_num_seqs=advice.worst_case_max_num_seqs,
        average_max_num_seqs=advice.average_max_num_seqs,
    )
