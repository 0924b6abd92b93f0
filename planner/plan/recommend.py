"""Safe limits from a plan, and what would make a plan fit when it does not.

* ``--max-model-len``: the context in force when it fits; otherwise the longest one sequence can
  have (vLLM's own estimate), rounded down to a multiple of 1,024 tokens (of the block size below 4k).
* ``--max-num-seqs``: with a workload profile, the risk-bounded concurrency of
  :mod:`planner.workload`; without one, the worst case — every sequence at the full context — keeping
  ``headroom`` of the usable blocks free, capped at vLLM's default (never above what vLLM would run).
* alternatives when it does not fit: a shorter context, an fp8 KV cache, a higher utilization, more
  GPUs by tensor parallelism, a bigger GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.errors import KvPlannerError
from planner.gpus.spec import GpuSpec
from planner.models.spec import ModelSpec
from planner.plan.build import Prediction
from planner.plan.models import Alternative, KvCacheReport, Plan, Recommendation
from planner.vllm.args import ServingArgs

PlanFn = Callable[[ModelSpec, GpuSpec, ServingArgs], Plan]


def round_context(tokens: int, block_size: int) -> int:
    """A friendly context length at or below ``tokens``."""
    if tokens >= 4096:
        return tokens // 1024 * 1024
    return max(block_size, tokens // block_size * block_size) if tokens >= block_size else tokens


def worst_case_max_num_seqs(kv: KvCacheReport, headroom: float) -> int:
    """Sequences that fit with every one at ``max_model_len`` and ``headroom`` of the blocks kept free."""
    usable = kv.usable_blocks * (1.0 - headroom)
    return int(usable // max(1, kv.blocks_per_request))


def vllm_args_for(args: ServingArgs, max_model_len: int, max_num_seqs: int, utilization: float,
                  kv_cache_dtype: str) -> list[str]:
    out = ["--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
           "--gpu-memory-utilization", f"{utilization:g}"]
    if kv_cache_dtype != "auto":
        out += ["--kv-cache-dtype", kv_cache_dtype]
    if args.tensor_parallel_size > 1:
        out += ["--tensor-parallel-size", str(args.tensor_parallel_size)]
    if args.pipeline_parallel_size > 1:
        out += ["--pipeline-parallel-size", str(args.pipeline_parallel_size)]
    return out


def recommendation(plan: Plan, prediction: Prediction, args: ServingArgs, *, headroom: float,
                   workload_limit: int | None, workload_basis: str | None) -> Recommendation | None:
    """Safe limits, or None when not even one token fits (see the alternatives)."""
    kv = plan.kv_cache
    if plan.fits:
        max_len = kv.max_model_len
    elif kv.estimated_max_model_len > 0 and kv.num_gpu_blocks > 0:
        max_len = round_context(kv.estimated_max_model_len, kv.block_size)
    else:
        return None
    default_seqs = prediction.resolved.max_num_seqs
    if workload_limit is not None:
        seqs, basis = max(1, min(workload_limit, default_seqs)), workload_basis or "workload"
    else:
        per_request = max(1, kv.blocks_for_sequence(max_len))
        worst = int(kv.usable_blocks * (1.0 - headroom) // per_request)
        seqs, basis = max(1, min(worst, default_seqs)), "worst-case"
    requested_dtype = args.kv_cache_dtype
    return Recommendation(
        max_model_len=max_len,
        max_num_seqs=seqs,
        gpu_memory_utilization=plan.memory.gpu_memory_utilization,
        kv_cache_dtype=requested_dtype if requested_dtype != "auto" else kv.kv_cache_dtype,
        vllm_args=vllm_args_for(args, max_len, seqs, plan.memory.gpu_memory_utilization, requested_dtype),
        basis=basis,
    )


def _alternative(change: str, args: ServingArgs, plan_fn: Callable[[ServingArgs], Plan] | None,
                 model: ModelSpec, gpu: GpuSpec, gpu_fn: PlanFn | None = None) -> Alternative | None:
    try:
        plan = plan_fn(args) if plan_fn is not None else gpu_fn(model, gpu, args)  # type: ignore[misc]
    except KvPlannerError:
        return None
    kv = plan.kv_cache
    return Alternative(
        change=change,
        vllm_args=vllm_args_for(args, kv.max_model_len, max(1, worst_case_max_num_seqs(kv, 0.0)),
                                plan.memory.gpu_memory_utilization, args.kv_cache_dtype),
        fits=plan.fits,
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
) -> list[Alternative]:
    """What would fit. Only computed when the plan does not fit (or the context had to shrink)."""
    if plan.fits:
        return []
    out: list[Alternative] = []
    kv = plan.kv_cache
    if kv.estimated_max_model_len > 0:
        shorter = round_context(kv.estimated_max_model_len, kv.block_size)
        alt = _alternative(f"shorter context: --max-model-len {shorter}",
                           args.model_copy(update={"max_model_len": shorter}), None, model, gpu, replan)
        if alt:
            out.append(alt)
    if kv.kv_cache_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla") and gpu.vendor == "nvidia":
        alt = _alternative("fp8 KV cache: --kv-cache-dtype fp8", args.model_copy(update={"kv_cache_dtype": "fp8"}),
                           None, model, gpu, replan)
        if alt:
            out.append(alt)
    if plan.memory.gpu_memory_utilization < 0.95:
        alt = _alternative("higher utilization: --gpu-memory-utilization 0.95",
                           args.model_copy(update={"gpu_memory_utilization": 0.95}), None, model, gpu, replan)
        if alt:
            out.append(alt)
    for tp in (2, 4, 8):
        if tp <= args.tensor_parallel_size or model.num_attention_heads % tp:
            continue
        alt = _alternative(f"more GPUs: --tensor-parallel-size {tp} ({tp * args.pipeline_parallel_size} GPUs)",
                           args.model_copy(update={"tensor_parallel_size": tp}), None, model, gpu, replan)
        if alt:
            out.append(alt)
            if alt.fits:
                break
    for bigger in bigger_gpus:
        alt = _alternative(f"bigger GPU: {bigger.name}", args, None, model, bigger, replan)
        if alt and alt.fits:
            out.append(alt)
            break
    return out
