"""The long-lived planner's engine cache (planner/plan/engine_cache.py): an engine stage it gives is the one
computed alone, for flags that differ in the limits and the utilization, on the same or another GPU, for a
vision model whose profile reads the context; and it never holds more than its bounds."""

from __future__ import annotations

import pytest

from planner.gpus.catalog import lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS
from planner.models.catalog import lookup_model
from planner.models.spec import ModelSpec
from planner.plan import make_plan
from planner.plan.build import plan_without_recommendation, predict
from planner.plan.engine import EngineLayout, compute_engine
from planner.plan.engine_cache import MAX_BASES, MAX_ENGINES, EngineCache, flags_key
from planner.vllm.args import ServingArgs
from planner.vllm.checks import resolve_max_model_len
from planner.vllm.defaults import resolve_args
from planner.vllm.releases import resolve_release

LLAMA, QWEN_MOE, GEMMA_VISION = (
    lookup_model(m) for m in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B", "google/gemma-3-12b-it")
)
L4, H100 = lookup_gpu("L4"), lookup_gpu("H100-80GB")
SETTINGS = [
    ServingArgs(max_model_len=4_096),
    ServingArgs(max_model_len=8_192),
    ServingArgs(max_model_len=8_192, max_num_seqs=7),
    ServingArgs(max_model_len=8_192, max_num_seqs=7, gpu_memory_utilization=0.9),
    ServingArgs(max_model_len=8_192, gpu_memory_utilization=0.85),
    ServingArgs(max_model_len=8_192, max_num_batched_tokens=4_096),
    ServingArgs(max_model_len=8_192, kv_cache_dtype="fp8"),
    ServingArgs(max_model_len=8_192, enable_prefix_caching=False, block_size=32),
    ServingArgs(max_model_len=16_384, tensor_parallel_size=2),
]


def _engine(cache: EngineCache | None, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, version: str) -> EngineLayout:
    parsed, release, _ = resolve_release(version)
    max_len, _ = resolve_max_model_len(model, args, release, parsed)
    resolved = resolve_args(args, model, gpu, release, max_len)
    if cache is None:
        return compute_engine(model, gpu, args, release, resolved, coefficients=DEFAULT_COEFFICIENTS, version=parsed)
    return cache.engine(model, gpu, args, release, resolved, coefficients=DEFAULT_COEFFICIENTS, version=parsed)


@pytest.mark.parametrize("version", ["0.6.0", "0.19.0", "0.33.0"])
@pytest.mark.parametrize("model", [LLAMA, QWEN_MOE, GEMMA_VISION], ids=lambda m: m.id)
def test_a_cached_engine_is_the_one_computed_alone(model: ModelSpec, version: str) -> None:
    cache = EngineCache()
    for gpu in (L4, H100):
        for args in SETTINGS:
            for _ in range(2):  # a miss, then a hit
                assert _engine(cache, model, gpu, args, version) == _engine(None, model, gpu, args, version)
    # The limits and the utilization share a base; the other flags and GPUs have their own.
    assert len(cache.bases) < 2 * len(SETTINGS)


@pytest.mark.parametrize("version", ["0.6.0", "0.19.0"])
def test_plans_with_the_cache_are_the_plans_without_it(version: str) -> None:
    cache = EngineCache()
    for model in (LLAMA, GEMMA_VISION):
        for args in SETTINGS:
            alone, prediction = plan_without_recommendation(model, L4, args, vllm_version=version)
            cached, shared = plan_without_recommendation(model, L4, args, vllm_version=version, engines=cache)
            assert cached.model_dump() == alone.model_dump()
            assert shared == prediction
            assert predict(model, L4, args, vllm_version=version, engines=cache) == prediction
    # and the whole recommendation from the cached predictions
    args = ServingArgs(max_model_len=20_480)
    model = lookup_model("Qwen/Qwen3-32B")  # does not fit on an A10G: alternatives

    def replan(m: ModelSpec, g: GpuSpec, a: ServingArgs):  # type: ignore[no-untyped-def]
        return plan_without_recommendation(m, g, a, vllm_version=version, engines=cache)

    a10g = lookup_gpu("A10G")
    with_cache = make_plan(model, a10g, args, vllm_version=version, base=replan(model, a10g, args), replan=replan)
    assert with_cache.model_dump() == make_plan(model, a10g, args, vllm_version=version).model_dump()


def test_the_cache_keeps_its_bounds() -> None:
    cache = EngineCache(max_bases=2, max_engines=3)
    for tp in (1, 2, 4):  # three bases
        for seqs in (1, 2, 3, 4):  # four engines each
            args = ServingArgs(max_model_len=4_096, max_num_seqs=seqs, tensor_parallel_size=tp)
            assert _engine(cache, QWEN_MOE, H100, args, "0.19.0") == _engine(None, QWEN_MOE, H100, args, "0.19.0")
            assert len(cache.bases) <= 2 and len(cache.engines) <= 3
    assert len(cache.bases) == 2 and len(cache.engines) == 3
    assert (EngineCache().bases.size, EngineCache().engines.size) == (MAX_BASES, MAX_ENGINES)


def test_another_object_with_the_same_id_is_not_found() -> None:
    """Keys hold ids; an entry keeps its objects alive and is found only by those same objects."""
    cache = EngineCache()
    args = ServingArgs(max_model_len=4_096)
    first = _engine(cache, LLAMA, L4, args, "0.19.0")
    copy = LLAMA.model_copy(update={"num_layers": LLAMA.num_layers // 2})
    other = _engine(cache, copy, L4, args, "0.19.0")
    assert other != first and other == _engine(None, copy, L4, args, "0.19.0")


def test_values_that_print_alike_are_different_flags() -> None:
    """The flags' key tells apart values that JSON would not (inf and None are both ``null`` there)."""
    unset = ServingArgs()
    assert unset.swap_space is None
    assert ServingArgs(swap_space=float("inf")).model_dump_json() == unset.model_dump_json()
    keys = {
        flags_key(unset),
        flags_key(ServingArgs(swap_space=float("inf"))),
        flags_key(ServingArgs(swap_space=4.0)),
        flags_key(ServingArgs(cpu_offload_gb=1.0)),
    }
    assert len(keys) == 4 and None not in keys
    limits_only = {flags_key(ServingArgs(max_model_len=n, max_num_seqs=n, gpu_memory_utilization=0.5)) for n in (1, 2)}
    assert limits_only == {flags_key(ServingArgs())}
