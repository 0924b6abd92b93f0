"""``planner simulate serve``: a vLLM simulator for trying dashboards, alerts, the exporter and the
webhook without GPUs. See docs/simulator.md."""

from enum import Enum
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from planner.cli._app import app
from planner.cli._commands import COMMANDS
from planner.cli._output import OutputFormat, console, print_json, print_yaml
from planner.cli._vllm_options import (
    BlockSize,
    DataParallel,
    GpuMemoryUtilization,
    KvCacheDtype,
    MaxModelLen,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    PipelineParallel,
    TensorParallel,
    serving_args,
)
from planner.errors import InvalidArgumentError, KvPlannerError
from planner.units import AUTO
from planner.vllm.args import ServingArgs

simulate_app = typer.Typer(
    name="simulate",
    help=COMMANDS["simulate"].help,
    no_args_is_help=True,
)
app.add_typer(simulate_app, name="simulate")

_S = "Simulator"


class VllmEngine(str, Enum):
    v1 = "v1"
    v0 = "v0"


@simulate_app.command("serve")
def serve(
    model: Annotated[str | None, typer.Option("--model", help="Model id: served name, and planned with --gpu.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU to size the KV cache for (with --model).")] = None,
    num_gpu_blocks: Annotated[
        int | None,
        typer.Option(
            "--num-gpu-blocks", min=2, rich_help_panel=_S, help="Use this many KV blocks and skip the planner."
        ),
    ] = None,
    max_model_len: MaxModelLen = None,
    max_num_seqs: MaxNumSeqs = None,
    max_num_batched_tokens: MaxNumBatchedTokens = None,
    gpu_memory_utilization: GpuMemoryUtilization = None,
    kv_cache_dtype: KvCacheDtype = "auto",
    block_size: BlockSize = None,
    tensor_parallel_size: TensorParallel = 1,
    pipeline_parallel_size: PipelineParallel = 1,
    data_parallel_size: DataParallel = 1,
    enable_prefix_caching: Annotated[
        bool | None, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching", rich_help_panel="vLLM flags")
    ] = None,
    enable_chunked_prefill: Annotated[
        bool, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill", rich_help_panel="vLLM flags")
    ] = True,
    served_model_name: Annotated[str | None, typer.Option("--served-model-name", rich_help_panel="vLLM flags")] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option("--vllm-version", help="Release whose metrics and scheduler rules to model (default: newest)."),
    ] = None,
    vllm_engine: Annotated[
        VllmEngine,
        typer.Option("--vllm-engine", rich_help_panel=_S, help="v0 (VLLM_USE_V1=0) exists only before 0.11."),
    ] = VllmEngine.v1,
    host: Annotated[str, typer.Option("--host", help="Address to bind (0.0.0.0 inside a pod).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            min=0.0,
            rich_help_panel=_S,
            help="Wall seconds per simulated second: 1 = real time, 0.01 = 100x faster, 0 = flat out.",
        ),
    ] = 1.0,
    seed: Annotated[int, typer.Option("--seed", rich_help_panel=_S)] = 0,
    step_base_ms: Annotated[
        float | None, typer.Option("--step-base-ms", min=0.0, rich_help_panel=_S, help="Fixed cost of one engine step.")
    ] = None,
    step_per_token_us: Annotated[
        float | None, typer.Option("--step-per-token-us", min=0.0, rich_help_panel=_S, help="Cost per scheduled token.")
    ] = None,
    step_per_context_token_ns: Annotated[
        float | None,
        typer.Option(
            "--step-per-context-token-ns",
            min=0.0,
            rich_help_panel=_S,
            help="Cost per token of context read by attention.",
        ),
    ] = None,
    eos_probability: Annotated[
        float,
        typer.Option(
            "--eos-probability",
            min=0.0,
            max=0.99,
            rich_help_panel=_S,
            help="Chance per generated token to stop early (0 = every request runs to max_tokens).",
        ),
    ] = 0.0,
    check_invariants: Annotated[
        bool, typer.Option("--check-invariants", rich_help_panel=_S, help="Recount the block pool after every step.")
    ] = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.table,
) -> None:
    """Serve vLLM's OpenAI API, /health, /version and /metrics over a simulated engine."""
    from planner.sim.engine import SpeedModel
    from planner.sim.server import serve_forever
    from planner.sim.settings import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, SimulatorSettings

    args = serving_args(
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
    )
    length, seqs, batched = args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens
    speed = SpeedModel()
    source = "--num-gpu-blocks"
    warnings: list[str] = []
    if num_gpu_blocks is None:
        if not (model and gpu):
            raise InvalidArgumentError(
                "give --num-gpu-blocks N, or --model and --gpu to size the cache with the planner",
                flag="--num-gpu-blocks",
            )
        planned = _plan(model, gpu, args, vllm_version)
        num_gpu_blocks, block_size, length = planned.num_gpu_blocks, planned.block_size, planned.max_model_len
        seqs, batched = seqs or planned.max_num_seqs, batched or planned.max_num_batched_tokens
        speed, source, warnings = planned.speed, f"plan:{planned.model_id}@{planned.gpu_name}", planned.warnings
    elif gpu is not None:
        warnings.append("--num-gpu-blocks given: --gpu is not used to size the cache")
    block = block_size or 16
    if length == AUTO:
        length = num_gpu_blocks * block  # the longest context one request can hold
    speed = SpeedModel(
        base_s=step_base_ms / 1e3 if step_base_ms is not None else speed.base_s,
        per_token_s=step_per_token_us / 1e6 if step_per_token_us is not None else speed.per_token_s,
        per_context_token_s=(
            step_per_context_token_ns / 1e9 if step_per_context_token_ns is not None else speed.per_context_token_s
        ),
    )
    settings = _validated(
        SimulatorSettings,
        model=model or "kv-planner/simulated-model",
        served_model_name=served_model_name,
        num_gpu_blocks=num_gpu_blocks,
        block_size=block,
        block_size_given=block_size is not None,
        max_model_len=length,
        max_num_seqs=seqs or DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens=batched or max(DEFAULT_MAX_NUM_BATCHED_TOKENS, seqs or 0),
        gpu_memory_utilization=gpu_memory_utilization if gpu_memory_utilization is not None else 0.9,
        kv_cache_dtype=kv_cache_dtype,
        vllm_version=vllm_version,
        engine_kind=vllm_engine.value,
        data_parallel_size=data_parallel_size,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill,
        time_scale=time_scale,
        seed=seed,
        speed=speed,
        eos_probability=eos_probability,
        check_invariants=check_invariants,
        source=source,
    )
    _print_summary(settings, f"http://{host}:{port}", warnings, output)
    serve_forever(settings, host=host, port=port, log_level="warning")


def _print_summary(settings: Any, url: str, warnings: list[str], output: OutputFormat) -> None:
    summary = {
        "url": url,
        "served_model_name": settings.name,
        "vllm_version": settings.vllm_version or settings.release,
        "modelled_release": settings.release,
        "num_gpu_blocks": settings.num_gpu_blocks,
        "block_size": settings.block_size,
        "max_model_len": settings.effective_max_model_len,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "data_parallel_size": settings.data_parallel_size,
        "time_scale": settings.time_scale,
        "seed": settings.seed,
        "speed": settings.speed.model_dump(),
        "source": settings.source,
        "warnings": warnings,
    }
    if output is OutputFormat.json:
        print_json(summary)
        return
    if output is OutputFormat.yaml:
        print_yaml(summary)
        return
    console.print(
        f"[bold]vLLM simulator[/] {url}  model={settings.name}  vllm={summary['vllm_version']} "
        f"(metrics of {settings.release})\n"
        f"  KV cache: {settings.num_gpu_blocks} blocks x {settings.block_size} tokens ({settings.source}); "
        f"max_model_len={settings.effective_max_model_len} max_num_seqs={settings.max_num_seqs} "
        f"max_num_batched_tokens={settings.max_num_batched_tokens}\n"
        f"  time scale {settings.time_scale:g} (wall s per simulated s), seed {settings.seed}"
    )
    for warning in warnings:
        console.print(f"  [yellow]warning:[/] {warning}")


def _plan(model: str, gpu: str, args: ServingArgs, vllm_version: str | None) -> Any:
    from planner.sim.plan_bridge import plan_cache

    return plan_cache(model, gpu, args, vllm_version=vllm_version)


def _validated(model_class: Any, /, **fields: Any) -> Any:
    """Build a pydantic model from CLI values; a rejected value becomes a usage error, not a traceback."""
    try:
        return model_class(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, KvPlannerError):
            raise cause from None  # a check inside the model: keep its type, message and hint
        where = ".".join(str(part) for part in first.get("loc", ())) or "settings"
        flag = "--" + where.replace("_", "-") if where != "settings" else None
        raise InvalidArgumentError(f"{flag or where}: {first.get('msg')}", flag=flag) from None
