"""``planner calibrate LOG...``: read real vLLM startup logs, compare, write a corrections file."""

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from planner.calibration.corrections import (
    CorrectionEntry,
    Corrections,
    Terms,
    load_corrections,
    save_corrections,
)
from planner.calibration.dataset import load_record_file
from planner.calibration.fit import fit_report
from planner.calibration.logs import parse_startup_log
from planner.calibration.records import StartupRecord
from planner.calibration.validate import serving_args
from planner.cli._app import app
from planner.cli._commands import COMMANDS
from planner.cli._output import OutputFormat, console, print_json
from planner.errors import KvPlannerError, PlannerInputError
from planner.gpus.catalog import lookup_gpu
from planner.models.catalog import lookup_model
from planner.plan.build import predict
from planner.units import GiB
from planner.vllm.releases import resolve_release


def _bytes(gib: float | None) -> int | None:
    return None if gib is None else int(gib * GiB)


def _entry(record: StartupRecord, gpu_name: str, log: Path) -> tuple[CorrectionEntry, dict[str, float | None]]:
    spec = lookup_model(record.model)
    gpu = lookup_gpu(gpu_name)
    args = serving_args(record, online_quantization=record.quantization is not None)
    prediction = predict(spec, gpu, args, vllm_version=record.vllm_version)
    stage = prediction.engine.memory[0]
    predicted = Terms(
        weights_bytes=stage.weights_bytes,
        non_torch_bytes=stage.non_torch_bytes,
        activation_peak_bytes=stage.activation_peak_bytes,
        cuda_graph_bytes=stage.cuda_graph_bytes,
        kv_cache_bytes=stage.kv_bytes,
    )
    measured = Terms(
        weights_bytes=_bytes(record.weights_gib),
        non_torch_bytes=_bytes(record.non_torch_gib),
        activation_peak_bytes=_bytes(record.activation_peak_gib),
        cuda_graph_bytes=_bytes(record.cuda_graph_gib),
        kv_cache_bytes=_bytes(record.kv_cache_memory_gib),
    )
    entry = CorrectionEntry(
        model=spec.id,
        gpu=gpu.name,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        vllm_version=str(prediction.version),
        max_num_batched_tokens=prediction.resolved.max_num_batched_tokens,
        max_num_seqs=prediction.resolved.max_num_seqs,
        enforce_eager=args.enforce_eager,
        measured=measured,
        predicted=predicted,
        source=str(log),
    )
    kv_error = None
    if record.kv_cache_memory_gib:
        kv_error = (stage.kv_bytes / GiB - record.kv_cache_memory_gib) / record.kv_cache_memory_gib
    return entry, {"kv_error": kv_error}


def _log_version(log: Path, logged: str | None, given: str | None) -> str:
    """The release a log was written by: its own version line, or ``--vllm-version``. Guessing (the newest
    release) would plan it with another release's arithmetic, so neither is an error."""
    if logged is None:
        if given is None:
            raise PlannerInputError(f"{log}: the log has no vLLM version line; pass --vllm-version X.Y.Z")
        return given
    if given is not None and str(resolve_release(logged)[0]) != given:
        raise PlannerInputError(f"{log}: the log says vLLM {logged}, --vllm-version says {given}")
    return logged


def _fit(records_file: Path, write: Path | None, output: OutputFormat) -> None:
    loaded = load_record_file(records_file)
    records = [r for r in loaded if isinstance(r, StartupRecord)]
    if not records:
        raise PlannerInputError(f"{records_file}: no startup records")
    report = fit_report(records, lookup_model=lookup_model, lookup_gpu=lookup_gpu)
    if write is not None:
        corrections = load_corrections(write) if write.exists() else Corrections()
        corrections.coefficients = report.coefficients
        save_corrections(corrections, write)
    if output is OutputFormat.json:
        print_json(report)
        return
    table = Table(header_style="bold", title=f"Memory model fitted on {report.observations} records")
    table.add_column("coefficient")
    table.add_column("value", justify="right")
    for name, value in report.coefficients.model_dump().items():
        shown = (
            f"{value:.4g}" if isinstance(value, float) else (f"{value / GiB:.4f} GiB" if value > 1000 else str(value))
        )
        table.add_row(name, shown)
    console.print(table)
    lomo = Table(header_style="bold", title="Leave one model out: KV memory error (full prediction)")
    for column in ("model", "records", "in-sample median", "held-out median", "held-out |max|"):
        lomo.add_column(column)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:+.2f}%"

    for row in report.leave_one_model_out:
        lomo.add_row(
            row.model,
            str(row.records),
            pct(row.in_sample_median_error),
            pct(row.held_out_median_error),
            pct(row.held_out_max_abs_error),
        )
    console.print(lomo)
    if write is not None:
        console.print(f"wrote the fitted coefficients to {write}")


@app.command(help=COMMANDS["calibrate"].help)
def calibrate(
    logs: Annotated[list[Path] | None, typer.Argument(help="vLLM startup log files.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU the logs ran on (logs rarely name it).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model id, when the log names a local path.")] = None,
    fit: Annotated[Path | None, typer.Option("--fit", help="JSONL of startup records to refit on.")] = None,
    write: Annotated[Path | None, typer.Option("--write", help="Corrections file to create or extend.")] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            "--vllm-version",
            help="The release that wrote the logs: needed when a log has no version line; must agree when it has.",
        ),
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.table,
) -> None:
    given_version = str(resolve_release(vllm_version)[0]) if vllm_version is not None else None
    if fit is not None:
        _fit(fit, write, output)
        return
    if not logs:
        raise PlannerInputError("give startup log files (and --gpu), or --fit RECORDS.jsonl")
    if gpu is None:
        raise PlannerInputError("--gpu is required with log files: vLLM logs rarely name the GPU")
    corrections = load_corrections(write) if write is not None and write.exists() else Corrections()
    table = Table(header_style="bold", title="Startup logs vs planner (GiB: logged / predicted)")
    for column in ("log", "model", "weights", "non-torch", "activation", "graphs", "KV", "KV error"):
        table.add_column(column)
    results = []
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError as error:
            raise PlannerInputError(f"cannot read {log}: {error.strerror or error}") from None
        record = parse_startup_log(text, record_id=log.name)
        if model is not None:
            record = record.model_copy(update={"model": model})
        if record.kv_cache_memory_gib is None and record.weights_gib is None:
            raise PlannerInputError(f"{log}: no vLLM memory lines found (is this a vLLM startup log?)")
        record = record.model_copy(update={"vllm_version": _log_version(log, record.vllm_version, given_version)})
        try:
            entry, extra = _entry(record, gpu, log)
        except KvPlannerError as error:
            raise PlannerInputError(f"{log}: {error}") from None
        corrections.entries.append(entry)
        results.append({"log": str(log), "record": record.model_dump(), "entry": entry.model_dump(), **extra})

        def pair(measured: int | None, predicted: int | None) -> str:
            m = f"{measured / GiB:.2f}" if measured is not None else "-"
            p = f"{predicted / GiB:.2f}" if predicted is not None else "-"
            return f"{m} / {p}"

        me, pr = entry.measured, entry.predicted
        error_text = f"{extra['kv_error'] * 100:+.2f}%" if extra["kv_error"] is not None else "-"
        table.add_row(
            log.name,
            entry.model,
            pair(me.weights_bytes, pr.weights_bytes),
            pair(me.non_torch_bytes, pr.non_torch_bytes),
            pair(me.activation_peak_bytes, pr.activation_peak_bytes),
            pair(me.cuda_graph_bytes, pr.cuda_graph_bytes),
            pair(me.kv_cache_bytes, pr.kv_cache_bytes),
            error_text,
        )
    if write is not None:
        save_corrections(corrections, write)
    if output is OutputFormat.json:
        print_json({"logs": results, "written": str(write) if write else None})
    else:
        console.print(table)
        if write is not None:
            console.print(
                f"wrote {len(corrections.entries)} entries to {write}; use: planner recommend --calibration {write} ..."
            )
