"""``planner recommend``: what vLLM will compute at startup, and the safe limits."""

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.cli import _vllm_options as v
from planner.cli._app import EXIT_FAILED, app
from planner.cli._commands import COMMANDS
from planner.cli._lookup import gpu_for, model_for
from planner.cli._output import console, err_console, print_json, print_yaml
from planner.errors import CapacityError, PlannerInputError, WorkloadProfileError
from planner.findings import Code, Finding, Severity
from planner.gpus.catalog import all_gpus
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS
from planner.plan import Plan, make_plan
from planner.plan.recommend import safe_max_num_seqs
from planner.vllm.args import ServingArgs
from planner.vllm.releases import LATEST_KNOWN

UNKNOWN_RELEASE = "unknown"

# A plan of one model imports only what it uses (tests/cli/test_lazy_commands.py): the corrections file,
# the catalog table, GPU sharing, inverse sizing and the rich tables are imported where they are needed.
if TYPE_CHECKING:
    from planner.calibration.corrections import Corrections
    from planner.cli._lookup import LoadedModel
    from planner.gpus.share import GpuShare

DEFAULT_HEADROOM = 0.1  # DESIGN's policy default: the same meaning as the webhook's `headroom`


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


def safe_as_asked(plan: Plan) -> bool:
    """The deployment as asked has limits that hold at the low end of its KV band (README's exit 0): vLLM's
    startup check passes and the recommendation is this deployment's, not another setup's."""
    rec = plan.recommendation
    return plan.fits and rec is not None and not rec.basis.startswith("alternative")


def _print_args(plan: Plan) -> None:
    """``-o args``: only arguments for the deployment as asked. When it needs another setup (more GPUs, a
    bigger card, fp8 KV), stdout stays empty so a script cannot paste a setup nobody asked for."""
    rec = plan.recommendation
    as_asked = (
        "this deployment does not fit as asked"
        if not plan.fits
        else "this deployment has no safe limits as asked (vLLM's startup check passes as predicted, but not "
        "when the prediction errs by its measured error)"
    )
    if rec is None:
        raise CapacityError(f"{as_asked}, and no option fits: no safe arguments to print (see --output table)")
    if rec.basis.startswith("alternative"):
        change = rec.basis.removeprefix("alternative:").strip()
        raise CapacityError(
            f"{as_asked}, so there are no arguments to print; the first option that fits is a different setup "
            f"({change}): {' '.join(rec.vllm_args)}. Rerun with those flags to get its arguments, or see "
            "--output table."
        )
    typer.echo(" ".join(rec.vllm_args))


def _warn_suspicious_values(plan: Plan, args: ServingArgs, headroom: float | None) -> None:
    """Unit slips and settings that defeat themselves: accepted (vLLM accepts them too), but said aloud."""
    if args.kv_cache_memory_bytes is not None and args.kv_cache_memory_bytes < (1 << 20):
        err_console.print(
            f"[yellow]note[/] --kv-cache-memory-bytes {args.kv_cache_memory_bytes} is {args.kv_cache_memory_bytes:,} "
            "bytes (under 1 MiB): vLLM reads a plain number as bytes; write a unit, e.g. 20G or 20GiB."
        )
    length, rec = plan.kv_cache.max_model_len, plan.recommendation
    if headroom and rec is not None and rec.max_model_len < length and safe_max_num_seqs(plan, length, headroom) < 1:
        err_console.print(
            f"[yellow]note[/] --headroom {headroom:g} keeps {headroom:.0%} of the KV blocks free, which leaves no room "
            f"for even one sequence of {length:,} tokens at the low end of the band: the recommended "
            f"--max-model-len is {rec.max_model_len:,} (a lower --headroom keeps a longer one, where it fits)."
        )


def _warn_ignored_without_model(**given: object) -> None:
    """The catalog table plans every model with the same flags; say which model-specific flags it ignores."""
    ignored = [f"--{name.replace('_', '-')}" for name, value in given.items() if value is not None]
    if ignored:
        err_console.print(
            f"[yellow]note[/] {', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} ignored without --model "
            "(the catalog table plans every model alike); add --model ID to use "
            f"{'it' if len(ignored) == 1 else 'them'}."
        )


def _corrections(path: Path | None) -> "Corrections | None":
    if path is None:
        return None
    from planner.calibration.corrections import load_corrections

    return load_corrections(path)


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
    vllm_version: Annotated[
        str | None,
        typer.Option(
            "--vllm-version",
            help="X.Y.Z (default: the newest checked release, said in the output); 'unknown': limits that "
            "hold on every checked release.",
        ),
    ] = None,
    headroom_flag: Annotated[
        float | None,
        typer.Option("--headroom", min=0.0, max=0.99, help="Fraction of KV blocks kept free (default 0.1)."),
    ] = None,
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
    nnodes: v.Nnodes = 1,
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
    kv_offloading_size: v.KvOffloadingSize = None,
    kv_offloading_backend: v.KvOffloadingBackend = None,
    moe_backend: v.MoeBackend = None,
    mxfp4_backend: v.Mxfp4Backend = None,
    limit_mm_per_prompt: v.LimitMmPerPrompt = None,
    mm_processor_kwargs: v.MmProcessorKwargs = None,
    skip_mm_profiling: v.SkipMmProfiling = False,
    hf_overrides: v.HfOverrides = None,
    env: v.VllmEnv = None,
    gpu_share: Annotated[
        str | None,
        typer.Option(
            "--gpu-share",
            help="The GPU is shared: N pods time-slice it (4), or this pod's memory on it (20GiB, e.g. an MPS "
            "limit). Plans a per-pod budget.",
        ),
    ] = None,
    target_seqs: Annotated[
        int | None,
        typer.Option(
            "--target-seqs",
            min=1,
            help="Inverse sizing: the smallest KV budget holding N sequences at the context with the headroom "
            "(risk-bounded with --workload).",
        ),
    ] = None,
    target_risk: Annotated[
        float | None,
        typer.Option("--target-risk", min=1e-9, max=0.5, help="With --target-seqs and --workload: overflow risk."),
    ] = None,
) -> None:
    headroom = DEFAULT_HEADROOM if headroom_flag is None else headroom_flag
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
        nnodes=nnodes,
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
        kv_offloading_size=kv_offloading_size,
        kv_offloading_backend=kv_offloading_backend,
        moe_backend=moe_backend,
        mxfp4_backend=mxfp4_backend,
        limit_mm_per_prompt=limit_mm_per_prompt,
        mm_processor_kwargs=mm_processor_kwargs,
        skip_mm_profiling=skip_mm_profiling,
        env=env,
    )
    corrections = _corrections(calibration)
    coefficients = corrections.memory_coefficients() if corrections else DEFAULT_COEFFICIENTS
    if model is None:
        if output is RecommendOutput.args:
            raise PlannerInputError("--output args needs --model")
        _warn_ignored_without_model(
            workload=workload,
            emit=emit,
            target_seqs=target_seqs,
            calibration=calibration,
            gpu_share=gpu_share,
            hf_overrides=hf_overrides,
        )
        from planner.models.catalog import all_models
        from planner.plan.fleet import fleet_rows

        # The release as `recommend --model` plans it: the newest checked one when none is given (said on
        # stderr), every checked one for 'unknown'. Each row's limits hold at the low end of its band.
        planned, release_note = release_to_plan(vllm_version)
        if release_note is not None:
            err_console.print(f"[yellow]note[/] {release_note.text}")
        rows = fleet_rows(
            all_models(), gpu_spec, args, vllm_version=planned, coefficients=coefficients, headroom=headroom
        )
        payload = {
            "gpu": {"name": gpu_spec.name, "memory_bytes": gpu_spec.memory_bytes, "count": args.gpus_per_engine},
            "vllm_version": planned or UNKNOWN_RELEASE,
            "headroom": headroom,
            "models": [r.model_dump() for r in rows],
        }
        if output is RecommendOutput.json:
            print_json(payload)
        elif output is RecommendOutput.yaml:
            print_yaml(payload)
        else:
            from planner.cli._plan_table import render_fleet

            render_fleet(console, gpu_spec, args, rows, headroom=headroom, vllm_version=planned)
        return
    if emit is not None and workload is None:
        raise PlannerInputError("--emit needs --workload: the thresholds come from the request-length profile")
    loaded = model_for(model, revision=revision, token=token, refresh=refresh)
    profile = _load_workload(workload)
    vllm_version, release_note = release_to_plan(vllm_version)
    override_note = _apply_overrides(loaded, hf_overrides, vllm_version) if hf_overrides is not None else None
    options: dict[str, Any] = {
        "vllm_version": vllm_version,
        "headroom": headroom,
        "coefficients": coefficients,
        "corrections": corrections,
        "draft": _draft(args, vllm_version, token=token, refresh=refresh, warnings=loaded.warnings),
    }
    share: GpuShare | None = None
    if gpu_share is not None:
        from planner.plan.shared import make_shared_plan, parse_gpu_share

        share = parse_gpu_share(gpu_share, gpu_spec)
        plan = make_shared_plan(
            loaded.spec, gpu_spec, args, share, workload=profile, bigger_gpus=_bigger_gpus(gpu_spec), **options
        )
    else:
        plan = make_plan(loaded.spec, gpu_spec, args, workload=profile, bigger_gpus=_bigger_gpus(gpu_spec), **options)
    if target_seqs is not None:
        plan = _inverse(loaded.spec, gpu_spec, args, share, plan, target_seqs, profile, target_risk, options)
    elif target_risk is not None:
        raise PlannerInputError("--target-risk needs --target-seqs (and --workload)")
    plan.findings[:0] = [Finding.of(Code.MODEL_RESOLUTION_NOTE, note) for note in loaded.warnings]
    if override_note is not None:
        plan.findings.insert(len(loaded.warnings), override_note)
    if release_note is not None:
        plan.findings.append(release_note)
    _warn_suspicious_values(plan, args, headroom_flag)
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
    if not safe_as_asked(plan):
        raise typer.Exit(EXIT_FAILED)  # it does not fit, or no limits hold at the low end of its band


def _apply_overrides(loaded: "LoadedModel", text: str, vllm_version: str | None) -> Finding | None:
    """``--hf-overrides`` applied to the model as ``vllm_version`` applies them (None: every release, which must
    agree): ``loaded.spec`` becomes the overridden model; the note says what was planned. Raises
    HfOverridesError (exit 2) for overrides kv-planner cannot apply as vLLM does."""
    from planner.vllm.hf_overrides import apply_hf_overrides, parse_hf_overrides

    overrides = parse_hf_overrides(text)
    if not overrides:
        return None
    applied = apply_hf_overrides(loaded.spec, loaded.config, overrides, version=vllm_version)
    loaded.spec = applied.spec
    rules = f"vLLM {vllm_version} rules" if vllm_version is not None else "every release's rules"
    severity = Severity.warn if applied.unapplied else Severity.info
    return Finding.of(
        Code.CONFIG_OVERRIDDEN, f"--hf-overrides applied ({rules}): {applied.summary()}", severity=severity
    )


def release_to_plan(given: str | None) -> tuple[str | None, Finding | None]:
    """The release ``recommend`` plans, and the note that says it was assumed.

    The output names one release (DESIGN: ``"vllm_version": str``), so a plan without ``--vllm-version``
    is that release's: its band is the planner's measured error *for that release*. Folding in what
    every older release would compute (``--vllm-version unknown``, what ``check`` and the webhook do when
    an image does not say) can take a third of the KV cache (gemma-3-27b on H100: 16.5 GiB predicted,
    the 0.13-0.16 sampler leaves 10.1) and would make every plan as timid as the worst release's.
    """
    if given is not None and given.strip().lower() == UNKNOWN_RELEASE:
        return None, None
    if given is not None:
        return given, None
    return LATEST_KNOWN, Finding.of(
        Code.VERSION_ASSUMED,
        f"--vllm-version not given: planned for vLLM {LATEST_KNOWN}, the newest release checked; pass the "
        "release you run (or --vllm-version unknown for limits that hold on every checked release)",
    )


def _draft(
    args: ServingArgs, vllm_version: str | None, *, token: str | None, refresh: bool, warnings: list[str]
) -> Any:
    """The drafter of ``--speculative-config`` when it names one: a draft model must resolve; an EAGLE
    head that does not is sized from the target's shapes (with a note)."""
    if not args.speculative_config:
        return None
    from planner.errors import KvPlannerError
    from planner.plan.speculative import parse_speculative_config
    from planner.vllm.releases import resolve_release

    settings = parse_speculative_config(args.speculative_config, resolve_release(vllm_version)[0])
    if settings.model is None or settings.method in ("ngram", "ngram_gpu", "suffix", "mtp"):
        return None
    try:
        return model_for(settings.model, revision=None, token=token, refresh=refresh).spec
    except KvPlannerError as error:
        if settings.method == "draft_model":
            raise
        warnings.append(f"drafter {settings.model} not read ({error.message.splitlines()[0]}): sized from the target")
        return None


def _inverse(
    model: Any,
    gpu: GpuSpec,
    args: ServingArgs,
    share: "GpuShare | None",
    plan: Plan,
    target_seqs: int,
    profile: Any,
    target_risk: float | None,
    options: dict[str, Any],
) -> Plan:
    """``--target-seqs``: the plan at the smallest KV budget for the target, with ``budget`` set."""
    from planner.plan.inverse import smallest_budget
    from planner.plan.shared import visible_gpu
    from planner.vllm.releases import resolve_release

    if target_risk is not None and profile is None:
        raise PlannerInputError("--target-risk needs --workload (the risk is over the request-length profile)")
    seen = visible_gpu(gpu, share) if share is not None else gpu
    _, release, _ = resolve_release(options["vllm_version"])

    def plan_fn(a: ServingArgs) -> Plan:
        return make_plan(model, seen, a, with_alternatives=False, **options)

    advice, chosen = smallest_budget(
        plan_fn,
        args,
        target_seqs=target_seqs,
        headroom=options["headroom"],
        kv_bytes_flag=release.kv_cache_memory_bytes_flag,
        profile=profile,
        target_risk=target_risk,
    )
    result = chosen.model_copy(deep=True)
    result.budget = advice
    result.sharing = plan.sharing
    if result.recommendation is not None:
        result.recommendation.vllm_args = advice.vllm_args
        result.recommendation.max_num_seqs = target_seqs
        result.recommendation.basis = f"target: {target_seqs} sequences ({advice.basis})"
    if share is not None and share.budget_bytes is not None and advice.pod_bytes > share.budget_bytes:
        result.findings.append(
            Finding.of(
                Code.TARGET_SEQS_DO_NOT_FIT,
                f"{target_seqs} sequences need {advice.pod_bytes / (1 << 30):.1f} GiB per GPU, more than this "
                f"pod's share ({share.budget_bytes / (1 << 30):.1f} GiB)",
            )
        )
    return result


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
        _print_args(plan)
    else:
        from planner.cli._plan_table import render_plan

        render_plan(console, plan, args)
        if plan.sharing is not None:
            console.print(f"[bold]shared GPU:[/] {plan.sharing.explanation}")
        if plan.budget is not None:
            b = plan.budget
            kv = f"{b.kv_cache_memory_bytes / (1 << 30):.2f} GiB KV" if b.kv_cache_memory_bytes else "the KV cache"
            console.print(
                f"[bold]target:[/] {b.target_seqs} sequences of {b.max_model_len:,} tokens ({b.basis}) need "
                f"{b.num_gpu_blocks:,} blocks = {kv}; the pod takes {b.pod_bytes / (1 << 30):.1f} GiB per GPU and "
                f"leaves {b.left_for_co_tenants_bytes / (1 << 30):.1f} GiB to co-tenants"
            )
