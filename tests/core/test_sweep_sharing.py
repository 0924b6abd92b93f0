"""What the batched sweep shares between points stays exact and leaves nothing behind: engine stages shared
through planner/plan/engine.py ``EngineMemo`` (flags that differ only in the limits, on any GPUs whose values
the engine reads agree) are the stages planned alone; a sweep leaves no reference cycle for the collector;
the collector is as it was after a sweep; the resumable search the batched sweep drives (recommend.run_steps)
ends only when it ends."""

from __future__ import annotations

import dataclasses
import gc
import itertools

import pytest

import planner.plan.build as build_module
import planner.plan.sweep as sweep_module
from planner.errors import KvPlannerError
from planner.gpus.catalog import lookup_gpu
from planner.gpus.spec import GpuSpec
from planner.memory.coefficients import DEFAULT_COEFFICIENTS
from planner.models.spec import ModelSpec
from planner.plan.build import _engine_stage
from planner.plan.engine import EngineLayout, EngineMemo
from planner.plan.sweep import collector_paused, grid, sweep_plans, sweep_table
from planner.vllm.args import ServingArgs
from planner.vllm.defaults import ResolvedArgs, resolve_args
from planner.vllm.releases import Release
from tests.core.sweep_grid import MODELS

# A text model, a vision model (its encoder profile reads the context and the GPU's ViT backend), MXFP4 MoE
# (its kernel and padding read the compute capability), packed KV groups (refused off SM90/SM100), recurrent
# states (gated delta net's blocks read the architecture), and a model whose TP 3 is refused.
_SHARED_MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-VL-7B-Instruct",
    "openai/gpt-oss-20b",
    "deepseek-ai/DeepSeek-V4-Flash",
    "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    "Qwen/Qwen3.5-4B",
)
# GPUs with one base key and different memory (and batch defaults), and GPUs of every other value the engine
# reads: no bfloat16 nor FP8 (T4), no FP8 (A100), SM 8.9 (L4), NVSwitch multicast (H100, B200), the SM10x
# capture ceiling (B200), SM 12.0 (RTX PRO 6000), no CUDA capability (MI300X).
_GPUS = (
    "H100-80GB",
    "H100-NVL-94GB",
    "H200-141GB",
    "A100-40GB",
    "A100-80GB",
    "L4",
    "B200",
    "T4",
    "RTX-PRO-6000",
    "MI300X",
)


def _model(model_id: str) -> ModelSpec:
    return next(m for m in MODELS if m.id == model_id)


def _comparable(engine: EngineLayout) -> EngineLayout:
    # A shared stage keeps the budget of the GPU it was first planned on: every other figure is the GPU's own.
    return dataclasses.replace(engine, memory=[dataclasses.replace(s, budget_bytes=0) for s in engine.memory])


_ROOTS = {
    "defaults": ServingArgs(),
    "tp2-fp8": ServingArgs(tensor_parallel_size=2, kv_cache_dtype="fp8"),
    "ngram-eager": ServingArgs(
        speculative_config='{"method": "ngram", "num_speculative_tokens": 3}', enforce_eager=True
    ),
}
# DeepSeek-V4 with a drafter is refused (not modelled): its refusals are compared by the other cases.
_CASES = [
    (model_id, name)
    for model_id in _SHARED_MODELS
    for name in _ROOTS
    if not (model_id == "deepseek-ai/DeepSeek-V4-Flash" and name == "ngram-eager")
]


@pytest.mark.parametrize(("model_id", "root_name"), _CASES)
def test_shared_engine_stages_are_the_stages_planned_alone(model_id: str, root_name: str) -> None:
    model, root = _model(model_id), _ROOTS[root_name]
    memo = EngineMemo()  # the sweep's: one per model and flags, whatever the GPU
    limits = itertools.product((None, 2048, 8192), (None, 1, 8, 96, 512))
    checked = 0
    for (max_len, seqs), gpu_name in itertools.product(limits, _GPUS):
        gpu = lookup_gpu(gpu_name)
        flags = root.model_copy(update={"max_model_len": max_len, "max_num_seqs": seqs})
        common = dict(vllm_version="0.33.0", coefficients=DEFAULT_COEFFICIENTS, corrections=None, draft=None)
        try:
            alone = _engine_stage(model, gpu, flags, **common)  # type: ignore[arg-type]
        except KvPlannerError as error:
            with pytest.raises(type(error)):
                _engine_stage(model, gpu, flags, memo=memo, **common)  # type: ignore[arg-type]
            continue
        shared = _engine_stage(model, gpu, flags, memo=memo, **common)  # type: ignore[arg-type]
        assert shared[:6] == alone[:6]
        assert _comparable(shared[6]) == _comparable(alone[6]), (model_id, gpu_name, max_len, seqs)
        checked += 1
    assert checked >= len(_GPUS)  # the flags are planned, not refused everywhere
    assert len(memo.bases) < checked  # something was shared


def test_gpus_of_other_fields_share_the_engine_where_its_values_agree() -> None:
    """A Llama's engine reads the compute capability only through values that are alike on an A100 (8.0) and
    an A10 (8.6): one base and one engine serve both, and it is the engine planned on the A10 alone."""
    from planner.plan.engine import compute_engine
    from planner.vllm.releases import resolve_release

    model, args = _model("meta-llama/Llama-3.1-8B-Instruct"), ServingArgs()
    version, release, _ = resolve_release("0.33.0")
    memo = EngineMemo()
    engines = []
    for name in ("A100-80GB", "A10"):
        gpu = lookup_gpu(name)
        resolved = resolve_args(args, model, gpu, release, 8192)
        engines.append(
            memo.engine(model, gpu, args, release, resolved, coefficients=DEFAULT_COEFFICIENTS, version=version)
        )
    alone = compute_engine(model, gpu, args, release, resolved, coefficients=DEFAULT_COEFFICIENTS, version=version)
    assert engines[0] is engines[1]
    assert len(memo.bases) == 1
    assert _comparable(engines[1]) == _comparable(alone)
    # Where a value differs (native FP8 on an L4), the base is the L4's own.
    l4 = lookup_gpu("L4")
    memo.engine(
        model,
        l4,
        args,
        release,
        resolve_args(args, model, l4, release, 8192),
        coefficients=DEFAULT_COEFFICIENTS,
        version=version,
    )
    assert len(memo.bases) == 2


def test_a_sweep_resolves_each_replans_flags_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search asks whether a recommended limit resolves to the flags already planned (``same_run``), then
    replans the ones that do not (``limited_stage``): both read the sweeper's memo of resolve_args
    (planner/plan/sweep.py ``resolved_args``), so no (flags, model, GPU, release, context) is resolved twice."""
    calls: list[tuple[int, ...]] = []

    def counted(args: ServingArgs, model: ModelSpec, gpu: GpuSpec, release: Release, max_len: int) -> ResolvedArgs:
        calls.append((id(args), id(model), id(gpu), id(release), max_len))
        return resolve_args(args, model, gpu, release, max_len)

    monkeypatch.setattr(sweep_module, "resolve_args", counted)
    monkeypatch.setattr(build_module, "resolve_args", counted)
    models = [_model(model_id) for model_id in _SHARED_MODELS[:3]]
    points = grid(models, [lookup_gpu(name) for name in _GPUS], tensor_parallel_sizes=(1, 2))
    table = sweep_table(points, vllm_version="0.33.0")
    assert int((table["recommended_max_num_seqs"] > 0).sum()) > len(points) // 2  # the search replanned
    assert len(calls) > len(points)
    assert len(set(calls)) == len(calls)


def test_a_sweep_leaves_no_reference_cycle() -> None:
    """Everything a sweep allocates is freed when its result is: a refusal kept with its traceback held the
    sweeper (a frame's ``self``), so every template waited for a full collection; so did a refusal raised
    while handling another exception (its ``__context__``: a malformed --speculative-config or
    --limit-mm-per-prompt)."""
    models = [_model("meta-llama/Llama-3.1-8B-Instruct"), _model("Qwen/Qwen2.5-VL-7B-Instruct")]
    gpus = [lookup_gpu("L4"), lookup_gpu("H100-80GB")]
    points = grid(models, gpus, tensor_parallel_sizes=(1, 3))
    points += grid(models, gpus, args=ServingArgs(speculative_config="{oops"))
    points += grid(models[1:], gpus, args=ServingArgs(limit_mm_per_prompt="image"))
    sweep_table(points[:1], vllm_version="0.33.0")  # numpy imported, module memos filled
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        table = sweep_table(points, vllm_version="0.33.0")
        plans = sweep_plans(points, vllm_version="0.33.0")
        refused = [error for error in table.errors if error is not None]
        assert len(refused) >= len(gpus) * 5  # TP 3 on both models, both malformed flags: the cases at stake
        assert any(p.recommended_max_num_seqs for p in plans)
        del table, plans
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()


def test_a_sweep_frees_what_it_allocated_before_the_collector_is_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """sweep_table frees the sweeper it swept with (its templates, engine stages and memos) by reference counts,
    while the collector is still off: the table plans a point with a sweeper of its own. Kept by the table, they
    were all young when the collector came back on, and its first pass walked every one of them (~5% of a
    catalog sweep's time)."""
    import weakref

    import planner.plan.vectorized as vectorized_module

    swept: list[weakref.ref[object]] = []
    evaluate = vectorized_module.evaluate

    def watched(sweeper: sweep_module._Sweeper, points: list[sweep_module.Point]) -> vectorized_module.SweepTable:
        swept.append(weakref.ref(sweeper))
        return evaluate(sweeper, points)

    monkeypatch.setattr(vectorized_module, "evaluate", watched)
    models = [_model("meta-llama/Llama-3.1-8B-Instruct"), _model("Qwen/Qwen2.5-VL-7B-Instruct")]
    points = grid(models, [lookup_gpu(name) for name in _GPUS], tensor_parallel_sizes=(1, 2))
    was = gc.isenabled()
    gc.disable()  # whatever is freed below is freed by its reference count
    try:
        table = sweep_table(points, vllm_version="0.33.0")
        assert len(swept) == 1 and swept[0]() is None
    finally:
        if was:
            gc.enable()
    assert int(table["has_recommendation"].sum()) > len(points) // 2  # the search replanned
    assert table.point(0).num_gpu_blocks == table["num_gpu_blocks"][0]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_as_it_was_after_a_sweep(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), collector_paused():
            raise RuntimeError("a sweep that fails")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_overlapping_sweeps_keep_the_collector_off_until_the_last_ends() -> None:
    """Two sweeps in two threads: the first to end leaves the collector off for the other."""
    was = gc.isenabled()
    gc.enable()
    try:
        first, second = collector_paused(), collector_paused()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert not gc.isenabled()
        second.__exit__(None, None, None)
        assert gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()


def test_a_memo_plans_another_release_unshared() -> None:
    """An EngineMemo serves the release of its first use; asked for another, it plans that one on its own."""
    from planner.plan.engine import compute_engine
    from planner.vllm.defaults import resolve_args
    from planner.vllm.releases import resolve_release

    model, gpu, args = _model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100-80GB"), ServingArgs()
    memo = EngineMemo()
    for since in ("0.33.0", "0.10.1"):
        version, release, _ = resolve_release(since)
        resolved = resolve_args(args, model, gpu, release, 8192)
        got = memo.engine(model, gpu, args, release, resolved, coefficients=DEFAULT_COEFFICIENTS, version=version)
        alone = compute_engine(model, gpu, args, release, resolved, coefficients=DEFAULT_COEFFICIENTS, version=version)
        assert got == alone, since
    assert len(memo.bases) == 1


def test_a_replan_that_raises_stop_iteration_is_not_the_search_ending() -> None:
    from planner.plan.recommend import run_steps

    def search():  # type: ignore[no-untyped-def]
        answer = yield (8192, None, "first")
        return ("settled", answer)

    def broken_replan(max_len: int, seqs: int | None, base: object) -> object:
        raise StopIteration  # e.g. next() on an exhausted iterator, deep in a replan

    assert run_steps(search(), lambda *request: "plan") == ("settled", "plan")
    with pytest.raises(StopIteration):
        run_steps(search(), broken_replan)
