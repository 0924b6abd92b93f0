"""Memory outside PyTorch's allocator that vLLM subtracts from the KV budget ("non_torch_memory").

vLLM's baseline snapshot (V0 from 0.6.5, V1 from 0.9.1) is taken in init_device once the CUDA context
exists (before NCCL initialisation up to 0.10, after it from 0.11), so what remains is what the first
forward pass creates: cuBLAS/cuDNN workspaces, the engine process's own CUDA state when the model runs
in-process (one GPU), and the communication buffers NCCL (and custom all-reduce) allocate lazily on first
use when TP > 1. On NVSwitch systems with NVLink SHARP (H100/H200/B200 HGX) NCCL's NVLS buffers dominate
(~1.8 GiB seen at TP=2 and TP=4); on PCIe or A100 systems they are a fraction of that.

Releases that subtract everything on the device outside torch (scope ``device``: V0 0.6.4/0.6.4.post1,
V1 0.7-0.9.0) also count the process's CUDA context. 0.6.0-0.6.3 (``init_free``) measure the drop in
free memory since init_device: the context is excluded as with a baseline and is planned so; the freed
activation blocks torch still caches at that point also count there, which is not modelled.
"""

from __future__ import annotations

from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import MemoryCoefficients


def non_torch_bytes(
    gpu: GpuSpec, *, tp: int, pp: int, coefficients: MemoryCoefficients, device_scope: bool = False
) -> int:
    """``device_scope``: the release's scope (``Release.v0_non_torch_scope`` / ``v1_non_torch_scope``) is
    ``device``."""
    total = coefficients.cuda_workspace_bytes
    if device_scope:
        # vllm 0.6.4 worker/worker.py determine_num_available_blocks (V1: 0.8.5.post1 / 0.9.0
        # v1/worker/gpu_worker.py determine_available_memory): non-torch = mem_get_info's used memory minus
        # torch's allocated bytes after empty_cache, so the process's CUDA context counts too (and any other
        # process on the GPU, which no plan can know).
        total += coefficients.cuda_context_bytes
    if tp == 1 and pp == 1:
        # One GPU: vLLM runs the model in the engine-core process itself (uniprocess executor), whose
        # sampler and scheduler-side CUDA state land on the same device.
        total += coefficients.single_process_non_torch_bytes
    if tp > 1:
        if gpu.nvswitch_multicast:
            total += coefficients.nccl_bytes_nvls + coefficients.nccl_bytes_per_extra_rank * (tp - 2)
        else:
            total += coefficients.nccl_bytes_plain
    return total
