"""Batched planning (planner/plan/sweep.py, planner/plan/vectorized.py) gives every point the figures of
its own ``make_plan`` (no alternatives), field by field: on the catalog grid (every model x GPUs x TP x
KV dtype x releases, unknown included), on named points for each plan term added after the sweep was
written (MXFP4, vision encoder, NCCL at init, cold compile, Model Runner V2, packed KV groups) and on
random points with the other flags drawn too."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import KvPlannerError
from planner.gpus.catalog import lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS
from planner.models.spec import ModelSpec
from planner.plan import make_plan
from planner.plan.sweep import PointPlan, grid, sweep_plans, sweep_table
from planner.plan.vectorized import SweepTable
from planner.vllm.args import ServingArgs
from planner.vllm.releases import RELEASES
from tests.core.sweep_grid import GPUS, MODELS

GiB = 1 << 30

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
        flags["speculative_config"] = '{"method": "ngram", "num_speculative_tokens": 3}'
    # The terms planned since the sweep was written: CUDA-graph capture flags, Model Runner V2 and its
    # sampler, a cold compile, NCCL at init, the MXFP4 kernel, the vision encoder's profile.
    names = draw(st.sets(st.sampled_from(sorted(_ENV)), max_size=3))
    flags["env"] = {name: draw(st.sampled_from(_ENV[name])) for name in sorted(names)}
    flags["performance_mode"] = draw(maybe() | st.sampled_from(["interactivity", "throughput"]))
    flags["max_cudagraph_capture_size"] = draw(maybe() | maybe() | st.sampled_from([8, 64, 300, 1024]))
    flags["nnodes"] = draw(st.sampled_from([1, 1, 1, 2]))
    flags["moe_backend"] = draw(maybe() | st.sampled_from(["auto", "triton", "marlin", "flashinfer_cutlass"]))
    flags["mxfp4_backend"] = draw(maybe() | maybe() | st.sampled_from(["marlin", "triton", "exact"]))
    flags["mm_encoder_tp_mode"] = draw(maybe() | st.just("data"))
    flags["limit_mm_per_prompt"] = draw(maybe() | maybe() | st.sampled_from(['{"image": 0}', '{"image": 2}']))
    flags["language_model_only"] = draw(st.integers(0, 5)) == 0
    flags["skip_mm_profiling"] = draw(st.integers(0, 5)) == 0
    flags["mamba_ssm_cache_dtype"] = draw(st.sampled_from(["auto", "auto", "float32", "bfloat16"]))
    return ServingArgs(**flags)


_ENV = {
    "VLLM_USE_V1": ["0", "1"],
    "VLLM_USE_V2_MODEL_RUNNER": ["0", "1"],
    "VLLM_USE_STANDALONE_COMPILE": ["0", "1"],
    "VLLM_USE_FLASHINFER_SAMPLER": ["0", "1"],
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": ["0"],
    "NCCL_P2P_DISABLE": ["1"],
}
# Models whose plans hold the terms planned since the sweep was written, drawn as often as the catalog:
# MXFP4 (gpt-oss), vision encoders, packed KV groups (DeepSeek-V4), Kimi delta attention, Mamba hybrids.
_NEW_TERMS = [
    m
    for m in MODELS
    if (m.quantization is not None and m.quantization.method == "mxfp4")
    or m.vision is not None
    or m.compressed_attention is not None
    or (m.mamba is not None and m.mamba.kind == "kda")
    or "M" in m.layer_pattern
]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(MODELS) | st.sampled_from(_NEW_TERMS),
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
    """The catalog table from one make_plan per model and length: vLLM's figures of the plan at the context
    planned, the limits of ``make_plan`` with ``--max-model-len`` 4096 / 32768 / as given (each settled with
    its own flags, at the low end of its own band)."""
    from planner.plan.fleet import FleetRow, first_sentence

    def limits(flags: ServingArgs) -> Any:
        try:
            return make_plan(model, gpu, flags, vllm_version=version, with_alternatives=False).recommendation
        except KvPlannerError:
            return None

    rows = []
    for model in models:
        try:
            plan = make_plan(model, gpu, args, vllm_version=version, with_alternatives=False)
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

        def safe_at(length: int, limit: int = limit) -> Any:
            if length > limit:
                return None
            rec = limits(args.model_copy(update={"max_model_len": length}))
            return rec.max_num_seqs if rec is not None and rec.max_model_len == length else None

        rec = plan.recommendation
        rows.append(
            FleetRow(
                id=model.id,
                fits=plan.fits,
                max_model_len=rec.max_model_len if rec else None,
                max_concurrency_4096=at(4096),
                max_concurrency_32768=at(32768),
                max_concurrency_max=at(longest) if usable and longest else None,
                max_num_seqs_4096=safe_at(4096),
                max_num_seqs_32768=safe_at(32768),
                max_num_seqs_max=rec.max_num_seqs if rec else None,
                fits_low=plan.fits and rec is not None and rec.max_model_len == kv.max_model_len,
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
    # (an unknown release plans every checked release for every limit: a stride of the catalog)
    models = MODELS if version is not None else MODELS[::5]
    for args in (ServingArgs(), ServingArgs(kv_cache_dtype="fp8", tensor_parallel_size=2)):
        got = [row.model_dump() for row in fleet_rows(models, gpu, args, vllm_version=version)]
        assert got == [row.model_dump() for row in _reference_rows(models, gpu, args, version)]


def _bigger(gpu: GpuSpec) -> list[GpuSpec]:
    """What ``planner recommend`` offers as bigger GPUs (planner/cli/recommend.py: _bigger_gpus)."""
    return sorted(
        (g for g in GPUS if g.vendor == gpu.vendor and g.memory_bytes > gpu.memory_bytes), key=lambda g: g.memory_bytes
    )


def assert_bigger_gpu_search_is_the_loop(
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
    assert_bigger_gpu_search_is_the_loop(monkeypatch, MODELS[::4], ["T4", "L4"], [ServingArgs()], ["0.33.0", None])


def test_gpus_of_one_class_differ_only_in_memory() -> None:
    """The sweep plans a GPU class with its first member. A card that differs in a field the class key
    leaves out (name, bandwidth, form factor, memory) must plan alike, and one that differs in a field the
    key holds (compute capability, fp8 flag, NVLink) gets its own template: this fails when the engine
    starts reading a field the key leaves out."""
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


def _models(*ids: str) -> list[ModelSpec]:
    by_id = {m.id: m for m in MODELS}
    return [by_id[i] for i in ids]


def _gpus(*names: str) -> list[GpuSpec]:
    return [lookup_gpu(name) for name in names]


# The plan terms added after the sweep was written, each on the points that have it (every point also
# through sweep_table; the GPUs of a class differ in memory and, here, in compute capability).
_TERM_CASES: dict[str, tuple[list[str], list[str], list[ServingArgs], list[str | None]]] = {
    # MXFP4 per-kernel weights and the kernel spread (up to 0.11 the kernel depends on the install).
    "mxfp4": (
        ["openai/gpt-oss-20b", "openai/gpt-oss-120b"],
        ["A100-80GB", "A30", "A10", "H100-80GB", "H100-PCIe-80GB", "B200", "B300", "L40S"],
        [
            ServingArgs(),
            ServingArgs(tensor_parallel_size=2),
            ServingArgs(tensor_parallel_size=4, enable_expert_parallel=True),
            ServingArgs(mxfp4_backend="marlin"),
            ServingArgs(moe_backend="triton"),
        ],
        ["0.10.1", "0.11.0", "0.20.0", "0.24.0", "0.33.0"],
    ),
    # The vision encoder's profile run, its band term, encoder data parallel (0.11's towers) and MRV2.
    "vision": (
        [
            "Qwen/Qwen3-VL-8B-Instruct",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "google/gemma-3-12b-it",
            "llava-hf/llava-v1.6-mistral-7b-hf",
            "Qwen/Qwen3.5-27B",
            "google/gemma-4-31B-it",  # an estimated encoder profile (KVP131): the vision_encoder band term
        ],
        ["L4", "A100-80GB", "H100-80GB", "MI300X"],
        [
            ServingArgs(),
            ServingArgs(tensor_parallel_size=2, mm_encoder_tp_mode="data"),
            ServingArgs(limit_mm_per_prompt='{"image": 0}'),
            ServingArgs(skip_mm_profiling=True, max_num_seqs=64),
        ],
        ["0.10.1", "0.11.0", "0.26.0", "0.27.0", "0.33.0"],
    ),
    # NCCL's channel buffers at TP communicator creation (up to 0.10.1.1; not on NVSwitch, not without P2P).
    "nccl_at_init": (
        ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B"],
        ["A100-80GB", "A100-40GB", "L40S", "H100-80GB", "H100-PCIe-80GB"],
        [
            ServingArgs(tensor_parallel_size=2),
            ServingArgs(tensor_parallel_size=4),
            ServingArgs(tensor_parallel_size=2, env={"NCCL_P2P_DISABLE": "1"}),
            ServingArgs(tensor_parallel_size=2, pipeline_parallel_size=2),
        ],
        ["0.7.2", "0.8.0", "0.10.1.1", "0.10.2"],
    ),
    # A cold compile's embedding copy (the compile_cache term) and Model Runner V2 with its sampler.
    "cold_compile_runner_v2": (
        ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B", "google/gemma-3-4b-it"],
        ["L4", "A100-80GB", "H100-80GB", "B200"],
        [
            ServingArgs(),
            ServingArgs(enforce_eager=True),
            ServingArgs(env={"VLLM_USE_STANDALONE_COMPILE": "0"}),
            ServingArgs(env={"VLLM_USE_V2_MODEL_RUNNER": "1"}),
            ServingArgs(env={"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}),
            ServingArgs(pipeline_parallel_size=2, env={"VLLM_USE_V2_MODEL_RUNNER": "1"}),
            ServingArgs(performance_mode="interactivity", max_cudagraph_capture_size=64),
        ],
        ["0.20.0", "0.26.0", "0.27.0", "0.29.0", "0.31.0", "0.33.0"],
    ),
    # Packed KV groups (DeepSeek-V4, 0.29+) and a hybrid whose block follows the Mamba state (Kimi-Linear).
    "packed_groups": (
        [
            "deepseek-ai/DeepSeek-V4-Flash",
            "moonshotai/Kimi-Linear-48B-A3B-Instruct",
            "Qwen/Qwen3-Next-80B-A3B-Instruct",
        ],
        ["H100-80GB", "H200-141GB", "B200", "A100-80GB"],
        [
            ServingArgs(tensor_parallel_size=4, kv_cache_dtype="fp8"),
            ServingArgs(tensor_parallel_size=8, kv_cache_dtype="fp8", max_model_len=-1),
            ServingArgs(tensor_parallel_size=4, max_model_len=32768),
            ServingArgs(tensor_parallel_size=4, pipeline_parallel_size=2, mamba_ssm_cache_dtype="bfloat16"),
        ],
        ["0.28.0", "0.29.0", "0.32.0", "0.33.0"],
    ),
}


@pytest.mark.parametrize("case", sorted(_TERM_CASES))
def test_the_terms_planned_since_the_sweep_was_written(case: str) -> None:
    ids, gpu_names, flags, versions = _TERM_CASES[case]
    models, gpus = _models(*ids), _gpus(*gpu_names)
    for version in versions:
        assert_same([(model, gpu, args) for model in models for gpu in gpus for args in flags], version)


@pytest.mark.parametrize("case", sorted(_TERM_CASES))
def test_the_terms_planned_since_the_sweep_was_written_with_an_unknown_release(case: str) -> None:
    ids, gpu_names, flags, _ = _TERM_CASES[case]
    assert_same(
        [(model, gpu, args) for model in _models(*ids) for gpu in _gpus(*gpu_names[:2]) for args in flags[:2]], None
    )


def test_the_cases_hold_the_terms_they_name() -> None:
    """Each case above plans its term somewhere (else it would check nothing new)."""
    from planner.plan.build import predict

    def engines(case: str) -> list[Any]:
        ids, gpu_names, flags, versions = _TERM_CASES[case]
        found = []
        for model in _models(*ids):
            for gpu in _gpus(*gpu_names):
                for args in flags:
                    for version in versions:
                        try:
                            found.append(predict(model, gpu, args, vllm_version=version).engine)
                        except KvPlannerError:
                            continue
        return found

    assert any(e.mxfp4 is not None and e.mxfp4_spread_bytes > 0 for e in engines("mxfp4"))
    vision = engines("vision")
    assert any(e.encoder is not None for e in vision) and any(e.encoder_band_bytes > 0 for e in vision)
    assert any(e.nccl_at_init_bytes > 0 for e in engines("nccl_at_init"))
    compiled = engines("cold_compile_runner_v2")
    assert any(e.cold_compile_bytes > 0 for e in compiled) and any(e.model_runner_v2 for e in compiled)
    assert any(e.grouping.packed for e in engines("packed_groups"))


def test_releases_planned_once_for_an_unknown_release_compute_alike() -> None:
    """release_fixed_bytes plans rows that differ only in their number once: each row planned on its own
    gives the same list, on flags whose terms compare the release number (encoder data parallel,
    Kimi-Linear's --mamba-ssm-cache-dtype, the YaRN rules, a drafter)."""
    from planner.plan.build import _engine_stage, release_fixed_bytes

    checked = _models(
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
        "openai/gpt-oss-20b",
        "deepseek-ai/DeepSeek-V4-Flash",
    )
    flags = [
        ServingArgs(),
        ServingArgs(tensor_parallel_size=2, mm_encoder_tp_mode="data"),
        ServingArgs(tensor_parallel_size=4, mamba_ssm_cache_dtype="bfloat16"),
        ServingArgs(tensor_parallel_size=8, kv_cache_dtype="fp8"),
        ServingArgs(speculative_config='{"method": "ngram", "num_speculative_tokens": 3}'),
    ]
    gpu = lookup_gpu("H100-80GB")
    for model in checked:
        for args in flags:
            one_by_one = []
            for row in RELEASES:  # (V0 rows too: an unknown release's spread holds every checked release)
                try:
                    _, release, *_, engine = _engine_stage(
                        model,
                        gpu,
                        args,
                        vllm_version=row.since,
                        coefficients=DEFAULT_COEFFICIENTS,
                        corrections=None,
                        draft=None,
                    )
                except KvPlannerError:
                    continue
                one_by_one.append(
                    (release.budget_ceil, max(stage.budget_bytes - stage.kv_bytes for stage in engine.memory))
                )
            utilization = args.gpu_memory_utilization or 0.9
            pinned = args.model_copy(update={"gpu_memory_utilization": utilization})
            got = release_fixed_bytes(
                model, gpu, pinned, utilization, coefficients=DEFAULT_COEFFICIENTS, corrections=None
            )
            assert got == one_by_one, (model.id, args)
