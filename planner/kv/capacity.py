"""Blocks, tokens, concurrency and the startup fit check, as vLLM computes and logs them.

Per worker (TP rank x PP stage): ``num_blocks = available // bytes_per_block`` with
``bytes_per_block = group_slots x page``; vLLM then takes the minimum over workers (all TP ranks of a
stage are identical, so over PP stages). The fit check asks whether one request of ``max_model_len``
tokens fits (``bytes_per_block x blocks_per_request <= available``, minus one block for the null
block from 0.2x); the error's "estimated maximum model length" is the same binary search vLLM runs.
The logged capacity lines follow the release's formula (``Release.tokens_formula``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.kv.grouping import Grouping
from planner.units import GiB


@dataclass
class StageKv:
    """One PP stage (and every TP rank of it)."""

    stage: int
    first_layer: int
    num_layers: int
    group_slots: int
    bytes_per_block: int
    available_bytes: int

    @property
    def num_blocks(self) -> int:
        if self.bytes_per_block <= 0:
            return 1  # attention-free stage: vLLM keeps one (null) block
        return max(0, self.available_bytes // self.bytes_per_block)


@dataclass
class KvLayout:
    grouping: Grouping
    block_size: int
    stages: list[StageKv]
    in_flight: int
    null_block_in_fit_check: bool
    dcp: int = 1
    num_gpu_blocks_override: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def limiting_stage(self) -> StageKv:
        return min(self.stages, key=lambda s: s.num_blocks)

    @property
    def num_gpu_blocks(self) -> int:
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        return self.limiting_stage.num_blocks

    def blocks_per_request(self, tokens: int) -> int:
        """Blocks one request of ``tokens`` tokens holds, summed over groups."""
        return sum(group.spec.blocks_for(tokens, in_flight=self.in_flight, dcp=self.dcp)
                   for group in self.grouping.groups)

    def _check_memory(self, stage: StageKv) -> int:
        available = stage.available_bytes
        if self.num_gpu_blocks_override is not None:
            available = self.num_gpu_blocks_override * stage.bytes_per_block
        if self.null_block_in_fit_check:
            available -= stage.bytes_per_block
        return available

    def needed_bytes(self, stage: StageKv, tokens: int) -> int:
        return stage.bytes_per_block * self.blocks_per_request(tokens)

    def fits(self, tokens: int) -> bool:
        """vLLM's startup check: can one request of ``tokens`` tokens be served on every stage?"""
        return all(self.needed_bytes(s, tokens) <= self._check_memory(s) for s in self.stages
                   if s.bytes_per_block > 0)

    def max_len_that_fits(self, upper: int) -> int:
        """The largest length in [1, upper] that fits on every stage (0 if none): vLLM's binary search."""
        best = upper
        for stage in self.stages:
            if stage.bytes_per_block <= 0:
                continue
            budget = self._check_memory(stage)
            if self.needed_bytes(stage, 1) > budget:
                return 0
            lo, hi, found = 1, upper, 1
            while lo <= hi:
                mid = (lo + hi) // 2
                if self.needed_bytes(stage, mid) <= budget:
                    found, lo = mid, mid + 1
                else:
                    hi = mid - 1
            best = min(best, found)
        return best

    def limiting_fit_stage(self, tokens: int) -> StageKv:
        """The stage whose fit check fails first (the one vLLM reports)."""
        for stage in self.stages:
            if stage.bytes_per_block > 0 and self.needed_bytes(stage, tokens) > self._check_memory(stage):
                return stage
        return self.limiting_stage

    def available_for_check(self, stage: StageKv) -> int:
        return self._check_memory(stage)


def capacity(layout: KvLayout, max_model_len: int, formula: str) -> tuple[int, float]:
    """("GPU KV cache size" tokens, "Maximum concurrency") as the release logs them."""
    blocks = layout.num_gpu_blocks
    per_request = max(1, layout.blocks_per_request(max_model_len))
    concurrency = blocks / per_request
    groups = max(1, len(layout.grouping.groups))
    min_block = min((g.spec.block_size for g in layout.grouping.groups), default=layout.block_size)
    if formula == "blocks_x_block_size":
        tokens = blocks * min_block
    elif formula == "blocks_div_groups":
        tokens = blocks // groups * min_block * layout.dcp
    else:
        tokens = int(concurrency * max_model_len)
    return tokens, concurrency


def _gib2(num_bytes: int) -> str:
    return f"{num_bytes / GiB:.2f}"


def fit_error_text(layout: KvLayout, max_model_len: int, style: str, *, block_size: int) -> str:
    """The ValueError vLLM raises when one request of ``max_model_len`` does not fit."""
    stage = layout.limiting_fit_stage(max_model_len)
    available = layout.available_for_check(stage)
    if available <= 0:
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.")
    if style == "v0":
        return (f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens "
                f"that can be stored in KV cache ({block_size * layout.num_gpu_blocks}). Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    needed = layout.needed_bytes(stage, max_model_len)
    estimated = layout.max_len_that_fits(max_model_len)
    estimate = (f"Based on the available memory, the estimated maximum model length is {estimated}. "
                if estimated > 0 else "")
    who = "models's" if style == "models's" else "model's"
    return (f"To serve at least one request with the {who} max seq len ({max_model_len}), "
            f"({_gib2(needed)} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({_gib2(available)} GiB). {estimate}Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.")
