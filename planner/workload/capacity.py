"""The KV-cache capacity the workload maths needs, owned here so that plans can depend on workload.

:func:`~planner.workload.concurrency.risk_bounded_concurrency` needs five things about a cache: its
usable blocks, the blocks one sequence of ``t`` tokens holds, the block sizes of its groups, the
``max_model_len`` in force and vLLM's own ``max_concurrency``. :class:`KvCapacity` names them;
``planner.plan.models.KvCacheReport`` (a whole plan's cache, every group) has them structurally, and
:class:`BlockCapacity` is the view when only vLLM's block numbers are known (``vllm:cache_config_info``
seen by the exporter/retuner, the load probe, a simulator): one full-attention group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from planner.errors import WorkloadProfileError
from planner.units import cdiv

if TYPE_CHECKING:  # (numpy is imported by the workload maths, not by every plan)
    from planner.workload.distribution import IntArray


class BlockGroup(Protocol):
    """One KV-cache group: all that the block lookup needs is its block size."""

    @property
    def block_size(self) -> int: ...


class KvCapacity(Protocol):
    """What risk-bounded concurrency reads from a KV cache."""

    @property
    def block_size(self) -> int: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def max_concurrency(self) -> float: ...

    @property
    def usable_blocks(self) -> int: ...

    @property
    def groups(self) -> Sequence[BlockGroup]: ...

    def blocks_for_sequence(self, tokens: int) -> int: ...

    # Optional, and used when present (planner.workload.occupancy.block_lookup):
    # ``blocks_for_sequences(tokens: IntArray) -> IntArray``, :meth:`blocks_for_sequence` of every entry
    # of ``tokens`` in one numpy pass. BlockCapacity and the plan's KvCacheReport have it.


@dataclass(frozen=True)
class _FullGroup:
    block_size: int


@dataclass(frozen=True)
class BlockCapacity:
    """``num_gpu_blocks`` blocks of one full-attention group: a request of ``t`` tokens holds
    ``ceil(t / block_size)`` blocks, and block 0 is vLLM's null block."""

    num_gpu_blocks: int
    block_size: int
    max_model_len: int

    @property
    def tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    @property
    def max_concurrency(self) -> float:
        return self.tokens / self.max_model_len

    @property
    def usable_blocks(self) -> int:
        return max(0, self.num_gpu_blocks - 1)

    @property
    def groups(self) -> tuple[_FullGroup]:
        return (_FullGroup(self.block_size),)

    def blocks_for_sequence(self, tokens: int) -> int:
        return cdiv(tokens, self.block_size)

    def blocks_for_sequences(self, tokens: IntArray) -> IntArray:
        blocks: IntArray = -(tokens // -self.block_size)
        return blocks


def capacity_for_blocks(num_gpu_blocks: int, block_size: int, max_model_len: int) -> BlockCapacity:
    """The capacity of ``num_gpu_blocks`` full-attention blocks, checked (all three must be positive)."""
    if num_gpu_blocks < 1 or block_size < 1 or max_model_len < 1:
        raise WorkloadProfileError(
            f"num_gpu_blocks ({num_gpu_blocks}), block_size ({block_size}) and max_model_len "
            f"({max_model_len}) must all be positive"
        )
    return BlockCapacity(num_gpu_blocks=num_gpu_blocks, block_size=block_size, max_model_len=max_model_len)
