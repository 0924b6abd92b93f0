"""Policy for KV offloading to CPU: the container's memory limit must hold the offload buffers.

The CPU tier (planner/plan/offload.py) is pinned host memory allocated when vLLM starts; it counts in
the container's memory cgroup. A ``resources.limits.memory`` below it means the kernel kills vLLM while
it allocates: KVP008 (cannot start; Enforce denies). Below it plus the rest of the process (Python,
PyTorch, the tokenizer, CUDA's host state: 2 GiB kept as a floor, an estimate, not a measurement of
one model) is KVP015 (warn). Each data-parallel engine of the pod has its own CPU tier.
"""

from __future__ import annotations

from typing import Any

from planner.plan.models import Plan
from planner.policy.codes import Code, Finding, finding
from planner.units import GiB

PROCESS_FLOOR_BYTES = 2 * GiB


def host_memory_findings(ctx: Any, plan: Plan | None, data_parallel_size: int) -> list[Finding]:
    """KVP008 / KVP015 for the container of ``ctx`` (a :class:`planner.policy.limits.LimitContext`)."""
    if plan is None or plan.offload is None or plan.offload.host_bytes <= 0:
        return []
    limit = ctx.found.memory_limit_bytes
    if limit is None:
        return []
    need = plan.offload.host_bytes * max(1, data_parallel_size)
    what = f"{need / GiB:.1f} GiB {'pinned ' if plan.offload.pinned else ''}KV offload ({plan.offload.backend})"
    if limit < need:
        text = f"memory limit {limit / GiB:.1f} GiB < {what}: vLLM is OOM-killed at startup"
        return [finding(Code.HOST_MEMORY_SHORT, ctx.name, text)]
    if limit < need + PROCESS_FLOOR_BYTES:
        text = f"memory limit {limit / GiB:.1f} GiB leaves under 2 GiB beside {what}"
        return [finding(Code.HOST_MEMORY_TIGHT, ctx.name, text)]
    return []
