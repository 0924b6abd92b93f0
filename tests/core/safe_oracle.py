"""The oracle of tests/core/test_safe_limits.py: plan the flags a limit comes with, check it at the low end.

A limit holds when vLLM starts with its flags even if the prediction errs by its known error (the band's
low end: ``num_gpu_blocks_low``, ``max_model_len_fits_low``), every sequence at the full context fits with
``headroom`` of the usable blocks (vLLM's null block excluded) kept free, and vLLM's SchedulerConfig takes
the count (``max_num_batched_tokens >= max_num_seqs``).
"""

from __future__ import annotations

from typing import Any

from planner.gpus.catalog import all_gpus, lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.models.spec import ModelSpec
from planner.plan.build import plan_without_recommendation
from planner.plan.models import Plan
from planner.vllm.args import ServingArgs
from planner.vllm.argv import parse_args
from planner.vllm.argv_values import to_serving_args

# The flags a recommendation or an alternative may set on top of the deployment's own.
_SET = ("max_model_len", "max_num_seqs", "gpu_memory_utilization", "kv_cache_dtype", "tensor_parallel_size")


def bigger_gpus(gpu: GpuSpec) -> list[GpuSpec]:
    """What ``planner recommend`` offers as bigger GPUs (planner/cli/recommend.py: _bigger_gpus)."""
    found = [g for g in all_gpus() if g.vendor == gpu.vendor and g.memory_bytes > gpu.memory_bytes]
    return sorted(found, key=lambda g: g.memory_bytes)


def emitted_limits(words: list[str]) -> dict[str, Any]:
    """The flags of ``vllm_args`` that a recommendation sets, as ServingArgs fields."""
    values = parse_args(words).values
    parsed = to_serving_args(values)
    return {name: getattr(parsed, name) for name in _SET if name in values}


def holds(model: ModelSpec, gpu: GpuSpec, flags: ServingArgs, version: str | None, headroom: float) -> list[str]:
    """What is wrong with ``flags`` (their ``--max-model-len`` and ``--max-num-seqs``) at the low end of the
    band of the plan of exactly those flags; [] when they hold."""
    plan, prediction = plan_without_recommendation(model, gpu, flags, vllm_version=version)
    assert flags.max_model_len is not None and flags.max_num_seqs is not None
    length, seqs = flags.max_model_len, flags.max_num_seqs
    band = plan.margin
    assert band is not None and band.num_gpu_blocks_low is not None
    low = min(plan.kv_cache.num_gpu_blocks, band.num_gpu_blocks_low)
    per = plan.kv_cache.blocks_for_sequence(length)
    out = []
    if not plan.fits:
        out.append("does not fit as predicted")
    if not band.max_model_len_fits_low:
        out.append(f"--max-model-len {length} does not fit at the low end")
    if seqs * per > max(0, low - 1) * (1.0 - headroom):
        out.append(f"{seqs} x {per} blocks > {low - 1} usable at the low end with {headroom:.0%} free")
    if seqs > prediction.resolved.max_num_batched_tokens:
        out.append(f"--max-num-seqs {seqs} > max_num_batched_tokens {prediction.resolved.max_num_batched_tokens}")
    return out


def problems(
    model: ModelSpec, gpu: GpuSpec, args: ServingArgs, plan: Plan, version: str | None, headroom: float
) -> list[str]:
    """Every limit ``plan`` emits (its recommendation, every option said to fit) checked with :func:`holds`."""
    found = []
    emitted = []
    if plan.recommendation is not None:
        rec = plan.recommendation
        target = gpu
        if rec.basis.startswith("alternative: bigger GPU: "):
            target = lookup_gpu(rec.basis.removeprefix("alternative: bigger GPU: ").split(" and ")[0])
        emitted.append((f"recommendation ({rec.basis})", target, rec.vllm_args))
    for alt in plan.alternatives:
        if not alt.fits:
            continue
        target = gpu
        if alt.change.startswith("bigger GPU: "):
            target = lookup_gpu(alt.change.removeprefix("bigger GPU: ").split(" and ")[0])
        emitted.append((alt.change, target, alt.vllm_args))
    for what, target, words in emitted:
        flags = args.model_copy(update=emitted_limits(words))
        wrong = holds(model, target, flags, version, headroom)
        if wrong:
            found.append(f"{model.id} on {target.name}, vLLM {version}: {what}: {' '.join(words)}: {wrong}")
    return found
