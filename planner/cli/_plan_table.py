"""Human-readable renderings of a Plan and of the per-model fleet table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from planner.gpus.spec import GpuSpec
from planner.plan.fleet import FleetRow
from planner.plan.models import KvGroupReport, Plan
from planner.units import GiB, format_bytes
from planner.vllm.args import ServingArgs


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / GiB:,.2f} GiB"


def _group_summary(groups: Sequence[KvGroupReport]) -> str:
    """KV-cache groups as "6: full x1, sliding(1024) x5": hybrid models have many groups of few kinds."""
    kinds = Counter(grp.kind + (f"({grp.window})" if grp.window else "") for grp in groups)
    if len(groups) == 1:
        return next(iter(kinds))
    return f"{len(groups)}: " + ", ".join(f"{kind} x{count}" for kind, count in kinds.items())


def render_plan(console: Console, plan: Plan, args: ServingArgs) -> None:
    m, g, mem, kv = plan.model, plan.gpu, plan.memory, plan.kv_cache
    console.print(
        f"[bold]{m.id}[/] ({m.architecture}, {m.attention}, {m.num_layers} layers, {m.dtype}"
        f"{', ' + m.quantization if m.quantization else ''}) on [bold]{g.count} x {g.name}[/] "
        f"({_gib(g.memory_bytes)} each), vLLM {plan.vllm_version}"
    )
    budget = Table(title=f"Memory per GPU ({mem.limiting_rank})", show_header=True, header_style="bold")
    budget.add_column("term")
    budget.add_column("bytes", justify="right")
    budget.add_row(
        f"budget = ceil({mem.total_bytes / GiB:.2f} GiB x {mem.gpu_memory_utilization:g})", _gib(mem.budget_bytes)
    )
    budget.add_row("- weights" + (" (estimated)" if mem.weights_estimated else ""), _gib(mem.weights_bytes))
    budget.add_row("- non-torch (CUDA, NCCL)", _gib(mem.non_torch_bytes))
    budget.add_row("- activation peak (profiling)", _gib(mem.activation_peak_bytes))
    graphs = _gib(mem.cuda_graph_bytes) if mem.cuda_graph_counted else f"({_gib(mem.cuda_graph_bytes)}, not counted)"
    budget.add_row("- CUDA graphs", graphs)
    band = plan.margin
    kv_text = band.describe() if band is not None and band.kv_cache_bytes > 0 else _gib(mem.kv_cache_bytes)
    budget.add_row("[bold]= KV cache[/]", f"[bold]{kv_text}[/]")
    console.print(budget)
    rec = plan.recommendation
    own = rec is not None and not rec.basis.startswith("alternative")  # limits of this deployment
    if band is not None and band.kv_cache_bytes > 0 and band.down_bytes > 0:
        largest = sorted((t for t in band.terms if t.low_bytes), key=lambda t: -t.low_bytes)[:3]
        parts = ", ".join(f"{t.name.replace('_', ' ')} {t.low_bytes / GiB:.2f}" for t in largest)
        holds = (
            "the limits below hold if vLLM finds as little as"
            if own
            else "no limits of this deployment hold if vLLM finds as little as"
        )
        console.print(f"  margin: {holds} {_gib(band.low_bytes)} (the planner's measured error; largest: {parts} GiB)")

    cache = Table(title="KV cache", show_header=False)
    cache.add_column("what")
    cache.add_column("value", justify="right")
    gpus = plan.gpu.count
    cache.add_row(
        "per token (whole model" + (f", across {gpus} GPUs)" if gpus > 1 else ")"), format_bytes(kv.bytes_per_token)
    )
    if kv.state_bytes_per_sequence:
        cache.add_row("state per sequence (Mamba/linear)", format_bytes(kv.state_bytes_per_sequence))
    cache.add_row("dtype / block size", f"{kv.kv_cache_dtype} / {kv.block_size} tokens")
    cache.add_row("groups", _group_summary(kv.groups))
    cache.add_row("bytes per block (per GPU)", format_bytes(kv.bytes_per_block))
    cache.add_row("GPU blocks", f"{kv.num_gpu_blocks:,}")
    cache.add_row("GPU KV cache size", f"{kv.tokens:,} tokens")
    cache.add_row(f"max concurrency @ {kv.max_model_len:,} tokens", f"{kv.max_concurrency:.2f}x")
    cache.add_row("longest single sequence", f"{kv.estimated_max_model_len:,} tokens")
    console.print(cache)

    if plan.fits and own:
        console.print("[green]fits:[/] vLLM's startup check passes")
    elif plan.fits:
        console.print(
            "[red]no safe limits:[/] vLLM's startup check passes as predicted, but no limits hold at the low end "
            "of the band (see the warning" + (" and what would fit)" if plan.alternatives else ")")
        )
    else:
        console.print(f"[red]does not fit:[/] {plan.fit_error}")
    if rec is not None:
        console.print(
            f"recommended ({rec.basis}): --max-model-len {rec.max_model_len} --max-num-seqs {rec.max_num_seqs}"
        )
        console.print("[bold]args:[/] " + " ".join(rec.vllm_args))
        for note in rec.notes:
            console.print(f"  {note}")
        if rec.basis == "worst-case":
            console.print("  (every sequence at the full context; pass --workload for a realistic limit)")
    if plan.alternatives:
        alt = Table(title="What would fit", show_header=True, header_style="bold")
        alt.add_column("change", overflow="fold")
        alt.add_column("fits")
        alt.add_column("max concurrency", justify="right")
        for a in plan.alternatives:
            alt.add_row(
                a.change,
                "yes" if a.fits else "no",
                f"{a.max_concurrency:.2f}x" if a.max_concurrency is not None else "-",
            )
        console.print(alt)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def render_fleet(
    console: Console,
    gpu: GpuSpec,
    args: ServingArgs,
    rows: Sequence[FleetRow],
    *,
    headroom: float,
    vllm_version: str | None = None,
) -> None:
    release = f", vLLM {vllm_version or 'unknown (every checked release)'}"
    table = Table(
        title=f"Catalog models on {args.gpus_per_engine} x {gpu.name} ({_gib(gpu.memory_bytes)} each){release}",
        header_style="bold",
    )
    table.add_column("model", overflow="fold")
    table.add_column("fits at full context")
    table.add_column("max context", justify="right")
    for length in ("4k", "32k", "max"):
        table.add_column(f"--max-num-seqs @{length}", justify="right")

    def cell(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    for row in rows:
        fits = "[green]yes[/]" if row.fits_low else "[yellow]nominal[/]" if row.fits else "[red]no[/]"
        table.add_row(
            row.id,
            fits,
            f"{row.max_model_len:,}" if row.max_model_len else "-",
            cell(row.max_num_seqs_4096),
            cell(row.max_num_seqs_32768),
            cell(row.max_num_seqs_max),
        )
    console.print(table)
    console.print(
        "fits at full context: vLLM starts with the model's own context length (its config's maximum); 'nominal': "
        "only as predicted, not at the low end of the planner's error band.\n"
        f"max context: the longest --max-model-len that holds at the low end of the error band with one sequence "
        f"keeping {headroom:.0%} of the KV blocks free ('-': none does).\n"
        f"--max-num-seqs @N: sequences of N tokens that run at once with {headroom:.0%} of the KV blocks kept free "
        "(--headroom), at the low end of the error band of a plan with exactly those flags ('-': none holds); raw "
        "vLLM concurrency is in -o json.\n"
        f"Next: planner recommend --gpu {gpu.name} --model <model> for one model's full plan, the vLLM "
        "arguments to paste and, when it does not fit, what would.",
        soft_wrap=False,
        highlight=False,
    )
