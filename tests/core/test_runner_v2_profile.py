"""Model Runner V2's profile run, as the vLLM release that has it does it (issue 12: the numbers must be
vLLM's numbers).

Every expectation cites the file of vLLM's source it was read in (``pip download vllm==X.Y.Z --no-deps``,
0.26.0, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0 and 0.33.0 read).
"""

from __future__ import annotations

from planner.calibration.dataset import dataset_records
from planner.calibration.validate import resolve_record_model, serving_args, validate_records
from planner.gpus.catalog import lookup_gpu
from planner.memory.activation import (
    activation_peak,
    compile_example_bytes,
    dense_width,
    moe_workspace_bytes,
    runner_v2_sampler_bytes,
    runner_v2_sampler_state_bytes,
)
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, GiB
from planner.models.catalog import lookup_model
from planner.plan.build import predict
from planner.plan.engine import StageMemory, uses_model_runner_v2
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Release, resolve_release

QWEN3_8B = "Qwen/Qwen3-8B"  # 36 layers, hidden 4096, vocabulary 151,936
H100 = "H100-80GB"


def _warm_peak(stage: StageMemory) -> int:
    """The profile run's peak without a cold compile's autotuning inputs (tests/core/test_cold_compile.py),
    which are the first stage's peak for these dense models at 8,192 tokens."""
    return stage.activation_peak_bytes - stage.cold_compile_bytes


def _row(version: str) -> Release:
    return resolve_release(version)[1]


def test_sampler_warm_up_pass_and_accounting_per_release() -> None:
    # v1/worker/gpu/model_runner.py _dummy_sampler_run: one sampler call on the dummy batch in 0.26.0 through
    # 0.32.0 (identical bodies), a second one with SamplingParams.for_sampler_warmup from 0.33.0.
    for version in ("0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"):
        assert not _row(version).runner_v2_sampler_warmup, version
    assert _row("0.33.0").runner_v2_sampler_warmup
    # utils/mem_utils.py memory_profiling + v1/worker/gpu_worker.py determine_available_memory: 0.26.0
    # subtracts non_torch_increase + torch_peak_increase + weights; 0.27.1 total_consumed (free memory
    # dropped since init_device) + transient_peak_headroom.
    assert _row("0.26.0").non_kv_accounting == "profile_peak"
    assert _row("0.25.0").non_kv_accounting == "profile_peak"
    assert _row("0.27.0").non_kv_accounting == _row("0.33.0").non_kv_accounting == "consumed_since_init"


def test_dummy_sampler_keeps_the_logits_in_the_model_dtype_and_nothing_per_logit() -> None:
    """0.26-0.32: the dummy batch's request slots hold the sampling states' initial values
    (v1/worker/gpu/sample/states.py: temperature 0, top_k = vocab, top_p 1, min_p 0; penalties.py,
    logit_bias.py, bad_words.py: off), so sampler.py processes nothing and gumbel.py takes a greedy argmax.
    What is alive: the forward's output [tokens, hidden], the rows at logits_indices (one a request,
    input_batch.py make_dummy) and compute_logits' [requests, vocab] in bf16 (logits_processor.py: the
    head runs in the model dtype)."""
    spec = lookup_model(QWEN3_8B)
    got = runner_v2_sampler_bytes(spec, num_reqs=1024, tokens=8192, tp=1, dtype_bytes=2, warmup_pass=False)
    assert got == (8192 + 1024) * 4096 * 2 + 1024 * 151936 * 2
    # Against the V1 runner's fitted 15.3 bytes a logit (gpu_model_runner.py _dummy_sampler_run: fp32 logits,
    # probabilities, the sort or Triton buffers): about a sixth.
    v1 = DEFAULT_COEFFICIENTS.sampler_bytes_per_logit * 1024 * 151936
    assert 0.15 < got / v1 < 0.17


def test_tensor_parallel_all_gather_holds_two_and_a_fraction_copies_of_the_logits() -> None:
    # device_communicators/cuda_communicator.py all_gather: the rank's [reqs, vocab/tp] shard, the
    # [tp x reqs, vocab/tp] receive buffer and the contiguous [reqs, vocab] reshape are alive together.
    spec = lookup_model(QWEN3_8B)
    one = runner_v2_sampler_bytes(spec, num_reqs=256, tokens=2048, tp=1, dtype_bytes=2, warmup_pass=False)
    two = runner_v2_sampler_bytes(spec, num_reqs=256, tokens=2048, tp=2, dtype_bytes=2, warmup_pass=False)
    held = (2048 + 256) * 4096 * 2
    assert two - held == int(2.5 * (one - held))


def test_033_warm_up_pass_pays_the_fp32_pipeline() -> None:
    """0.33 sampler.py apply_sampling_params copies the logits to fp32 (4 bytes); FlashInfer's
    top_k_top_p_sampling_from_logits (top_k_first) keeps the masked copy and its softmax (8 more); with
    VLLM_USE_FLASHINFER_SAMPLER=0 the Triton top-k/top-p kernel (topk_topp_triton.py) masks in place."""
    spec = lookup_model(QWEN3_8B)
    held = (8192 + 1024) * 4096 * 2
    logits = 1024 * 151936 * 2
    with_fi = runner_v2_sampler_bytes(spec, num_reqs=1024, tokens=8192, tp=1, dtype_bytes=2, warmup_pass=True)
    without = runner_v2_sampler_bytes(
        spec, num_reqs=1024, tokens=8192, tp=1, dtype_bytes=2, warmup_pass=True, flashinfer=False
    )
    assert with_fi == held + logits + 1024 * 151936 * 12
    assert without == held + logits + 1024 * 151936 * 4
    args = ServingArgs(max_model_len=8192)
    gpu = lookup_gpu(H100)
    peak_032 = _warm_peak(predict(spec, gpu, args, vllm_version="0.32.0").engine.memory[0])
    peak_033 = _warm_peak(predict(spec, gpu, args, vllm_version="0.33.0").engine.memory[0])
    off = ServingArgs(max_model_len=8192, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    peak_033_off = _warm_peak(predict(spec, gpu, off, vllm_version="0.33.0").engine.memory[0])
    forward = int(DEFAULT_COEFFICIENTS.forward_bytes_per_token_width * 8192 * dense_width(spec, 1) * 2)
    assert peak_033 == with_fi
    # Without FlashInfer the second pass (0.94 GiB) stays just under the forward (0.97), as 0.32 does.
    assert peak_033_off == max(forward, without) == forward == peak_032


def test_h100_defaults_leave_a_dense_models_peak_to_the_forward_on_026() -> None:
    """Qwen3-8B on an H100 with vLLM's defaults (8,192 tokens, 1,024 sequences): V2's sampler warm-up
    (0.36 GiB) is below the forward, so the profiled peak is the forward's; the V1 runner (0.25, or
    VLLM_USE_V2_MODEL_RUNNER=0 on 0.26: envs.py maybe_convert_bool) peaks at its sampler (2.21 GiB)."""
    spec, gpu = lookup_model(QWEN3_8B), lookup_gpu(H100)
    v2 = predict(spec, gpu, ServingArgs(max_model_len=8192), vllm_version="0.26.0")
    v1_env = predict(
        spec, gpu, ServingArgs(max_model_len=8192, env={"VLLM_USE_V2_MODEL_RUNNER": "0"}), vllm_version="0.26.0"
    )
    v1_old = predict(spec, gpu, ServingArgs(max_model_len=8192), vllm_version="0.25.0")
    assert v2.engine.model_runner_v2 and not v1_env.engine.model_runner_v2
    forward = DEFAULT_COEFFICIENTS.forward_bytes_per_token_width * 8192 * dense_width(spec, 1) * 2
    assert _warm_peak(v2.engine.memory[0]) == int(forward)
    assert v1_env.engine.memory[0].activation_peak_bytes == v1_old.engine.memory[0].activation_peak_bytes
    assert abs(v1_env.engine.memory[0].activation_peak_bytes / GiB - 2.21) < 0.01
    # The V1 runner on 0.26 has nothing of V2's: same non-torch as 0.25.
    assert v1_env.engine.memory[0].non_torch_bytes == v1_old.engine.memory[0].non_torch_bytes


def test_the_env_var_selects_the_runner_only_where_v2_was_read() -> None:
    spec = lookup_model(QWEN3_8B)
    on, off = {"VLLM_USE_V2_MODEL_RUNNER": "1"}, {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert not uses_model_runner_v2(spec, _row("0.25.0"), on)  # opt-in V2 before 0.26: not read
    assert uses_model_runner_v2(spec, _row("0.26.0"))
    assert not uses_model_runner_v2(spec, _row("0.29.0"), off)
    moe = lookup_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert not uses_model_runner_v2(moe, _row("0.28.0")) and uses_model_runner_v2(moe, _row("0.28.0"), on)


def test_v2_sampler_state_counts_from_027_as_consumed_memory() -> None:
    """v1/worker/gpu/sample/penalties.py PenaltiesState (every release 0.26-0.33): output_bin_counts
    [max_num_seqs, vocab] and prompt_bin_mask [max_num_seqs, vocab/32], and structured_outputs.py's grammar
    bitmask, int32, built in load_model: in no term under 0.26's accounting, in total_consumed from 0.27."""
    spec, gpu = lookup_model(QWEN3_8B), lookup_gpu(H100)
    state = runner_v2_sampler_state_bytes(spec, 1024)
    assert state == 1024 * (151936 + 2 * 4748) * 4
    args = ServingArgs(max_model_len=8192)
    on_026 = predict(spec, gpu, args, vllm_version="0.26.0").engine.memory[0]
    on_027 = predict(spec, gpu, args, vllm_version="0.27.1").engine.memory[0]
    assert on_027.non_torch_bytes - on_026.non_torch_bytes == state
    assert on_027.activation_peak_bytes == on_026.activation_peak_bytes
    # Pipeline parallelism: only the last stage builds the sampler.
    pp = ServingArgs(max_model_len=8192, pipeline_parallel_size=2)
    stages = predict(spec, gpu, pp, vllm_version="0.27.1").engine.memory
    assert stages[1].non_torch_bytes - stages[0].non_torch_bytes == state


def test_later_stages_received_buffers_are_in_no_term_on_v2_in_026() -> None:
    """v1/worker/gpu/model_runner.py load_model allocates a later stage's intermediate tensors
    [max_num_tokens, hidden] x 2 when the model loads; 0.26's profiling counts only the profile run's
    peak increase, so they are in no term. The V1 runner (gpu_model_runner.py _dummy_run) allocates them
    in the profile run, and from 0.27 everything since init_device counts."""
    spec = lookup_model(QWEN3_8B)
    received = 2 * 8192 * 4096 * 2

    def forward(receives: bool) -> int:
        return activation_peak(
            spec,
            coefficients=DEFAULT_COEFFICIENTS,
            max_num_batched_tokens=8192,
            max_num_seqs=1024,
            tp=1,
            dtype_bytes=2,
            last_stage=False,
            receives_from_previous_stage=receives,
        ).forward_bytes

    base = forward(False)
    assert forward(True) == base + received
    gpu = lookup_gpu(H100)
    args = ServingArgs(max_model_len=8192, pipeline_parallel_size=2)
    stage_026 = predict(spec, gpu, args, vllm_version="0.26.0").engine.memory[0]
    stage_026_second = predict(spec, gpu, args, vllm_version="0.26.0").engine.memory[1]
    v1_args = args.model_copy(update={"env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}})
    v1_second = predict(spec, gpu, v1_args, vllm_version="0.26.0").engine.memory[1]
    assert _warm_peak(stage_026) == base
    assert stage_026_second.activation_peak_bytes == max(
        base, runner_v2_sampler_bytes(spec, num_reqs=1024, tokens=8192, tp=1, dtype_bytes=2, warmup_pass=False)
    )
    assert v1_second.activation_peak_bytes > stage_026_second.activation_peak_bytes + received // 2
    later = predict(spec, gpu, args, vllm_version="0.27.1").engine.memory[1]
    assert later.activation_peak_bytes == stage_026_second.activation_peak_bytes + received


def test_n001_is_planned_with_the_v2_runner_and_its_cold_compile_decides_the_peak() -> None:
    """n001 (Qwen3-8B, H100, 0.26.0, "[model_runner.py:747] Graph capturing finished": Model Runner V2)
    logged a 1.29 GiB peak. V2's sampler warm-up (0.36 GiB) cannot be it, nor the forward term (fitted on
    the V1 runner, the same model code: 0.97 GiB, 0.32 short of the log); the V1 sampler constant had given
    2.21. A cold compile's autotuning inputs are (planner/memory/activation.py compile_example_bytes,
    tests/core/test_cold_compile.py): the embedding table's copy, 151,936 x 4,096 bf16, and two
    8,192-token buffers, 1.284 GiB. Pinned so a change in any term shows here."""
    record = next(r for r in dataset_records() if r.id == "n001")
    spec, online = resolve_record_model(record, lookup_model)
    prediction = predict(
        spec, lookup_gpu(H100), serving_args(record, online_quantization=online), vllm_version="0.26.0"
    )
    assert prediction.engine.model_runner_v2
    stage = prediction.engine.memory[0]
    sampler = runner_v2_sampler_bytes(spec, num_reqs=1024, tokens=8192, tp=1, dtype_bytes=2, warmup_pass=False)
    forward = stage.activation_peak_bytes - stage.cold_compile_bytes
    assert sampler / GiB < 0.37 < 0.96 < forward / GiB < 0.97
    assert stage.activation_peak_bytes == compile_example_bytes(spec, tokens=8192, tp=1, dtype_bytes=2)
    assert record.activation_peak_gib == 1.29
    assert abs(stage.activation_peak_bytes / GiB - record.activation_peak_gib) < 0.01
    result = validate_records([record], lookup_model=lookup_model, lookup_gpu=lookup_gpu).records[0]
    assert result.full is not None and result.full.error is not None
    # KV memory within 0.05% (was +0.62% with the forward term, -1.66% with the V1 sampler's 2.21 GiB).
    assert abs(result.full.error) < 0.0005


def test_the_moe_workspace_is_held_through_v2s_sampler_warm_up_too() -> None:
    """The fused-MoE workspaces come from v1/worker/workspace.py's WorkspaceManager (the worker's, whichever
    runner: 0.26 model_executor/layers/fused_moe/modular_kernel.py), so V2's warm-up peaks on top of them.
    DeepSeek-V2-Lite is a V2 architecture from 0.26 (config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES)."""
    spec, gpu = lookup_model("deepseek-ai/DeepSeek-V2-Lite-Chat"), lookup_gpu(H100)
    args = ServingArgs(max_model_len=8192)
    v2 = predict(spec, gpu, args, vllm_version="0.26.0")
    v1 = predict(spec, gpu, args.model_copy(update={"env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}), vllm_version="0.26.0")
    assert v2.engine.model_runner_v2 and not v1.engine.model_runner_v2
    workspace = moe_workspace_bytes(spec, 8192, 1, 2)
    sampler = runner_v2_sampler_bytes(spec, num_reqs=1024, tokens=8192, tp=1, dtype_bytes=2, warmup_pass=False)
    assert workspace + sampler <= v2.engine.memory[0].activation_peak_bytes < v1.engine.memory[0].activation_peak_bytes
