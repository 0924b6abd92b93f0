"""Peak activation memory of vLLM's profiling run (the "torch peak memory increase").

vLLM profiles with one dummy forward pass of ``max_num_batched_tokens`` tokens spread over
``num_reqs = min(max_num_seqs, max_num_batched_tokens)`` requests, then (last PP stage only) a
sampler warm-up on ``num_reqs`` rows of logits (``gpu_model_runner.profile_run`` /
``_dummy_sampler_run``). The two peaks happen at different times, so torch's peak is the larger:

* forward: the activations alive inside one decoder layer — residual, hidden, fused QKV, attention
  output, fused gate/up and the MLP output — ``tokens x width x dtype_bytes``; for MoE layers the
  fused-MoE workspace ``tokens x top_k x (2 x expert_width + hidden)``;
* sampler: fp32 logits, probabilities and sort buffers, ``num_reqs x vocab x bytes_per_logit``. What
  the sampler keeps per logit depends on the release's top-k/top-p kernel (``Release.sampler_kernel``,
  ``v1/sample/ops/topk_topp_sampler.py``): the PyTorch path (0.12-0.16, and 0.17-0.20 below 8 requests)
  sorts the full logits (``logits.sort`` -> fp32 values and int64 indices, plus the radix sort's double
  buffers) and scatters them back; the Triton kernel (0.17+, 8 requests or more) masks in place; FlashInfer
  (default when installed up to 0.11, on by default from 0.21) samples from the logits in one kernel.
* From 0.14 unquantized fused MoE runs through the modular kernel, whose workspaces come from the
  persistent ``WorkspaceManager`` (``v1/worker/workspace.py``: grows, never frees). They are still
  allocated when the sampler warms up, so that peak is ``workspace + sampler``, not the sampler alone.

A pipeline stage after the first also holds the hidden states and residual it received
(``IntermediateTensors``: ``2 x tokens x hidden x dtype_bytes``) through both peaks.

The V0 engine (``worker/model_runner.py`` ``profile_run`` -> ``_dummy_run``) runs the same forward eagerly,
without torch.compile, so its peak is the live set of plain PyTorch at the MLP's down projection, not
the fitted V1 figure (about 22% lower for Llama-3.1-8B): see :func:`eager_width`. Its dummy sampling
asks for ``top_k = vocab - 1, top_p = 0.99``, which takes V0's sort path (``layers/sampler.py``
``_apply_top_k_top_p`` sorts and scatters the full fp32 logits) in every V0 release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.memory.coefficients import MemoryCoefficients
from planner.models.spec import ModelSpec


@dataclass(frozen=True)
class ActivationPeak:
    forward_bytes: int
    sampler_bytes: int

    @property
    def peak_bytes(self) -> int:
        return max(self.forward_bytes, self.sampler_bytes)


def dense_width(model: ModelSpec, tp: int) -> float:
    """Activation elements per token alive at the peak of a dense layer, on one TP rank."""
    kv_heads = max(1, model.num_kv_heads // tp) if model.num_kv_heads else 0
    qkv = model.num_attention_heads / tp * model.head_dim + kv_heads * (model.head_dim + model.head_size_v)
    mlp = (3 if model.mlp_gated else 2) * model.intermediate_size / tp
    return 2 * model.hidden_size + qkv + mlp


def eager_width(model: ModelSpec, tp: int) -> float:
    """Activation elements per token alive at the peak of one decoder layer run eagerly (V0).

    In the MLP (``LlamaMLP.forward``: ``gate_up, _ = gate_up_proj(x); x = act_fn(gate_up);
    x, _ = down_proj(x)``), while the down projection writes its output the caller still holds the
    residual and the normed hidden states, and the frame holds ``gate_up`` and the activation output:
    ``3 x hidden + (gate_up + act) x intermediate / tp``. In attention: residual, normed hidden, fused
    QKV, the attention output and the o_proj output. The larger of the two is the layer's peak; no
    fitted constant (the #10517 logs, tests/core/test_profiling_causes.py, agree within 0.5%).
    """
    kv_heads = max(1, model.num_kv_heads // tp) if model.num_kv_heads else 0
    q = model.num_attention_heads / tp * model.head_dim
    qkv = q + kv_heads * (model.head_dim + model.head_size_v)
    attention = 3 * model.hidden_size + qkv + model.num_attention_heads / tp * model.head_size_v
    mlp = 3 * model.hidden_size + (3 if model.mlp_gated else 2) * model.intermediate_size / tp
    return max(attention, mlp)


def moe_width(model: ModelSpec, tp: int) -> float:
    moe = model.moe
    if moe is None:
        return 0.0
    return moe.experts_per_token * (2 * moe.moe_intermediate_size / tp + model.hidden_size)


def sampler_kernel_in_force(kernel: str, env: Mapping[str, str]) -> str:
    """The release's top-k/top-p kernel as the environment leaves it. Up to 0.11.0
    (``flashinfer_if_installed``) ``TopKTopPSampler`` takes FlashInfer only when it is installed and
    ``VLLM_USE_FLASHINFER_SAMPLER`` is not false; otherwise ``forward_native`` -> ``apply_top_k_top_p``,
    the PyTorch sort + scatter path (``v1/sample/ops/topk_topp_sampler.py``, which logs "Falling back to
    the PyTorch-native implementation of top-p & top-k sampling"). ``VLLM_USE_FLASHINFER_SAMPLER=0``
    plans that path; an install without FlashInfer takes it too."""
    disabled = env.get("VLLM_USE_FLASHINFER_SAMPLER", "").strip().lower() in ("0", "false")
    return "sort_scatter" if kernel == "flashinfer_if_installed" and disabled else kernel


def sampler_bytes_per_logit(coefficients: MemoryCoefficients, kernel: str, num_reqs: int) -> float:
    """Bytes the sampler warm-up keeps per (dummy request x vocabulary entry) for the release's kernel
    (``Release.sampler_kernel``: flashinfer_if_installed, sort_scatter, triton_batch8, flashinfer).

    The fitted constant is the Triton path's (the calibration releases run it); the sort path adds the
    sorted copy and its indices (``sampler_sort_extra_bytes_per_logit``). FlashInfer is planned with the
    fitted constant (fp32 logits, probabilities and the sampling buffer are the same order)."""
    base = coefficients.sampler_bytes_per_logit
    sorts = kernel == "sort_scatter" or (kernel == "triton_batch8" and num_reqs < 8)
    return base + coefficients.sampler_sort_extra_bytes_per_logit if sorts else base


def moe_workspace_bytes(model: ModelSpec, tokens: int, tp: int, dtype_bytes: int) -> int:
    """The modular fused-MoE kernel's two workspaces for ``tokens`` (TritonExperts.workspace_shapes):
    ``(M, top_k, max(I, H))`` and ``(M, top_k, max(2I, H))``, I the expert width on the rank."""
    moe = model.moe
    if moe is None:
        return 0
    inter, hidden = moe.moe_intermediate_size / tp, model.hidden_size
    return int(tokens * moe.experts_per_token * (max(inter, hidden) + max(2 * inter, hidden)) * dtype_bytes)


def activation_peak(
    model: ModelSpec,
    *,
    coefficients: MemoryCoefficients,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int,
    dtype_bytes: int,
    last_stage: bool,
    receives_from_previous_stage: bool = False,
    sampler_kernel: str = "triton_batch8",
    moe_workspace_held: bool = False,
    eager_engine: bool = False,
) -> ActivationPeak:
    """``eager_engine``: the V0 engine's profile run (eager forward, sort-path sampler)."""
    tokens = max_num_batched_tokens
    received = 2 * tokens * model.hidden_size * dtype_bytes if receives_from_previous_stage else 0
    if eager_engine:
        forward = tokens * eager_width(model, tp) * dtype_bytes
        sampler_kernel = "sort_scatter"
    else:
        forward = coefficients.forward_bytes_per_token_width * tokens * dense_width(model, tp) * dtype_bytes
    if model.moe is not None:
        forward = max(
            forward, coefficients.moe_bytes_per_token_expert_width * tokens * moe_width(model, tp) * dtype_bytes
        )
    sampler = 0.0
    if last_stage:
        num_reqs = min(max_num_seqs, max_num_batched_tokens)
        sampler = sampler_bytes_per_logit(coefficients, sampler_kernel, num_reqs) * num_reqs * model.vocab_size
        if moe_workspace_held and model.quantization is None:
            # vllm 0.14+ model_executor/layers/fused_moe/modular_kernel.py: workspaces from
            # current_workspace_manager() outlive the forward pass (quantized MoE kernels not verified).
            sampler += moe_workspace_bytes(model, tokens, tp, dtype_bytes)
    return ActivationPeak(
        forward_bytes=int(forward) + received, sampler_bytes=int(sampler) + received if last_stage else 0
    )
