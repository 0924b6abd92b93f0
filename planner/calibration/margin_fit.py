"""Measure the planner's error per budget term and per release: the bounds of the safety margin.

For every calibration record the planner predicts the first stage's terms from the GPU alone (as
``planner validate`` does in ``full``) and compares them with what vLLM logged. Each term's largest miss
in each direction, per release-table row, becomes :class:`planner.plan.margin.ReleaseBounds`; misses are
relative for terms that scale (weights, activation peak, CUDA graphs) and absolute for non-torch memory.
Records that do not log a breakdown contribute their non-weight miss as ``unattributed``.

Run ``python scripts/fit_margin.py > planner/data/margin.json`` after any change to the memory
model or the calibration data; a test keeps the shipped file equal to a fresh measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.calibration.records import StartupRecord
from planner.calibration.validate import resolve_record_model, serving_args
from planner.errors import KvPlannerError
from planner.gpus.spec import GpuSpec
from planner.models.spec import ModelSpec
from planner.plan.build import predict
from planner.plan.margin import UNFITTED_MARGIN, MarginModel, ReleaseBounds, TermBounds, activation_kind
from planner.units import GiB

ModelLookup = Callable[[str], ModelSpec]
GpuLookup = Callable[[str], GpuSpec]


@dataclass(frozen=True)
class TermMiss:
    """One record's misses (logged minus predicted: positive = the term was larger than predicted)."""

    record_id: str
    release: str
    weights_kind: str
    activation_kind: str
    weights: float | None
    activation: float | None
    non_torch: float | None
    cuda_graph: float | None
    unattributed: float | None


def _relative(logged_gib: float | None, predicted: int) -> float | None:
    if logged_gib is None or predicted <= 0:
        return None
    return (logged_gib * GiB - predicted) / predicted


def measure(record: StartupRecord, lookup_model: ModelLookup, lookup_gpu: GpuLookup) -> TermMiss | None:
    if (record.nodes or 1) > 1:
        return None  # multi-node non-torch memory is not modelled: no full prediction to measure
    try:
        spec, online = resolve_record_model(record, lookup_model)
        gpu = lookup_gpu(record.gpu or "")
        args = serving_args(record, online_quantization=online)
        prediction = predict(spec, gpu, args, vllm_version=record.vllm_version)
    except (KvPlannerError, LookupError):
        return None
    stage = prediction.engine.memory[0]
    quantized = spec.quantization is not None or args.quantization is not None
    kind = "estimated" if prediction.engine.weights_estimated else ("quantized" if quantized else "exact")
    # vLLM's own estimate is what 0.20+ subtracts; a captured pool (all an older release prints) is another
    # quantity — up to 0.19 the capture sizes and pool differ from what the estimator counts — so only logs
    # that print the estimate measure the graph term.
    graphs = record.graph_estimate_gib
    # A cold start's compile-time autotuning inputs are the plan's, and a warm compile cache has none: the
    # band's compile_cache term covers that difference, so each record is measured against the start (cold
    # or warm) closer to its log, or the other terms' bounds would count it again.
    cold = stage.cold_compile_bytes
    activation_peak = stage.activation_peak_bytes
    kv_bytes = stage.kv_bytes
    if cold and record.activation_peak_gib is not None:
        logged = record.activation_peak_gib * GiB
        if abs(logged - (activation_peak - cold)) < abs(logged - activation_peak):
            activation_peak -= cold
            kv_bytes += cold
    elif cold and record.kv_cache_memory_gib is not None:
        logged = record.kv_cache_memory_gib * GiB
        if abs(kv_bytes + cold - logged) < abs(kv_bytes - logged):
            kv_bytes += cold
    activation = _relative(record.activation_peak_gib, activation_peak)
    non_torch = None if record.non_torch_gib is None else record.non_torch_gib * GiB - stage.non_torch_bytes
    unattributed = None
    if prediction.engine.encoder_band_bytes > 0:
        # The vision encoder's profile is only estimated (KVP131): the band's vision_encoder term carries
        # it, so its miss does not widen the activation bound of every text model of the release.
        activation = None
    if (
        prediction.release.non_kv_accounting == "consumed_since_init"
        and record.activation_peak_gib is not None
        and record.non_torch_gib is not None
    ):
        # 0.27.1+ prints what stays allocated after profiling (MoE workspaces, the V2 sampler state) as
        # consumed memory and only the transient rest as peak activation, where the plan keeps such buffers
        # in its activation term: the split is vLLM's bookkeeping, so the two are measured together.
        logged = (record.activation_peak_gib + record.non_torch_gib) * GiB
        unattributed = logged - (activation_peak + stage.non_torch_bytes)
        activation = non_torch = None
    elif record.kv_cache_memory_gib is not None and (
        record.activation_peak_gib is None or record.non_torch_gib is None
    ):
        # KV = budget - terms: what the KV miss leaves after the weights' (and counted graphs') own misses.
        kv_short = kv_bytes - record.kv_cache_memory_gib * GiB
        weights_short = (record.weights_gib * GiB - stage.weights_bytes) if record.weights_gib is not None else 0.0
        unattributed = kv_short - weights_short
    return TermMiss(
        record_id=record.id,
        release=prediction.release.since,
        weights_kind=kind,
        activation_kind=activation_kind(spec),
        weights=_relative(record.weights_gib, stage.weights_bytes),
        activation=activation,
        non_torch=non_torch,
        cuda_graph=_relative(graphs, stage.cuda_graph_bytes),
        unattributed=unattributed,
    )


def tp_across_nodes_miss(record: StartupRecord, lookup_model: ModelLookup, lookup_gpu: GpuLookup) -> int | None:
    """How much less KV memory a record whose TP group spans nodes logged than the single-node prediction
    (bytes; negative when it logged more). None: not such a record, or nothing to compare."""
    if record.kv_cache_memory_gib is None:
        return None
    try:
        spec, online = resolve_record_model(record, lookup_model)
        args = serving_args(record, online_quantization=online)
        if not args.tensor_parallel_across_nodes:
            return None
        prediction = predict(spec, lookup_gpu(record.gpu or ""), args, vllm_version=record.vllm_version)
    except (KvPlannerError, LookupError):
        return None
    predicted = min(stage.kv_bytes for stage in prediction.engine.memory)
    return int(predicted - record.kv_cache_memory_gib * GiB)


def _largest(values: Sequence[float | None], sign: float, digits: int = 4) -> float | None:
    """The largest miss in one direction (0 when none went that way; None when nothing was measured)."""
    measured = [sign * v for v in values if v is not None]
    return round(max([0.0, *measured]), digits) if measured else None


def _bytes(value: float | None) -> int | None:
    return None if value is None else int(value)


def _bounds(misses: Sequence[TermMiss], sign: float, graph_misses: Sequence[TermMiss]) -> TermBounds:
    def weights(kind: str) -> float | None:
        return _largest([m.weights for m in misses if m.weights_kind == kind], sign)

    def activation(kind: str) -> float | None:
        return _largest([m.activation for m in misses if m.activation_kind == kind], sign)

    return TermBounds(
        weights_exact=weights("exact"),
        weights_quantized=weights("quantized"),
        weights_estimated=weights("estimated"),
        activation_dense=activation("dense"),
        activation_moe=activation("moe"),
        activation_mla=activation("mla"),
        activation_vision=activation("vision"),
        non_torch_bytes=_bytes(_largest([m.non_torch for m in misses], sign, 0)),
        # vLLM's graph estimator is the same code whether or not the release subtracts it: measured on
        # every record that logs it.
        cuda_graph=_largest([m.cuda_graph for m in graph_misses], sign),
        unattributed_bytes=_bytes(_largest([m.unattributed for m in misses], sign, 0)),
    )


def fit_margin(records: Sequence[StartupRecord], *, lookup_model: ModelLookup, lookup_gpu: GpuLookup) -> MarginModel:
    misses = [m for m in (measure(r, lookup_model, lookup_gpu) for r in records) if m is not None]
    by_release: dict[str, ReleaseBounds] = {}
    for release in sorted({m.release for m in misses}):
        rows = [m for m in misses if m.release == release]
        by_release[release] = ReleaseBounds(
            records=len(rows), short=_bounds(rows, 1.0, misses), over=_bounds(rows, -1.0, misses)
        )
    across = [m for m in (tp_across_nodes_miss(r, lookup_model, lookup_gpu) for r in records) if m is not None]
    return UNFITTED_MARGIN.model_copy(update={"by_release": by_release, "tp_across_nodes_bytes": max([0, *across])})
