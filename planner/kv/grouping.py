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
* Layers of several page sizes that share a block-outermost layout (DeepSeek-V4, from 0.29) are packed
  instead (:func:`group_packed`): a group may hold layers of different pages side by side, and one
  block id is the widest group's pages together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from planner.errors import UnsupportedArchitectureError
from planner.findings import Code, Finding
from planner.kv.specs import CacheKind, LayerCache
from planner.units import cdiv


@dataclass(frozen=True)
class KvGroup:
    spec: LayerCache
    """The group's spec (a packed group: its first member's)."""
    layers: tuple[int, ...]
    """Global indices of the decoder layers in this group (padding slots not listed; a packed group lists
    one entry per member cache, so a decoder layer may appear more than once)."""
    members: tuple[LayerCache, ...] = ()
    """Packed groups (``UniformTypeKVCacheSpecs``): each member cache's spec, parallel to ``layers``."""

    @property
    def page_bytes(self) -> int:
        """Bytes of one block id in this group, for one layer slot (packed: all its members together)."""
        return sum(m.page_bytes for m in self.members) if self.members else self.spec.page_bytes

    def stage_bytes(self, stage_layers: range) -> int:
        """Packed groups: the bytes of one block id on the stage holding ``stage_layers``."""
        return sum(m.page_bytes for i, m in zip(self.layers, self.members, strict=True) if i in stage_layers)

    def blocks_for(self, tokens: int, *, in_flight: int, dcp: int = 1) -> int:
        """Blocks one request of ``tokens`` tokens holds in this group: a packed group's members share the
        group's block table, so the most any member needs (``UniformTypeKVCacheSpecs.max_memory_usage_pages``)."""
        if self.members:
            return max(m.blocks_for(tokens, in_flight=in_flight, dcp=dcp) for m in self.distinct_members)
        return self.spec.blocks_for(tokens, in_flight=in_flight, dcp=dcp)

    @cached_property
    def distinct_members(self) -> tuple[LayerCache, ...]:
        """The members' distinct specs (hashed once: a context search asks :meth:`blocks_for` many times)."""
        return tuple(dict.fromkeys(self.members))


@dataclass
class Grouping:
    groups: list[KvGroup]
    group_size: int
    """Layer slots per group (padding included) on the whole model."""
    padding_layers: int = 0
    warnings: list[Finding] = field(default_factory=list)
    packed: bool = False
    """Groups of mixed page sizes packed block-outermost (``_get_packed_kv_cache_groups``)."""
    _stage_slots: dict[tuple[int, int, int], int] = field(default_factory=dict, init=False, repr=False, compare=False)
    """:func:`stage_group_size` per stage range, filled on first use."""

    @property
    def page_bytes(self) -> int:
        return self.groups[0].spec.page_bytes if self.groups else 0

    def stage_bytes_per_block(self, stage_layers: range) -> int:
        """Packed groups: one block id's bytes on a stage, the widest group's pages there
        (``_get_kv_cache_bytes_per_block`` for a block-outermost layout)."""
        return max((group.stage_bytes(stage_layers) for group in self.groups), default=0)

    @cached_property
    def spec_counts(self) -> tuple[tuple[LayerCache, int], ...]:
        """Each distinct group spec with the number of groups that have it (a hybrid model's groups
        repeat a few specs: sums over groups are sums over these, computed once per grouping). A packed
        group counts by its first member's spec here, as the plan's group report shows it; what a request
        holds in it is :attr:`request_groups`."""
        counts: dict[LayerCache, int] = {}
        for group in self.groups:
            counts[group.spec] = counts.get(group.spec, 0) + 1
        return tuple(counts.items())

    @cached_property
    def request_groups(self) -> tuple[tuple[KvGroup, int], ...]:
        """One group of each kind a request's blocks depend on, with how many groups are alike
        (:meth:`KvGroup.blocks_for` reads only the spec, or a packed group's set of member specs)."""
        counts: dict[tuple[LayerCache, frozenset[LayerCache]], tuple[KvGroup, int]] = {}
        for group in self.groups:
            key = (group.spec, frozenset(group.members))
            first, count = counts.get(key, (group, 0))
            counts[key] = (first, count + 1)
        return tuple(counts.values())


def _unify_page_sizes(specs: list[LayerCache], *, pad: bool = False) -> list[LayerCache]:
    """Scale the block size of layers with smaller pages so every page has the same bytes; with ``pad``
    (vLLM 0.29+), an attention page that does not divide the largest keeps its block size and is padded."""
    largest = max(spec.page_bytes for spec in specs)
    unified = []
    for spec in specs:
        if spec.page_bytes == largest:
            unified.append(spec)
            continue
        if largest % spec.page_bytes:
            if pad and spec.kind != "mamba":
                unified.append(LayerCache(spec.kind, largest, spec.block_size, spec.window, spec.const_blocks))
                continue
            raise UnsupportedArchitectureError(
                f"KV page sizes ({spec.page_bytes} and {largest} bytes per block) cannot be unified by adjusting "
                "the block size in this vLLM release; kv-planner does not model its padding",
                field="--block-size",
            )
        ratio = largest // spec.page_bytes
        unified.append(LayerCache(spec.kind, largest, spec.block_size * ratio, spec.window, spec.const_blocks))
    return unified


def group_layers(
    layers: list[LayerCache | None],
    *,
    group_size_threshold: float | None,
    strided: bool,
    pad_pages: bool = False,
) -> Grouping:
    """Group the layers of the whole model (TP rank 0 shapes) like vLLM (``pad_pages``: see
    :func:`_unify_page_sizes`)."""
    indexed = [(i, spec) for i, spec in enumerate(layers) if spec is not None]
    if not indexed:
        return Grouping(groups=[], group_size=0)
    specs = [spec for _, spec in indexed]
    first = specs[0]
    if all(spec is first for spec in specs) or len(set(specs)) == 1:
        return Grouping(groups=[KvGroup(specs[0], tuple(i for i, _ in indexed))], group_size=len(indexed))

    specs = _unify_page_sizes(specs, pad=pad_pages)
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


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM's ``_approximate_gcd``: the chunk size in ``[lower_bound, max(values)]`` that pads the values least
    when each is rounded up to a multiple of it (ties to the larger)."""
    best, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def group_packed(caches: list[tuple[int, LayerCache]]) -> Grouping:
    """vLLM 0.29+ ``_get_packed_kv_cache_groups`` (block-outermost layout, several page sizes).

    ``caches`` are (decoder layer, spec) in the order vLLM lists the model's KV caches. Caches are bucketed
    greedily by uniform type (the same block size and kind; sliding ones with the same window). A bucket
    whose page sizes each have as many layers is a repeating pattern ("balanced"); the number of pattern
    repeats per group is the ``_approximate_gcd`` of the balanced buckets' repeats, at least the largest
    mixed-page balanced bucket's, and each balanced bucket is cut into that many repeats a group
    (``repeats[i::n]``); an unbalanced bucket stays one group. Sliding-window buckets count as state
    buckets, capped at the states one block already holds, only when there is no repeat pattern.
    """
    buckets: list[tuple[tuple[CacheKind, int, int | None], list[tuple[int, LayerCache]]]] = []
    for index, spec in caches:
        key = (spec.kind, spec.block_size, spec.window if spec.kind == "sliding_window" else None)
        for bucket_key, members in buckets:
            if bucket_key == key:
                members.append((index, spec))
                break
        else:
            buckets.append((key, [(index, spec)]))

    def by_page(members: list[tuple[int, LayerCache]]) -> dict[int, list[tuple[int, LayerCache]]]:
        pages: dict[int, list[tuple[int, LayerCache]]] = {}
        for index, spec in members:
            pages.setdefault(spec.page_bytes, []).append((index, spec))
        return pages

    shaped = [(key, by_page(members)) for key, members in buckets]
    balanced = [len({len(v) for v in pages.values()}) == 1 for _, pages in shaped]
    repeats_of = [max(len(v) for v in pages.values()) for _, pages in shaped]
    floor = max(
        (r for (_, pages), b, r in zip(shaped, balanced, repeats_of, strict=True) if b and len(pages) > 1), default=0
    )
    repeats = _approximate_gcd([r for b, r in zip(balanced, repeats_of, strict=True) if b], floor) if floor else None

    def groups_for(b: bool, r: int) -> int:
        return cdiv(r, repeats) if b and repeats is not None else 1

    def widest(pages: dict[int, list[tuple[int, LayerCache]]], n: int) -> int:
        return sum(cdiv(len(v), n) * page for page, v in pages.items())

    def is_state(key: tuple[CacheKind, int, int | None]) -> bool:
        return key[0] == "mamba" or (repeats is None and key[0] == "sliding_window")

    anchor = max(
        (
            widest(pages, sum(len(v) for v in pages.values()) if is_state(key) else groups_for(b, r))
            for (key, pages), b, r in zip(shaped, balanced, repeats_of, strict=True)
        ),
        default=0,
    )
    groups: list[KvGroup] = []
    for (key, pages), b, r in zip(shaped, balanced, repeats_of, strict=True):
        count = groups_for(b, r)
        members = [m for v in pages.values() for m in v]
        if anchor and is_state(key):
            per_block = max(anchor // members[0][1].page_bytes, 1)
            count = max(count, cdiv(len(members), per_block))
        if count == 1:
            chunks = [members]
        else:
            pattern = list(zip(*pages.values(), strict=True))
            chunks = [[m for repeat in pattern[i::count] for m in repeat] for i in range(count)]
        for chunk in chunks:
            groups.append(KvGroup(chunk[0][1], tuple(i for i, _ in chunk), tuple(s for _, s in chunk)))
    return Grouping(groups=groups, group_size=max(len(g.layers) for g in groups), packed=True)


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
