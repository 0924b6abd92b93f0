"""Causes of the budget's over-prediction, each as the vLLM release that has it does it (issue 12).

Every expectation cites the file of vLLM's source it was read in (``pip download vllm==X.Y.Z --no-deps``).
"""

from __future__ import annotations

from planner.calibration.dataset import dataset_records
from planner.calibration.validate import resolve_record_model, serving_args, validate_records
from planner.gpus.catalog import lookup_gpu
from planner.memory.activation import (
    dense_width,
    eager_width,
    moe_workspace_bytes,
    sampler_bytes_per_logit,
    sampler_held_bytes,
    sampler_kernel_in_force,
)
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, GiB
from planner.models.catalog import lookup_model
from planner.plan.build import predict
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release


def _kernel(version: str) -> str:
    return resolve_release(version)[1].sampler_kernel


def test_sampler_kernel_per_release() -> None:
    # 0.10.1.1/0.11.0 v1/sample/ops/topk_topp_sampler.py: VLLM_USE_FLASHINFER_SAMPLER unset -> FlashInfer
    # when installed; 0.12.0-0.16.0: FlashInfer opt-in, apply_top_k_top_p sorts and scatters a copy;
    # 0.17.1: apply_top_k_top_p_triton for logits.shape[0] >= 8; 0.21.0 envs.py: the sampler env var
    # defaults to True.
    assert _kernel("0.10.1") == "flashinfer_if_installed"
    assert _kernel("0.11.0") == "flashinfer_if_installed"
    # 0.11.1/0.11.2 topk_topp_sampler.py: "Users must opt in explicitly via VLLM_USE_FLASHINFER_SAMPLER=1".
    assert _kernel("0.11.1") == _kernel("0.11.2") == "sort_scatter"
    assert _kernel("0.12.0") == _kernel("0.16.0") == "sort_scatter"
    assert _kernel("0.17.1") == _kernel("0.20.2") == "triton_batch8"
    assert _kernel("0.21.0") == _kernel("0.33.0") == "flashinfer"


def test_the_sort_path_keeps_about_two_and_a_half_times_the_bytes_per_logit() -> None:
    c = DEFAULT_COEFFICIENTS
    triton = sampler_bytes_per_logit(c, "triton_batch8", 1024)
    sort = sampler_bytes_per_logit(c, "sort_scatter", 1024)
    assert 2.3 < sort / triton < 2.8
    # Below 8 requests 0.17+ still sorts (apply_top_k_top_p_pytorch).
    assert sampler_bytes_per_logit(c, "triton_batch8", 4) == sort


def test_pre_017_plans_keep_less_kv_memory_for_the_sampler_peak() -> None:
    """Llama-3.1-8B on H100 with vLLM's default 1024 sequences: the 0.16 sampler (sort) peaks higher
    than 0.17's Triton kernel, so 0.16 leaves less KV memory (same budget rules in both rows)."""
    spec, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100-80GB")
    args = ServingArgs(max_model_len=8192, gpu_memory_utilization=0.9)
    old = predict(spec, gpu, args, vllm_version="0.16.0").engine.memory[0]
    new = predict(spec, gpu, args, vllm_version="0.17.1").engine.memory[0]
    assert old.activation_peak_bytes > 2.3 * new.activation_peak_bytes
    assert old.kv_bytes < new.kv_bytes - 2 * GiB


def test_moe_workspace_is_held_during_the_sampler_warm_up_from_014() -> None:
    # 0.14.0 fused_moe/unquantized_fused_moe_method.py builds make_unquantized_moe_kernel, whose
    # modular_kernel.py takes workspaces from v1/worker/workspace.py current_workspace_manager()
    # (never freed); 0.13.0's unquantized method does not use the manager.
    assert not resolve_release("0.13.0")[1].moe_workspace_held
    assert resolve_release("0.14.0")[1].moe_workspace_held
    record = next(r for r in dataset_records() if r.id == "r001")  # DeepSeek-V2-Lite, 0.19.0, H100
    spec, online = resolve_record_model(record, lookup_model)
    prediction = predict(
        spec, lookup_gpu("H100-80GB"), serving_args(record, online_quantization=online), vllm_version="0.19.0"
    )
    peak = prediction.engine.memory[0].activation_peak_bytes / GiB
    assert record.activation_peak_gib is not None
    # 8192 x 6 x (2048 + 2816) x 2 bytes of workspace + the sampler: within 1% of the logged 1.93 GiB
    # (max(forward, sampler) alone gave 1.50).
    assert abs(peak - record.activation_peak_gib) < 0.01 * record.activation_peak_gib
    assert moe_workspace_bytes(spec, 8192, 1, 2) == 8192 * 6 * (2048 + 2816) * 2


# Cause e: the V0 engine's profile run is eager PyTorch (no torch.compile). Two startups of one
# environment in https://github.com/vllm-project/vllm/issues/10517 (comment of 2024-12-02, Llama-3.1-8B
# on an RTX 3090, vLLM 0.6.4.post1 by its log format, V0, chunked prefill off so the profile batch is
# --max-model-len tokens): "Memory profiling results" prints peak_torch_memory 17.06 / 17.98 GiB with
# "Loading model weights took 14.9888 GB", i.e. an activation peak of 2.0712 / 2.9912 GiB.
_V0_PEAKS = ((20000, 17.06 - 14.9888), (29000, 17.98 - 14.9888))


def test_v0_forward_peak_is_the_eager_live_set_at_the_down_projection() -> None:
    spec = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    # residual + normed hidden + down_proj output (3 x 4096) + gate_up (2 x 14336) + act (14336)
    assert eager_width(spec, 1) == 3 * 4096 + 3 * 14336
    assert eager_width(spec, 2) == 3 * 4096 + 3 * 14336 / 2
    for max_model_len, logged_gib in _V0_PEAKS:
        args = ServingArgs(max_model_len=max_model_len, gpu_memory_utilization=0.9)
        prediction = predict(spec, lookup_gpu("RTX-3090"), args, vllm_version="0.6.4.post1")
        assert prediction.resolved.engine == "v0"
        assert prediction.resolved.max_num_batched_tokens == max_model_len
        peak = prediction.engine.memory[0].activation_peak_bytes
        assert peak == int(max_model_len * eager_width(spec, 1) * 2)
        assert abs(peak / (logged_gib * GiB) - 1) < 0.01
        # the V1-fitted forward would over-predict this peak by about a quarter
        fitted = DEFAULT_COEFFICIENTS.forward_bytes_per_token_width * max_model_len * dense_width(spec, 1) * 2
        assert fitted / (logged_gib * GiB) > 1.2


def test_v0_profile_samples_on_the_sort_path() -> None:
    """0.6.4.post1 worker/model_runner.py _dummy_run samples with top_k = vocab - 1, top_p = 0.99, which
    layers/sampler.py _apply_top_k_top_p serves by sorting and scattering the full logits (same in 0.7.3
    and 0.8.5's V0): the sampler peak is the sort path's, also on V1-default releases run on V0."""
    spec = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    args = ServingArgs(max_model_len=2048, gpu_memory_utilization=0.9)
    prediction = predict(spec, lookup_gpu("H100-80GB"), args, vllm_version="0.6.4.post1")
    seqs = min(prediction.resolved.max_num_seqs, prediction.resolved.max_num_batched_tokens)
    per_logit = sampler_bytes_per_logit(DEFAULT_COEFFICIENTS, "sort_scatter", seqs)
    assert prediction.engine.memory[0].activation_peak_bytes == int(per_logit * seqs * spec.vocab_size)
    v0_on_08 = predict(
        spec, lookup_gpu("H100-80GB"), args.model_copy(update={"env": {"VLLM_USE_V1": "0"}}), vllm_version="0.8.5"
    )
    assert v0_on_08.resolved.engine == "v0"
    assert v0_on_08.engine.memory[0].activation_peak_bytes == int(per_logit * seqs * spec.vocab_size)


def test_from_0111_an_installed_flashinfer_does_not_sample() -> None:
    """0.11.1 v1/sample/ops/topk_topp_sampler.py: with VLLM_USE_FLASHINFER_SAMPLER unset TopKTopPSampler takes
    forward_native (the sort + scatter path) even with FlashInfer installed; 0.11.0 took FlashInfer. So the
    same startup leaves less KV memory on 0.11.2 than on 0.11.0 (community startups with FlashInfer
    installed: Meta-Llama-3-8B on an H200, Qwen2.5-Coder-14B on an L40S, both 0.11.2)."""
    spec, gpu = lookup_model("meta-llama/Meta-Llama-3-8B-Instruct"), lookup_gpu("H200-141GB")
    args = ServingArgs(max_model_len=1024, gpu_memory_utilization=0.9)
    old = predict(spec, gpu, args, vllm_version="0.11.0").engine.memory[0]
    new = predict(spec, gpu, args, vllm_version="0.11.2").engine.memory[0]
    per_logit = sampler_bytes_per_logit(DEFAULT_COEFFICIENTS, "sort_scatter", 1024)
    held = sampler_held_bytes(spec, num_reqs=1024, tokens=8192, dtype_bytes=2)  # H200: 1024 dummy requests
    assert new.activation_peak_bytes == int(per_logit * 1024 * spec.vocab_size + held)
    assert new.kv_bytes < old.kv_bytes - 2 * GiB


def test_without_flashinfer_the_010_011_sampler_sorts() -> None:
    """0.10/0.11 v1/sample/ops/topk_topp_sampler.py: TopKTopPSampler takes forward_cuda (FlashInfer) only
    when FlashInfer is installed and VLLM_USE_FLASHINFER_SAMPLER is not false; otherwise forward_native
    -> apply_top_k_top_p sorts and scatters the full logits ("FlashInfer is not available. Falling back to
    the PyTorch-native implementation of top-p & top-k sampling")."""
    off = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    assert sampler_kernel_in_force("flashinfer_if_installed", {}) == "flashinfer_if_installed"
    assert sampler_kernel_in_force("flashinfer_if_installed", off) == "sort_scatter"
    assert sampler_kernel_in_force("flashinfer_if_installed", {"VLLM_USE_FLASHINFER_SAMPLER": "1"}) == (
        "flashinfer_if_installed"
    )
    # Later rows have their own kernels; the switch is read only where the release takes it this way.
    assert sampler_kernel_in_force("triton_batch8", off) == "triton_batch8"
    spec, gpu = lookup_model("Qwen/Qwen3-4B"), lookup_gpu("H100-80GB")
    args = ServingArgs(max_model_len=40960, gpu_memory_utilization=0.9)
    with_fi = predict(spec, gpu, args, vllm_version="0.10.2").engine.memory[0]
    without = predict(spec, gpu, args.model_copy(update={"env": off}), vllm_version="0.10.2").engine.memory[0]
    seqs = 1024  # H100 serve default, below the 8192 batched tokens
    per_logit = sampler_bytes_per_logit(DEFAULT_COEFFICIENTS, "sort_scatter", seqs)
    held = sampler_held_bytes(spec, num_reqs=seqs, tokens=8192, dtype_bytes=2)
    assert without.activation_peak_bytes == int(per_logit * seqs * spec.vocab_size + held)
    assert without.kv_bytes < with_fi.kv_bytes - 3 * GiB


def test_the_sort_path_reproduces_the_logged_activation_peaks_of_010_without_flashinfer() -> None:
    """Community startups of 0.10.2 on H100 without FlashInfer log their peak activation (the 'Free memory
    on device' line), e.g. 5.59 GiB for Qwen3-4B's 1024 x 151,936 logits. The sort path (the fitted Triton
    constant + the sort's tensors, not fitted) plans each within 2%."""
    logged = {r.id: r for r in dataset_records() if r.flashinfer_sampler is False and r.activation_peak_gib}
    checked = 0
    for record in logged.values():
        spec, _ = resolve_record_model(record, lookup_model)
        args = serving_args(record, online_quantization=False)
        peak = predict(spec, lookup_gpu(record.gpu or ""), args, vllm_version=record.vllm_version)
        if peak.resolved.max_num_seqs < 256 or spec.vision is not None:
            # the forward pass, not the sampler, sets the peak (a vision model's also holds its encoder outputs)
            continue
        checked += 1
        planned = peak.engine.memory[0].activation_peak_bytes / GiB
        assert record.activation_peak_gib is not None
        assert abs(planned - record.activation_peak_gib) / record.activation_peak_gib < 0.02, record.id
    assert checked > 0


def test_prefix_caching_as_given_decides_a_hybrid_requests_state_blocks() -> None:
    """vLLM 0.27.1 on Qwen3.6-27B-FP8 (H100, --enable-prefix-caching, phivan3008/meeting-translator
    vllm_serve.log): 857 blocks of 784 tokens print 'Maximum concurrency for 4,096 tokens per request:
    71.42x' = 857 / 12 (6 attention blocks + 2 per Gated DeltaNet group in align mode). Planned with the
    release's default (prefix caching off for hybrids), a request needs 9 blocks (95.22x); the record's
    prefix_caching flag reaches the plan."""
    startup = next(r for r in dataset_records() if r.id == "c029")
    assert startup.enable_prefix_caching is True
    spec, online = resolve_record_model(startup, lookup_model)
    gpu = lookup_gpu(startup.gpu or "")
    given = serving_args(startup, online_quantization=online)
    assert given.enable_prefix_caching is True
    report = validate_records([startup], lookup_model=lookup_model, lookup_gpu=lookup_gpu).records[0]
    assert report.layout is not None and report.layout.exact and report.layout.tokens == 292_522
    default = validate_records(
        [startup.model_copy(update={"enable_prefix_caching": None})], lookup_model=lookup_model, lookup_gpu=lookup_gpu
    ).records[0]
    assert default.layout is not None and not default.layout.exact
    assert gpu.name == "H100-80GB" and spec.mamba is not None
