"""Memory outside PyTorch's allocator that vLLM subtracts from the KV budget ("non_torch_memory").

vLLM's baseline snapshot (V0 from 0.6.5, V1 from 0.9.1) is taken in init_device once the CUDA context
exists (before NCCL initialisation up to 0.10, after it from 0.11), so what remains is what the first
forward pass creates: cuBLAS/cuDNN workspaces, the engine process's own CUDA state when the model runs
in-process (one GPU), and the communication buffers NCCL (and custom all-reduce) allocate lazily on first
use when TP > 1. On NVSwitch systems with NVLink SHARP (H100/H200/B200 HGX) NCCL's NVLS buffers dominate
(~1.8 GiB seen at TP=2 and TP=4); on PCIe or A100 systems they are a fraction of that.

At TP > 1 vLLM creates two NCCL communicators for the TP group: its own ``PyNcclCommunicator``
(``distributed/parallel_state.py`` GroupCoordinator, in ``init_worker_distributed_environment``) and
torch.distributed's ``ProcessGroupNCCL`` on the group's ``device_group``, which connects lazily at the first
collective torch runs there: the logits gather of the profile run (V0: ``LogitsProcessor._gather_logits`` ->
``tensor_model_parallel_gather`` -> ``torch.distributed.gather``; V1 up to 0.26: ``tensor_model_parallel_all_gather``
-> ``base_device_communicator.py`` ``all_gather_into_tensor`` on the device group). Up to 0.10.1 vLLM sets
``NCCL_CUMEM_ENABLE=0`` (``vllm/__init__.py`` in 0.7, ``env_override.py`` in 0.8-0.10.1, ``worker/worker_base.py``
in 0.6), and NCCL without cuMem (``init.cc``: ``runtimeConn = cuMemSupport && NCCL_RUNTIME_CONNECT``), like every
NCCL before 2.22, connects the rings and trees of every channel inside ``ncclCommInitRank``: each communicator
holds LL, LL128 and Simple buffers (0.5 + 4.7 + 4 MiB, padded to 2 MiB) per channel and peer from its creation,
after the baseline snapshot of those releases, so they are non-torch memory. With P2P between the GPUs (NVLink
or PCIe P2P) the buffers are GPU memory; without it (``NCCL_P2P_DISABLE=1``, or a driver that reports none, as
in pods that vLLM warns "lacks GPU P2P capability") NCCL's shared-memory transport keeps them in host memory:
:func:`nccl_at_init_bytes`. From 0.10.2 cuMem stays on and NCCL connects on first use, which the plain
figure measures.

Releases that subtract everything on the device outside torch (scope ``device``: V0 0.6.4/0.6.4.post1,
V1 0.7-0.9.0) also count the process's CUDA context. 0.6.0-0.6.3 (``init_free``) measure the drop in
free memory since init_device: the context is excluded as with a baseline and is planned so; the freed
activation blocks torch still caches at that point also count there, which is not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping

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


def nccl_at_init_bytes(
    gpu: GpuSpec,
    *,
    tp: int,
    buffers_at_init: bool,
    env: Mapping[str, str],
    across_nodes: bool,
    coefficients: MemoryCoefficients,
) -> int:
    """The channel buffers of the two TP communicators that NCCL allocates at their creation in GPU memory
    (``buffers_at_init``: ``Release.nccl_buffers_at_init``). Not on NVSwitch/NVLS systems, whose measured
    figure (``nccl_bytes_nvls``) already holds what NCCL keeps there: the 0.10.0 TP=8 H100 startups
    (calibration c006, c007) are planned within 0.2% with it. Not across nodes either: NCCL's network transport
    is what the tensor-parallel-across-nodes band covers (planner/plan/margin.py)."""
    if tp == 1 or not buffers_at_init or gpu.nvswitch_multicast or across_nodes:
        return 0
    if env.get("NCCL_P2P_DISABLE", "").strip().lower() in ("1", "true", "yes"):
        return 0
    return coefficients.nccl_bytes_p2p_at_init
