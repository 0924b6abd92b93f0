"""The probe's report: one row per concurrency step, the verdict, and the table that prints it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

StopReason = Literal[
    "limit-crossed",  # a step crossed the preemption or latency limits
    "max-concurrency",  # the staircase reached --max-concurrency without crossing a limit
    "max-requests",  # hard limit on requests sent
    "max-tokens",  # hard limit on tokens sent + asked for
    "max-duration",  # hard limit on wall time
    "interrupted",  # Ctrl-C
    "errors",  # requests failed (the report says why)
]


class ProbeStep(BaseModel):
    """What one concurrency level showed, over its measurement window (after a warm-up)."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int
    requests_completed: int = Field(description="requests that finished inside the measurement window")
    requests_failed: int = 0
    duration_s: float
    kv_cache_usage_max: float | None = None
    kv_cache_usage_mean: float | None = None
    preemptions: float | None = Field(default=None, description="vllm:num_preemptions_total increase")
    requests_running_max: float | None = None
    requests_waiting_max: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    output_tokens_per_s: float = 0.0
    passed: bool
    partial: bool = Field(default=False, description="a hard limit or Ctrl-C cut the step short")
    reasons: list[str] = Field(default_factory=list, description="why the step failed")


class ProbeLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preemption_limit: float
    ttft_limit_s: float | None
    itl_limit_s: float | None
    max_requests: int
    max_tokens: int
    max_duration_s: float


class PlannerComparison(BaseModel):
    """The planner's risk-bounded answer for the same blocks and lengths the probe used."""

    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int
    risk: float
    target_risk: float
    headroom: float
    worst_case_max_num_seqs: int
    average_max_num_seqs: int


class ProbeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str
    metrics_url: str | None
    model: str
    max_model_len: int
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    lengths: str = Field(description="how prompt and output lengths were chosen")
    limits: ProbeLimits
    steps: list[ProbeStep]
    safe_concurrency: int | None = Field(
        description="highest concurrency that passed, with every lower level tried also passing"
    )
    stop_reason: StopReason
    interrupted: bool = False
    requests_sent: int
    tokens_sent: int = Field(description="prompt tokens sent + output tokens asked for")
    duration_s: float
    planner: PlannerComparison | None = None
    warnings: list[str] = Field(default_factory=list)
    quick: bool = Field(default=False, description="run with --quick (short requests, one round per level)")


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def report_table(report: ProbeReport) -> list[list[str]]:
    """Rows for the CLI table (header first)."""
    rows = [
        [
            "conc",
            "done",
            "KV max",
            "KV mean",
            "preempt",
            "waiting",
            "TTFT p50",
            "TTFT p95",
            "ITL p50",
            "ITL p95",
            "tok/s",
            "verdict",
        ]
    ]
    for step in sorted(report.steps, key=lambda s: s.concurrency):
        if step.passed and step.partial:
            verdict = "ok so far (cut short: not counted)"
        elif step.partial and not step.reasons:
            verdict = "cut short before a verdict (not counted)"
        elif step.passed:
            verdict = "ok"
        else:
            verdict = "FAIL: " + "; ".join(step.reasons) + (" (cut short)" if step.partial else "")
        rows.append(
            [
                str(step.concurrency),
                str(step.requests_completed),
                _fmt(step.kv_cache_usage_max, ".0%"),
                _fmt(step.kv_cache_usage_mean, ".0%"),
                _fmt(step.preemptions, ".0f"),
                _fmt(step.requests_waiting_max, ".0f"),
                _fmt(step.ttft_p50_s, ".0f", 1000) + " ms" if step.ttft_p50_s is not None else "-",
                _fmt(step.ttft_p95_s, ".0f", 1000) + " ms" if step.ttft_p95_s is not None else "-",
                _fmt(step.itl_p50_s, ".1f", 1000) + " ms" if step.itl_p50_s is not None else "-",
                _fmt(step.itl_p95_s, ".1f", 1000) + " ms" if step.itl_p95_s is not None else "-",
                f"{step.output_tokens_per_s:.0f}",
                verdict,
            ]
        )
    return rows


def stop_explanation(report: ProbeReport) -> str:
    """Why the run ended, in words, with what to change when a budget (not the server) ended it."""
    limits = report.limits
    budget_advice = "raise it" if report.quick else "raise it, or use --quick (shorter requests, one round per level)"
    return {
        "limit-crossed": "a level crossed the preemption or latency limits",
        "max-concurrency": "the staircase reached its top without crossing a limit (raise --max-concurrency)",
        "max-requests": f"the {limits.max_requests}-request budget (--max-requests) ran out; {budget_advice}",
        "max-tokens": f"the {limits.max_tokens:,}-token budget (--max-tokens) ran out; {budget_advice}",
        "max-duration": f"the {limits.max_duration_s:g} s time limit (--max-duration) ran out; {budget_advice}",
        "interrupted": "interrupted (Ctrl-C)",
        "errors": "requests failed (see the failing level)",
    }[report.stop_reason]


def summary_lines(report: ProbeReport) -> list[str]:
    lines = []
    why = stop_explanation(report)
    if report.safe_concurrency is None:
        tried = ", ".join(str(s.concurrency) for s in sorted(report.steps, key=lambda s: s.concurrency))
        done = f"levels measured: {tried}" if tried else "no level finished its warm-up"
        lines.append(f"No concurrency level passed completely ({done}). Stopped because {why}.")
    else:
        lines.append(f"Highest safe concurrency: {report.safe_concurrency}. Stopped because {why}.")
    if report.planner is not None:
        p = report.planner
        lines.append(
            f"Planner for the same blocks and lengths: --max-num-seqs {p.max_num_seqs} "
            f"(overflow risk {p.risk:.3%} <= {p.target_risk:.0%}, headroom {p.headroom:.0%}); "
            f"worst case {p.worst_case_max_num_seqs}, average-based {p.average_max_num_seqs}."
        )
    lines.append(f"Sent {report.requests_sent} requests, {report.tokens_sent} tokens, in {report.duration_s:.1f} s.")
    lines.extend(f"warning: {w}" for w in report.warnings)
    return lines
