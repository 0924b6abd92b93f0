"""KV-cache groups, as vLLM's ``get_kv_cache_groups`` forms them (``vllm/v1/core/kv_cache_utils.py``,
``kv_cache_planning.py`` from 0.2x).

* Every layer the same spec: one group with every layer.
* Otherwise (hybrid models): pages are unified (smaller pages get a proportionally larger block
  size), layers are bucketed by spec, and every bucket is cut into groups of ``group_size`` layers,
  where ``group_size`` is the smallest bucket — or the largest when it is less than
  ``threshold x`` the smallest (1.25 in 0.12-0.14, 1.5 from 0.18; always the smallest before 0.12).
  Layers go to groups strided (``layers[i::n]``, from 0.11) or contiguously (0.10). Short groups are
  padded, so every group has ``group_size`` layer slots and one block id is ``group_size`` pages.
* All groups draw block ids from one pool; a request holds blocks in every group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from planner.findings import Code, Finding
from planner.kv.specs import LayerCache
from planner.units import cdiv


@dataclass(frozen=True)
class KvGroup:
    spec: LayerCache
    layers: tuple[int, ...]
    """Global indices of the decoder layers in this group (padding slots not listed)."""


@dataclass
class Grouping:
    groups: list[KvGroup]
    group_size: int
    """Layer slots per group (padding included) on the whole model."""
    padding_layers: int = 0
    warnings: list[Finding] = field(default_factory=list)
    _stage_slots: dict[tuple[int, int, int], int] = field(default_factory=dict, init=False, repr=False, compare=False)
    """:func:`stage_group_size` per stage range, filled on first use."""

    @property
    def page_bytes(self) -> int:
        return self.groups[0].spec.page_bytes if self.groups else 0

    @cached_property
    def spec_counts(self) -> tuple[tuple[LayerCache, int], ...]:
        """Each distinct group spec with the number of groups that have it (a hybrid model's groups
        repeat a few specs: sums over groups are sums over these, computed once per grouping)."""
        counts: dict[LayerCache, int] = {}
        for group in self.groups:
            counts[group.spec] = counts.get(group.spec, 0) + 1
        return tuple(counts.items())


def _unify_page_sizes(specs: list[LayerCache]) -> list[LayerCache]:
    """Scale the block size of layers with smaller pages so every page has the same bytes."""
    largest = max(spec.page_bytes for spec in specs)
    unified = []
    for spec in specs:
        if spec.page_bytes == largest:
            unified.append(spec)
            continue
        if largest % spec.page_bytes:
            raise ValueError("KV page sizes cannot be unified by adjusting the block size")
        ratio = largest // spec.page_bytes
        unified.append(LayerCache(spec.kind, largest, spec.block_size * ratio, spec.window, spec.const_blocks))
    return unified


def group_layers(
    layers: list[LayerCache | None],
    *,
    group_size_threshold: float | None,
    strided: bool,
) -> Grouping:
    """Group the layers of the whole model (TP rank 0 shapes) like vLLM."""
    indexed = [(i, spec) for i, spec in enumerate(layers) if spec is not None]
    if not indexed:
        return Grouping(groups=[], group_size=0)
    specs = [spec for _, spec in indexed]
    first = specs[0]
    if all(spec is first for spec in specs) or len(set(specs)) == 1:
        return Grouping(groups=[KvGroup(specs[0], tuple(i for i, _ in indexed))], group_size=len(indexed))

    specs = _unify_page_sizes(specs)
    buckets: dict[LayerCache, list[int]] = {}
    for (index, _), spec in zip(indexed, specs, strict=True):
        buckets.setdefault(spec, []).append(index)
    sizes = [len(members) for members in buckets.values()]
    group_size = min(sizes)
    if group_size_threshold is not None and max(sizes) < min(sizes) * group_size_threshold:
        group_size = max(sizes)
    groups: list[KvGroup] = []
    padding = 0
    warnings: list[Finding] = []
    for spec, members in buckets.items():
        count = cdiv(len(members), group_size)
        pad = count * group_size - len(members)
        if pad:
            padding += pad
            warnings.append(
                Finding.of(
                    Code.PADDING_LAYERS,
                    f"vLLM adds {pad} padding layers to the {spec.kind} group "
                    f"(may waste up to {pad / len(members) * 100:.2f}% of KV cache memory)",
                )
            )
        for g in range(count):
            chosen = members[g::count] if strided else members[g * group_size : (g + 1) * group_size]
            groups.append(KvGroup(spec, tuple(chosen)))
    return Grouping(groups=groups, group_size=group_size, padding_layers=padding, warnings=warnings)


def stage_group_size(grouping: Grouping, stage_layers: range) -> int:
    """Layer slots per group on one PP stage: the most layers any group has there
    (vLLM projects the global groups onto each worker's layers)."""
    if not grouping.groups:
        return 0
    # A grouping is shared by every plan of a model (planner/plan/engine.py memoizes it) and never changed:
    # the count is computed once per stage range.
    key = (stage_layers.start, stage_layers.stop, stage_layers.step)
    found = grouping._stage_slots.get(key)
    if found is None:
        found = max(sum(1 for i in group.layers if i in stage_layers) for group in grouping.groups)
        grouping._stage_slots[key] = found
    return found
