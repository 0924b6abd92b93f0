"""KV blocks, groups, tokens and concurrency exactly as vLLM computes them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InvalidArgumentError
from planner.plan import make_plan
from planner.plan.build import kv_report, predict
from planner.vllm.args import ServingArgs

GiB = 1 << 30


def _layout_for(spec, gpu, kv_gib, version, **args):  # type: ignore[no-untyped-def]
    prediction = predict(
        spec,
        gpu,
        ServingArgs(**args),
        vllm_version=version,
        available_override=[int(kv_gib * GiB)] * args.get("pipeline_parallel_size", 1),
    )
    return prediction, kv_report(spec, prediction)


def test_llama_8b_uniform_layout_h100_0_19(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    # Logged by vLLM 0.19.0: 58.11 GiB -> 29,751 blocks, 476,016 tokens, 58.11x at 8,192.
    _, kv = _layout_for(shared_model("meta-llama--Llama-3.1-8B"), h100, 58.11, "0.19.0", max_model_len=8192)
    assert kv.bytes_per_block == 32 * 16 * 4096  # 32 layers x 16 tokens x (2 x 8 heads x 128 x 2 B)
    assert abs(kv.num_gpu_blocks - 29_751) <= 3  # the logged GiB is rounded to 0.01
    assert kv.tokens == kv.num_gpu_blocks * 16
    assert kv.max_concurrency == pytest.approx(kv.num_gpu_blocks / 512, rel=1e-9)


def test_gemma2_sliding_groups_0_19_logged_figures(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    # vLLM 0.19.0 logged 21,110 blocks, 168,880 tokens, 20.60x for 54.12 GiB.
    prediction, kv = _layout_for(
        shared_model("google--gemma-2-9b-it"), h100, 54.12, "0.19.0", max_model_len=8192, gpu_memory_utilization=0.95
    )
    assert [g.kind for g in kv.groups] == ["sliding_window", "full"]
    assert kv.bytes_per_block == 21 * 16 * 8 * 512 * 2
    layout = prediction.layout
    assert layout.blocks_per_request(8192) == 512 + 513  # full + window (4095 + 8192 in flight, capped) + 1
    assert abs(kv.num_gpu_blocks - 21_110) <= 2
    assert kv.tokens == kv.num_gpu_blocks // 2 * 16  # 0.10-0.19 formula: blocks // groups * block size


def test_tokens_formula_changes_after_0_19(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("openai--gpt-oss-20b")
    _, old = _layout_for(spec, h100, 58.47, "0.19.0", max_model_len=8192)
    _, new = _layout_for(spec, h100, 58.47, "0.20.2", max_model_len=8192)
    assert old.tokens == old.num_gpu_blocks // 2 * 16
    assert new.tokens == int(new.num_gpu_blocks / new.blocks_per_request * 8192)
    assert old.tokens != new.tokens


def test_gemma3_27b_groups_and_padding(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    # 52 sliding + 10 full layers: group size 10 -> 1 full + 6 sliding groups, 8 padding layers.
    prediction, kv = _layout_for(shared_model("btly--hewo"), h100, 40.0, "0.33.0", max_model_len=32768)
    kinds = [g.kind for g in kv.groups]
    assert kinds.count("full") == 1 and kinds.count("sliding_window") == 6
    assert prediction.layout.grouping.padding_layers == 8
    assert kv.bytes_per_block == 10 * kv.groups[0].page_bytes
    assert any("padding layers" in w.message for w in prediction.warnings)


def test_llama4_chunked_groups_depend_on_release(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    before, kv_before = _layout_for(spec, h100, 30.0, "0.13.0", max_model_len=65536)
    _, kv_after = _layout_for(spec, h100, 30.0, "0.14.0", max_model_len=65536)
    assert [g.kind for g in kv_before.groups] == ["full"]  # hybrid manager off: all layers full
    assert sorted(g.kind for g in kv_after.groups) == ["chunked_local"] * 3 + ["full"]  # 4 groups of 12
    assert kv_after.bytes_per_block == 12 * kv_after.groups[0].page_bytes
    # chunked layers keep 8,192 + in-flight tokens: 4096 + 3 x cdiv(8192 + 8192, 16) blocks per request
    assert kv_after.blocks_per_request == 4096 + 3 * 1024
    per_request_after = kv_after.bytes_per_block * kv_after.blocks_per_request
    assert per_request_after < kv_before.bytes_per_block * kv_before.blocks_per_request / 2
    assert any(w.code == "KVP110" for w in before.warnings)


def test_qwen3_next_block_size_aligned_to_the_mamba_state(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    _, kv = _layout_for(
        shared_model("Qwen--Qwen3-Next-80B-A3B-Instruct"),
        h100,
        20.0,
        "0.33.0",
        max_model_len=32768,
        enable_prefix_caching=False,
    )
    # attention page per token 2 heads x 2 x 256 x 2 B = 2 KiB; GDN state ~1.05 MiB -> 544 tokens
    assert kv.block_size == 544
    assert sorted(g.kind for g in kv.groups) == ["full"] + ["mamba"] * 3
    assert kv.state_bytes_per_sequence > 0
    mamba = [g for g in kv.groups if g.kind == "mamba"]
    assert all(g.blocks_for(100_000) == g.blocks_for(10) for g in mamba)  # constant per sequence


def test_kv_heads_replicate_beyond_tp_and_mla_never_splits(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    llama = shared_model("meta-llama--Llama-3.1-8B")  # 8 KV heads
    _, tp8 = _layout_for(llama, h100, 10.0, "0.33.0", tensor_parallel_size=8, max_model_len=8192)
    _, tp4 = _layout_for(llama, h100, 10.0, "0.33.0", tensor_parallel_size=4, max_model_len=8192)
    assert tp4.bytes_per_block == 2 * tp8.bytes_per_block
    falcon = shared_model("ybelkada--falcon-7b-sharded-bf16")  # MQA: one KV head
    with pytest.raises(InvalidArgumentError, match="divisible"):
        _layout_for(falcon, h100, 10.0, "0.33.0", tensor_parallel_size=2)  # 71 heads
    ds = shared_model("deepseek-ai--DeepSeek-V2-Lite")
    _, mla1 = _layout_for(ds, h100, 10.0, "0.19.0", max_model_len=8192)
    _, mla2 = _layout_for(ds, h100, 10.0, "0.19.0", max_model_len=8192, tensor_parallel_size=2)
    assert mla1.bytes_per_block == mla2.bytes_per_block == 27 * 16 * 576 * 2


def test_pipeline_stage_with_least_memory_decides(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    plan = make_plan(
        shared_model("meta-llama--Llama-3.1-8B"),
        h100,
        ServingArgs(pipeline_parallel_size=2, max_model_len=8192, gpu_memory_utilization=0.95),
        vllm_version="0.19.0",
    )
    assert plan.memory.limiting_rank == "tp0/pp1"  # the last stage holds the sampler
    assert plan.kv_cache.bytes_per_block == 16 * 16 * 4096


def test_fit_error_is_vllms_text_with_its_estimate(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    plan = make_plan(
        shared_model("meta-llama--Llama-3.1-70B"),
        h100,
        ServingArgs(tensor_parallel_size=2, gpu_memory_utilization=0.9),
        vllm_version="0.19.0",
    )
    assert not plan.fits
    assert plan.fit_error is not None and plan.fit_error.startswith(
        "To serve at least one request with the models's max seq len (131072)"
    )
    assert f"the estimated maximum model length is {plan.kv_cache.estimated_max_model_len}." in plan.fit_error
    assert plan.recommendation is not None
    assert plan.recommendation.max_model_len <= plan.kv_cache.estimated_max_model_len
    changes = [a.change for a in plan.alternatives]
    assert any(c.startswith("shorter context") for c in changes)
    assert any(c.startswith("fp8 KV cache") for c in changes)
    assert any(a.fits for a in plan.alternatives)


def test_newer_fit_text_and_null_block(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    plan = make_plan(
        shared_model("meta-llama--Llama-3.1-70B"), h100, ServingArgs(tensor_parallel_size=2), vllm_version="0.33.0"
    )
    assert plan.fit_error is not None and "the model's max seq len" in plan.fit_error


def test_auto_max_model_len_fits_the_context(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    plan = make_plan(
        shared_model("meta-llama--Llama-3.1-70B"),
        h100,
        ServingArgs(tensor_parallel_size=2, max_model_len=-1),
        vllm_version="0.33.0",
    )
    assert plan.fits and plan.kv_cache.max_model_len < 131072
    assert plan.kv_cache.blocks_per_request <= plan.kv_cache.num_gpu_blocks - 1
    with pytest.raises(InvalidArgumentError, match="auto"):
        make_plan(
            shared_model("meta-llama--Llama-3.1-70B"),
            h100,
            ServingArgs(tensor_parallel_size=2, max_model_len=-1),
            vllm_version="0.12.0",
        )


def test_context_beyond_the_model_needs_vllms_override(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("Qwen--Qwen2.5-7B-Instruct")
    with pytest.raises(InvalidArgumentError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        make_plan(spec, h100, ServingArgs(max_model_len=65536))
    plan = make_plan(spec, h100, ServingArgs(max_model_len=65536, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}))
    assert plan.kv_cache.max_model_len == 65536


def test_utilization_outside_range_is_refused(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgumentError, match="gpu_memory_utilization"):
        make_plan(shared_model("meta-llama--Llama-3.1-8B"), h100, ServingArgs(gpu_memory_utilization=1.5))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    kv_gib=st.floats(min_value=0.05, max_value=40),
    length=st.integers(min_value=1, max_value=131072),
    version=st.sampled_from(["0.10.2", "0.19.0", "0.33.0"]),
)
def test_estimated_max_len_is_the_largest_that_fits(kv_gib: float, length: int, version: str) -> None:
    from planner.models.config import parse_config
    from tests.conftest import load_shared_config
    from tests.core.conftest import make_gpu

    spec = parse_config(load_shared_config("google--gemma-2-9b-it"), model_id="g")
    gpu = make_gpu("H100-80GB", 79.19)
    prediction = predict(
        spec, gpu, ServingArgs(max_model_len=8192), vllm_version=version, available_override=[int(kv_gib * GiB)]
    )
    layout = prediction.layout
    best = layout.max_len_that_fits(length)
    if best:
        assert layout.fits(best)
    if best < length:
        assert not layout.fits(best + 1)
