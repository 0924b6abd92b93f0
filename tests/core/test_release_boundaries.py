"""Plans on either side of a release row: each change lands exactly where that release's source has it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.errors import InvalidArgumentError
from planner.gpus.catalog import lookup_gpu
from planner.memory.cudagraph import capture_sizes
from planner.plan.build import predict
from planner.plan.engine import capture_limit, mamba_blocks_and_alignment
from planner.vllm.args import ServingArgs
from planner.vllm.defaults import default_block_size
from planner.vllm.releases import resolve_release
from tests.core.conftest import make_gpu

GiB = 1 << 30


def _predict(spec, gpu, version, kv_gib, **args):  # type: ignore[no-untyped-def]
    stages = args.get("pipeline_parallel_size", 1)
    return predict(
        spec, gpu, ServingArgs(**args), vllm_version=version, available_override=[int(kv_gib * GiB)] * stages
    )


@pytest.mark.parametrize("version", ["0.9.2", "0.29.0", "0.30.0", "0.31.0", "0.32.0"])
def test_the_last_gaps_have_their_own_checked_row(version: str) -> None:
    _, row, warnings = resolve_release(version)
    # the row of that minor (a patch row where one patch changed something), read in that very release
    assert row.since.rsplit(".", 1)[0] == version.rsplit(".", 1)[0]
    assert version in row.evidence.split(":", 1)[0].split(" and ")
    assert warnings == []


def test_0_9_has_0_10s_kv_cache_arithmetic_and_0_8s_capture_sizes_and_dtypes() -> None:
    # vllm 0.9.2 v1/core/kv_cache_utils.py equals 0.10.0's for sizing (hybrid manager groups, tokens =
    # blocks // groups x block size, the estimate printed in the fit error); config.py still captures
    # cuda_graph_sizes = [512] and CacheDType has no fp8_inc; engine/arg_utils.py excludes A100.
    old, row, new = (resolve_release(v)[1] for v in ("0.8.5", "0.9.2", "0.10.0"))
    assert (old.tokens_formula, row.tokens_formula, new.tokens_formula) == (
        "blocks_x_block_size",
        "blocks_div_groups",
        "blocks_div_groups",
    )
    assert (old.fit_error_style, row.fit_error_style) == ("e0", "e1")
    assert (old.capture_rule, row.capture_rule, new.capture_rule) == ("v0_8", "v0_8", "v0_10")
    assert row.kv_cache_dtypes == old.kv_cache_dtypes and "fp8_inc" in new.kv_cache_dtypes
    assert [b.excludes_a100 for b in old.batch_defaults] == [False, False]
    assert [b.excludes_a100 for b in row.batch_defaults] == [True, False]
    assert row.v0_available and row.v1_default


def test_0_9_prints_the_estimated_length_that_0_8_dropped(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-3.1-8B")
    old = _predict(spec, h100, "0.8.5", 1, max_model_len=131072)
    new = _predict(spec, h100, "0.9.2", 1, max_model_len=131072)
    assert old.fit_error is not None and new.fit_error is not None
    assert "estimated maximum model length" not in old.fit_error
    assert "the estimated maximum model length is 8192." in new.fit_error  # 1 GiB / 128 KiB a token


def test_blackwell_mla_block_is_tritons_16_until_0_10(shared_model) -> None:  # type: ignore[no-untyped-def]
    # vllm 0.8.5.post1 / 0.9.2 platforms/cuda.py: FlashMLA (block 64) only on Hopper
    # (attention/ops/flashmla.py), CUTLASS MLA only through VLLM_ATTENTION_BACKEND: Triton MLA, block 16.
    spec = shared_model("deepseek-ai--DeepSeek-V2-Lite")
    b200 = make_gpu("B200", 178.35, "blackwell")
    hopper = make_gpu("H100-80GB", 79.19, "hopper")
    for version in ("0.8.5", "0.9.2"):
        release = resolve_release(version)[1]
        assert default_block_size(spec, b200, release) == 16
        assert default_block_size(spec, hopper, release) == 64
    assert default_block_size(spec, b200, resolve_release("0.10.1")[1]) == 128


def test_0_29_reserves_the_null_block_before_the_fit_check(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    # vllm 0.29.0 v1/core/kv_cache_utils.py get_kv_cache_configs: auto-fit and the fit check plan against
    # available - one block (0.28.0: all of it). 1 GiB = 512 blocks of 2 MiB for Llama-3.1-8B.
    spec = shared_model("meta-llama--Llama-3.1-8B")
    old = _predict(spec, h100, "0.28.0", 1, max_model_len=-1)
    new = _predict(spec, h100, "0.29.0", 1, max_model_len=-1)
    assert old.layout.num_gpu_blocks == new.layout.num_gpu_blocks == 512
    assert (old.max_model_len, new.max_model_len) == (512 * 16, 511 * 16)
    assert _predict(spec, h100, "0.28.0", 1, max_model_len=8192).fits
    late = _predict(spec, h100, "0.29.0", 1, max_model_len=8192)
    assert not late.fits and "the estimated maximum model length is 8176." in (late.fit_error or "")


@pytest.mark.parametrize(
    ("name", "version", "batches"),
    [
        # Dense: Model Runner V2 by default from 0.26 (config/vllm.py _is_default_v2_model_runner_model), so
        # async scheduling under PP keeps pp + 1 batches in flight (max_concurrent_batches).
        ("google--gemma-2-9b-it", "0.25.1", 1),  # the window adds max_num_batched_tokens once
        ("google--gemma-2-9b-it", "0.26.0", 3),
        ("google--gemma-2-9b-it", "0.28.0", 3),
        # MoE stays on the V1 runner (pp batches) until 0.29.0 makes V2 the default for every model.
        ("openai--gpt-oss-20b", "0.28.0", 2),
        ("openai--gpt-oss-20b", "0.29.0", 3),
        ("openai--gpt-oss-20b", "0.33.0", 3),
    ],
)
def test_sliding_window_in_flight_follows_the_model_runner(  # type: ignore[no-untyped-def]
    shared_model, h100, name, version, batches
) -> None:
    prediction = _predict(shared_model(name), h100, version, 20, pipeline_parallel_size=2, max_model_len=8192)
    assert prediction.layout.in_flight == batches * prediction.resolved.max_num_batched_tokens


def test_without_async_scheduling_pp_keeps_pp_batches(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    prediction = _predict(
        shared_model("openai--gpt-oss-20b"),
        h100,
        "0.29.0",
        20,
        pipeline_parallel_size=2,
        max_model_len=8192,
        async_scheduling=False,
    )
    assert prediction.layout.in_flight == 2 * prediction.resolved.max_num_batched_tokens


def test_0_31_captures_max_num_seqs() -> None:
    # vllm 0.31.0 config/vllm.py _set_cudagraph_sizes: uniform_decode_sizes = [max_num_seqs] when it is at
    # most the capture ceiling, appended when at most max_num_batched_tokens (0.30.0: not captured).
    assert 100 not in capture_sizes(100, 8192, "v0_20")
    assert 100 in capture_sizes(100, 8192, "v0_31")
    assert capture_sizes(256, 8192, "v0_31") == capture_sizes(256, 8192, "v0_20")  # on the grid already
    assert 1000 not in capture_sizes(1000, 8192, "v0_31")  # beyond the 512 ceiling
    assert 100 not in capture_sizes(100, 64, "v0_31")  # beyond max_num_batched_tokens
    assert resolve_release("0.30.0")[1].capture_rule == "v0_20"
    assert resolve_release("0.31.0")[1].capture_rule == resolve_release("0.33.0")[1].capture_rule == "v0_31"


def test_0_11_1_captures_in_steps_of_8_then_16() -> None:
    # vllm 0.11.0 config/__init__.py _set_cudagraph_sizes: [1, 2, 4] + range(8, min(2 x seqs, 512) + 1, 8);
    # 0.11.1 and 0.11.2 config/vllm.py (max_cudagraph_capture_size): steps of 8 below 256, then 16, as 0.12.0.
    rules = [resolve_release(v)[1].capture_rule for v in ("0.11.0", "0.11.1", "0.11.2", "0.12.0")]
    assert rules == ["v0_10", "v0_12", "v0_12", "v0_12"]
    assert len(capture_sizes(256, 8192, "v0_10")) == 3 + 64
    assert len(capture_sizes(256, 8192, "v0_12")) == 3 + 31 + 17


def test_an_explicit_max_cudagraph_capture_size_replaces_the_default_ceiling() -> None:
    # vllm 0.29.0 config/vllm.py _set_cudagraph_sizes: a given max_cudagraph_capture_size is used as is
    # (then capped at max_num_batched_tokens), not min(2 x max_num_seqs, 512), and the uniform-decode sizes
    # (0.31: max_num_seqs) are computed only for the default.
    assert capture_sizes(256, 2048, "v0_20", explicit_max=16) == [1, 2, 4, 8, 16]
    assert capture_sizes(8, 8192, "v0_20") == [1, 2, 4, 8, 16]
    assert capture_sizes(8, 8192, "v0_20", explicit_max=64) == [1, 2, 4, *range(8, 65, 8)]
    assert capture_sizes(256, 48, "v0_20", explicit_max=64) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    assert 20 in capture_sizes(20, 8192, "v0_31") and 20 not in capture_sizes(20, 8192, "v0_31", explicit_max=64)


def test_interactivity_mode_captures_every_small_batch() -> None:
    # vllm 0.17.1 .. 0.29.0 config/vllm.py: --performance-mode interactivity captures range(1, min(max, 32) + 1)
    # in place of [1, 2, 4], then the usual grid.
    sizes = capture_sizes(256, 8192, "v0_20", interactivity=True)
    assert sizes == [*range(1, 33), *range(40, 256, 8), *range(256, 513, 16)]
    assert capture_sizes(8, 8192, "v0_20", interactivity=True) == list(range(1, 17))


def test_0_28_captures_up_to_1024_on_sm100() -> None:
    # vllm 0.28.0 config/vllm.py: default_max_graph_size = 1024 if is_device_capability_family(100) else 512
    # (0.27.1: 512 everywhere); SM 12.0 (RTX PRO 6000) is not of that family.
    b200, rtx = lookup_gpu("B200"), lookup_gpu("RTX-PRO-6000")
    old, new = resolve_release("0.27.1")[1], resolve_release("0.28.0")[1]
    assert (capture_limit(old, b200), capture_limit(new, b200), capture_limit(new, rtx)) == (512, 1024, 512)
    assert capture_limit(new, lookup_gpu("MI355X")) == 512
    assert capture_sizes(1024, 8192, "v0_20", 1024)[-1] == 1024
    assert len(capture_sizes(1024, 8192, "v0_20", 1024)) == len(capture_sizes(1024, 8192, "v0_20")) + 32


def test_graph_estimate_follows_the_capture_sizes(shared_model) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-3.1-8B")
    b200 = lookup_gpu("B200")

    def graphs(version: str, **args: int) -> int:
        return _predict(spec, b200, version, 20, max_model_len=8192, **args).engine.memory[0].cuda_graph_bytes

    assert graphs("0.28.0", max_num_seqs=1024) > graphs("0.27.1", max_num_seqs=1024)
    assert graphs("0.28.0", max_num_seqs=256) == graphs("0.27.1", max_num_seqs=256)
    assert graphs("0.29.0", max_num_seqs=256, max_cudagraph_capture_size=16) < graphs("0.29.0", max_num_seqs=256)


def test_0_31_graph_estimate_grows_only_for_an_off_grid_max_num_seqs(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("meta-llama--Llama-3.1-8B")

    def graphs(version: str, **args: int) -> int:
        return _predict(spec, h100, version, 20, max_model_len=8192, **args).engine.memory[0].cuda_graph_bytes

    assert graphs("0.31.0", max_num_seqs=100) > graphs("0.30.0", max_num_seqs=100)
    assert graphs("0.31.0") == graphs("0.30.0")


def test_0_32_mamba2_layers_keep_a_prefill_checkpoint_block() -> None:
    # vllm 0.32.0 model_executor/layers/mamba/mamba_mixer2.py get_kv_cache_spec: num_prefill_checkpoint_blocks=1
    # (alignment 1), counted by v1/kv_cache_interface.py MambaSpec in "align" mode; 0.31.0 has no such
    # override. Gated delta nets get theirs in 0.33.0 (qwen_gdn_linear_attn.py), on Hopper/Blackwell.
    mamba2 = SimpleNamespace(
        layer_pattern="MMA", model_type="nemotron_h", mla=None, mamba=SimpleNamespace(kind="mamba2")
    )
    gdn = SimpleNamespace(
        layer_pattern="MMA", model_type="qwen3_next", mla=None, mamba=SimpleNamespace(kind="gated_delta_net")
    )
    mamba1 = SimpleNamespace(layer_pattern="MMA", model_type="jamba", mla=None, mamba=SimpleNamespace(kind="mamba1"))
    hopper = SimpleNamespace(architecture="hopper")
    pc_on = SimpleNamespace(enable_prefix_caching=True)
    pc_off = SimpleNamespace(enable_prefix_caching=False)

    def blocks(model, version, resolved=pc_on):  # type: ignore[no-untyped-def]
        return mamba_blocks_and_alignment(model, hopper, resolve_release(version)[1], resolved)  # type: ignore[arg-type]

    assert [blocks(mamba2, v) for v in ("0.28.0", "0.31.0", "0.32.0", "0.33.0")] == [(2, 16), (2, 16), (3, 16), (3, 16)]
    assert [blocks(gdn, v) for v in ("0.31.0", "0.32.0", "0.33.0")] == [(2, 16), (2, 16), (3, 64)]
    assert [blocks(mamba1, v) for v in ("0.32.0", "0.33.0")] == [(2, 16), (2, 16)]
    assert blocks(mamba2, "0.32.0", pc_off) == (1, 16)


def test_kv_cache_dtypes_appear_in_their_release() -> None:
    # config/cache.py CacheDType: nvfp4_ds_mla from 0.30.0, ultraquant_4bit from 0.32.0.
    def dtypes(version: str) -> tuple[str, ...]:
        return resolve_release(version)[1].kv_cache_dtypes

    assert "nvfp4_ds_mla" not in dtypes("0.29.0") and "nvfp4_ds_mla" in dtypes("0.30.0")
    assert "ultraquant_4bit" not in dtypes("0.31.0") and "ultraquant_4bit" in dtypes("0.32.0")
    assert set(dtypes("0.28.0")) == set(dtypes("0.29.0"))
    assert set(dtypes("0.32.0")) < set(dtypes("0.33.0"))


_NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
_EAGLE3 = '{"method": "eagle3", "model": "someone/gemma-2-9b-eagle3", "num_speculative_tokens": 3}'


@pytest.mark.parametrize(
    ("speculative", "pp", "version", "batches"),
    [
        # ngram: async scheduling off by default through 0.32.0 (config/vllm.py), so pp batches (1 without
        # PP); 0.33.0 runs it on Model Runner V2 with async scheduling (pp + 1).
        (_NGRAM, 2, "0.31.0", 2),
        (_NGRAM, 2, "0.32.0", 2),
        (_NGRAM, 2, "0.33.0", 3),
        (_NGRAM, 1, "0.32.0", 1),
        (_NGRAM, 1, "0.33.0", 2),
        # EAGLE3 under PP is not on Model Runner V2 up to 0.29.0 (_get_v2_model_runner_unsupported_features).
        (_EAGLE3, 2, "0.28.0", 2),
        (_EAGLE3, 2, "0.29.0", 2),
        (_EAGLE3, 2, "0.30.0", 3),
    ],
)
def test_the_drafter_decides_runner_and_async_scheduling(  # type: ignore[no-untyped-def]
    shared_model, h100, speculative, pp, version, batches
) -> None:
    prediction = _predict(
        shared_model("google--gemma-2-9b-it"),
        h100,
        version,
        20,
        pipeline_parallel_size=pp,
        max_model_len=8192,
        speculative_config=speculative,
    )
    assert prediction.layout.in_flight == batches * prediction.resolved.max_num_batched_tokens


def test_async_scheduling_with_ngram_is_refused_where_vllm_refuses_it(shared_model, h100) -> None:  # type: ignore[no-untyped-def]
    spec = shared_model("google--gemma-2-9b-it")
    args = {"max_model_len": 8192, "speculative_config": _NGRAM, "async_scheduling": True}
    with pytest.raises(InvalidArgumentError, match="--async-scheduling"):
        _predict(spec, h100, "0.32.0", 20, **args)
    on_v2 = _predict(spec, h100, "0.33.0", 20, **args)  # 0.33.0 runs ngram on Model Runner V2, async
    assert on_v2.layout.in_flight == 2 * on_v2.resolved.max_num_batched_tokens


@pytest.mark.parametrize(
    ("name", "version", "runner_v2", "counted"),
    [
        # vllm 0.26.0-0.28.0 v1/worker/gpu/model_runner.py: Model Runner V2's profile_cudagraph_memory
        # returns 0, so a dense model (V2 by default) has no CUDA-graph estimate subtracted from the KV
        # budget; 0.29.0 estimates it (_profile_cudagraph_memory). The V1 runner (a MoE before 0.29, or
        # any model before 0.26) subtracts its estimate (0.20+).
        ("meta-llama--Llama-3.1-8B", "0.25.1", False, True),
        ("meta-llama--Llama-3.1-8B", "0.26.0", True, False),
        ("meta-llama--Llama-3.1-8B", "0.28.0", True, False),
        ("meta-llama--Llama-3.1-8B", "0.29.0", True, True),
        ("openai--gpt-oss-20b", "0.28.0", False, True),
    ],
)
def test_model_runner_v2_graph_estimate_starts_in_0_29(  # type: ignore[no-untyped-def]
    shared_model, h100, name, version, runner_v2, counted
) -> None:
    prediction = _predict(shared_model(name), h100, version, 20, max_model_len=8192)
    assert prediction.engine.model_runner_v2 is runner_v2
    assert prediction.engine.memory[0].cuda_graph_counted is counted
