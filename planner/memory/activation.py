"""Peak activation memory of vLLM's profiling run (the "torch peak memory increase").

vLLM profiles with one dummy forward pass of ``max_num_batched_tokens`` tokens spread over
``num_reqs = min(max_num_seqs, max_num_batched_tokens)`` requests, then (last PP stage only) a
sampler warm-up on ``num_reqs`` rows of logits (``gpu_model_runner.profile_run`` /
``_dummy_sampler_run``). The two peaks happen at different times, so torch's peak is the larger:

* forward: the activations alive inside one decoder layer — residual, hidden, fused QKV, attention
  output, fused gate/up and the MLP output — ``tokens x width x dtype_bytes``; for MoE layers the
  fused-MoE workspace ``tokens x top_k x (2 x expert_width + hidden)``;
* sampler: fp32 logits, probabilities and sort buffers, ``num_reqs x vocab x bytes_per_logit``.

A pipeline stage after the first also holds the hidden states and residual it received
(``IntermediateTensors``: ``2 x tokens x hidden x dtype_bytes``) through both peaks.
"""

from __future__ import annotations

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


def moe_width(model: ModelSpec, tp: int) -> float:
    moe = model.moe
    if moe is None:
        return 0.0
    return moe.experts_per_token * (2 * moe.moe_intermediate_size / tp + model.hidden_size)


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
) -> ActivationPeak:
    tokens = max_num_batched_tokens
    received = 2 * tokens * model.hidden_size * dtype_bytes if receives_from_previous_stage else 0
    forward = coefficients.forward_bytes_per_token_width * tokens * dense_width(model, tp) * dtype_bytes
    if model.moe is not None:
        forward = max(
            forward, coefficients.moe_bytes_per_token_expert_width * tokens * moe_width(model, tp) * dtype_bytes
        )
    sampler = 0.0
    if last_stage:
        num_reqs = min(max_num_seqs, max_num_batched_tokens)
        sampler = coefficients.sampler_bytes_per_logit * num_reqs * model.vocab_size
    return ActivationPeak(
        forward_bytes=int(forward) + received, sampler_bytes=int(sampler) + received if last_stage else 0
    )
