"""``python -m admission exporter``: the exporter and, in the same process, the retuner.

Targets come from exactly one of ``--targets`` (static URLs), ``--discover`` (the Kubernetes API) or
``--prometheus-url`` (read vLLM's series from Prometheus; may be combined with ``--discover`` for the
pods' annotations). Every flag also reads ``KV_PLANNER_<FLAG>`` (``--max-targets`` <-
``KV_PLANNER_MAX_TARGETS``; list flags split on whitespace).
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer
from pydantic import ValidationError

from admission.cli import app
from planner.errors import KvPlannerError

_R = "Retuner"
_S = "Scraping"


def _env(flag: str) -> str:
    return "KV_PLANNER_" + flag.upper().replace("-", "_")


class RetuneMode(str, Enum):
    off = "off"
    recommend = "recommend"
    apply = "apply"


@app.command("exporter")
def exporter(
    port: Annotated[int, typer.Option(envvar=_env("port"), min=0, max=65535, help="HTTP port.")] = 9400,
    host: Annotated[str, typer.Option(envvar=_env("host"), help="Address to bind.")] = "0.0.0.0",
    targets: Annotated[
        list[str] | None,
        typer.Option(
            "--targets",
            envvar=_env("targets"),
            help="vLLM /metrics URLs (repeatable), options in the fragment: URL#workload=w&planned-num-gpu-blocks=N.",
        ),
    ] = None,
    more_targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[URL]...",
            show_default=False,
            help="More target URLs after --targets (DESIGN's `--targets URL...` spelling).",
        ),
    ] = None,
    discover: Annotated[
        bool,
        typer.Option(
            "--discover/--no-discover",
            envvar=_env("discover"),
            help="Find vLLM pods in namespaces labelled kv-planner.io/enabled=true.",
        ),
    ] = False,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            envvar=_env("prometheus-url"), help="Read vLLM's series from this Prometheus API instead of the pods."
        ),
    ] = None,
    prometheus_selector: Annotated[
        str,
        typer.Option(envvar=_env("prometheus-selector"), help='Label matchers added to every query, e.g. job="vllm".'),
    ] = "",
    namespace_selector: Annotated[
        str, typer.Option(envvar=_env("namespace-selector"), help="Namespaces to watch (label selector).")
    ] = "kv-planner.io/enabled=true",
    pod_selector: Annotated[
        str | None, typer.Option(envvar=_env("pod-selector"), help="Only pods matching this label selector.")
    ] = None,
    kubeconfig: Annotated[
        str | None, typer.Option(envvar=_env("kubeconfig"), help="Outside a cluster: the kubeconfig file.")
    ] = None,
    resync_seconds: Annotated[
        float, typer.Option(envvar=_env("resync-seconds"), min=1.0, help="Seconds per pod watch before relisting.")
    ] = 60.0,
    scrape_timeout: Annotated[
        float,
        typer.Option(
            envvar=_env("scrape-timeout"),
            min=0.01,
            rich_help_panel=_S,
            help="Seconds a target gets unless its recent reads show it needs more (hung targets get this).",
        ),
    ] = 1.0,
    scrape_timeout_max: Annotated[
        float,
        typer.Option(
            envvar=_env("scrape-timeout-max"),
            min=0.01,
            rich_help_panel=_S,
            help="Most seconds any target gets (a normally slow pod: 4x its slowest recent read).",
        ),
    ] = 5.0,
    scrape_timeout_offset: Annotated[
        float,
        typer.Option(
            envvar=_env("scrape-timeout-offset"),
            min=0.0,
            rich_help_panel=_S,
            help="Seconds kept back from Prometheus' X-Prometheus-Scrape-Timeout-Seconds.",
        ),
    ] = 0.5,
    max_targets: Annotated[
        int,
        typer.Option(
            envvar=_env("max-targets"),
            min=1,
            rich_help_panel=_S,
            help="Read at most this many targets (bounds cardinality).",
        ),
    ] = 500,
    max_concurrency: Annotated[
        int, typer.Option(envvar=_env("max-concurrency"), min=1, rich_help_panel=_S, help="Parallel target reads.")
    ] = 64,
    max_body_bytes: Annotated[
        int,
        typer.Option(
            envvar=_env("max-body-bytes"), min=1024, rich_help_panel=_S, help="Largest /metrics page accepted."
        ),
    ] = 4 << 20,
    retune: Annotated[
        RetuneMode,
        typer.Option(
            envvar=_env("retune"), rich_help_panel=_R, help="off, recommend (metrics + Events), apply (patch args)."
        ),
    ] = RetuneMode.recommend,
    retune_interval: Annotated[
        float,
        typer.Option(envvar=_env("retune-interval"), min=1.0, rich_help_panel=_R, help="Seconds between observations."),
    ] = 60.0,
    retune_persist: Annotated[
        int,
        typer.Option(
            envvar=_env("retune-persist"), min=1, rich_help_panel=_R, help="Observations a condition must persist."
        ),
    ] = 3,
    retune_high_usage: Annotated[
        float, typer.Option(envvar=_env("retune-high-usage"), min=0.0, max=1.0, rich_help_panel=_R)
    ] = 0.95,
    retune_min_dwell: Annotated[
        float,
        typer.Option(envvar=_env("retune-min-dwell"), min=0.0, rich_help_panel=_R, help="Seconds between two changes."),
    ] = 900.0,
    retune_max_step_down: Annotated[
        float, typer.Option(envvar=_env("retune-max-step-down"), min=0.01, max=0.99, rich_help_panel=_R)
    ] = 0.5,
    retune_max_step_up: Annotated[
        float, typer.Option(envvar=_env("retune-max-step-up"), min=0.01, rich_help_panel=_R)
    ] = 0.25,
    retune_min_seqs: Annotated[int, typer.Option(envvar=_env("retune-min-seqs"), min=1, rich_help_panel=_R)] = 1,
    retune_max_seqs: Annotated[
        int | None, typer.Option(envvar=_env("retune-max-seqs"), min=1, rich_help_panel=_R)
    ] = None,
    retune_target_risk: Annotated[
        float, typer.Option(envvar=_env("retune-target-risk"), min=1e-9, max=0.5, rich_help_panel=_R)
    ] = 0.01,
    retune_headroom: Annotated[
        float, typer.Option(envvar=_env("retune-headroom"), min=0.0, max=0.99, rich_help_panel=_R)
    ] = 0.1,
    retune_min_requests: Annotated[
        int, typer.Option(envvar=_env("retune-min-requests"), min=1, rich_help_panel=_R)
    ] = 20,
    retune_annotate: Annotated[
        bool,
        typer.Option(
            "--retune-annotate/--no-retune-annotate",
            envvar=_env("retune-annotate"),
            rich_help_panel=_R,
            help="Write kv-planner.io/recommended-max-num-seqs on the workload.",
        ),
    ] = False,
    retune_events: Annotated[
        bool, typer.Option("--retune-events/--no-retune-events", envvar=_env("retune-events"), rich_help_panel=_R)
    ] = True,
    retune_apply_min_interval: Annotated[
        float,
        typer.Option(
            envvar=_env("retune-apply-min-interval"),
            min=0.0,
            rich_help_panel=_R,
            help="Seconds between two rollouts of one workload.",
        ),
    ] = 3600.0,
    retune_apply_max_per_hour: Annotated[
        int, typer.Option(envvar=_env("retune-apply-max-per-hour"), min=1, rich_help_panel=_R)
    ] = 4,
    retune_namespaces: Annotated[
        list[str] | None,
        typer.Option(
            "--retune-namespaces",
            envvar=_env("retune-namespaces"),
            rich_help_panel=_R,
            help="The only namespaces written in (Events, annotation, apply); repeatable. None: metrics only.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(envvar=_env("log-level"), help="debug, info, warning, error.")] = "info",
) -> None:
    """Expose kv_planner_* metrics for vLLM pods; optionally recommend or apply --max-num-seqs."""
    from admission.exporter.server import ExporterConfig, serve
    from admission.exporter.service import ScrapeSettings
    from admission.observations.targets import parse_static_target
    from admission.retuner import RetunerSettings

    def fail(message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(2)

    if more_targets and not targets:
        raise fail(f"unexpected argument {more_targets[0]!r}: target URLs follow --targets")
    targets = [*(targets or []), *(more_targets or [])]
    if targets and (discover or prometheus_url):
        raise fail("--targets cannot be combined with --discover or --prometheus-url")
    if not (targets or discover or prometheus_url):
        raise fail("give --targets URL..., --discover or --prometheus-url URL")
    try:
        config = ExporterConfig(
            host=host,
            port=port,
            targets=[parse_static_target(t) for t in targets or []],
            discover=discover,
            prometheus_url=prometheus_url,
            prometheus_selector=prometheus_selector,
            namespace_selector=namespace_selector,
            pod_selector=pod_selector,
            resync_s=resync_seconds,
            kubeconfig=kubeconfig,
            scrape=ScrapeSettings(
                scrape_timeout_s=scrape_timeout,
                scrape_timeout_max_s=scrape_timeout_max,
                timeout_offset_s=scrape_timeout_offset,
                max_targets=max_targets,
                max_concurrency=max_concurrency,
                max_body_bytes=max_body_bytes,
            ),
            retuner=RetunerSettings(
                mode=retune.value,
                interval_s=retune_interval,
                persist=retune_persist,
                high_usage=retune_high_usage,
                min_dwell_s=retune_min_dwell,
                max_step_down=retune_max_step_down,
                max_step_up=retune_max_step_up,
                min_seqs=retune_min_seqs,
                max_seqs=retune_max_seqs,
                target_risk=retune_target_risk,
                headroom=retune_headroom,
                min_requests=retune_min_requests,
                annotate=retune_annotate,
                events=retune_events,
                apply_min_interval_s=retune_apply_min_interval,
                apply_max_per_hour=retune_apply_max_per_hour,
                namespaces=tuple(retune_namespaces or ()),
            ),
            log_level=log_level,
        )
    except KvPlannerError as error:
        raise fail(str(error)) from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise fail(f"{where}: {message}" if where else message) from None
    try:
        serve(config)
    except KvPlannerError as error:
        raise fail(str(error)) from None
    except Exception as error:  # e.g. no kubeconfig / not in a cluster with --discover
        if type(error).__name__ == "ConfigException":
            raise fail(f"cannot reach the Kubernetes API: {error}") from None
        raise
