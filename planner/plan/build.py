"""make_plan(): model + GPU + serving flags + release -> the Plan vLLM's startup will produce."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from planner.errors import InvalidArgumentError, KvPlannerError
from planner.findings import Code, Finding, fix_args
from planner.gpus.spec import GpuSpec
from planner.kv.capacity import KvLayout, capacity, fit_error_text, no_memory_text
from planner.kv.dtypes import is_approximate
from planner.kv.specs import kv_bytes_per_token_all_layers, mamba_state_bytes
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.engine import (
    EngineLayout,
    EngineSource,
    StageMemory,
    TermCorrections,
    compute_engine,
    kv_layout,
    memory_budget,
)
from planner.plan.margin import activation_kind, kv_band
from planner.plan.models import (
    GpuReport,
    KvBand,
    KvCacheReport,
    KvGroupReport,
    MemoryReport,
    ModelReport,
    Plan,
    kv_past_card,
)
from planner.plan.offload import OffloadReport, is_disaggregation, offload_report, transfer_role
from planner.plan.speculative import DrafterCost
from planner.units import GiB
from planner.vllm.architectures import check_architecture
from planner.vllm.args import ServingArgs
from planner.vllm.checks import check_parallelism, check_values, derived_length, resolve_max_model_len
from planner.vllm.defaults import ResolvedArgs, resolve_args
from planner.vllm.releases import RELEASES, Release, Version, resolve_release


@dataclass
class Prediction:
    """Intermediate result: the engine arithmetic plus the KV layout, before recommendations."""

    version: Version
    release: Release
    resolved: ResolvedArgs
    engine: EngineLayout
    layout: KvLayout
    max_model_len: int
    fits: bool
    fit_error: str | None
    warnings: list[Finding]


def _unmodelled_warnings(args: ServingArgs, release: Release, kv_name: str) -> list[Finding]:
    warnings = []
    if is_disaggregation(args):
        connector, role = transfer_role(args)
        warnings.append(
            Finding.of(
                Code.KV_TRANSFER_NOT_MODELLED,
                f"disaggregated prefill/decode ({connector}, {role or 'role not set'}): KV moved between engines "
                "and the connector's transfer buffers are not counted; local capacity as planned",
            )
        )
    if is_approximate(kv_name):
        warnings.append(
            Finding.of(
                Code.PACKED_DTYPE_APPROXIMATED,
                f"--kv-cache-dtype {kv_name}: packed layout approximated by its nominal bits",
            )
        )
    if args.kv_cache_memory_bytes is not None and not release.kv_cache_memory_bytes_flag:
        raise InvalidArgumentError(
            "unrecognized arguments: --kv-cache-memory-bytes (added in vLLM 0.10.2)", flag="--kv-cache-memory-bytes"
        )
    if args.swap_space is not None:
        if not release.swap_space_flag:
            raise InvalidArgumentError(
                "unrecognized arguments: --swap-space (removed in vLLM 0.18.0)", flag="--swap-space"
            )
        warnings.append(
            Finding.of(Code.SWAP_SPACE_V0_ONLY, "--swap-space only matters for the V0 engine; V1 never swaps")
        )
    if args.data_parallel_size > 1:
        warnings.append(
            Finding.of(
                Code.DATA_PARALLEL, f"data parallel: {args.data_parallel_size} engines, each with the capacity below"
            )
        )
    return warnings


def _offload(args: ServingArgs, prediction: Prediction, plan: Plan) -> OffloadReport | None:
    kv = plan.kv_cache
    return offload_report(
        args,
        prediction.version,
        bytes_per_block=kv.bytes_per_block,
        block_size=kv.block_size,
        groups=max(1, len(kv.groups)),
        gpu_tokens=kv.tokens,
    )


def offload_notes(report: OffloadReport) -> list[Finding]:
    """KVP203: the CPU tier in numbers (info)."""
    text = (
        f"KV offload ({report.backend}, {report.source}): CPU tier {report.cpu_tokens:,} tokens in "
        f"{report.host_bytes / GiB:.1f} GiB {'pinned ' if report.pinned else ''}host memory; GPU tier "
        f"{report.gpu_tokens:,} tokens"
    )
    return [Finding.of(Code.CPU_OFFLOAD_NOT_COUNTED, t) for t in (text, *report.notes)]


def speculative_notes(drafter: DrafterCost | None) -> list[Finding]:
    """KVP201: what the drafter costs (info, with the numbers)."""
    if drafter is None:
        return []
    if drafter.weights_bytes == 0 and drafter.kv_layers == 0 and not drafter.notes:
        return [
            Finding.of(Code.SPECULATIVE_NOT_MODELLED, f"speculative decoding ({drafter.method}): no GPU weights or KV")
        ]
    text = (
        f"speculative decoding ({drafter.method}, {drafter.num_speculative_tokens} tokens): drafter weights "
        f"{drafter.weights_bytes / GiB:.2f} GiB{' (estimated)' if drafter.weights_estimated else ''}, "
        f"{drafter.kv_layers} KV layer(s), {drafter.lookahead_tokens} lookahead slots per sequence"
    )
    return [Finding.of(Code.SPECULATIVE_NOT_MODELLED, t) for t in (text, *drafter.notes)]


def _engine_stage(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    vllm_version: str | None,
    coefficients: MemoryCoefficients,
    corrections: TermCorrections | None,
    draft: ModelSpec | None,
    memo: EngineSource | None = None,
    resolve: Resolver | None = None,
) -> tuple[Version, Release, list[Finding], int, bool, ResolvedArgs, EngineLayout]:
    """Everything of :func:`predict` that can refuse the flags, up to the per-stage memory terms (the
    KV layout and the fit check come after and never refuse): the release spread needs only this.
    ``memo``: the engine stages of flags that differ from these only in the batch sizes and the context, on
    any GPUs (the sweep's), or a long-lived planner's engine cache (used without corrections or a drafter
    model); ``resolve``: :func:`resolve_args` or a memo of it (the sweep's)."""
    version, release, warnings = resolve_release(vllm_version)
    warnings += check_architecture(model.architecture, version)
    check_parallelism(model, args)
    max_len, auto, resolved, engine, corrected = limited_stage(
        model,
        gpu,
        args,
        version,
        release,
        coefficients=coefficients,
        corrections=corrections,
        draft=draft,
        memo=memo,
        resolve=resolve,
    )
    warnings += engine.warnings + _unmodelled_warnings(args, release, engine.kv_dtype.name)
    warnings += speculative_notes(engine.drafter)
    if corrected:
        warnings.append(
            Finding.of(Code.CORRECTED, "memory terms corrected with measurements from the calibration file")
        )
    if engine.weights_estimated:
        warnings.append(
            Finding.of(Code.WEIGHTS_ESTIMATED, "weights estimated from the architecture (no exact checkpoint size)")
        )
    return version, release, warnings, max_len, auto, resolved, engine


Resolver = Callable[[ServingArgs, ModelSpec, GpuSpec, Release, int], ResolvedArgs]
""":func:`resolve_args`, or a memo of it."""


def limited_stage(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    version: Version,
    release: Release,
    *,
    coefficients: MemoryCoefficients,
    corrections: TermCorrections | None,
    draft: ModelSpec | None,
    memo: EngineSource | None = None,
    resolve: Resolver | None = None,
) -> tuple[int, bool, ResolvedArgs, EngineLayout, bool]:
    """The part of :func:`_engine_stage` the limits (``--max-model-len``, ``--max-num-seqs``) reach: (the
    context, auto-fit, the resolved flags, the engine, whether measured corrections were applied). The
    release, architecture, parallelism and unmodelled-flag checks read no limit: the sweep plans flags that
    differ from flags it planned only in the limits with this part alone (planner/plan/sweep.py), and gives
    its memo of :func:`resolve_args` as ``resolve`` (its search resolves the same flags before replanning
    them)."""
    check_values(args)
    max_len, auto = resolve_max_model_len(model, args, release, version)
    resolved = (resolve or resolve_args)(args, model, gpu, release, max_len)
    deltas = (
        corrections.deltas_for(
            model,
            gpu,
            args,
            max_num_batched_tokens=resolved.max_num_batched_tokens,
            max_num_seqs=resolved.max_num_seqs,
        )
        if corrections is not None
        else None
    )
    if memo is not None and deltas is None and draft is None:
        engine = memo.engine(model, gpu, args, release, resolved, coefficients=coefficients, version=version)
    else:
        engine = compute_engine(
            model, gpu, args, release, resolved, coefficients=coefficients, deltas=deltas, version=version, draft=draft
        )
    return max_len, auto, resolved, engine, deltas is not None


FitFailure = Literal["", "weights", "no_memory", "auto", "length", "given_kv"]


def startup_fit(
    layout: KvLayout, max_len: int, auto: bool, *, weights_bytes: int | None, budget_bytes: int
) -> tuple[bool, FitFailure, int]:
    """vLLM's startup checks on a KV layout: (fits, which check failed, the context in force — the
    auto-fit one for ``--max-model-len auto``). ``weights_bytes``: the heaviest stage's weights, None when
    the KV memory was given (a log's figure), so the weights are known to have loaded."""
    if weights_bytes is not None and weights_bytes >= budget_bytes:
        return False, "weights", max_len
    if min(stage.available_bytes for stage in layout.stages) <= 0:
        return False, "no_memory", max_len
    if auto:
        fit = layout.max_len_that_fits(max_len)
        if fit <= 0:
            return False, "auto", max_len
        return True, "", min(max_len, fit)
    if layout.fits(max_len):
        return True, "", max_len
    return False, "length", max_len


def given_kv_overflows(stage: StageMemory, args: ServingArgs, gpu: GpuSpec) -> bool:
    """:func:`~planner.plan.models.kv_past_card` for a given ``--kv-cache-memory-bytes``, with ``stage``'s
    figures (the limiting stage's, as the memory report and the sweeps show them)."""
    given = args.kv_cache_memory_bytes
    return given is not None and kv_past_card(stage.weights_bytes, stage.non_torch_bytes, given, gpu.memory_bytes)


def fit_error_message(
    failure: FitFailure,
    layout: KvLayout,
    release: Release,
    max_len: int,
    *,
    weights_bytes: int,
    budget_bytes: int,
    utilization: float,
    memory_bytes: int,
) -> str:
    """The error vLLM raises for the failed check of :func:`startup_fit`."""
    if failure == "weights":
        return (
            f"Model weights ({weights_bytes / GiB:.2f} GiB per GPU) do not fit in the memory budget "
            f"({budget_bytes / GiB:.2f} GiB = {utilization:g} x {memory_bytes / GiB:.2f} GiB): vLLM fails "
            "while loading the model (CUDA out of memory)"
        )
    if failure == "no_memory":
        return no_memory_text(release.fit_error_style)
    if failure == "given_kv":
        return (
            f"--kv-cache-memory-bytes {layout.limiting_stage.available_bytes / GiB:.2f} GiB with the weights "
            f"({weights_bytes / GiB:.2f} GiB per GPU) and the memory outside PyTorch is more than the GPU's "
            f"{memory_bytes / GiB:.2f} GiB: vLLM runs out of memory allocating the KV cache (it takes the given "
            "size without profiling)"
        )
    if failure == "auto":
        return (
            "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
            "token. Try increasing `gpu_memory_utilization`."
        )
    return fit_error_text(layout, max_len, release.fit_error_style)


def predict(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    vllm_version: str | None = None,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    available_override: list[int] | None = None,
    corrections: TermCorrections | None = None,
    draft: ModelSpec | None = None,
    engines: EngineSource | None = None,
) -> Prediction:
    """Run vLLM's startup arithmetic. ``available_override`` replaces the predicted per-stage KV
    memory (used when a log gives the real figure). ``engines``: where engine stages already computed are
    kept (planner/plan/engine_cache.py), for a caller that plans the same deployment again and again."""
    version, release, warnings, max_len, auto, resolved, engine = _engine_stage(
        model,
        gpu,
        args,
        vllm_version=vllm_version,
        coefficients=coefficients,
        corrections=corrections,
        draft=draft,
        memo=engines,
    )
    if available_override is not None:
        available = list(available_override)
    elif args.kv_cache_memory_bytes is not None:
        available = [args.kv_cache_memory_bytes] * len(engine.memory)
    else:
        available = [stage.kv_bytes for stage in engine.memory]
    layout = kv_layout(engine, release, resolved, args, available)
    before = max_len
    heaviest = max(engine.memory, key=lambda stage: stage.weights_bytes)
    fits, failure, max_len = startup_fit(
        layout,
        max_len,
        auto,
        weights_bytes=heaviest.weights_bytes if available_override is None else None,
        budget_bytes=heaviest.budget_bytes,
    )
    if (
        fits
        and available_override is None
        and given_kv_overflows(engine.memory[layout.limiting_stage.stage], args, gpu)
    ):
        fits, failure = False, "given_kv"
    fit_error = (
        None
        if fits
        else fit_error_message(
            failure,
            layout,
            release,
            max_len,
            weights_bytes=heaviest.weights_bytes,
            budget_bytes=heaviest.budget_bytes,
            utilization=resolved.gpu_memory_utilization,
            memory_bytes=gpu.memory_bytes,
        )
    )
    if fits and auto and max_len < before:
        warnings.append(
            Finding.of(
                Code.AUTO_FIT_CONTEXT,
                f"--max-model-len auto: vLLM will reduce the context from {before} to {max_len}",
                fix=fix_args(["--max-model-len", str(max_len)]),
            )
        )
    if model.compressed_attention is not None:
        warnings.append(_window_blocks_note(layout, max_len))
    return Prediction(
        version=version,
        release=release,
        resolved=resolved,
        engine=engine,
        layout=layout,
        max_model_len=max_len,
        fits=fits,
        fit_error=fit_error,
        warnings=warnings,
    )


def _window_blocks_note(layout: KvLayout, max_len: int) -> Finding:
    """KVP114 (DeepSeek-V4): the blocks a request holds whatever its length, and what the logged size means."""
    capped = [g for g in layout.grouping.groups if g.spec.kind == "sliding_window"]
    held = sum(g.blocks_for(max_len, in_flight=layout.in_flight, dcp=layout.dcp) for g in capped)
    per_block = layout.limiting_stage.bytes_per_block
    full = layout.blocks_per_request(max_len) - held
    return Finding.of(
        Code.WINDOW_BLOCKS_PER_REQUEST,
        f"each request holds {held:,} blocks ({held * per_block / GiB:.2f} GiB) in the {len(capped)} sliding-window "
        f"and compressor-state groups (window + {layout.in_flight:,} in-flight tokens) besides {full:,} blocks "
        f'for its {max_len:,} tokens; vLLM\'s "GPU KV cache size" is max concurrency x max_model_len, so dividing '
        "the KV memory by it does not give bytes per token (vLLM #51041)",
    )


def kv_report(model: ModelSpec, prediction: Prediction) -> KvCacheReport:
    layout, engine = prediction.layout, prediction.engine
    max_len = prediction.max_model_len
    tokens, concurrency = capacity(layout, max_len, prediction.release.tokens_formula)
    kv = engine.kv_dtype
    per_token = kv_bytes_per_token_all_layers(model, kv, 1)
    state = mamba_state_bytes(model, 1, *engine.mamba_bytes) * model.layer_pattern.count("M")
    groups = [
        KvGroupReport(
            kind=group.spec.kind,
            num_layers=(
                len(group.layers)
                if layout.grouping.packed or len(layout.grouping.groups) == 1
                else layout.limiting_stage.group_slots
            ),
            page_bytes=group.page_bytes,
            block_size=group.spec.block_size,
            window=group.spec.window,
            tokens_cap=group.spec.tokens_cap(layout.in_flight),
            blocks_per_sequence_const=group.spec.const_blocks,
        )
        for group in layout.grouping.groups
    ]
    derived = derived_length(model, prediction.version)
    return KvCacheReport(
        bytes_per_token=per_token,
        state_bytes_per_sequence=state,
        kv_cache_dtype=kv.name,
        block_size=layout.block_size,
        bytes_per_block=layout.limiting_stage.bytes_per_block,
        num_gpu_blocks=layout.num_gpu_blocks,
        tokens=tokens,
        max_concurrency=concurrency,
        max_model_len=max_len,
        blocks_per_request=layout.blocks_per_request(max_len),
        estimated_max_model_len=layout.max_len_that_fits(max(derived, max_len)),
        groups=groups,
    )


def memory_report(gpu: GpuSpec, prediction: Prediction, kv_memory_given: bool) -> MemoryReport:
    stage_index = prediction.layout.limiting_stage.stage
    stage = prediction.engine.memory[stage_index]
    return MemoryReport(
        total_bytes=gpu.memory_bytes,
        gpu_memory_utilization=prediction.resolved.gpu_memory_utilization,
        budget_bytes=stage.budget_bytes,
        weights_bytes=stage.weights_bytes,
        weights_estimated=prediction.engine.weights_estimated,
        activation_peak_bytes=stage.activation_peak_bytes,
        non_torch_bytes=stage.non_torch_bytes,
        cuda_graph_bytes=stage.cuda_graph_bytes,
        cuda_graph_counted=stage.cuda_graph_counted,
        kv_cache_bytes=max(0, prediction.layout.limiting_stage.available_bytes),
        kv_cache_memory_bytes_given=kv_memory_given,
        limiting_rank=f"tp0/pp{stage_index}",
    )


def model_report(model: ModelSpec, prediction: Prediction) -> ModelReport:
    return ModelReport(
        id=model.id,
        architecture=model.architecture,
        model_type=model.model_type,
        checkpoint_bytes=model.checkpoint_bytes,
        parameters=model.parameters or prediction.engine.parameters,
        dtype=prediction.resolved.dtype,
        quantization=model.quantization.method if model.quantization else None,
        attention=model.attention_design,
        num_layers=model.num_layers,
        max_position_embeddings=model.max_position_embeddings,
        derived_max_model_len=derived_length(model, prediction.version),
        source=model.source.url if model.source else None,
    )


def version_spread(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    prediction: Prediction,
    *,
    coefficients: MemoryCoefficients,
    corrections: TermCorrections | None,
    draft: ModelSpec | None = None,
) -> int:
    """How much less KV memory (limiting stage) any checked release computes for the same flags than the
    release planned: the uncertainty of a plan whose vLLM version is unknown. The utilization is pinned to
    the planned one, since the recommended flags spell it out. The V0 rows count too (``--vllm-version
    unknown`` promises limits that hold on every checked release): V0 profiles a batch as long as the context
    up to 32K tokens, so their figure follows the flags' ``--max-model-len`` (a plan of another context has
    its own spread)."""
    utilization = prediction.resolved.gpu_memory_utilization
    fixed = release_fixed_bytes(
        model, gpu, args, utilization, coefficients=coefficients, corrections=corrections, draft=draft
    )
    planned = min(prediction.layout.stages, key=lambda s: s.available_bytes).available_bytes
    return spread_from_fixed(planned, gpu.memory_bytes, utilization, fixed)


def release_fixed_bytes(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    utilization: float,
    *,
    coefficients: MemoryCoefficients,
    corrections: TermCorrections | None,
    draft: ModelSpec | None = None,
) -> list[tuple[bool, int]]:
    """Per checked release that takes these flags (V0 rows included): (budget rounded up, the most memory
    any stage needs besides the KV cache). A stage's KV memory is the budget minus that, so
    :func:`spread_from_fixed` gives the spread for any GPU whose memory is all that differs
    (planner/plan/sweep.py)."""
    pinned = args.model_copy(update={"gpu_memory_utilization": utilization})
    out = []
    seen: dict[tuple[object, ...], tuple[bool, int] | None] = {}
    for row in RELEASES:
        # Rows that differ only in their release number (0.15/0.16, 0.22-0.24) compute the same stage unless
        # the number itself changes something: the derived context, the architecture's support, a drafter,
        # the release thresholds the engine stage compares the number with (_NUMBER_THRESHOLDS).
        version = Version.parse(row.since)
        key = (
            _row_behaviour(row),
            derived_length(model, version),
            _architecture_refused(model, version),
            row.since if args.speculative_config else None,
            tuple(version >= threshold for threshold in _NUMBER_THRESHOLDS),
        )
        if key not in seen:
            try:
                _, release, *_, other = _engine_stage(
                    model,
                    gpu,
                    pinned,
                    vllm_version=row.since,
                    coefficients=coefficients,
                    corrections=corrections,
                    draft=draft,
                )
                seen[key] = (
                    release.budget_ceil,
                    max(stage.budget_bytes - stage.kv_bytes for stage in other.memory),
                )
            except KvPlannerError:
                seen[key] = None  # a flag that release does not have: it would not run these flags at all
        found = seen[key]
        if found is not None:
            out.append(found)
    return out


_BEHAVIOUR: dict[str, str] = {}
# Release numbers the engine stage compares a row's own number with, besides its fields: the towers that take
# --mm-encoder-tp-mode data (planner/plan/multimodal.py, 0.11.0) and Kimi-Linear's reading of
# --mamba-ssm-cache-dtype (planner/plan/engine.py _KDA_SSM_FLAG_FROM, 0.32.0). A new comparison of the number in
# the engine stage belongs here.
_NUMBER_THRESHOLDS = (Version.parse("0.11.0"), Version.parse("0.32.0"))


def _row_behaviour(row: Release) -> str:
    """Every field of a release row but its number and evidence (computed once per row)."""
    found = _BEHAVIOUR.get(row.since)
    if found is None:
        found = _BEHAVIOUR[row.since] = repr(sorted(row.model_dump(exclude={"since", "evidence"}).items()))
    return found


def _architecture_refused(model: ModelSpec, version: Version) -> bool:
    try:
        check_architecture(model.architecture, version)
    except KvPlannerError:
        return True
    return False


def spread_from_fixed(planned: int, memory_bytes: int, utilization: float, fixed: list[tuple[bool, int]]) -> int:
    """``planned`` minus the least KV memory of the releases in ``fixed`` (:func:`release_fixed_bytes`)."""
    least = planned
    for ceil, need in fixed:
        least = min(least, memory_budget(memory_bytes, utilization, ceil=ceil) - need)
    return planned - least


def margin_band(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    prediction: Prediction,
    memory: MemoryReport,
    *,
    version_known: bool,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    corrections: TermCorrections | None = None,
    spread_hint: int | None = None,
    draft: ModelSpec | None = None,
) -> KvBand:
    """The KV band of :mod:`planner.plan.margin`, with what vLLM would make of its low end.
    ``spread_hint``: an unknown release's spread already computed for a closely related plan (the
    alternatives of one request reuse the request's, instead of a dozen predictions each)."""
    spread: int | None = None
    if not version_known and args.kv_cache_memory_bytes is None:
        spread = (
            spread_hint
            if spread_hint is not None
            else version_spread(
                model, gpu, args, prediction, coefficients=coefficients, corrections=corrections, draft=draft
            )
        )
    band = kv_band(
        memory,
        release_since=prediction.release.since,
        tensor_parallel_size=args.tensor_parallel_size,
        quantized=model.quantization is not None or args.quantization is not None,
        activation_kind=activation_kind(model),
        version_spread_bytes=spread,
        tp_across_nodes=args.tensor_parallel_across_nodes,
        mxfp4_spread_bytes=prediction.engine.mxfp4_spread_bytes,
        encoder_estimate_bytes=prediction.engine.encoder_band_bytes,
        cold_compile_bytes=prediction.engine.cold_compile_bytes,
        nccl_at_init_bytes=prediction.engine.nccl_at_init_bytes,
    )
    (
        band.num_gpu_blocks_low,
        band.max_model_len_fits_low,
        band.estimated_max_model_len_low,
    ) = band_low_end(
        prediction.engine,
        prediction.release,
        prediction.resolved,
        args,
        [stage.available_bytes for stage in prediction.layout.stages],
        band.down_bytes,
        prediction.max_model_len,
        derived_length(model, prediction.version),
    )
    return band


def band_low_end(
    engine: EngineLayout,
    release: Release,
    resolved: ResolvedArgs,
    args: ServingArgs,
    available: list[int],
    down_bytes: int,
    max_len: int,
    derived: int,
) -> tuple[int, bool, int]:
    """What vLLM would make of the band's low end: (blocks, the context still fits, the longest context)."""
    low = [stage - down_bytes for stage in available]
    layout = kv_layout(engine, release, resolved, args, low)
    blocks = layout.num_gpu_blocks if min(low) > 0 else 0
    fits = blocks > 0 and layout.fits(max_len)
    return blocks, fits, layout.max_len_that_fits(max(derived, max_len)) if blocks else 0


def plan_without_recommendation(
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    vllm_version: str | None = None,
    gpu_count: int | None = None,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    corrections: TermCorrections | None = None,
    draft: ModelSpec | None = None,
    with_margin: bool = True,
    spread_hint: int | None = None,
    engines: EngineSource | None = None,
) -> tuple[Plan, Prediction]:
    prediction = predict(
        model,
        gpu,
        args,
        vllm_version=vllm_version,
        coefficients=coefficients,
        corrections=corrections,
        draft=draft,
        engines=engines,
    )
    warnings = list(prediction.warnings)
    if gpu_count is not None and gpu_count != args.gpus_per_engine * args.data_parallel_size:
        warnings.append(
            Finding.of(
                Code.GPU_COUNT_MISMATCH,
                f"the pod gets {gpu_count} GPUs but TP x PP x DP = {args.gpus_total}: vLLM needs exactly "
                "TP x PP GPUs per engine",
            )
        )
    plan = Plan(
        model=model_report(model, prediction),
        gpu=GpuReport(
            name=gpu.name,
            memory_bytes=gpu.memory_bytes,
            count=args.gpus_per_engine,
            bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
            data_parallel_size=args.data_parallel_size,
        ),
        vllm_version=str(prediction.version),
        memory=memory_report(gpu, prediction, args.kv_cache_memory_bytes is not None),
        kv_cache=kv_report(model, prediction),
        fits=prediction.fits,
        fit_error=prediction.fit_error,
        findings=warnings,
        speculative=prediction.engine.drafter,
    )
    plan.offload = _offload(args, prediction, plan)
    if plan.offload is not None:
        plan.findings += offload_notes(plan.offload)
    elif args.kv_offloading_size is not None and args.kv_offloading_backend is None:
        # vllm 0.11.1-0.13 config/vllm.py: offloading starts only with --kv-offloading-backend.
        plan.findings.append(
            Finding.of(
                Code.CPU_OFFLOAD_NOT_COUNTED,
                f"--kv-offloading-size without --kv-offloading-backend does nothing in vLLM {plan.vllm_version}",
            )
        )
    if not with_margin:  # the fleet view shows no band; the version spread costs a dozen predictions
        return plan, prediction
    plan.margin = margin_band(
        model,
        gpu,
        args,
        prediction,
        plan.memory,
        version_known=vllm_version is not None,
        coefficients=coefficients,
        corrections=corrections,
        spread_hint=spread_hint,
        draft=draft,
    )
    return plan, prediction
