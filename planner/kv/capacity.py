"""Blocks, tokens, concurrency and the startup fit check, as vLLM computes and logs them.

Per worker (TP rank x PP stage): ``num_blocks = available // bytes_per_block`` with
``bytes_per_block = group_slots x page``; vLLM then takes the minimum over workers (all TP ranks of a
stage are identical, so over PP stages). The fit check asks whether one request of ``max_model_len``
tokens fits; how it counts changed across releases (``Release.fit_check``):

* ``per_layer`` (<= 0.13): the sum over the worker's layers of each layer's own need, taken before the
  hybrid manager's unification (sliding layers counted with their window even when sized as full);
* ``first_group_global`` (0.14-0.16): only the first group's blocks, with the whole model's group size,
  against the smallest worker's memory;
* ``first_group`` (0.17-0.18): only the first group's blocks, per worker;
* ``all_groups`` (0.19-0.26): every group's blocks, per worker;
* ``all_groups_null_block`` (0.33): the same against the memory minus one block (the null block).

The error's "estimated maximum model length" is the same binary search vLLM runs on the same function.
The V0 engine (<= 0.10.2) checks ``max_model_len <= block_size x (num_gpu_blocks // pp)`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.kv.grouping import Grouping
from planner.kv.specs import LayerCache
from planner.units import GiB, cdiv

_DOCS = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


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


@dataclass(frozen=True)
class FitTerms:
    """Bytes one request of ``t`` tokens needs: ``constant + sum(coef x cdiv(min(cap, cdiv(t, div)), block))``
    over ``terms`` of ``(coef, cap, div, block)`` (``cap`` None: no cap). Every spec's
    :meth:`LayerCache.blocks_for` is one such term (constant blocks and a sliding window's extra block go
    into ``constant``), so a stage's need is a short sum however many layers and groups it has."""

    constant: int
    terms: tuple[tuple[int, int | None, int, int], ...]

    @classmethod
    def of(cls, weighted: list[tuple[LayerCache, int]], *, in_flight: int, dcp: int) -> FitTerms:
        constant = 0
        terms: list[tuple[int, int | None, int, int]] = []
        for spec, coef in weighted:
            if spec.const_blocks is not None:
                constant += coef * spec.const_blocks
            elif spec.kind in ("sliding_window", "chunked_local"):
                cap = spec.tokens_cap(in_flight)
                assert cap is not None
                if spec.kind == "sliding_window":
                    constant += coef
                terms.append((coef, cap, 1, spec.block_size))
            else:
                terms.append((coef, None, dcp, spec.block_size))
        return cls(constant=constant, terms=tuple(terms))

    def needed(self, tokens: int) -> int:
        total = self.constant
        for coef, cap, div, block in self.terms:
            t = cdiv(tokens, div)
            total += coef * cdiv(t if cap is None else min(cap, t), block)
        return total

    def longest(self, budget: int, upper: int) -> int | None:
        """A guess of the largest length in [1, upper] whose need fits ``budget``: exact once every capped
        term is saturated and the uncapped ones share one block size (None when they do not)."""
        rest = self.constant
        growing: set[tuple[int, int]] = set()
        weight = 0
        for coef, cap, div, block in self.terms:
            if cap is None:
                growing.add((div, block))
                weight += coef
            else:
                rest += coef * cdiv(cap, block)
        if not growing:
            return upper
        if len(growing) > 1 or weight <= 0:
            return None
        ((div, block),) = growing
        return max(1, min(upper, (budget - rest) // weight * block * div))


@dataclass
class KvLayout:
    grouping: Grouping
    block_size: int
    stages: list[StageKv]
    in_flight: int
    fit_check: str
    raw_layers: list[LayerCache | None] = field(default_factory=list)
    dcp: int = 1
    num_gpu_blocks_override: int | None = None
    override_in_fit_check: bool = False
    v0: bool = False
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
        return sum(
            count * group.blocks_for(tokens, in_flight=self.in_flight, dcp=self.dcp)
            for group, count in self.grouping.request_groups
        )

    # --- the fit check -----------------------------------------------------------------------------

    def check_memory(self, stage: StageKv) -> int:
        """The memory the release checks one request against on this stage."""
        available = stage.available_bytes
        if self.fit_check == "first_group_global":
            available = min(s.available_bytes for s in self.stages)
        if self.num_gpu_blocks_override is not None and self.override_in_fit_check:
            available = self.num_gpu_blocks_override * stage.bytes_per_block
        if self.fit_check == "all_groups_null_block":
            available -= stage.bytes_per_block
        return available

    def needed_bytes(self, stage: StageKv, tokens: int) -> int:
        """KV bytes one request of ``tokens`` tokens needs on this stage, counted the release's way."""
        page = self.grouping.page_bytes
        if self.fit_check == "per_layer":
            layers = self.raw_layers[stage.first_layer : stage.first_layer + stage.num_layers]
            return sum(
                spec.page_bytes * spec.blocks_for(tokens, in_flight=self.in_flight, dcp=self.dcp)
                for spec in layers
                if spec is not None
            )
        if self.fit_check in ("first_group_global", "first_group"):
            first = self.grouping.groups[0].spec.blocks_for(tokens, in_flight=self.in_flight, dcp=self.dcp)
            slots = self.grouping.group_size if self.fit_check == "first_group_global" else stage.group_slots
            return slots * page * first
        return stage.bytes_per_block * self.blocks_per_request(tokens)

    def _checked_stages(self) -> list[StageKv]:
        return [s for s in self.stages if s.bytes_per_block > 0]

    def fits(self, tokens: int) -> bool:
        """vLLM's startup check: can one request of ``tokens`` tokens be served?"""
        if self.v0:
            return tokens <= self.block_size * (self.num_gpu_blocks // max(1, len(self.stages)))
        return all(self.needed_bytes(s, tokens) <= self.check_memory(s) for s in self._checked_stages())

    def max_len_that_fits(self, upper: int) -> int:
        """The largest length in [1, upper] that fits on every stage (0 if none): vLLM's binary search."""
        if self.v0:
            return min(upper, self.block_size * (self.num_gpu_blocks // max(1, len(self.stages))))
        best = upper
        for stage in self._checked_stages():
            budget = self.check_memory(stage)
            if self.needed_bytes(stage, 1) > budget:
                return 0
            # The need grows with the length, so vLLM's search finds the largest length that fits. The
            # closed form of the need's terms guesses it; two evaluations of the need itself prove it (it fits
            # and one token more does not), else the search runs as vLLM's does.
            # A packed group's need is the most any member needs (KvGroup.blocks_for), not a sum of terms.
            guess = upper >= 1 and not self.grouping.packed
            found = self.fit_terms(stage).longest(budget, upper) if guess else None
            if found is None or not (
                self.needed_bytes(stage, found) <= budget
                and (found == upper or self.needed_bytes(stage, found + 1) > budget)
            ):
                lo, hi, found = 1, upper, 1
                while lo <= hi:
                    mid = (lo + hi) // 2
                    if self.needed_bytes(stage, mid) <= budget:
                        found, lo = mid, mid + 1
                    else:
                        hi = mid - 1
            best = min(best, found)
        return best

    def fit_terms(self, stage: StageKv) -> FitTerms:
        """:meth:`needed_bytes` of one stage as a sum of terms (see :class:`FitTerms`)."""
        page = self.grouping.page_bytes
        weighted: list[tuple[LayerCache, int]]
        if self.fit_check == "per_layer":
            counts: dict[LayerCache, int] = {}
            for spec in self.raw_layers[stage.first_layer : stage.first_layer + stage.num_layers]:
                if spec is not None:
                    counts[spec] = counts.get(spec, 0) + 1
            weighted = [(spec, spec.page_bytes * count) for spec, count in counts.items()]
        elif self.fit_check in ("first_group_global", "first_group"):
            slots = self.grouping.group_size if self.fit_check == "first_group_global" else stage.group_slots
            weighted = [(self.grouping.groups[0].spec, slots * page)]
        else:
            weighted = [(spec, stage.bytes_per_block * count) for spec, count in self.grouping.spec_counts]
        return FitTerms.of(weighted, in_flight=self.in_flight, dcp=self.dcp)

    def limiting_fit_stage(self, tokens: int) -> StageKv:
        """The stage whose fit check fails first (the one vLLM reports)."""
        for stage in self._checked_stages():
            if self.needed_bytes(stage, tokens) > self.check_memory(stage):
                return stage
        return self.limiting_stage


def capacity(layout: KvLayout, max_model_len: int, formula: str) -> tuple[int, float]:
    """("GPU KV cache size" tokens, "Maximum concurrency") as the release logs them."""
    blocks = layout.num_gpu_blocks
    if layout.v0:
        tokens = blocks * layout.block_size
        return tokens, tokens / max_model_len
    per_request = max(1, layout.blocks_per_request(max_model_len))
    concurrency = blocks / per_request
    groups = max(1, len(layout.grouping.groups))
    min_block = min((g.spec.block_size for g in layout.grouping.groups), default=layout.block_size)
    if formula == "blocks_x_block_size":
        tokens = blocks * layout.block_size
        concurrency = tokens / max_model_len
    elif formula == "blocks_div_groups":
        tokens = blocks // groups * min_block * layout.dcp
    else:
        tokens = int(concurrency * max_model_len)
    return tokens, concurrency


def _gib(num_bytes: int, style: str) -> str:
    if style in ("e3", "e4"):
        return f"{round(num_bytes / GiB, 2)}"  # vLLM's format_gib from 0.14
    return f"{num_bytes / GiB:.2f}"


def no_memory_text(style: str) -> str:
    """The error when nothing is left for the KV cache at all."""
    text = (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine"
    )
    if style == "e4":
        return text + " (this flag also controls CPU memory reservation on the CPU backend, despite its name)." + _DOCS
    return text + "." + (_DOCS if style in ("e2", "e3") else "")


def fit_error_text(layout: KvLayout, max_model_len: int, style: str) -> str:
    """The ValueError vLLM raises when one request of ``max_model_len`` tokens does not fit."""
    if layout.v0:
        return (
            f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that can "
            f"be stored in KV cache ({layout.max_len_that_fits(1 << 40)})."
            " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    stage = layout.limiting_fit_stage(max_model_len)
    available = layout.check_memory(stage)
    if available <= 0:
        return no_memory_text(style)
    needed = layout.needed_bytes(stage, max_model_len)
    estimated = layout.max_len_that_fits(max_model_len)
    who = "model's" if style == "e4" else "models's"
    head = (
        f"To serve at least one request with the {who} max seq len ({max_model_len}), "
        f"({_gib(needed, style)} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({_gib(available, style)} GiB)."
    )
    tail = "Try increasing `gpu_memory_utilization`"
    tail += " (which also controls CPU memory on the CPU backend)" if style == "e4" else ""
    tail += " or decreasing `max_model_len` when initializing the engine."
    tail += _DOCS if style in ("e2", "e3", "e4") else ""
    if style == "e0":
        return f"{head} Based on the available memory,  {tail}"  # 0.8.5 never printed the estimate
    if estimated > 0:
        return f"{head} Based on the available memory, the estimated maximum model length is {estimated}. {tail}"
    return f"{head}  {tail}" if style in ("e1", "e2") else f"{head} {tail}"
