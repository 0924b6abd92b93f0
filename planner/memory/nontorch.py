"""Memory that grows outside PyTorch's allocator during profiling ("non-torch forward increase").

vLLM takes its baseline snapshot after NCCL initialisation, so what remains is what the first
forward pass creates: cuBLAS/cuDNN workspaces, the engine process's own CUDA state when the model runs
in-process (one GPU), and the
communication buffers NCCL (and custom all-reduce) allocate lazily on first use when TP > 1. On
NVSwitch systems with NVLink SHARP (H100/H200/B200 HGX) NCCL's NVLS buffers dominate (~1.8 GiB
seen at TP=2 and TP=4); on PCIe or A100 systems they are a fraction of that.
"""

from __future__ import annotations

from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import MemoryCoefficients


def non_torch_bytes(gpu: GpuSpec, *, tp: int, pp: int, coefficients: MemoryCoefficients) -> int:
    total = coefficients.cuda_workspace_bytes
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
