"""Batched planning (planner/plan/sweep.py, planner/plan/vectorized.py) gives every point the figures of
its own ``make_plan`` (no alternatives), field by field: on the catalog grid (every model x GPUs x TP x
KV dtype x releases, unknown included) and on random points with the other flags drawn too."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import KvPlannerError
from planner.gpus.catalog import all_gpus, lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.models.catalog import all_models
from planner.models.spec import ModelSpec
from planner.plan import make_plan
from planner.plan.sweep import PointPlan, grid, sweep_plans, sweep_table
from planner.plan.vectorized import SweepTable
from planner.vllm.args import ServingArgs
from planner.vllm.releases import RELEASES

GiB = 1 << 30
MODELS = list(all_models())
GPUS = list(all_gpus())

_FIGURES = (
    "vllm_version",
    "fits",
    "gpu_memory_utilization",
    "budget_bytes",
    "weights_bytes",
    "activation_peak_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "cuda_graph_counted",
    "kv_cache_bytes",
    "kv_cache_dtype",
    "block_size",
    "bytes_per_block",
    "num_gpu_blocks",
    "tokens",
    "max_concurrency",
    "max_model_len",
    "blocks_per_request",
    "estimated_max_model_len",
    "derived_max_model_len",
    "band_low_bytes",
    "band_high_bytes",
    "num_gpu_blocks_low",
    "max_model_len_fits_low",
    "estimated_max_model_len_low",
    "version_spread_bytes",
    "recommended_max_model_len",
    "recommended_max_num_seqs",
)


def expected(model: ModelSpec, gpu: GpuSpec, args: ServingArgs, version: str | None, headroom: float) -> dict[str, Any]:
    """The figures as make_plan reports them (the same names as PointPlan's)."""
    try:
        plan = make_plan(model, gpu, args, vllm_version=version, headroom=headroom, with_alternatives=False)
    except KvPlannerError as error:
        return {"error": str(error)}
    memory, kv, band, rec = plan.memory, plan.kv_cache, plan.margin, plan.recommendation
    assert band is not None
    return {
        "error": None,
        "vllm_version": plan.vllm_version,
        "fits": plan.fits,
        "fit_error": plan.fit_error,
        "gpu_memory_utilization": memory.gpu_memory_utilization,
        "budget_bytes": memory.budget_bytes,
        "weights_bytes": memory.weights_bytes,
        "activation_peak_bytes": memory.activation_peak_bytes,
        "non_torch_bytes": memory.non_torch_bytes,
        "cuda_graph_bytes": memory.cuda_graph_bytes,
        "cuda_graph_counted": memory.cuda_graph_counted,
        "kv_cache_bytes": memory.kv_cache_bytes,
        "kv_cache_dtype": kv.kv_cache_dtype,
        "block_size": kv.block_size,
        "bytes_per_block": kv.bytes_per_block,
        "num_gpu_blocks": kv.num_gpu_blocks,
        "tokens": kv.tokens,
        "max_concurrency": kv.max_concurrency,
        "max_model_len": kv.max_model_len,
        "blocks_per_request": kv.blocks_per_request,
        "estimated_max_model_len": kv.estimated_max_model_len,
        "derived_max_model_len": plan.model.derived_max_model_len,
        "band_low_bytes": band.low_bytes,
        "band_high_bytes": band.high_bytes,
        "num_gpu_blocks_low": band.num_gpu_blocks_low,
        "max_model_len_fits_low": band.max_model_len_fits_low,
        "estimated_max_model_len_low": band.estimated_max_model_len_low,
        "version_spread_bytes": next((t.low_bytes for t in band.terms if t.name == "unknown_release"), None),
        "recommended_max_model_len": rec.max_model_len if rec else None,
        "recommended_max_num_seqs": rec.max_num_seqs if rec else None,
        "sequence_blocks": [kv.blocks_for_sequence(n) for n in (1, 4096, 32768, kv.max_model_len)],
    }


def figures(point: PointPlan) -> dict[str, Any]:
    if point.error is not None:
        return {"error": point.error}
    out: dict[str, Any] = {name: getattr(point, name) for name in _FIGURES}
    out["error"] = None
    out["fit_error"] = point.fit_error
    out["sequence_blocks"] = [point.sequence_blocks(n) for n in (1, 4096, 32768, point.max_model_len)]
    return out


def table_figures(table: SweepTable, index: int) -> dict[str, Any]:
    if table.errors[index] is not None:
        return {"error": table.errors[index]}
    out: dict[str, Any] = {name: table[name][index].item() for name in _FIGURES if name in table.columns}
    out["vllm_version"] = str(table["vllm_version"][index])
    out["kv_cache_dtype"] = str(table["kv_cache_dtype"][index])
    if not table["has_version_spread"][index]:
        out["version_spread_bytes"] = None
    if not table["has_recommendation"][index]:
        out["recommended_max_model_len"] = out["recommended_max_num_seqs"] = None
    out["error"] = None
    return out


def assert_same(
    points: list[tuple[ModelSpec, GpuSpec, ServingArgs]], version: str | None, headroom: float = 0.1
) -> None:
    plans = sweep_plans(points, vllm_version=version, headroom=headroom)
    table = sweep_table(points, vllm_version=version, headroom=headroom)
    for index, ((model, gpu, args), point) in enumerate(zip(points, plans, strict=True)):
        want = expected(model, gpu, args, version, headroom)
        got = figures(point)
        where = f"{model.id} on {gpu.name} ({gpu.memory_bytes} B), {args!r}, vLLM {version}"
        assert got == want, where
        # Types too: a numpy integer or a float where the Plan has an int would be a different JSON.
        assert [type(got[k]) for k in sorted(want)] == [type(want[k]) for k in sorted(want)], where
        in_table = table_figures(table, index)
        assert in_table == {k: want[k] for k in in_table}, where


def test_the_catalog_has_every_kind_of_model_the_grid_claims() -> None:
    kinds = {
        "hybrid": any("M" in m.layer_pattern for m in MODELS),
        "mla": any(m.mla is not None for m in MODELS),
        "sliding": any("S" in m.layer_pattern for m in MODELS),
        "chunked": any("C" in m.layer_pattern for m in MODELS),
        "moe": any(m.moe is not None for m in MODELS),
        "quantized": any(m.quantization is not None for m in MODELS),
        "vision": any(m.vision is not None for m in MODELS),
    }
    assert all(kinds.values()), kinds


@pytest.mark.parametrize(
    ("version", "gpu_names", "step"),
    [
        ("0.33.0", ["L4", "H100-80GB", "MI300X"], 1),
        # V0 on pre-Ampere cards (a shorter context changes the profile batch: the replanned limits differ)
        ("0.8.0", ["T4", "V100-32GB"], 3),
        ("0.13.0", ["A10G", "B200"], 3),
    ],
)
def test_every_catalog_model_on_some_gpus(version: str, gpu_names: list[str], step: int) -> None:
    gpus = [lookup_gpu(name) for name in gpu_names]
    points = grid(MODELS[::step], gpus, tensor_parallel_sizes=(1, 2, 4, 8), kv_cache_dtypes=("auto", "fp8"))
    assert_same(points, version)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.8.0", "0.10.1", "0.13.0", "0.15.0", "0.20.0", "0.26.0", "0.33.0", None])
def test_every_catalog_model_on_the_catalog_gpus(version: str | None) -> None:
    # Every GPU at two releases (the members of one GPU class each with its own memory); every other GPU at
    # the rest, every fourth for the unknown release (which plans every checked release per point).
    gpus = GPUS if version in ("0.33.0", "0.10.1") else GPUS[::2] if version is not None else GPUS[::4]
    points = grid(MODELS, gpus, tensor_parallel_sizes=(1, 2, 4, 8), kv_cache_dtypes=("auto", "fp8"))
    assert_same(points, version)


def test_unknown_release_on_some_models() -> None:
    gpus = [lookup_gpu(name) for name in ("A10G", "H100-80GB", "MI300X")]
    points = grid(MODELS[::9], gpus, tensor_parallel_sizes=(1, 4), kv_cache_dtypes=("auto", "fp8"))
    assert_same(points, None)


_RELEASES = [None, *(row.since for row in RELEASES), "0.40.0"]


@st.composite
def _gpu(draw: st.DrawFn) -> GpuSpec:
    gpu = draw(st.sampled_from(GPUS))
    if draw(st.booleans()):
        return gpu
    # The same card with another memory: a GPU class shared by several memories, and the batch defaults'
    # memory thresholds crossed.
    memory = draw(st.integers(min_value=4 * GiB, max_value=300 * GiB))
    return gpu.model_copy(update={"memory_bytes": memory})


@st.composite
def _args(draw: st.DrawFn) -> ServingArgs:
    maybe = st.none
    flags: dict[str, Any] = {
        "tensor_parallel_size": draw(st.sampled_from([1, 1, 2, 4, 8])),
        "pipeline_parallel_size": draw(st.sampled_from([1, 1, 1, 2, 3])),
        "kv_cache_dtype": draw(st.sampled_from(["auto", "auto", "fp8", "fp8_e5m2", "bfloat16", "fp8_ds_mla"])),
        "gpu_memory_utilization": draw(maybe() | st.floats(min_value=0.3, max_value=1.0)),
        "max_model_len": draw(maybe() | st.just(-1) | st.integers(min_value=1, max_value=400_000)),
        "max_num_seqs": draw(maybe() | st.integers(min_value=1, max_value=2048)),
        "max_num_batched_tokens": draw(maybe() | st.integers(min_value=64, max_value=65536)),
        "block_size": draw(maybe() | st.sampled_from([16, 32, 64, 128])),
        "enforce_eager": draw(st.booleans()),
        "enable_prefix_caching": draw(maybe() | st.booleans()),
        "enable_chunked_prefill": draw(maybe() | st.just(False)),
        "async_scheduling": draw(maybe() | st.booleans()),
        "disable_hybrid_kv_cache_manager": draw(st.booleans()),
        "data_parallel_size": draw(st.sampled_from([1, 1, 2])),
        "enable_expert_parallel": draw(st.booleans()),
        "quantization": draw(maybe() | st.just("fp8")),
        "cpu_offload_gb": draw(st.sampled_from([0.0, 0.0, 2.5])),
    }
    if draw(st.integers(0, 4)) == 0:
        flags["kv_cache_memory_bytes"] = draw(st.integers(min_value=0, max_value=60 * GiB))
    if draw(st.integers(0, 4)) == 0:
        flags["num_gpu_blocks_override"] = draw(st.integers(min_value=1, max_value=100_000))
    if draw(st.integers(0, 5)) == 0:
        flags["env"] = {"VLLM_USE_V1": draw(st.sampled_from(["0", "1"]))}
    if draw(st.integers(0, 5)) == 0:
        flags["speculative_config"] = '{"method": "ngram", "num_speculative_tokens": 3}'
    return ServingArgs(**flags)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(MODELS),
    gpus=st.lists(_gpu(), min_size=1, max_size=4),
    flags=st.lists(_args(), min_size=1, max_size=2),
    version=st.sampled_from(_RELEASES),
    headroom=st.sampled_from([0.0, 0.1, 0.35]),
)
def test_random_points(
    model: ModelSpec, gpus: list[GpuSpec], flags: list[ServingArgs], version: str | None, headroom: float
) -> None:
    points = [(model, gpu, args) for gpu in gpus for args in flags]
    assert_same(points, version, headroom)


def test_without_the_band_the_figures_are_the_same_and_no_limits_are_recommended() -> None:
    gpus = [lookup_gpu(name) for name in ("L4", "H100-80GB")]
    points = grid(MODELS[::5], gpus, tensor_parallel_sizes=(1, 2))
    banded = sweep_plans(points, vllm_version="0.33.0")
    bare = sweep_plans(points, vllm_version="0.33.0", with_margin=False)
    for a, b in zip(banded, bare, strict=True):
        same = ("error", "fits", "num_gpu_blocks", "kv_cache_bytes", "estimated_max_model_len")
        assert [getattr(a, name) for name in same] == [getattr(b, name) for name in same]
        assert b.band_low_bytes is None and b.recommended_max_model_len is None


def test_headroom_out_of_range_is_refused_as_make_plan_refuses_it() -> None:
    with pytest.raises(KvPlannerError, match="headroom"):
        sweep_plans([], headroom=1.0)


def _reference_rows(models: list[ModelSpec], gpu: GpuSpec, args: ServingArgs, version: str | None) -> list[Any]:
    """The catalog table as it was computed before the batched sweep: one plan per model."""
    from planner.plan.build import plan_without_recommendation
    from planner.plan.fleet import FleetRow, first_sentence
    from planner.plan.recommend import safe_max_num_seqs

    rows = []
    for model in models:
        try:
            plan, _ = plan_without_recommendation(model, gpu, args, vllm_version=version, with_margin=False)
        except KvPlannerError as error:
            rows.append(
                FleetRow(
                    id=model.id,
                    fits=False,
                    max_model_len=None,
                    max_concurrency_4096=None,
                    max_concurrency_32768=None,
                    max_concurrency_max=None,
                    note=str(error).splitlines()[0],
                )
            )
            continue
        kv = plan.kv_cache
        usable = kv.num_gpu_blocks > 0 and plan.memory.kv_cache_bytes > 0
        longest = kv.max_model_len if plan.fits else kv.estimated_max_model_len
        limit = max(plan.model.derived_max_model_len, kv.max_model_len)

        def at(length: int, kv: Any = kv, usable: bool = usable, longest: int = longest, limit: int = limit) -> Any:
            if not usable or length > limit or length > longest:
                return None
            per_request = kv.blocks_for_sequence(length)
            return round(kv.num_gpu_blocks / per_request, 2) if per_request else 0.0

        def safe_at(length: int, plan: Any = plan, at: Any = at) -> Any:
            return None if at(length) is None else safe_max_num_seqs(plan, length, 0.1)

        rows.append(
            FleetRow(
                id=model.id,
                fits=plan.fits,
                max_model_len=longest if usable and longest else None,
                max_concurrency_4096=at(4096),
                max_concurrency_32768=at(32768),
                max_concurrency_max=at(longest) if usable and longest else None,
                max_num_seqs_4096=safe_at(4096),
                max_num_seqs_32768=safe_at(32768),
                max_num_seqs_max=safe_at(longest) if usable and longest else None,
                weights_bytes=plan.memory.weights_bytes,
                kv_cache_bytes=plan.memory.kv_cache_bytes,
                note=None if plan.fits else first_sentence(plan.fit_error or ""),
            )
        )
    return rows


@pytest.mark.parametrize("version", ["0.33.0", "0.10.1", None])
@pytest.mark.parametrize("gpu_name", ["T4", "L4", "A100-80GB", "H100-80GB", "MI300X"])
def test_the_catalog_table_is_the_per_model_plans(gpu_name: str, version: str | None) -> None:
    from planner.plan.fleet import fleet_rows

    gpu = lookup_gpu(gpu_name)
    for args in (ServingArgs(), ServingArgs(kv_cache_dtype="fp8", tensor_parallel_size=2)):
        got = [row.model_dump() for row in fleet_rows(MODELS, gpu, args, vllm_version=version)]
        assert got == [row.model_dump() for row in _reference_rows(MODELS, gpu, args, version)]


def _bigger(gpu: GpuSpec) -> list[GpuSpec]:
    """What ``planner recommend`` offers as bigger GPUs (planner/cli/recommend.py: _bigger_gpus)."""
    return sorted(
        (g for g in GPUS if g.vendor == gpu.vendor and g.memory_bytes > gpu.memory_bytes), key=lambda g: g.memory_bytes
    )


def _assert_bigger_gpu_search_is_the_loop(
    monkeypatch: pytest.MonkeyPatch,
    models: list[ModelSpec],
    gpus: list[str],
    flags: list[ServingArgs],
    versions: list[str | None],
) -> None:
    import planner.plan as plan_module

    loop = plan_module.alternatives

    def one_by_one(*args: Any, first_fitting: Any = None, **kwargs: Any) -> Any:
        return loop(*args, **kwargs)

    for name in gpus:
        gpu = lookup_gpu(name)
        for model in models:
            for args in flags:
                for version in versions:
                    try:
                        batched = make_plan(model, gpu, args, vllm_version=version, bigger_gpus=_bigger(gpu))
                    except KvPlannerError:
                        continue
                    with monkeypatch.context() as patch:
                        patch.setattr(plan_module, "alternatives", one_by_one)
                        looped = make_plan(model, gpu, args, vllm_version=version, bigger_gpus=_bigger(gpu))
                    assert batched.model_dump() == looped.model_dump(), (model.id, name, args, version)


def test_the_bigger_gpu_search_offers_what_the_loop_offers(monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_bigger_gpu_search_is_the_loop(monkeypatch, MODELS[::4], ["T4", "L4"], [ServingArgs()], ["0.33.0", None])


@pytest.mark.slow
def test_the_bigger_gpu_search_on_every_model(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = [ServingArgs(), ServingArgs(kv_cache_dtype="fp8", tensor_parallel_size=2), ServingArgs(max_model_len=-1)]
    _assert_bigger_gpu_search_is_the_loop(
        monkeypatch, MODELS, ["T4", "L4", "MI250X"], flags, ["0.33.0", "0.10.1", None]
    )


def test_gpus_of_one_class_differ_only_in_memory() -> None:
    """The sweep plans a GPU class with its first member. A card that differs in any other field the class
    key leaves out (name, compute capability, bandwidth, fp8 flag, NVLink, form factor) must plan alike:
    this fails when the engine starts reading such a field."""
    variants = []
    for name in ("A100-80GB", "H100-80GB", "L4", "T4", "MI300X"):
        gpu = lookup_gpu(name)
        variants += [
            gpu,
            gpu.model_copy(update={"name": f"{name}-X", "aliases": [], "bandwidth_bytes_per_s": 1}),
            gpu.model_copy(update={"compute_capability": "1.0", "fp8": not gpu.fp8, "nvlink": not gpu.nvlink}),
            gpu.model_copy(update={"form_factor": "other", "memory_bytes": gpu.memory_bytes - 3 * GiB}),
        ]
    for version in ("0.33.0", "0.10.1", None):
        points = [(model, gpu, ServingArgs()) for model in MODELS[::6] for gpu in variants]
        assert_same(points, version)
