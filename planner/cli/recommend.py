"""``planner recommend``: what vLLM will compute at startup, and the safe limits."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.calibration.corrections import Corrections, load_corrections
from planner.cli import _vllm_options as v
from planner.cli._app import EXIT_FAILED, app
from planner.cli._commands import COMMANDS
from planner.cli._lookup import gpu_for, model_for
from planner.cli._output import console, print_json, print_yaml
from planner.cli._plan_table import render_fleet, render_plan
from planner.errors import CapacityError, PlannerInputError, WorkloadProfileError
from planner.findings import Code, Finding
from planner.gpus.catalog import all_gpus
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS
from planner.models.catalog import all_models
from planner.plan import Plan, make_plan
from planner.plan.fleet import fleet_rows
from planner.vllm.args import ServingArgs


class RecommendOutput(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"
    args = "args"


def _load_workload(value: str | None) -> Any:
    """``--workload`` is a file (YAML/JSON/CSV histogram), a vLLM ``/metrics`` URL or a Prometheus URL
    (the observed request-length histograms), or an inline JSON/YAML profile."""
    if value is None:
        return None
    from planner.workload import load_workload_file, parse_workload_text

    try:
        if value.startswith(("http://", "https://")):
            from planner.probe.sources import load_workload_source

            return load_workload_source(value)
        path = Path(value).expanduser()
        if path.is_file():
            return load_workload_file(path)
        if path.suffix.lower() in (".json", ".yaml", ".yml", ".csv") and not value.lstrip().startswith(("{", "[")):
            raise WorkloadProfileError(f"--workload: {value}: no such file")
        return parse_workload_text(value, source="--workload")
    except WorkloadProfileError:
        raise
    except (OSError, ValueError) as error:
        raise WorkloadProfileError(f"--workload: {error}") from None


def _bigger_gpus(gpu: GpuSpec) -> list[GpuSpec]:
    candidates = [g for g in all_gpus() if g.vendor == gpu.vendor and g.memory_bytes > gpu.memory_bytes]
    return sorted(candidates, key=lambda g: g.memory_bytes)


def _corrections(path: Path | None) -> Corrections | None:
    return load_corrections(path) if path is not None else None


@app.command(
    help=COMMANDS["recommend"].help,
    epilog="Examples: planner recommend --gpu A100-80GB;  "
    "planner recommend --gpu H100-80GB --model meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k",
)
def recommend(
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU name or alias (see `planner gpus`).")] = None,
    gpu_memory: Annotated[str | None, typer.Option("--gpu-memory", help="Plan for an unlisted card: 48GiB.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="HF id, catalog id or local path.")] = None,
    revision: Annotated[str | None, typer.Option("--revision", help="Hub commit, branch or tag.")] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="HF_TOKEN", show_envvar=False, help="Hugging Face token (default $HF_TOKEN)."),
    ] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Bypass the catalog and caches.")] = False,
    vllm_version: Annotated[str | None, typer.Option("--vllm-version", help="X.Y.Z (default: newest known).")] = None,
    headroom: Annotated[
        float, typer.Option("--headroom", min=0.0, max=0.99, help="Fraction of KV blocks kept free.")
    ] = 0.1,
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload", help="Request-length profile: file, inline JSON, vLLM /metrics URL or Prometheus URL."
        ),
    ] = None,
    emit: Annotated[
        str | None,
        typer.Option("--emit", help="With --workload: print ready YAML for keda,hpa,gaie,kubeai instead of the plan."),
    ] = None,
    emit_name: Annotated[str, typer.Option("--emit-name", help="Name of the scaled workload.")] = "vllm",
    emit_namespace: Annotated[str | None, typer.Option("--emit-namespace")] = None,
    prometheus_url: Annotated[str | None, typer.Option("--prometheus-url", help="For KEDA/HPA triggers.")] = None,
    calibration: Annotated[Path | None, typer.Option("--calibration", help="Corrections file.")] = None,
    output: Annotated[RecommendOutput, typer.Option("--output", "-o")] = RecommendOutput.table,
    max_model_len: v.MaxModelLen = None,
    max_num_seqs: v.MaxNumSeqs = None,
    max_num_batched_tokens: v.MaxNumBatchedTokens = None,
    gpu_memory_utilization: v.GpuMemoryUtilization = None,
    kv_cache_dtype: v.KvCacheDtype = "auto",
    kv_cache_memory_bytes: v.KvCacheMemoryBytes = None,
    block_size: v.BlockSize = None,
    tensor_parallel_size: v.TensorParallel = 1,
    pipeline_parallel_size: v.PipelineParallel = 1,
    data_parallel_size: v.DataParallel = 1,
    dtype: v.Dtype = "auto",
    quantization: v.Quantization = None,
    enforce_eager: v.EnforceEager = False,
    cpu_offload_gb: v.CpuOffloadGb = 0.0,
    enable_expert_parallel: v.EnableExpertParallel = False,
    disable_hybrid_kv_cache_manager: v.DisableHybrid = False,
    num_gpu_blocks_override: v.NumGpuBlocksOverride = None,
    enable_lora: v.EnableLora = False,
    max_loras: v.MaxLoras = 1,
    max_lora_rank: v.MaxLoraRank = 16,
    speculative_config: v.SpeculativeConfig = None,
    kv_transfer_config: v.KvTransferConfig = None,
    env: v.VllmEnv = None,
) -> None:
    gpu_spec = gpu_for(gpu, gpu_memory)
    args = v.serving_args(
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        block_size=block_size,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        data_parallel_size=data_parallel_size,
        dtype=dtype,
        quantization=quantization,
        enforce_eager=enforce_eager,
        cpu_offload_gb=cpu_offload_gb,
        enable_expert_parallel=enable_expert_parallel,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
        num_gpu_blocks_override=num_gpu_blocks_override,
        enable_lora=enable_lora,
        max_loras=max_loras,
        max_lora_rank=max_lora_rank,
        speculative_config=speculative_config,
        kv_transfer_config=kv_transfer_config,
        env=env,
    )
    corrections = _corrections(calibration)
    coefficients = corrections.memory_coefficients() if corrections else DEFAULT_COEFFICIENTS
    if model is None:
        if output is RecommendOutput.args:
            raise PlannerInputError("--output args needs --model")
        rows = fleet_rows(all_models(), gpu_spec, args, vllm_version=vllm_version, coefficients=coefficients)
        payload = {
            "gpu": {"name": gpu_spec.name, "memory_bytes": gpu_spec.memory_bytes, "count": args.gpus_per_engine},
            "models": [r.model_dump() for r in rows],
        }
        if output is RecommendOutput.json:
            print_json(payload)
        elif output is RecommendOutput.yaml:
            print_yaml(payload)
        else:
            render_fleet(console, gpu_spec, args, rows)
        return
    if emit is not None and workload is None:
        raise PlannerInputError("--emit needs --workload: the thresholds come from the request-length profile")
    loaded = model_for(model, revision=revision, token=token, refresh=refresh)
    profile = _load_workload(workload)
    plan = make_plan(
        loaded.spec,
        gpu_spec,
        args,
        vllm_version=vllm_version,
        headroom=headroom,
        workload=profile,
        coefficients=coefficients,
        corrections=corrections,
        bigger_gpus=_bigger_gpus(gpu_spec),
    )
    plan.findings[:0] = [Finding.of(Code.MODEL_RESOLUTION_NOTE, note) for note in loaded.warnings]
    if emit is not None:
        _emit_thresholds(
            plan,
            profile,
            emit,
            headroom=headroom,
            options={
                "name": emit_name,
                "namespace": emit_namespace,
                "model_name": loaded.spec.id,
                "engines_per_replica": args.data_parallel_size,
                **({"prometheus_url": prometheus_url} if prometheus_url else {}),
            },
        )
        return
    _emit(plan, args, output)
    if not plan.fits:
        raise typer.Exit(EXIT_FAILED)


def _emit_thresholds(plan: Plan, profile: Any, targets: str, *, headroom: float, options: dict[str, Any]) -> None:
    """KEDA / HPA / Gateway API Inference Extension / KubeAI settings derived from the plan and workload."""
    from planner.workload import risk_bounded_concurrency
    from planner.workload.thresholds import ThresholdOptions, render_thresholds

    if not plan.fits:
        raise CapacityError(f"nothing to scale: the plan does not fit ({plan.fit_error})")
    advice = risk_bounded_concurrency(
        plan.kv_cache, profile, headroom=headroom, max_model_len=plan.kv_cache.max_model_len
    )
    names = [t.strip() for t in targets.split(",") if t.strip()]
    typer.echo(render_thresholds(advice, names, ThresholdOptions(**options)).rstrip())


def _emit(plan: Plan, args: ServingArgs, output: RecommendOutput) -> None:
    if output is RecommendOutput.json:
        print_json(plan)
    elif output is RecommendOutput.yaml:
        print_yaml(plan)
    elif output is RecommendOutput.args:
        if plan.recommendation is None:
            raise CapacityError("nothing fits: no safe arguments to print (see --output table)")
        typer.echo(" ".join(plan.recommendation.vllm_args))
    else:
        render_plan(console, plan, args)
