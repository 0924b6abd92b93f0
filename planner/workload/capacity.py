"""Block capacity when only vLLM's block numbers are known (``vllm:cache_config_info``, a simulator).

The exporter/retuner and the load probe see ``num_gpu_blocks`` and ``block_size`` but not the model's
layer layout; for plain full-attention models that is all :func:`risk_bounded_concurrency` needs.
"""

from __future__ import annotations

from planner.errors import WorkloadProfileError
from planner.plan.models import KvCacheReport, KvGroupReport
from planner.units import cdiv


def kv_report_for_blocks(num_gpu_blocks: int, block_size: int, max_model_len: int) -> KvCacheReport:
    """A :class:`KvCacheReport` of one full-attention group with ``num_gpu_blocks`` blocks.

    Byte fields are 0 (unknown); block arithmetic is exact: one request of ``t`` tokens holds
    ``ceil(t / block_size)`` blocks and block 0 is vLLM's null block.
    """
    if num_gpu_blocks < 1 or block_size < 1 or max_model_len < 1:
        raise WorkloadProfileError(
            f"num_gpu_blocks ({num_gpu_blocks}), block_size ({block_size}) and max_model_len "
            f"({max_model_len}) must all be positive"
        )
    tokens = num_gpu_blocks * block_size
    return KvCacheReport(
        bytes_per_token=0,
        state_bytes_per_sequence=0,
        kv_cache_dtype="auto",
        block_size=block_size,
        bytes_per_block=0,
        num_gpu_blocks=num_gpu_blocks,
        tokens=tokens,
        max_concurrency=tokens / max_model_len,
        max_model_len=max_model_len,
        blocks_per_request=cdiv(max_model_len, block_size),
        estimated_max_model_len=tokens,
        groups=[KvGroupReport(kind="full", num_layers=1, page_bytes=0, block_size=block_size)],
    )
