"""Batched planning: many (model, GPU, flags) points at once, each with the figures its ``make_plan`` gives.

from planner.plan.sweep import grid, sweep_plans, sweep_table
points = grid(models, gpus, tensor_parallel_sizes=(1, 2, 4, 8), kv_cache_dtypes=("auto", "fp8"))
plans = sweep_plans(points, vllm_version="0.33.0")      # one PointPlan per point, plain Python
[(p.gpu.name, p.args.tensor_parallel_size, p.num_gpu_blocks, p.recommended_max_num_seqs) for p in plans if p.fits]
table = sweep_table(points, vllm_version="0.33.0")      # the same figures as numpy columns (large sweeps)
table["num_gpu_blocks"], table["recommended_max_num_seqs"], table.errors

Most of what one plan costs does not depend on the GPU's memory: vLLM's defaults, the KV specs and their
grouping, the weights, activation peak (vision encoder and cold compile included), CUDA graphs and
non-torch memory (NCCL at init included). Those read the GPU only through its vendor, architecture, compute
capability, NVSwitch multicast and the batch defaults its memory gets (every ``GpuSpec`` field the engine
stage reads besides ``memory_bytes``: planner/vllm/defaults.py, planner/plan/engine.py,
planner/plan/multimodal.py, planner/memory). So the sweep runs the engine stage once per (model, flags,
GPU class) — a template, with the class's first GPU — and each point adds only what its memory changes:
the budget, the KV layout of what is left, vLLM's fit check, capacity, the KV band and the recommended
limits, through the functions ``make_plan`` uses, without building the pydantic reports. The spread of an
unknown release is likewise one engine stage per checked release and template, not per point.

The recommended limits are planned again with their own flags (recommend.settle), which makes most points
ask for one or two more engine stages: flags that differ from planned ones only in ``--max-model-len`` /
``--max-num-seqs``. Those read the limits only through vLLM's resolved batch sizes and context, so they
share the planned flags' engine base (planner/plan/engine.py ``EngineMemo``: KV specs, grouping, weights,
drafter), and so do GPUs of any class whose values the engine reads agree (``BaseGpu``, ``BatchGpu``: a
Llama's engine is the same on an A100 and an A10); only the batch part (activation peak, CUDA graphs, encoder
profile) is planned for each. The collector is paused for a sweep (:func:`collector_paused`).

A point's figures are those of ``make_plan(model, gpu, args, vllm_version=..., headroom=...,
with_alternatives=False)`` (tests/core/test_sweep.py checks every field on a broad grid): a deployment
that does not fit gets no alternatives here (they are other deployments: plan one point with
``make_plan`` for them). Measurement corrections and resolved draft models (``make_plan(draft=...)``) are not batched.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.errors import KvPlannerError
from planner.gpus.spec import GpuSpec
from planner.kv.capacity import KvLayout, capacity
from planner.kv.grouping import Grouping
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.spec import ModelSpec
from planner.plan.build import (
    FitFailure,
    _engine_stage,
    band_low_end,
    fit_error_message,
    given_kv_overflows,
    limited_stage,
    release_fixed_bytes,
    spread_from_fixed,
    startup_fit,
)
from planner.plan.engine import EngineLayout, EngineMemo, gpu_base_key, kv_layout, memory_budget
from planner.plan.margin import activation_kind, band_terms
from planner.plan.recommend import (
    Replan,
    alternative_context,
    check_headroom,
    nominal_context,
    safe_context,
    seqs_cap,
    settle,
)
from planner.units import cdiv
from planner.vllm.args import ServingArgs
from planner.vllm.checks import derived_length
from planner.vllm.defaults import ResolvedArgs, batch_defaults, resolve_args
from planner.vllm.releases import RELEASES, Release, Version, resolve_release

if TYPE_CHECKING:
    from planner.plan.vectorized import SweepTable, _Shape

__all__ = ["PointPlan", "first_fitting_gpu", "grid", "sweep_plans", "sweep_table"]


@dataclass(slots=True)
class PointPlan:
    """One point's figures, named as in the Plan (memory figures per GPU, of the limiting rank).

    ``error`` is set when vLLM refuses the flags before sizing anything (``make_plan`` raises then); the
    figures are 0 / False. ``recommended_*`` are None when nothing fits at the low end of the band (and
    always without the band, ``with_margin=False``)."""

    model: ModelSpec
    gpu: GpuSpec
    args: ServingArgs
    error: str | None = None
    vllm_version: str = ""
    fits: bool = False
    gpu_memory_utilization: float = 0.0
    budget_bytes: int = 0
    weights_bytes: int = 0
    activation_peak_bytes: int = 0
    non_torch_bytes: int = 0
    cuda_graph_bytes: int = 0
    cuda_graph_counted: bool = False
    kv_cache_bytes: int = 0
    kv_cache_dtype: str = ""
    block_size: int = 0
    bytes_per_block: int = 0
    num_gpu_blocks: int = 0
    tokens: int = 0
    max_concurrency: float = 0.0
    max_model_len: int = 0
    blocks_per_request: int = 0
    estimated_max_model_len: int = 0
    derived_max_model_len: int = 0
    band_low_bytes: int | None = None
    band_high_bytes: int | None = None
    num_gpu_blocks_low: int | None = None
    max_model_len_fits_low: bool | None = None
    estimated_max_model_len_low: int | None = None
    version_spread_bytes: int | None = None
    recommended_max_model_len: int | None = None
    recommended_max_num_seqs: int | None = None
    # Internal: what fit_error and sequence_blocks need, and the context the band calls safe.
    _template: _Template | None = field(default=None, repr=False)
    _layout: KvLayout | None = field(default=None, repr=False)
    _given_over: bool = field(default=False, repr=False)
    _failure: FitFailure = field(default="", repr=False)
    _safe_len: int | None = field(default=None, repr=False)
    _safe_blocks: int = field(default=0, repr=False)

    @property
    def fit_error(self) -> str | None:
        """vLLM's error when the point does not fit (``Plan.fit_error``), built on demand."""
        t, layout = self._template, self._layout
        if self.fits or t is None or layout is None:
            return None
        return fit_error_message(
            self._failure,
            layout,
            t.release,
            self.max_model_len,
            weights_bytes=t.heaviest_weights,
            budget_bytes=self.budget_bytes,
            utilization=self.gpu_memory_utilization,
            memory_bytes=self.gpu.memory_bytes,
        )

    def sequence_blocks(self, tokens: int) -> int:
        """Blocks one sequence of ``tokens`` tokens holds over every group (``KvCacheReport.blocks_for_sequence``)."""
        t, layout = self._template, self._layout
        if t is None or layout is None:
            return 0
        return sequence_blocks(t.engine.grouping, layout.in_flight, tokens)


def sequence_blocks(grouping: Grouping, in_flight: int, tokens: int) -> int:
    """Blocks one sequence of ``tokens`` tokens holds over every group of ``grouping``."""
    # KvGroupReport.blocks_for over the groups kv_report reports (no decode-context split: the report's view).
    total = 0
    for spec, count in grouping.spec_counts:
        if spec.const_blocks is not None:
            blocks = spec.const_blocks
        else:
            cap = spec.tokens_cap(in_flight)
            if cap is None:
                blocks = cdiv(tokens, spec.block_size)
            else:
                blocks = cdiv(min(cap, tokens), spec.block_size) + (1 if spec.kind == "sliding_window" else 0)
        total += count * blocks
    return total


@dataclass
class _Template:
    """The engine stage of one (model, flags, GPU class), computed with the class's first GPU."""

    model: ModelSpec
    args: ServingArgs
    gpu: GpuSpec
    version: Version
    release: Release
    resolved: ResolvedArgs
    engine: EngineLayout
    max_len: int
    auto: bool
    derived: int
    fixed: list[int]
    """Per stage: the memory besides the KV cache (budget minus the stage's KV memory)."""
    heaviest_weights: int
    coefficients: MemoryCoefficients
    band_offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Limiting stage -> (down, up) bytes of the band without the unknown-release term."""
    spread_fixed: list[tuple[bool, int]] | None = None

    def offsets(self, stage: int, memo: dict[tuple[object, ...], tuple[int, int]]) -> tuple[int, int]:
        """(down, up) bytes of the band when ``stage`` limits, without the unknown release's spread: they
        depend on that stage's terms and the release, not on the GPU's memory (``memo``: the sweep's, by
        every input of :func:`band_terms`, and by engine stage)."""
        found = self.band_offsets.get(stage)
        if found is None:
            # Templates on one engine stage — flags that differ only in the limits, GPUs whose values agree —
            # have one band: the terms read that stage, the model and the flags the limits were set on, which
            # the stages of one EngineMemo share. The engine is kept by its templates: its id stays its own.
            by_engine = ("engine", id(self.engine), stage)
            found = memo.get(by_engine)
            if found is None:
                found = memo[by_engine] = self._offsets(stage, memo)
            self.band_offsets[stage] = found
        return found

    def _offsets(self, stage: int, memo: dict[tuple[object, ...], tuple[int, int]]) -> tuple[int, int]:
        """(down, up) of :meth:`offsets` by the values of every input of :func:`band_terms` (``memo``)."""
        memory = self.engine.memory[stage]
        given = self.args.kv_cache_memory_bytes is not None
        quantized = self.model.quantization is not None or self.args.quantization is not None
        kind = activation_kind(self.model)
        tp, across = self.args.tensor_parallel_size, self.args.tensor_parallel_across_nodes
        engine = self.engine
        key = (
            memory.weights_bytes,
            engine.weights_estimated,
            memory.activation_peak_bytes,
            memory.cuda_graph_bytes,
            memory.cuda_graph_counted,
            given,
            self.release.since,
            tp,
            quantized,
            kind,
            across,
            engine.mxfp4_spread_bytes,
            engine.encoder_band_bytes,
            engine.cold_compile_bytes,
            engine.nccl_at_init_bytes,
        )
        found = memo.get(key)
        if found is None:
            terms, _ = band_terms(
                weights_bytes=memory.weights_bytes,
                weights_estimated=self.engine.weights_estimated,
                activation_peak_bytes=memory.activation_peak_bytes,
                cuda_graph_bytes=memory.cuda_graph_bytes,
                cuda_graph_counted=memory.cuda_graph_counted,
                kv_cache_memory_bytes_given=given,
                release_since=self.release.since,
                tensor_parallel_size=tp,
                quantized=quantized,
                activation_kind=kind,
                version_spread_bytes=None,
                tp_across_nodes=across,
                mxfp4_spread_bytes=engine.mxfp4_spread_bytes,
                encoder_estimate_bytes=engine.encoder_band_bytes,
                cold_compile_bytes=engine.cold_compile_bytes,
                nccl_at_init_bytes=engine.nccl_at_init_bytes,
            )
            found = (sum(low for _, low, _, _ in terms), sum(high for _, _, high, _ in terms))
            memo[key] = found
        return found

    def release_fixed(self) -> list[tuple[bool, int]]:
        if self.spread_fixed is None:
            self.spread_fixed = release_fixed_bytes(
                self.model,
                self.gpu,
                self.args,
                self.resolved.gpu_memory_utilization,
                coefficients=self.coefficients,
                corrections=None,
            )
        return self.spread_fixed


def _detached(error: KvPlannerError) -> KvPlannerError:
    """``error`` without what leads back to the frames that raised it: its traceback, and the exceptions it
    was raised while handling (``raise ... from None`` only hides those when printed). Those frames hold the
    sweeper, which holds the error: the cycle would keep every template alive until a full collection."""
    error.__traceback__ = None
    error.__context__ = error.__cause__ = None
    return error


def gpu_class_key(gpu: GpuSpec, releases: Sequence[Release]) -> tuple[object, ...]:
    """What GPUs share an engine stage by: every GpuSpec field the stage reads but the memory (and the
    name, which words only refusals: see ``_Sweeper.template``), and vLLM's batch defaults at each of
    ``releases`` (they depend on the memory). The compute capability picks the MXFP4 kernel, the vision
    encoder's attention backend, the SM10x capture ceiling, the FP8 MoE workspace and DeepSeek-V4's
    support; NVLink and native FP8 are read nowhere there today and kept so that a new reader stays exact."""
    return (*gpu_base_key(gpu), tuple(batch_defaults(gpu, release) for release in releases))


class _Sweeper:
    """Templates by (model, flags, GPU class) and the points evaluated from them, for one release."""

    def __init__(
        self, vllm_version: str | None, *, headroom: float, coefficients: MemoryCoefficients, with_margin: bool
    ) -> None:
        check_headroom(headroom)
        self.vllm_version = vllm_version
        self.version_known = vllm_version is not None
        self.headroom = headroom
        self.coefficients = coefficients
        self.with_margin = with_margin
        _, planned, _ = resolve_release(vllm_version)
        # The releases whose batch defaults an engine stage may read: the planned one, and for an unknown
        # release every checked release of the spread.
        self.releases = [planned] if self.version_known else [planned, *RELEASES]
        self.classes: dict[int, tuple[GpuSpec, int]] = {}
        """GPU identity -> (the GPU, its class number)."""
        self.class_numbers: dict[tuple[object, ...], int] = {}
        """:func:`gpu_class_key` -> its number: the memos' keys hold the number (hashing the key tuple again for
        every lookup cost more than the lookups)."""
        self.templates: dict[tuple[int, int, object], _Template | KvPlannerError] = {}
        self.limited: dict[tuple[int, int, int | None], ServingArgs] = {}
        self.roots: dict[int, ServingArgs] = {}
        """Flags with limits set (:meth:`with_limits`) -> the flags they were set on."""
        self.engines: dict[tuple[int, int], EngineMemo] = {}
        self.band_memo: dict[tuple[object, ...], tuple[int, int]] = {}
        self.resolved: dict[tuple[int, ...], ResolvedArgs] = {}
        """:meth:`resolved_args`' memo."""
        self.shapes: dict[tuple[object, ...], _Shape] = {}
        """The batched sweep's KV layout shapes (planner/plan/vectorized.py ``_Shape``) by ``_shape_key``."""
        self.keep: list[object] = []  # objects whose id() keys the dictionaries above

    def gpu_class(self, gpu: GpuSpec) -> int:
        """The number of ``gpu``'s class (GPUs with equal :func:`gpu_class_key`)."""
        found = self.classes.get(id(gpu))
        if found is None:
            key = gpu_class_key(gpu, self.releases)
            number = self.class_numbers.setdefault(key, len(self.class_numbers))
            found = self.classes[id(gpu)] = (gpu, number)
        return found[1]

    def template(self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs) -> _Template | KvPlannerError:
        key: tuple[int, int, object] = (id(model), id(args), self.gpu_class(gpu))
        found = self.templates.get(key)
        if found is None:
            self.keep += (model, args)
            found = self._build(model, gpu, args)
            self.templates[key] = found
        if isinstance(found, KvPlannerError):
            # Each GPU's own engine stage words its refusal (a message may name the GPU); one that takes the
            # flags after all gets a template of its own.
            own_key = (id(model), id(args), ("gpu", id(gpu)))
            found = self.templates.get(own_key)
            if found is None:
                found = self._build(model, gpu, args)
                self.templates[own_key] = found
        return found

    def _build(self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs) -> _Template | KvPlannerError:
        # Flags with other limits share the engine base, and GPUs whose values the engine reads agree share
        # the engine stages (planner/plan/engine.py EngineMemo).
        root = self.roots.get(id(args), args)
        memo_key = (id(model), id(root))
        memo = self.engines.get(memo_key)
        if memo is None:
            self.keep.append(root)
            memo = self.engines[memo_key] = EngineMemo()
        # Flags with limits set on flags planned on this class: only what the limits reach is planned again.
        parent = self.templates.get((id(model), id(root), self.gpu_class(gpu))) if root is not args else None
        try:
            if isinstance(parent, _Template):
                version, release, derived = parent.version, parent.release, parent.derived
                max_len, auto, resolved, engine, _ = limited_stage(
                    model,
                    gpu,
                    args,
                    version,
                    release,
                    coefficients=self.coefficients,
                    corrections=None,
                    draft=None,
                    memo=memo,
                    resolve=self.resolved_args,
                )
            else:
                version, release, _, max_len, auto, resolved, engine = _engine_stage(
                    model,
                    gpu,
                    args,
                    vllm_version=self.vllm_version,
                    coefficients=self.coefficients,
                    corrections=None,
                    draft=None,
                    memo=memo,
                    resolve=self.resolved_args,
                )
                derived = derived_length(model, version)
        except KvPlannerError as error:
            return _detached(error)
        heaviest = max(engine.memory, key=lambda stage: stage.weights_bytes)
        return _Template(
            model=model,
            args=args,
            gpu=gpu,
            version=version,
            release=release,
            resolved=resolved,
            engine=engine,
            max_len=max_len,
            auto=auto,
            derived=derived,
            fixed=[stage.budget_bytes - stage.kv_bytes for stage in engine.memory],
            heaviest_weights=heaviest.weights_bytes,
            coefficients=self.coefficients,
        )

    def point(self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, spread_hint: int | None = None) -> PointPlan:
        """One point without the verification of a shorter recommended context (see :meth:`plan`)."""
        found = self.template(model, gpu, args)
        if isinstance(found, KvPlannerError):
            return PointPlan(model=model, gpu=gpu, args=args, error=str(found))
        t = found
        resolved, engine, release = t.resolved, t.engine, t.release
        utilization = resolved.gpu_memory_utilization
        budget = memory_budget(gpu.memory_bytes, utilization, ceil=release.budget_ceil)
        if args.kv_cache_memory_bytes is not None:
            available = [args.kv_cache_memory_bytes] * len(t.fixed)
        else:
            available = [budget - fixed for fixed in t.fixed]
        layout = kv_layout(engine, release, resolved, args, available)
        fits, failure, max_len = startup_fit(
            layout, t.max_len, t.auto, weights_bytes=t.heaviest_weights, budget_bytes=budget
        )
        tokens, concurrency = capacity(layout, max_len, release.tokens_formula)
        limiting = layout.limiting_stage
        stage = engine.memory[limiting.stage]
        given_over = given_kv_overflows(stage, args, gpu)
        if fits and given_over:  # predict's check of a given cache
            fits, failure = False, "given_kv"
        blocks = layout.num_gpu_blocks
        kv = max(0, limiting.available_bytes)
        estimated = layout.max_len_that_fits(max(t.derived, max_len))
        out = PointPlan(
            model=model,
            gpu=gpu,
            args=args,
            vllm_version=str(t.version),
            fits=fits,
            gpu_memory_utilization=utilization,
            budget_bytes=budget,
            weights_bytes=stage.weights_bytes,
            activation_peak_bytes=stage.activation_peak_bytes,
            non_torch_bytes=stage.non_torch_bytes,
            cuda_graph_bytes=stage.cuda_graph_bytes,
            cuda_graph_counted=stage.cuda_graph_counted,
            kv_cache_bytes=kv,
            kv_cache_dtype=engine.kv_dtype.name,
            block_size=layout.block_size,
            bytes_per_block=limiting.bytes_per_block,
            num_gpu_blocks=blocks,
            tokens=tokens,
            max_concurrency=concurrency,
            max_model_len=max_len,
            blocks_per_request=layout.blocks_per_request(max_len),
            estimated_max_model_len=estimated,
            derived_max_model_len=t.derived,
            _template=t,
            _layout=layout,
            _failure=failure,
            _given_over=given_over,
        )
        if not self.with_margin:
            return out
        # margin_band: the band's terms, the unknown release's spread, what vLLM makes of the low end.
        spread = None
        if not self.version_known and args.kv_cache_memory_bytes is None:
            spread = (
                spread_hint
                if spread_hint is not None
                else spread_from_fixed(min(available), gpu.memory_bytes, utilization, t.release_fixed())
            )
        down, up = t.offsets(limiting.stage, self.band_memo)
        if spread is not None:
            down += max(0, spread)
        low = max(0, kv - down)
        blocks_low, fits_low, estimated_low = band_low_end(
            engine, release, resolved, args, available, kv - low, max_len, t.derived
        )
        out.band_low_bytes, out.band_high_bytes = low, kv + up
        out.num_gpu_blocks_low, out.max_model_len_fits_low = blocks_low, fits_low
        out.estimated_max_model_len_low = estimated_low
        out.version_spread_bytes = spread
        # recommend.safe_max_model_len / safe_cache
        out._safe_blocks = min(blocks, blocks_low)
        out._safe_len = safe_context(
            fits=fits,
            fits_low=fits_low,
            max_model_len=max_len,
            longest=min(estimated, estimated_low),
            safe_blocks=out._safe_blocks,
            block_size=layout.block_size,
        )
        return out

    def plan(self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs, spread_hint: int | None = None) -> PointPlan:
        """A point with make_plan's recommendation (no workload, no alternatives): recommend.settle over the
        sweep's points, so the limits are planned again with their own flags just as make_plan's are."""
        out = self.point(model, gpu, args, spread_hint)
        if out.error is not None or not self.with_margin:
            return out
        first = SearchRow.of(out)
        settled = None if first is None else settle(first, self.replan(model, gpu, args), self.headroom)
        if settled is not None:
            out.recommended_max_model_len = settled.max_model_len
            out.recommended_max_num_seqs = settled.max_num_seqs
        return out

    def replan(self, model: ModelSpec, gpu: GpuSpec, args: ServingArgs) -> Replan[SearchRow]:
        """recommend.Replanner for sweep points: ``args`` with ``--max-model-len`` (and ``--max-num-seqs``) set,
        each planned with its own band (no spread hint: an unknown release's spread follows the flags)."""

        def planned(max_len: int, seqs: int | None, base: SearchRow) -> SearchRow | None:
            if self.same_run(base.template, base.args, gpu, base.context, max_len, seqs):
                return base
            return SearchRow.of(self.point(model, gpu, self.with_limits(args, max_len, seqs)))

        return planned

    def same_run(
        self, t: _Template, args: ServingArgs, gpu: GpuSpec, context: int, max_len: int, seqs: int | None
    ) -> bool:
        """``args`` (planned from template ``t`` on ``gpu``, the context in force ``context``) with
        ``--max-model-len max_len`` and ``--max-num-seqs seqs`` set plan exactly as ``args`` did: the same
        flags (the context spelled out), or — the release known — flags vLLM resolves to the same values
        (the engine stage reads the count and the context only through them; an unknown release's spread
        reads every release's defaults, so there only the same flags do)."""
        if max_len != context or t.auto or args.max_model_len not in (None, max_len):
            return False
        if seqs is None or seqs == args.max_num_seqs:
            return True
        if not self.version_known:
            return False
        flags = self.with_limits(args, max_len, seqs)
        try:
            return self.resolved_args(flags, t.model, gpu, t.release, max_len) == t.resolved
        except KvPlannerError:
            return False

    def resolved_args(
        self, args: ServingArgs, model: ModelSpec, gpu: GpuSpec, release: Release, max_len: int
    ) -> ResolvedArgs:
        """:func:`resolve_args`, once per flags, model, GPU class, release and context: the search asks it in
        :meth:`same_run` for every GPU and again when the flags are planned (``limited_stage``). The class key
        holds every GpuSpec field resolve_args reads but the memory and the name, and the batch defaults the
        memory and the name give; the name words only refusals, which are not kept. Only for objects the
        sweeper keeps (their ids stay theirs)."""
        key = (id(args), id(model), self.gpu_class(gpu), id(release), max_len)
        found = self.resolved.get(key)
        if found is None:
            found = self.resolved[key] = resolve_args(args, model, gpu, release, max_len)
        return found

    def with_limits(self, args: ServingArgs, max_len: int, seqs: int | None) -> ServingArgs:
        key = (id(args), max_len, seqs)
        found = self.limited.get(key)
        if found is None:
            update: dict[str, int] = {"max_model_len": max_len}
            if seqs is not None:
                update["max_num_seqs"] = seqs
            found = args.model_copy(update=update)
            self.keep += (args, found)
            self.limited[key] = found
            self.roots[id(found)] = self.roots.get(id(args), args)
        return found


@dataclass(slots=True)
class SearchRow:
    """One planned point as recommend.settle's search reads it (a :class:`recommend.Candidate`): from a
    :class:`PointPlan` (:meth:`of`) or from the batched sweep's columns (planner/plan/vectorized.py)."""

    fits: bool
    context: int
    safe_len: int | None
    safe_blocks: int
    block_size: int
    nominal_context: int | None
    template: _Template
    args: ServingArgs
    in_flight: int

    @classmethod
    def of(cls, point: PointPlan) -> SearchRow | None:
        """None for a refused point."""
        t, layout = point._template, point._layout
        if point.error is not None or t is None or layout is None:
            return None
        return cls(
            fits=point.fits,
            context=point.max_model_len,
            safe_len=None if point._given_over else point._safe_len,
            safe_blocks=point._safe_blocks,
            block_size=point.block_size,
            nominal_context=nominal_context(point.estimated_max_model_len, point.num_gpu_blocks, point.block_size),
            template=t,
            args=point.args,
            in_flight=layout.in_flight,
        )

    @property
    def seqs_cap(self) -> int:
        return seqs_cap(self.template.resolved)

    def sequence_blocks(self, tokens: int) -> int:
        return sequence_blocks(self.template.engine.grouping, self.in_flight, tokens)


Point = tuple[ModelSpec, GpuSpec, ServingArgs]


def first_fitting_gpu(
    model: ModelSpec,
    gpus: Sequence[GpuSpec],
    args: ServingArgs,
    *,
    vllm_version: str | None,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    headroom: float = 0.1,
    spread_hint: int | None = None,
) -> int | None:
    """The index of the first GPU on which the flags have safe limits, alone or with the shorter context
    their plan allows — what ``recommend.alternatives`` offers as a bigger GPU (``offer(..., quiet=True)``: a
    GPU before it adds nothing) —, or None. The GPUs are planned in order by one sweeper (the GPUs of a class
    share a template), as sweep points rather than Plans, with make_plan's search for the limits
    (recommend.settle); make_plan then plans that one GPU's alternative itself. ``spread_hint``: an unknown
    release's spread for the flags as given (the limits' own plans compute theirs)."""
    sweeper = _Sweeper(vllm_version, headroom=headroom, coefficients=coefficients, with_margin=True)
    for index, gpu in enumerate(gpus):
        plan = sweeper.point(model, gpu, args, spread_hint)
        if plan.error is not None:
            continue
        first = SearchRow.of(plan)
        if first is None:
            continue
        settled = settle(first, sweeper.replan(model, gpu, args), headroom)
        if settled is not None and settled.max_model_len == first.context:
            return index
        shorter = alternative_context(first, settled, headroom)
        if shorter is None:
            continue
        # recommend.offer: the change together with the context it allows, its limits settled again.
        combined_args = sweeper.with_limits(args, shorter, None)
        combined = SearchRow.of(sweeper.point(model, gpu, combined_args))
        if combined is None:
            continue
        if settle(combined, sweeper.replan(model, gpu, combined_args), headroom) is not None:
            return index
    return None


def sweep_plans(
    points: Iterable[Point],
    *,
    vllm_version: str | None = None,
    headroom: float = 0.1,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    with_margin: bool = True,
    spread_hint: int | None = None,
) -> list[PointPlan]:
    """Plan every (model, GPU, flags) point for one vLLM release (None: unknown, as ``make_plan``).

    ``with_margin`` False skips the KV band and the recommendation (the catalog table's view);
    ``spread_hint``: an unknown release's spread already known for these points (make_plan's replans)."""
    sweeper = _Sweeper(vllm_version, headroom=headroom, coefficients=coefficients, with_margin=with_margin)
    with collector_paused():
        return [sweeper.plan(model, gpu, args, spread_hint) for model, gpu, args in points]


def sweep_table(
    points: Iterable[Point],
    *,
    vllm_version: str | None = None,
    headroom: float = 0.1,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
    with_margin: bool = True,
) -> SweepTable:
    """:func:`sweep_plans` as numpy columns, the per-point arithmetic vectorised (planner/plan/vectorized.py):
    for thousands of points. Imports numpy."""
    from planner.plan.vectorized import evaluate

    def sweeper() -> _Sweeper:
        return _Sweeper(vllm_version, headroom=headroom, coefficients=coefficients, with_margin=with_margin)

    with collector_paused():
        table = evaluate(sweeper(), list(points))
        # The table plans a point again (SweepTable.point) with a sweeper of its own, so what the sweep allocated
        # (its templates, engine stages and memos) is freed here, by reference counts, while the collector is
        # still off: kept, every object of it was walked by the collector's first pass once it was back on.
        table.sweeper = sweeper()
    return table


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one sweep, as it was after. A sweep allocates hundreds of
    thousands of small objects (templates, flags, layouts) that all live until it returns; each full
    collection walks every one of them again, which cost a quarter of a catalog sweep's CPU
    (docs/benchmarks.md). Pauses nest and may overlap across threads: the collector is back on (if it was
    on before the first) when the last one ends."""
    _PAUSES.begin()
    try:
        yield
    finally:
        _PAUSES.end()


class _CollectorPauses:
    """The sweeps running now (:func:`collector_paused`), and whether the collector was on before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.enabled_before = False

    def begin(self) -> None:
        with self.lock:
            if self.running == 0:
                self.enabled_before = gc.isenabled()
                gc.disable()
            self.running += 1

    def end(self) -> None:
        with self.lock:
            self.running -= 1
            if self.running == 0 and self.enabled_before:
                gc.enable()


_PAUSES = _CollectorPauses()


def grid(
    models: Sequence[ModelSpec],
    gpus: Sequence[GpuSpec],
    *,
    args: ServingArgs | None = None,
    tensor_parallel_sizes: Sequence[int] | None = None,
    kv_cache_dtypes: Sequence[str] | None = None,
    gpu_memory_utilizations: Sequence[float | None] | None = None,
    max_model_lens: Sequence[int | None] | None = None,
) -> list[Point]:
    """Every model x GPU x TP x KV dtype x utilization x context, in that order (the last varies fastest).
    An axis left None keeps ``args``'s value; ``args`` gives every other flag."""
    base = args or ServingArgs()
    axes = itertools.product(
        tensor_parallel_sizes or (base.tensor_parallel_size,),
        kv_cache_dtypes or (base.kv_cache_dtype,),
        gpu_memory_utilizations or (base.gpu_memory_utilization,),
        max_model_lens or (base.max_model_len,),
    )
    flags = [
        base.model_copy(
            update={
                "tensor_parallel_size": int(tp),
                "kv_cache_dtype": str(kv),
                "gpu_memory_utilization": None if util is None else float(util),
                "max_model_len": None if length is None else int(length),
            }
        )
        for tp, kv, util, length in axes
    ]
    return [(model, gpu, one) for model in models for gpu in gpus for one in flags]
