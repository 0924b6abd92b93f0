"""The drafter of speculative decoding inside one engine's KV layout (see planner/plan/speculative.py).

The drafter's attention layers are appended after the target's as layers of the target's page: vLLM
puts a same-shaped layer into the target's group, so one block id costs one more page; a draft model of
another shape forms a ``UniformTypeKVCacheSpecs`` group whose page is the sum of its layers' pages,
which is the same bytes per block as ``bytes / target page`` extra target-shaped layers (exact when the
pages divide, as for draft models sharing the head size; otherwise rounded up, and said so). They sit
on the last pipeline stage, with the drafter's weights.
"""

from __future__ import annotations

import dataclasses

from planner.findings import Code, Finding
from planner.kv.dtypes import KvDtype
from planner.kv.grouping import Grouping, group_layers
from planner.kv.specs import LayerCache, RankLayout
from planner.models.spec import ModelSpec
from planner.plan.speculative import DrafterCost, drafter_cost, parse_speculative_config
from planner.units import cdiv
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Release, Version


def engine_drafter(
    model: ModelSpec,
    args: ServingArgs,
    version: Version | None,
    *,
    kv: KvDtype,
    dtype: str,
    draft: ModelSpec | None,
) -> DrafterCost | None:
    """The drafter's cost on one rank, or None without ``--speculative-config`` (or a known release)."""
    if not args.speculative_config or version is None:
        return None
    settings = parse_speculative_config(args.speculative_config, version)
    return drafter_cost(model, settings, version, kv=kv, dtype=dtype, tp=args.tensor_parallel_size, draft=draft)


def with_drafter_layers(
    rank: RankLayout, grouping: Grouping, drafter: DrafterCost | None, release: Release
) -> tuple[RankLayout, Grouping, int, list[Finding]]:
    """(rank, grouping, layers appended, notes) with the drafter's KV layers in the layout."""
    if drafter is None or drafter.kv_bytes_per_token <= 0:
        return rank, grouping, 0, []
    target_page = rank.attention_page_per_token
    if target_page <= 0:
        return (
            rank,
            grouping,
            0,
            [Finding.of(Code.DRAFTER_LAYOUT, "the drafter's KV layers are not placed: no attention")],
        )
    notes: list[Finding] = []
    if drafter.kv_bytes_per_token == target_page * drafter.kv_layers:
        count = drafter.kv_layers
    else:
        count = cdiv(drafter.kv_bytes_per_token, target_page)
        if drafter.kv_bytes_per_token % target_page:
            notes.append(
                Finding.of(
                    Code.DRAFTER_LAYOUT,
                    f"draft KV pages ({drafter.kv_bytes_per_token} B/token) rounded up to {count} target layers",
                )
            )
    spec = LayerCache("full", target_page * rank.block_size, rank.block_size)
    extra: list[LayerCache | None] = [spec] * count
    new_rank = dataclasses.replace(rank, layers=[*rank.layers, *extra], raw_layers=[*rank.raw_layers, *extra])
    new_grouping = group_layers(
        new_rank.layers,
        group_size_threshold=release.group_size_threshold,
        strided=release.strided_groups,
        pad_pages=release.pad_unaligned_pages,
    )
    return new_rank, new_grouping, count, notes
