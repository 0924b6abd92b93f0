"""``planner validate FILE.jsonl``: the planner against real vLLM startup reports."""

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.calibration.dataset import dataset_records, load_record_file
from planner.calibration.records import StartupRecord
from planner.calibration.validate import ValidationReport, validate_records
from planner.cli._app import app
from planner.cli._commands import COMMANDS
from planner.cli._output import OutputFormat, console, err_console, print_json, print_yaml
from planner.errors import (
    GatedModelError,
    HubUnavailableError,
    KvPlannerError,
    ModelNotFoundError,
    PlannerInputError,
    RepoNotAllowedError,
    ResolutionTimeoutError,
    UnknownModelError,
)
from planner.gpus.catalog import lookup_gpu
from planner.hub.resolve import resolve_model
from planner.models.catalog import lookup_model
from planner.models.spec import ModelSpec


def lookup_any_model(name: str) -> ModelSpec:
    """The catalog first; then a local path, the Hugging Face cache or the Hub (bounded), so reports of
    models the catalog lacks are still checked where the config can be read."""
    try:
        return lookup_model(name)
    except UnknownModelError as unknown:
        try:
            return resolve_model(name, timeout=30.0).spec
        except KvPlannerError as error:
            # Say why the fallback failed (offline, gated, not found, network), not just "unknown".
            raise UnknownModelError(
                name, unknown.suggestions, hint=f"not in the catalog; {resolution_reason(error)}"
            ) from None


def resolution_reason(error: KvPlannerError) -> str:
    """One line naming why a model could not be read, with the resolver's own message."""
    kinds: list[tuple[type[KvPlannerError], str]] = [
        (GatedModelError, "gated or private on the Hub"),
        (RepoNotAllowedError, "not allowed by the lookup policy"),
        (ModelNotFoundError, "not found"),
        (ResolutionTimeoutError, "the Hub lookup timed out"),
        (HubUnavailableError, "the Hub is unreachable (offline or network)"),
    ]
    label = next((text for kind, text in kinds if isinstance(error, kind)), "its config could not be read")
    return f"{label}: {error.message}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.2f}%"


def render_report(report: ValidationReport) -> None:
    table = Table(header_style="bold", title="Planner vs vLLM startup reports")
    for column in ("id", "model", "blocks (pred/logged)", "tokens (pred/logged)", "exact", "budget", "full"):
        table.add_column(column)
    for r in report.records:
        if not r.supported:
            table.add_row(r.id, r.model, f"unsupported: {r.reason}", "", "", "", "")
            continue
        layout = r.layout
        blocks = tokens = exact = "-"
        if layout is not None:
            blocks = (
                f"{layout.num_gpu_blocks:,} / {layout.logged_gpu_blocks:,}"
                if layout.logged_gpu_blocks
                else f"{layout.num_gpu_blocks:,} / -"
            )
            tokens = f"{layout.tokens:,} / {layout.logged_tokens:,}" if layout.logged_tokens else f"{layout.tokens:,}"
            exact = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}[layout.exact]
        table.add_row(
            r.id,
            r.model,
            blocks,
            tokens,
            exact,
            _pct(r.budget.error if r.budget else None),
            _pct(r.full.error if r.full else None),
        )
    console.print(table)
    s = report.summary
    console.print(f"records {s.records}, supported {s.supported}, layout exact {s.layout_exact}/{s.layout_scored}")
    for name, stats in (("budget", s.budget), ("full", s.full)):
        console.print(
            f"{name}: KV memory error median {_pct(stats.median)}, p90 {_pct(stats.p90)}, "
            f"max {_pct(stats.max)}, |max| {_pct(stats.abs_max)} over {stats.count} records"
        )


@app.command(help=COMMANDS["validate"].help)
def validate(
    file: Annotated[
        Path | None,
        typer.Argument(help="JSONL of startup records (see docs/accuracy.md); default: the shipped data."),
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.table,
) -> None:
    loaded: list[StartupRecord | str]
    if file is None:
        loaded = list(dataset_records())
    else:
        loaded = load_record_file(file)
        for problem in (r for r in loaded if isinstance(r, str)):
            err_console.print(f"[yellow]not a record[/] {file}: {problem}")
        if not any(isinstance(r, StartupRecord) for r in loaded):
            raise PlannerInputError(f"{file}: no startup records (one JSON object per line)")
    report = validate_records(loaded, lookup_model=lookup_any_model, lookup_gpu=lookup_gpu)
    if output is OutputFormat.json:
        print_json(report)
    elif output is OutputFormat.yaml:
        print_yaml(report)
    else:
        render_report(report)
