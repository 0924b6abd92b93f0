"""``planner probe``: find the highest safe concurrency of a live vLLM server (docs/probe.md).

Safe to point at production: hard limits on requests, tokens and time; Ctrl-C cancels the requests
in flight and prints the partial report (exit code 130).
"""

import asyncio
import contextlib
import re
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from planner.cli._app import app
from planner.cli._commands import COMMANDS
from planner.cli._output import OutputFormat, console, err_console, print_json, print_yaml
from planner.errors import PlannerInputError, ScrapeError
from planner.units import parse_human_int

if TYPE_CHECKING:
    from planner.probe import ProbeConfig, ProbeReport

EXIT_INTERRUPTED = 130
EXIT_UNREACHABLE = 3  # the endpoint or its metrics cannot be reached (as for a model that cannot be resolved)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: str, flag: str) -> float:
    """``250ms``, ``2s``, ``1.5`` (seconds), ``10m``, ``1h``."""
    match = _DURATION.match(value)
    if not match or float(match.group(1)) <= 0:
        raise PlannerInputError(f"{flag} {value!r}: use a positive duration such as 500ms, 2s, 10m or 1h")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def _levels(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        levels = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise PlannerInputError(f"--levels {value!r}: give comma-separated integers such as 4,8,12") from None
    if not levels or min(levels) < 1:
        raise PlannerInputError("--levels: every level must be a positive integer")
    return levels


async def _run(config: "ProbeConfig") -> "ProbeReport":
    from planner.probe import run_probe  # httpx/numpy load only for this command

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def interrupted() -> None:
        err_console.print("interrupted: cancelling the requests in flight (Ctrl-C again to abort at once)")
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C raises KeyboardInterrupt as usual

    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers here (Windows, threads)
        loop.add_signal_handler(signal.SIGINT, interrupted)
    try:
        return await run_probe(config, stop=stop, progress=err_console.print)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def _print_table(report: "ProbeReport") -> None:
    from rich.table import Table

    from planner.probe.report import report_table, summary_lines

    rows = report_table(report)
    table = Table(title=f"planner probe: {report.model} at {report.endpoint}", title_justify="left")
    for header in rows[0]:
        table.add_column(header, justify="left" if header == "verdict" else "right")
    for row in rows[1:]:
        table.add_row(*row)
    console.print(f"lengths: {report.lengths}")
    if report.num_gpu_blocks:
        console.print(
            f"server: {report.num_gpu_blocks} KV blocks of {report.block_size} tokens, "
            f"max_model_len {report.max_model_len}"
        )
    console.print(table)
    for line in summary_lines(report):
        console.print(line)


# Option types (Annotated aliases keep the signature readable).
Endpoint = Annotated[str, typer.Option("--endpoint", help="Server base URL, e.g. http://vllm:8000.")]
MetricsUrl = Annotated[str | None, typer.Option("--metrics-url", help="Default: <endpoint>/metrics.")]
Model = Annotated[str | None, typer.Option("--model", help="Model to request (default: the first served).")]
Workload = Annotated[
    str | None,
    typer.Option(
        "--workload",
        help="Request lengths: YAML/JSON/CSV file, a vLLM /metrics URL or a Prometheus URL. "
        "Default: long requests that fill the context.",
    ),
]
MaxConcurrency = Annotated[
    int | None,
    typer.Option("--max-concurrency", min=1, max=4096, help="Staircase top (default: twice the planner's limit)."),
]
StartConcurrency = Annotated[
    int | None, typer.Option("--start-concurrency", min=1, help="First level (default: a quarter of that limit).")
]
Quick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="A first look in under two minutes: prompts of at most 2,048 tokens, one round per level, "
        "no warm-up, 100 s in all.",
    ),
]
Growth = Annotated[float, typer.Option("--growth", min=1.01, max=16.0, help="Level multiplier.")]
Levels = Annotated[str | None, typer.Option("--levels", help="Explicit levels, e.g. 4,8,12,16.")]
Refine = Annotated[bool, typer.Option("--refine/--no-refine", help="Bisect after the first failing level.")]
MaxRequests = Annotated[int, typer.Option("--max-requests", min=1, help="Hard limit: requests sent.")]
MaxTokens = Annotated[
    str, typer.Option("--max-tokens", help="Hard limit: prompt + output tokens in total (50m = 50,000,000).")
]
MaxDuration = Annotated[str, typer.Option("--max-duration", help="Hard limit: wall time (10m, 600s).")]
PreemptionLimit = Annotated[float, typer.Option("--preemption-limit", min=0.0, help="Preemptions allowed per step.")]
TtftLimit = Annotated[str | None, typer.Option("--ttft-limit", help="p95 time to first token, e.g. 2s.")]
ItlLimit = Annotated[str | None, typer.Option("--itl-limit", help="p95 inter-token latency, e.g. 80ms.")]
OutputTokens = Annotated[
    int, typer.Option("--output-tokens", min=1, help="Without --workload: output tokens per request.")
]
PromptTokens = Annotated[
    int | None,
    typer.Option("--prompt-tokens", min=1, help="Without --workload: prompt tokens (default: fill the context)."),
]
MaxModelLen = Annotated[str | None, typer.Option("--max-model-len", help="If the server does not report it.")]
RequestsPerStep = Annotated[
    int | None, typer.Option("--requests-per-step", min=1, help="Measured completions per level.")
]
WarmupRequests = Annotated[int | None, typer.Option("--warmup-requests", min=0, help="Completions before measuring.")]
SampleInterval = Annotated[str, typer.Option("--sample-interval", help="/metrics scrape interval.")]
RequestTimeout = Annotated[str, typer.Option("--request-timeout", help="Per request.")]
Headroom = Annotated[float, typer.Option("--headroom", min=0.0, max=0.99, help="Headroom for the planner comparison.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for lengths and prompt tokens.")]
Output = Annotated[OutputFormat, typer.Option("--output", "-o")]
Plot = Annotated[Path | None, typer.Option("--plot", help="Write a PNG or SVG plot.")]


@app.command(
    help=COMMANDS["probe"].help,
    epilog="Example: planner probe --endpoint http://vllm:8000 --workload lengths.yaml --max-concurrency 64 "
    "--ttft-limit 2s --plot probe.png",
)
def probe(  # typer passes every option by keyword
    *,
    endpoint: Endpoint,
    metrics_url: MetricsUrl = None,
    model: Model = None,
    workload: Workload = None,
    max_concurrency: MaxConcurrency = None,
    start_concurrency: StartConcurrency = None,
    quick: Quick = False,
    growth: Growth = 2.0,
    levels: Levels = None,
    refine: Refine = True,
    max_requests: MaxRequests = 1000,
    max_tokens: MaxTokens = "50m",
    max_duration: MaxDuration = "10m",
    preemption_limit: PreemptionLimit = 0.0,
    ttft_limit: TtftLimit = None,
    itl_limit: ItlLimit = None,
    output_tokens: OutputTokens = 256,
    prompt_tokens: PromptTokens = None,
    max_model_len: MaxModelLen = None,
    requests_per_step: RequestsPerStep = None,
    warmup_requests: WarmupRequests = None,
    sample_interval: SampleInterval = "500ms",
    request_timeout: RequestTimeout = "10m",
    headroom: Headroom = 0.0,
    seed: Seed = 0,
    output: Output = OutputFormat.table,
    plot: Plot = None,
) -> None:
    from planner.probe import ProbeConfig
    from planner.probe.sources import load_workload_source

    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise PlannerInputError(f"--plot {plot}: the file must end in .png or .svg")
    profile = load_workload_source(workload) if workload else None
    fields = dict(
        endpoint=endpoint,
        metrics_url=metrics_url,
        model=model,
        max_model_len=parse_human_int(max_model_len) if max_model_len else None,
        workload=profile,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        levels=_levels(levels),
        start_concurrency=min(start_concurrency, max_concurrency)
        if start_concurrency and max_concurrency
        else start_concurrency,
        max_concurrency=max_concurrency,
        quick=quick,
        growth=growth,
        refine=refine,
        warmup_requests=warmup_requests,
        requests_per_step=requests_per_step,
        max_requests=max_requests,
        max_tokens=parse_human_int(max_tokens),
        max_duration_s=parse_duration(max_duration, "--max-duration"),
        preemption_limit=preemption_limit,
        ttft_limit_s=parse_duration(ttft_limit, "--ttft-limit") if ttft_limit else None,
        itl_limit_s=parse_duration(itl_limit, "--itl-limit") if itl_limit else None,
        sample_interval_s=parse_duration(sample_interval, "--sample-interval"),
        request_timeout_s=parse_duration(request_timeout, "--request-timeout"),
        headroom=headroom,
        seed=seed,
    )
    try:
        config = ProbeConfig(**fields)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:3])
        raise PlannerInputError(f"invalid probe settings: {problems}") from None
    try:
        report = asyncio.run(_run(config))
    except ScrapeError as error:
        err_console.print(f"error: {error}")
        raise typer.Exit(EXIT_UNREACHABLE) from None
    if output is OutputFormat.json:
        print_json(report)
    elif output is OutputFormat.yaml:
        print_yaml(report)
    else:
        _print_table(report)
    if plot is not None:
        from planner.probe.plot import plot_report

        err_console.print(f"plot written to {plot_report(report, plot)}")
    if report.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
