"""The few constants of kv-planner's memory model, each a property of a cause, not of a model.

They are fitted by ``planner calibrate --fit FILE`` (``planner/calibration/fit.py``) on the startup reports
in ``../shared/calibration`` and checked model-by-model with leave-one-model-out in
``docs/accuracy.md``. Change them only through that fit; the tests pin the accuracy, not the values.
"""

from pydantic import BaseModel, ConfigDict, Field

GiB = 1 << 30


class MemoryCoefficients(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sampler_bytes_per_logit: float = Field(
        description="bytes of sampler warm-up memory per (dummy request x vocabulary entry): fp32 logits, "
        "probabilities and top-k/top-p sort buffers"
    )
    sampler_sort_extra_bytes_per_logit: float = Field(
        default=24.0,
        description="extra bytes per logit when the sampler sorts the full logits (PyTorch top-k/top-p): "
        "sorted fp32 values (4) and int64 indices (8), plus the radix sort's double buffers (4 + 8); from "
        "the tensors vllm allocates, not fitted (no calibration record runs that path yet)",
    )
    forward_bytes_per_token_width: float = Field(
        description="activation bytes per (batched token x activation width element): residual, hidden, "
        "qkv, attention output, gate_up and MLP output live at the peak, in units of dtype bytes"
    )
    moe_bytes_per_token_expert_width: float = Field(
        description="fused-MoE workspace per (batched token x top-k x expert width element x dtype byte)"
    )
    cuda_workspace_bytes: int = Field(description="cuBLAS/cuDNN workspaces created during the first forward")
    single_process_non_torch_bytes: int = Field(
        description="extra non-torch memory when the model runs inside the engine process (TP = PP = 1)"
    )
    cuda_context_bytes: int = Field(
        default=int(0.48 * GiB),
        description="memory the engine process holds outside PyTorch before vLLM's baseline snapshot (CUDA "
        "context, kernel images, library handles), counted only by releases that subtract everything on the "
        "device (non_torch_scope 'device': V0 0.6.4, V1 0.7-0.9.0). Not fitted: the largest such memory beyond "
        "the baseline-scope terms among the public 0.6.4 logs found (H200: 0.73 GiB non-torch at TP=1; RTX 3090 "
        "0.35; a GTX 1080 driving a desktop 0.15-0.47, docs/accuracy.md), so a smaller context is under-predicted, "
        "never over",
    )
    nccl_bytes_nvls: int = Field(description="NCCL buffers for TP > 1 on NVSwitch systems with NVLS (H100/H200/B200)")
    nccl_bytes_per_extra_rank: int = Field(description="NCCL buffer growth per TP rank beyond 2")
    nccl_bytes_plain: int = Field(description="NCCL buffers for TP > 1 without NVLS (PCIe, A100, L40S)")
    nccl_bytes_p2p_at_init: int = Field(
        default=int(1.35 * GiB),
        description="per TP rank, on top of nccl_bytes_plain: the channel buffers NCCL allocates in GPU memory "
        "when vLLM's two TP communicators are created, counted by releases that keep NCCL from connecting on "
        "first use (Release.nccl_buffers_at_init: <= 0.10.1) on a node whose GPUs reach each other by P2P "
        "(NVLink or PCIe P2P; without it NCCL's shared-memory transport keeps them in host memory). Not fitted: "
        "the one public startup of that kind with a memory breakdown (vLLM 0.7.2, TP=2 on A100-40GB, calibration "
        "record g013: non_torch_memory 1.54 GiB on both ranks against 0.19 of the other terms). Its size follows "
        "NCCL's channel count and the peers of a rank (interconnect, TP), which the plan does not know: the "
        "safety band keeps the figure again on both sides (planner/plan/margin.py)",
    )
    cudagraph_base_bytes: int = Field(description="graph pool memory independent of depth (largest capture)")
    cudagraph_bytes_per_layer: int = Field(description="graph memory per decoder layer on the rank (51 sizes)")
    cudagraph_bytes_per_moe_layer: int = Field(description="extra graph memory per MoE layer")
    cudagraph_reference_sizes: int = Field(description="number of capture sizes the per-layer figure was fitted at")


# Fitted by `planner calibrate --fit ../shared/calibration/vllm-startup.jsonl` (see docs/accuracy.md); the sampler's
# bytes per logit were refitted alone on the shipped records (planner/data/calibration, the 27 whose logged peak is
# the V1 sampler) once the hidden states it holds became a term of their own (activation.sampler_held_bytes).
DEFAULT_COEFFICIENTS = MemoryCoefficients(
    sampler_bytes_per_logit=14.8208,
    forward_bytes_per_token_width=1.236,
    moe_bytes_per_token_expert_width=2.151,
    cuda_workspace_bytes=int(0.07 * GiB),
    single_process_non_torch_bytes=int(0.18 * GiB),
    nccl_bytes_nvls=int(2.0 * GiB),
    nccl_bytes_per_extra_rank=int(0.03 * GiB),
    nccl_bytes_plain=int(0.12 * GiB),
    cudagraph_base_bytes=int(0.262 * GiB),
    cudagraph_bytes_per_layer=int(0.0152 * GiB),
    cudagraph_bytes_per_moe_layer=int(0.0272 * GiB),
    cudagraph_reference_sizes=51,
)
