"""``planner gpus`` and ``planner models``: the embedded catalogs, as tables or JSON."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.cli._app import app
from planner.cli._commands import COMMANDS
from planner.cli._output import OutputFormat, console, print_json, print_yaml
from planner.gpus.catalog import all_gpus, instance_types, lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.units import GiB

# One module serves both commands: `planner gpus` does not import the model catalog (its ModelSpec classes),
# and -o json / -o yaml do not import rich (tables are built where they are printed).
if TYPE_CHECKING:
    from rich.table import Table

    from planner.models.spec import ModelSpec

OutputOption = Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")]


def _emit(value: Any, output: OutputFormat) -> bool:
    """Print JSON/YAML and return True, or return False for the table format."""
    if output is OutputFormat.json:
        print_json(value)
        return True
    if output is OutputFormat.yaml:
        print_yaml(value)
        return True
    return False


def _table(**options: Any) -> "Table":
    from rich.table import Table

    return Table(**options)


def _gpu_record(gpu: GpuSpec) -> dict[str, Any]:
    record = gpu.model_dump(mode="json")
    record["memory_gib"] = round(gpu.memory_bytes / GiB, 2)
    return record


@app.command(
    "gpus",
    help=COMMANDS["gpus"].help,
    epilog="Examples: planner gpus;  planner gpus NVIDIA-A100-SXM4-80GB;  planner gpus --instance-types",
)
def gpus(
    name: Annotated[str | None, typer.Argument(help="Show one GPU, by any of its names.")] = None,
    list_instance_types: Annotated[
        bool, typer.Option("--instance-types", help="List cloud instance types with their GPU and count.")
    ] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    if list_instance_types:
        types = instance_types()
        if not _emit(types, output):
            table = _table(title="Cloud instance types", title_justify="left")
            for column in ("Provider", "Instance type", "GPU", "GPUs"):
                table.add_column(column, justify="right" if column == "GPUs" else "left")
            for item in types:
                table.add_row(item.provider, item.name, item.gpu, str(item.count))
            console.print(table)
        return
    if name is not None:
        gpu = lookup_gpu(name)
        if not _emit(_gpu_record(gpu), output):
            _print_gpu(gpu)
        return
    specs = all_gpus()
    if _emit([_gpu_record(g) for g in specs], output):
        return
    table = _table(title="GPU catalog (memory = total CUDA reports)", title_justify="left")
    for column, justify in (
        ("Name", "left"),
        ("GiB", "right"),
        ("TB/s", "right"),
        ("Arch", "left"),
        ("FP8", "center"),
        ("MIG", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    table.add_column("Aliases", no_wrap=True, overflow="ellipsis")
    for gpu in specs:
        more = f" (+{len(gpu.aliases) - 1})" if len(gpu.aliases) > 1 else ""
        table.add_row(
            gpu.name,
            f"{gpu.memory_gib:.2f}",
            f"{gpu.bandwidth_bytes_per_s / 1e12:.2f}",
            gpu.architecture,
            "yes" if gpu.fp8 else "",
            str(len(gpu.mig_profiles) or ""),
            (gpu.aliases[0] + more) if gpu.aliases else "",
        )
    console.print(table)
    console.print("GiB = total memory CUDA reports. All aliases, MIG profiles and sources: planner gpus NAME")


def _print_gpu(gpu: GpuSpec) -> None:
    console.print(
        f"[bold]{gpu.name}[/bold] ({gpu.vendor} {gpu.architecture}"
        + (f", sm_{gpu.compute_capability}" if gpu.compute_capability else "")
        + (f", {gpu.form_factor}" if gpu.form_factor else "")
        + ")"
    )
    console.print(f"  memory     {gpu.memory_bytes:,} bytes = {gpu.memory_gib:.2f} GiB")
    console.print(f"  source     {gpu.memory_source}")
    console.print(f"  bandwidth  {gpu.bandwidth_bytes_per_s / 1e9:,.0f} GB/s")
    if gpu.aliases:
        console.print(f"  aliases    {', '.join(gpu.aliases)}")
    carriers = [f"{t.name} x{t.count}" for t in instance_types() if t.gpu == gpu.name]
    if carriers:
        console.print(f"  instances  {', '.join(carriers)}")
    if gpu.notes:
        console.print(f"  notes      {gpu.notes}")
    if gpu.mig_profiles:
        table = _table(title="MIG profiles", title_justify="left")
        for column in ("Profile", "Resource", "Memory", "Compute"):
            table.add_column(column)
        for profile in gpu.mig_profiles:
            table.add_row(
                profile.name,
                f"nvidia.com/mig-{profile.name}",
                f"{profile.memory_bytes / GiB:.2f} GiB",
                f"{profile.compute_fraction:.0%}",
            )
        console.print(table)
        console.print(f"  MIG source {gpu.mig_profiles[0].memory_source}")


def _params(model: "ModelSpec") -> str:
    return f"{model.parameters / 1e9:.1f}B" if model.parameters else ""


@app.command(
    "models",
    help=COMMANDS["models"].help,
    epilog="Examples: planner models;  planner models llama-3.1-8b;  planner models -o json",
)
def models(
    model_id: Annotated[str | None, typer.Argument(help="Show one model, by Hugging Face id or alias.")] = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    from planner.models.catalog import all_models, lookup_model

    if model_id is not None:
        model = lookup_model(model_id)
        if not _emit(model, output):
            _print_model(model)
        return
    entries = all_models()
    if _emit(entries, output):
        return
    table = _table(title="Model catalog", title_justify="left")
    table.add_column("Model", no_wrap=True)
    for column, justify in (
        ("Attention", "left"),
        ("Layers", "right"),
        ("KV heads x dim", "right"),
        ("Max len", "right"),
        ("Params", "right"),
        ("Weights", "left"),
        ("Checked", "center"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for model in entries:
        quant = (
            f"{model.quantization.method} {model.quantization.weight_bits:g}b" if model.quantization else model.dtype
        )
        table.add_row(
            model.id,
            model.attention_design,
            str(model.num_layers),
            f"{model.num_kv_heads}x{model.head_dim}",
            f"{model.derived_max_model_len:,}",
            _params(model),
            quant,
            "yes" if model.source is not None and model.source.verified else "",
        )
    console.print(table)
    console.print("Checked = verified field by field against a real config.json. Details: planner models ID")


def _print_model(model: "ModelSpec") -> None:
    console.print(f"[bold]{model.id}[/bold] ({model.architecture}, {model.attention_design})")
    rows = [
        ("layers", f"{model.num_layers} ({_pattern_summary(model.layer_pattern)})"),
        (
            "attention",
            f"{model.num_attention_heads} heads, {model.num_kv_heads} KV heads, head_dim {model.head_dim}",
        ),
        (
            "context",
            f"{model.derived_max_model_len:,} tokens ({model.derived_max_model_len_key or 'default'})",
        ),
        ("dtype", model.dtype),
    ]
    if model.sliding_window:
        rows.append(("window", f"{model.sliding_window:,} tokens"))
    if model.attention_chunk_size:
        rows.append(("chunk", f"{model.attention_chunk_size:,} tokens"))
    if model.mla:
        rows.append(("MLA", f"kv_lora_rank {model.mla.kv_lora_rank} + rope {model.mla.qk_rope_head_dim}"))
    if model.moe:
        rows.append(("MoE", f"{model.moe.num_experts} experts, top-{model.moe.experts_per_token}"))
    if model.quantization:
        rows.append(
            (
                "quantized",
                f"{model.quantization.method}, {model.quantization.weight_bits:g} bits/weight"
                + (f", KV {model.quantization.kv_cache_dtype}" if model.quantization.kv_cache_dtype else ""),
            )
        )
    if model.parameters:
        rows.append(("parameters", f"{model.parameters:,}"))
    if model.checkpoint_bytes:
        rows.append(("checkpoint", f"{model.checkpoint_bytes:,} bytes"))
    if model.source:
        rows.append(("source", model.source.url + (f" @ {model.source.revision}" if model.source.revision else "")))
        rows.append(("verified", "yes" if model.source.verified else "no (facts not checked against a config.json)"))
    if model.aliases:
        rows.append(("aliases", ", ".join(model.aliases)))
    for key, value in rows:
        console.print(f"  {key:<11}{value}")
    for note in model.notes:
        console.print(f"  - {note}")


def _pattern_summary(pattern: str) -> str:
    names = {"F": "full", "S": "sliding", "C": "chunked", "M": "mamba/linear", "N": "no-KV"}
    return ", ".join(f"{pattern.count(letter)} {label}" for letter, label in names.items() if letter in pattern)
