"""Parameter counts from the architecture, exact against published counts, and their sharding."""

from __future__ import annotations

import pytest

from planner.models.weights import estimate_weights, pp_partition


@pytest.mark.parametrize(
    ("name", "parameters"),
    [  # the parameter counts Hugging Face shows for these checkpoints
        ("meta-llama--Llama-3.1-8B", 8_030_261_248),
        ("meta-llama--Llama-3.1-70B", 70_553_706_496),
        ("Qwen--Qwen2.5-7B-Instruct", 7_615_616_512),
        ("mistralai--Mixtral-8x7B-v0.1", 46_702_792_704),
        ("deepseek-ai--DeepSeek-V2-Lite", 15_706_484_224),
        ("microsoft--Phi-3-mini-4k-instruct", 3_821_079_552),
        ("THUDM--glm-4-9b-chat", 9_399_951_360),
        ("meta-llama--Llama-3.2-1B", 1_235_814_400),
        ("ybelkada--falcon-7b-sharded-bf16", 6_921_720_704),
    ],
)
def test_parameter_count_is_exact(shared_model, name, parameters) -> None:  # type: ignore[no-untyped-def]
    assert estimate_weights(shared_model(name), dtype="bfloat16").parameters == parameters


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("Qwen--Qwen3-8B", 8_190_735_360),
        ("google--gemma-2-9b-it", 9_241_705_984),
        ("openai--gpt-oss-120b", 116_829_156_672),
        ("deepseek-ai--DeepSeek-V3", 671_026_419_200),
    ],
)
def test_parameter_count_within_a_thousandth(shared_model, name, parameters) -> None:  # type: ignore[no-untyped-def]
    estimated = estimate_weights(shared_model(name), dtype="bfloat16").parameters
    assert abs(estimated - parameters) / parameters < 1e-3


def test_tensor_parallel_splits_weights_and_replicates_small_tensors(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-3.1-8B")
    one = estimate_weights(spec, dtype="bfloat16").bytes_per_stage[0]
    two = estimate_weights(spec, dtype="bfloat16", tp=2).bytes_per_stage[0]
    four = estimate_weights(spec, dtype="bfloat16", tp=4).bytes_per_stage[0]
    assert one / 2 < two < one / 2 * 1.01 and one / 4 < four < one / 4 * 1.02


def test_checkpoint_bytes_set_the_total_and_casting_scales_it(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-3.1-8B").model_copy(update={"checkpoint_bytes": 16_060_522_496})
    bf16 = estimate_weights(spec, dtype="bfloat16", checkpoint_bytes=spec.checkpoint_bytes)
    fp32 = estimate_weights(spec, dtype="float32", checkpoint_bytes=spec.checkpoint_bytes)
    assert not bf16.estimated
    rope = 131072 * 128 * 2
    assert bf16.bytes_per_stage[0] - rope == pytest.approx(16_060_522_496, rel=1e-6)
    assert fp32.bytes_per_stage[0] == pytest.approx(2 * (bf16.bytes_per_stage[0] - rope) + 2 * rope, rel=1e-6)


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (32, 2, [16, 16]),
        (80, 3, [27, 27, 26]),
        (61, 4, [15, 15, 16, 15]),
        (126, 4, [31, 32, 32, 31]),
        (10, 4, [2, 3, 3, 2]),
    ],
)
def test_pipeline_partition_matches_vllm_get_pp_indices(layers, pp, expected) -> None:  # type: ignore[no-untyped-def]
    assert pp_partition(layers, pp) == expected
    assert sum(expected) == layers


def test_pipeline_partition_override() -> None:
    assert pp_partition(32, 2, "10,22") == [10, 22]
    with pytest.raises(ValueError):
        pp_partition(32, 2, "10,20")
