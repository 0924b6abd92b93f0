"""Safe limits from a plan, and what would make a plan fit when it does not.

Both limits are computed at the low end of the plan's KV band (:mod:`planner.plan.margin`): the KV
memory vLLM finds when the prediction errs as much as it did on the calibration data. So a
recommendation starts, and its pool is not over-subscribed, whenever the prediction is within its
measured error.

* ``--max-model-len``: the context in force when it fits at the low end; otherwise the longest one
  sequence can have there (vLLM's own estimate), rounded down to a multiple of 1,024 tokens (of the
  block size below 4k).
* ``--max-num-seqs``: with a workload profile, the risk-bounded concurrency of
  :mod:`planner.workload`; without one, the worst case — every sequence at the full context — keeping
  ``headroom`` of the usable blocks free, capped at vLLM's default (never above what vLLM would run).
* alternatives when it does not fit: a shorter context, an fp8 KV cache, a higher utilization, more
  GPUs by tensor parallelism, a bigger GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.errors import KvPlannerError, PlannerInputError
from planner.gpus.spec import GpuSpec
from planner.models.spec import ModelSpec
from planner.plan.build import Prediction
from planner.plan.models import Alternative, KvCacheReport, Plan, Recommendation
from planner.vllm.args import ServingArgs

PlanFn = Callable[[ModelSpec, GpuSpec, ServingArgs], Plan]


def check_headroom(headroom: float) -> None:
    """Raise :class:`PlannerInputError` unless ``0 <= headroom < 1`` (the share of blocks kept free)."""
    if not 0 <= headroom < 1:
        raise PlannerInputError(f"headroom must be in [0, 1), got {headroom}")


def round_context(tokens: int, block_size: int) -> int:
    """A friendly context length at or below ``tokens``."""
    if tokens >= 4096:
        return tokens // 1024 * 1024
    return max(block_size, tokens // block_size * block_size) if tokens >= block_size else tokens


def worst_case_max_num_seqs(kv: KvCacheReport, headroom: float) -> int:
    """Sequences that fit with every one at ``max_model_len`` and ``headroom`` of the blocks kept free."""
    usable = kv.usable_blocks * (1.0 - headroom)
    return int(usable // max(1, kv.blocks_per_request))


def safe_cache(plan: Plan) -> KvCacheReport:
    """The plan's KV cache at the low end of its band: the blocks recommendations may count on."""
    band = plan.margin
    if band is None or band.num_gpu_blocks_low is None:
        return plan.kv_cache
    return plan.kv_cache.model_copy(
        update={"num_gpu_blocks": min(plan.kv_cache.num_gpu_blocks, band.num_gpu_blocks_low)}
    )


def safe_max_model_len(plan: Plan) -> int | None:
    """The context to recommend: the one in force when it fits at the low end of the band, else the
    longest that does (rounded), None when nothing fits."""
    kv, band = plan.kv_cache, plan.margin
    fits_low = plan.fits if band is None or band.max_model_len_fits_low is None else band.max_model_len_fits_low
    longest = kv.estimated_max_model_len
    if band is not None and band.estimated_max_model_len_low is not None:
        longest = min(longest, band.estimated_max_model_len_low)
    return safe_context(
        fits=plan.fits,
        fits_low=fits_low,
        max_model_len=kv.max_model_len,
        longest=longest,
        safe_blocks=safe_cache(plan).num_gpu_blocks,
        block_size=kv.block_size,
    )


def safe_context(
    *, fits: bool, fits_low: bool, max_model_len: int, longest: int, safe_blocks: int, block_size: int
) -> int | None:
    """:func:`safe_max_model_len` from the figures it reads (``longest``: the longest context at the low end
    of the band, ``safe_blocks``: the blocks there)."""
    if fits and fits_low:
        return max_model_len
    if longest > 0 and safe_blocks > 0:
        return min(max_model_len, round_context(longest, block_size))
    return None


def safe_max_num_seqs(plan: Plan, max_len: int, headroom: float) -> int:
    """Worst case at the low end of the band: every sequence at ``max_len``, ``headroom`` kept free."""
    kv = safe_cache(plan)
    return worst_case_seqs(kv.num_gpu_blocks, kv.blocks_for_sequence(max_len), headroom)


def worst_case_seqs(blocks: int, blocks_per_sequence: int, headroom: float) -> int:
    """Sequences of ``blocks_per_sequence`` blocks each in ``blocks`` (one is vLLM's null block), ``headroom``
    of them kept free."""
    usable = max(0, blocks - 1)
    return int(usable * (1.0 - headroom) // max(1, blocks_per_sequence))


def vllm_args_for(
    args: ServingArgs, max_model_len: int, max_num_seqs: int, utilization: float, kv_cache_dtype: str
) -> list[str]:
    """The flags to paste: the recommended limits, plus every sizing flag the plan was computed with
    (pasting the limits without e.g. ``--enforce-eager`` or ``--quantization`` would describe another
    deployment, which may not fit)."""
    out = [
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--gpu-memory-utilization",
        f"{utilization:g}",
    ]
    if kv_cache_dtype != "auto":
        out += ["--kv-cache-dtype", kv_cache_dtype]
    numbers: list[tuple[str, int | float | None, int | float | None]] = [
        ("--tensor-parallel-size", args.tensor_parallel_size, 1),
        ("--pipeline-parallel-size", args.pipeline_parallel_size, 1),
        ("--data-parallel-size", args.data_parallel_size, 1),
        ("--decode-context-parallel-size", args.decode_context_parallel_size, 1),
        ("--max-num-batched-tokens", args.max_num_batched_tokens, None),
        ("--block-size", args.block_size, None),
        ("--kv-cache-memory-bytes", args.kv_cache_memory_bytes, None),
        ("--num-gpu-blocks-override", args.num_gpu_blocks_override, None),
        ("--cpu-offload-gb", args.cpu_offload_gb, 0.0),
    ]
    out += [
        item
        for flag, value, default in numbers
        if value is not None and value != default
        for item in (flag, f"{value:g}" if isinstance(value, float) else str(value))
    ]
    if args.dtype != "auto":
        out += ["--dtype", args.dtype]
    if args.quantization:
        out += ["--quantization", args.quantization]
    if args.moe_backend and args.moe_backend != "auto":
        out += ["--moe-backend", args.moe_backend]  # the MXFP4 kernel, so the experts' padding, follows it
    switches = [
        ("--enforce-eager", args.enforce_eager),
        ("--enable-expert-parallel", args.enable_expert_parallel),
        ("--disable-hybrid-kv-cache-manager", args.disable_hybrid_kv_cache_manager),
    ]
    out += [flag for flag, on in switches if on]
    if args.enable_prefix_caching is not None:
        out.append("--enable-prefix-caching" if args.enable_prefix_caching else "--no-enable-prefix-caching")
    if args.enable_lora:
        out += ["--enable-lora", "--max-loras", str(args.max_loras), "--max-lora-rank", str(args.max_lora_rank)]
    return out


def recommendation(
    plan: Plan,
    prediction: Prediction,
    args: ServingArgs,
    *,
    headroom: float,
    workload_limit: int | None,
    workload_basis: str | None,
) -> Recommendation | None:
    """Safe limits, or None when not even one token fits (see the alternatives)."""
    if plan.memory.given_kv_overflows:
        return None  # no context helps: the given cache itself does not fit on the card
    found = safe_max_model_len(plan)
    if found is None:
        return None
    max_len = found
    default_seqs = prediction.resolved.max_num_seqs
    if workload_limit is not None:
        seqs, basis = max(1, min(workload_limit, default_seqs)), workload_basis or "workload"
    else:
        worst = safe_max_num_seqs(plan, max_len, headroom)
        seqs, basis = max(1, min(worst, default_seqs)), "worst-case"
    requested_dtype = args.kv_cache_dtype
    return Recommendation(
        max_model_len=max_len,
        max_num_seqs=seqs,
        gpu_memory_utilization=plan.memory.gpu_memory_utilization,
        kv_cache_dtype=requested_dtype if requested_dtype != "auto" else plan.kv_cache.kv_cache_dtype,
        vllm_args=vllm_args_for(args, max_len, seqs, plan.memory.gpu_memory_utilization, requested_dtype),
        basis=basis,
    )


def verified_context(
    plan: Plan, max_len: int, args: ServingArgs, model: ModelSpec, gpu: GpuSpec, replan: PlanFn
) -> tuple[int | None, Plan]:
    """``max_len`` checked by planning it, stepping down until a context fits at the low end of its own band.

    A shorter context can leave less KV memory: V0 turns chunked prefill off at or below 32K tokens, so its
    profile batch becomes the context itself (vLLM #10517 on an RTX 3090: 20K and 35K start, 29K does not).
    Returns the context (None when none fits) and the plan made with it."""
    current = plan
    for _ in range(_VERIFY_STEPS):
        if max_len == current.kv_cache.max_model_len and current.fits:
            return max_len, current
        try:
            current = replan(model, gpu, args.model_copy(update={"max_model_len": max_len}))
        except KvPlannerError:
            return None, current
        found = safe_max_model_len(current)
        if found == max_len and current.fits:
            return max_len, current
        if found is None or found >= max_len:
            return None, current
        max_len = found
    return None, current


# Each step plans a shorter context; two suffice in V0 (past the 32K switch, then inside it).
_VERIFY_STEPS = 6


def _try(
    change: str, flags: list[str], args: ServingArgs, model: ModelSpec, gpu: GpuSpec, replan: PlanFn
) -> tuple[Alternative, Plan] | None:
    try:
        plan = replan(model, gpu, args)
    except KvPlannerError:
        return None
    kv = plan.kv_cache
    max_len = safe_max_model_len(plan) or kv.max_model_len
    if "--max-model-len" in flags and plan.fits and max_len != kv.max_model_len:
        verified, checked = verified_context(plan, max_len, args, model, gpu, replan)
        if verified is None:
            return _alternative(change, flags, args, plan, max_len, fits=False), plan
        max_len, plan = verified, checked
    return _alternative(change, flags, args, plan, max_len, fits=plan.fits), plan


def _alternative(
    change: str, flags: list[str], args: ServingArgs, plan: Plan, max_len: int, *, fits: bool
) -> Alternative:
    kv = plan.kv_cache
    seqs = max(1, safe_max_num_seqs(plan, max_len, 0.0))
    if "--max-model-len" in flags:
        # The option says the context its arguments carry: the low end of its KV band, which can be
        # shorter than the context tried (a recommendation must hold when the prediction errs).
        at = flags.index("--max-model-len") + 1
        tried = flags[at]
        if tried != str(max_len):
            flags = [*flags[:at], str(max_len), *flags[at + 1 :]]
            change = change.replace(f"--max-model-len {tried}", f"--max-model-len {max_len}")
    return Alternative(
        change=change,
        args=flags,
        vllm_args=vllm_args_for(args, max_len, seqs, plan.memory.gpu_memory_utilization, args.kv_cache_dtype),
        fits=fits,
        max_model_len=kv.max_model_len,
        max_concurrency=kv.max_concurrency,
    )


def alternatives(
    plan: Plan,
    model: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    *,
    replan: PlanFn,
    bigger_gpus: Sequence[GpuSpec] = (),
    first_fitting: Callable[[Sequence[GpuSpec]], int | None] | None = None,
) -> list[tuple[Alternative, Plan]]:
    """What would fit, with the plan behind each option; computed only when the plan does not fit.
    ``first_fitting``: the index of the first of ``bigger_gpus`` whose (quiet) offer adds an option, found
    without planning the others one by one (the same answer as the loop that would).

    Single changes first (a shorter context, an fp8 KV cache, a higher utilization, more GPUs, a bigger
    GPU); a change that is not enough on its own is also offered together with the context it allows.
    """
    if plan.fits:
        return []
    out: list[tuple[Alternative, Plan]] = []

    def offer(
        change: str, flags: list[str], changed: ServingArgs, target: GpuSpec = gpu, *, quiet: bool = False
    ) -> bool:
        """Add the option (``quiet``: only if it fits, alone or with a shorter context)."""
        tried = _try(change, flags, changed, model, target, replan)
        if tried is None:
            return False
        alt, alt_plan = tried
        if alt.fits or not quiet:
            out.append(tried)
        estimated = alt_plan.kv_cache.estimated_max_model_len
        if not alt.fits and estimated > 0 and alt_plan.kv_cache.num_gpu_blocks > 0:
            shorter = round_context(estimated, alt_plan.kv_cache.block_size)
            combined = _try(
                f"{change} and --max-model-len {shorter}",
                [*flags, "--max-model-len", str(shorter)],
                changed.model_copy(update={"max_model_len": shorter}),
                model,
                target,
                replan,
            )
            if combined is not None and combined[0].fits:
                out.append(combined)
                return True
        return alt.fits

    kv = plan.kv_cache
    if kv.estimated_max_model_len > 0 and kv.num_gpu_blocks > 0:
        shorter = round_context(kv.estimated_max_model_len, kv.block_size)
        offer(
            f"shorter context: --max-model-len {shorter}",
            ["--max-model-len", str(shorter)],
            args.model_copy(update={"max_model_len": shorter}),
        )
    if not kv.kv_cache_dtype.startswith("fp8") and gpu.vendor == "nvidia":
        offer(
            "fp8 KV cache: --kv-cache-dtype fp8",
            ["--kv-cache-dtype", "fp8"],
            args.model_copy(update={"kv_cache_dtype": "fp8"}),
        )
    if plan.memory.gpu_memory_utilization < 0.95:
        offer(
            "higher utilization: --gpu-memory-utilization 0.95",
            ["--gpu-memory-utilization", "0.95"],
            args.model_copy(update={"gpu_memory_utilization": 0.95}),
        )
    for tp in (2, 4, 8):
        if tp <= args.tensor_parallel_size or model.num_attention_heads % tp:
            continue
        if offer(
            f"more GPUs: --tensor-parallel-size {tp} ({tp * args.pipeline_parallel_size} GPUs)",
            ["--tensor-parallel-size", str(tp)],
            args.model_copy(update={"tensor_parallel_size": tp}),
        ):
            break
    if first_fitting is not None and bigger_gpus:
        # The GPUs before the first that fits add nothing (quiet offers): the batched sweep finds it
        # (planner/plan/sweep.py: first_fitting_gpu), and only its option is planned here.
        found = first_fitting(bigger_gpus)
        if found is not None:
            offer(f"bigger GPU: {bigger_gpus[found].name}", [], args, bigger_gpus[found], quiet=True)
        return out
    for bigger in bigger_gpus:
        if offer(f"bigger GPU: {bigger.name}", [], args, bigger, quiet=True):
            break
    return out


def recommendation_from_alternative(alt: Alternative, alt_plan: Plan) -> Recommendation:
    """When the requested deployment does not fit: the limits of the first option that does."""
    kv = alt_plan.kv_cache
    seqs = int(alt.vllm_args[alt.vllm_args.index("--max-num-seqs") + 1])
    max_len = int(alt.vllm_args[alt.vllm_args.index("--max-model-len") + 1])
    return Recommendation(
        max_model_len=max_len,
        max_num_seqs=seqs,
        gpu_memory_utilization=alt_plan.memory.gpu_memory_utilization,
        kv_cache_dtype=kv.kv_cache_dtype,
        vllm_args=alt.vllm_args,
        basis=f"alternative: {alt.change}",
    )
