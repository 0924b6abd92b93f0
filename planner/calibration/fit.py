"""Fitting the memory model's constants on startup reports, and leave-one-model-out checks.

Each constant belongs to a cause (see :mod:`planner.memory.coefficients`), and each is fitted on the
records where that cause is the one visible in the logged term:

* activation peak ``= max(a x tokens x dense width x dtype, c x tokens x MoE width x dtype,
  b x dummy requests x vocabulary)``: the branch that is largest for a record is fitted on it
  (alternating least squares through the origin, a few rounds); where a cold compile's autotuning
  inputs (planner/memory/activation.py compile_example_bytes, derived, not fitted) exceed the branch,
  the record informs no constant;
* non-torch: the CUDA workspace from multi-process ranks without TP (PP), the single-process extra
  from TP=PP=1 minus that, NCCL/NVLS from TP>1 on NVSwitch GPUs (base at TP=2, slope per rank);
* CUDA graphs: linear least squares of ``base/sqrt(tp) + sizes/51 x (p x layers + q x MoE layers)``.

Leave-one-model-out refits everything without one model's records and predicts that model's KV
memory, which is how the planner will meet a model it has never seen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.calibration.records import StartupRecord
from planner.calibration.validate import serving_args, validate_records
from planner.errors import KvPlannerError
from planner.gpus.spec import GpuSpec
from planner.memory.activation import (
    compile_example_bytes,
    dense_width,
    moe_width,
    moe_workspace_bytes,
    runner_v2_flashinfer_sampler,
    runner_v2_sampler_bytes,
    runner_v2_sampler_state_bytes,
    sampler_bytes_per_logit,
    sampler_held_bytes,
    sampler_kernel_in_force,
)
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.memory.cudagraph import capture_sizes
from planner.memory.mxfp4 import parse_capability
from planner.models.spec import ModelSpec
from planner.plan.build import predict
from planner.plan.engine import compiles_with_autotune_examples, with_online_quantization
from planner.units import DTYPE_BYTES, GiB

ModelLookup = Callable[[str], ModelSpec]
GpuLookup = Callable[[str], GpuSpec]

# Values from first principles, used where no training record informs a constant (so a held-out model
# never borrows its own fit): three fp32 copies of the logits (logits, probabilities, sorted values),
# one activation element per width element, MoE workspace of about two buffers, no measured overheads.
FIRST_PRINCIPLES = DEFAULT_COEFFICIENTS.model_copy(
    update={
        "sampler_bytes_per_logit": 12.0,
        "forward_bytes_per_token_width": 1.0,
        "moe_bytes_per_token_expert_width": 2.0,
        "cuda_workspace_bytes": 0,
        "single_process_non_torch_bytes": 0,
        "nccl_bytes_nvls": int(1.0 * GiB),
        "nccl_bytes_per_extra_rank": 0,
    }
)


@dataclass(frozen=True)
class Observation:
    """One record's features and logged terms (bytes)."""

    model_key: str
    release: str
    """the release-table row the record's vLLM version falls in"""
    tp: int
    pp: int
    nvls: bool
    dense_feature: float
    moe_feature: float
    sampler_feature: float
    sampler_fixed: float
    """bytes held through the sampler warm-up that are not the fitted constant's: the sorted copy on
    the sort path, the persistent fused-MoE workspaces (0.14+), Model Runner V2's whole warm-up"""
    compile_bytes: float
    """a cold compile's autotuning inputs (0 where the release or the flags compile without them)"""
    activation: float | None
    non_torch: float | None
    graph_features: tuple[float, float, float]
    cuda_graph: float | None


def observe(record: StartupRecord, spec: ModelSpec, gpu: GpuSpec) -> Observation:
    args = serving_args(record, online_quantization=record.quantization is not None and record.base_model is None)
    prediction = predict(spec, gpu, args, vllm_version=record.vllm_version)
    resolved = prediction.resolved
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    model = with_online_quantization(spec, args)
    dtype_bytes = DTYPE_BYTES[resolved.dtype]
    tokens = resolved.max_num_batched_tokens
    first_stage_layers = prediction.engine.partition[0]
    moe_layers = first_stage_layers if model.moe is not None else 0
    sizes = (
        len(capture_sizes(resolved.max_num_seqs, explicit_max=args.max_cudagraph_capture_size))
        / DEFAULT_COEFFICIENTS.cudagraph_reference_sizes
    )
    gib = float(GiB)
    release = prediction.release
    num_reqs = min(resolved.max_num_seqs, tokens)
    # The logged terms are the first stage's: it runs the sampler only without PP.
    runner_v2 = prediction.engine.model_runner_v2
    sampler_state = 0.0
    if runner_v2:
        # Model Runner V2's sampler warm-up is derived from its source, not the V1 runner's fitted
        # constant: nothing to fit, its bytes are fixed (planner/memory/activation.py).
        sampler_feature = 0.0
        sampler_fixed = (
            float(
                runner_v2_sampler_bytes(
                    model,
                    num_reqs=num_reqs,
                    tokens=tokens,
                    tp=tp,
                    dtype_bytes=dtype_bytes,
                    warmup_pass=release.runner_v2_sampler_warmup,
                    flashinfer=runner_v2_flashinfer_sampler(args.env),
                )
            )
            if pp == 1
            else 0.0
        )
        if pp == 1 and release.non_kv_accounting == "consumed_since_init":
            sampler_state = float(runner_v2_sampler_state_bytes(model, resolved.max_num_seqs))
    else:
        sampler_feature = float(num_reqs * model.vocab_size) if pp == 1 else 0.0
        kernel = sampler_kernel_in_force(release.sampler_kernel, args.env)
        extra = sampler_bytes_per_logit(DEFAULT_COEFFICIENTS, kernel, num_reqs)
        sampler_fixed = (extra - DEFAULT_COEFFICIENTS.sampler_bytes_per_logit) * sampler_feature
        if pp == 1 and resolved.engine != "v0":
            sampler_fixed += float(sampler_held_bytes(model, num_reqs=num_reqs, tokens=tokens, dtype_bytes=dtype_bytes))
    quantization = model.quantization
    fp8_held = (
        release.fp8_moe_workspace_held
        and quantization is not None
        and quantization.method == "fp8"
        and parse_capability(gpu.compute_capability) == (8, 9)
    )
    if pp == 1 and model.moe is not None and ((release.moe_workspace_held and quantization is None) or fp8_held):
        sampler_fixed += moe_workspace_bytes(model, tokens, tp, dtype_bytes)
    compiles = compiles_with_autotune_examples(model, args, release, resolved.engine)
    compile_bytes = (
        float(compile_example_bytes(model, tokens=tokens, tp=tp, dtype_bytes=dtype_bytes)) if compiles else 0.0
    )

    def logged(value: float | None) -> float | None:
        return None if value is None else value * gib

    return Observation(
        model_key=(record.base_model or record.model).lower(),
        release=release.since,
        tp=tp,
        pp=pp,
        nvls=gpu.nvswitch_multicast,
        dense_feature=tokens * dense_width(model, tp) * dtype_bytes,
        moe_feature=tokens * moe_width(model, tp) * dtype_bytes,
        sampler_feature=sampler_feature,
        sampler_fixed=sampler_fixed,
        compile_bytes=compile_bytes,
        activation=logged(record.activation_peak_gib),
        # 0.27+ logs print V2's sampler state inside "consumed memory": not the fitted non-torch causes.
        non_torch=None if record.non_torch_gib is None else record.non_torch_gib * gib - sampler_state,
        graph_features=(1 / math.sqrt(tp), sizes * first_stage_layers, sizes * moe_layers),
        # vLLM subtracts its *estimate* of graph memory (0.20+); fit on it where the log printed it.
        cuda_graph=logged(
            record.graph_estimate_gib if record.graph_estimate_gib is not None else record.cuda_graph_gib
        ),
    )


def _through_origin(xs: list[float], ys: list[float], default: float) -> float:
    denominator = sum(x * x for x in xs)
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / denominator if denominator else default


def _fit_activation(obs: Sequence[Observation], prior: MemoryCoefficients) -> tuple[float, float, float]:
    a, c, b = prior.forward_bytes_per_token_width, prior.moe_bytes_per_token_expert_width, prior.sampler_bytes_per_logit
    rows = [o for o in obs if o.activation is not None]
    for _ in range(10):
        groups: dict[str, tuple[list[float], list[float]]] = {"a": ([], []), "c": ([], []), "b": ([], [])}
        for o in rows:
            assert o.activation is not None
            candidates = {
                "a": a * o.dense_feature,
                "c": c * o.moe_feature,
                "b": b * o.sampler_feature + o.sampler_fixed,
            }
            branch = max(candidates, key=lambda k: candidates[k])
            if o.compile_bytes > candidates[branch]:
                continue  # the compile's autotuning inputs are the peak: no fitted cause is visible
            feature = {"a": o.dense_feature, "c": o.moe_feature, "b": o.sampler_feature}[branch]
            fixed = o.sampler_fixed if branch == "b" else 0.0
            groups[branch][0].append(feature)
            groups[branch][1].append(o.activation - fixed)
        a = _through_origin(*groups["a"], default=a)
        c = _through_origin(*groups["c"], default=c)
        b = _through_origin(*groups["b"], default=b)
    return a, c, b


def _median(values: list[float], default: float) -> float:
    return statistics.median(values) if values else default


def _fit_non_torch(obs: Sequence[Observation], prior: MemoryCoefficients) -> dict[str, int]:
    workspace = _median(
        [o.non_torch for o in obs if o.non_torch is not None and o.tp == 1 and o.pp > 1], prior.cuda_workspace_bytes
    )
    single = _median(
        [o.non_torch - workspace for o in obs if o.non_torch is not None and o.tp == 1 and o.pp == 1],
        prior.single_process_non_torch_bytes,
    )
    nvls = [(o.tp, o.non_torch - workspace) for o in obs if o.non_torch is not None and o.tp > 1 and o.nvls]
    base = _median([v for tp, v in nvls if tp == 2], prior.nccl_bytes_nvls)
    slopes = [(v - base) / (tp - 2) for tp, v in nvls if tp > 2]
    return {
        "cuda_workspace_bytes": int(workspace),
        "single_process_non_torch_bytes": int(max(0.0, single)),
        "nccl_bytes_nvls": int(base),
        "nccl_bytes_per_extra_rank": int(_median(slopes, prior.nccl_bytes_per_extra_rank)),
    }


def _fit_graphs(obs: Sequence[Observation], prior: MemoryCoefficients) -> dict[str, int]:
    rows = [o for o in obs if o.cuda_graph is not None]
    has_moe = any(o.graph_features[2] for o in rows)
    if len(rows) < 3:
        return {}
    matrix = np.array([o.graph_features if has_moe else o.graph_features[:2] for o in rows], dtype=float)
    target = np.array([o.cuda_graph for o in rows], dtype=float)
    solution, *_ = np.linalg.lstsq(matrix, target, rcond=None)
    # One refit without outliers (residual > 3 median absolute deviations): a few logs report estimates
    # twice the measured pool, which least squares would otherwise chase.
    residual = np.abs(matrix @ solution - target)
    spread = float(np.median(residual)) or 1.0
    keep = residual <= 3 * spread
    if keep.sum() >= matrix.shape[1] + 1 and not keep.all():
        solution, *_ = np.linalg.lstsq(matrix[keep], target[keep], rcond=None)
    out = {"cudagraph_base_bytes": int(max(0.0, solution[0])), "cudagraph_bytes_per_layer": int(max(0.0, solution[1]))}
    out["cudagraph_bytes_per_moe_layer"] = (
        int(max(0.0, solution[2])) if has_moe else prior.cudagraph_bytes_per_moe_layer
    )
    return out


def fit_coefficients(
    observations: Sequence[Observation], prior: MemoryCoefficients = DEFAULT_COEFFICIENTS
) -> MemoryCoefficients:
    a, c, b = _fit_activation(observations, prior)
    update: dict[str, float | int] = {
        "forward_bytes_per_token_width": round(a, 4),
        "moe_bytes_per_token_expert_width": round(c, 4),
        "sampler_bytes_per_logit": round(b, 4),
        **_fit_non_torch(observations, prior),
        **_fit_graphs(observations, prior),
    }
    return prior.model_copy(update=update)


class ModelError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    records: int
    in_sample_median_error: float | None
    held_out_median_error: float | None
    held_out_max_abs_error: float | None


class ReleaseError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    release: str
    records: int
    in_sample_median_error: float | None
    held_out_median_error: float | None
    held_out_max_abs_error: float | None


class FitReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    coefficients: MemoryCoefficients
    observations: int
    leave_one_model_out: list[ModelError]
    leave_one_release_out: list[ReleaseError] = []


def _observations(
    records: Sequence[StartupRecord], lookup_model: ModelLookup, lookup_gpu: GpuLookup
) -> list[tuple[StartupRecord, Observation]]:
    out = []
    for record in records:
        if (record.nodes or 1) > 1:
            continue  # multi-node non-torch memory is not modelled: nothing to fit or predict
        try:
            spec = lookup_model(record.model)
        except KvPlannerError:
            if not record.base_model:
                continue
            try:
                spec = lookup_model(record.base_model)
            except KvPlannerError:
                continue
        try:
            gpu = lookup_gpu(record.gpu or "")
            out.append((record, observe(record, spec, gpu)))
        except (KvPlannerError, LookupError):
            continue
    return out


def fit_report(
    records: Sequence[StartupRecord],
    *,
    lookup_model: ModelLookup,
    lookup_gpu: GpuLookup,
    prior: MemoryCoefficients = FIRST_PRINCIPLES,
) -> FitReport:
    pairs = _observations(records, lookup_model, lookup_gpu)
    everything = fit_coefficients([o for _, o in pairs], prior)
    in_sample = validate_records(
        [r for r, _ in pairs], lookup_model=lookup_model, lookup_gpu=lookup_gpu, coefficients=everything
    )

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 5) if values else None

    def held_out(
        group: Callable[[Observation], str],
    ) -> list[tuple[str, int, float | None, float | None, float | None]]:
        """Refit without each group's records, predict them: (group, records, in-sample median, held-out
        median, held-out max |error|)."""
        in_errors: dict[str, list[float]] = {}
        for (_, obs), result in zip(pairs, in_sample.records, strict=True):
            if result.full is not None and result.full.error is not None:
                in_errors.setdefault(group(obs), []).append(result.full.error)
        rows = []
        for key in sorted({group(o) for _, o in pairs}):
            training = [o for _, o in pairs if group(o) != key]
            held = [r for r, o in pairs if group(o) == key]
            coefficients = fit_coefficients(training, prior)
            report = validate_records(held, lookup_model=lookup_model, lookup_gpu=lookup_gpu, coefficients=coefficients)
            errors = [r.full.error for r in report.records if r.full is not None and r.full.error is not None]
            worst = round(max(abs(e) for e in errors), 5) if errors else None
            rows.append((key, len(held), median(in_errors.get(key, [])), median(errors), worst))
        return rows

    lomo = [
        ModelError(model=key, records=n, in_sample_median_error=a, held_out_median_error=b, held_out_max_abs_error=c)
        for key, n, a, b, c in held_out(lambda o: o.model_key)
    ]
    loro = [
        ReleaseError(
            release=key, records=n, in_sample_median_error=a, held_out_median_error=b, held_out_max_abs_error=c
        )
        for key, n, a, b, c in held_out(lambda o: o.release)
    ]
    return FitReport(
        coefficients=everything, observations=len(pairs), leave_one_model_out=lomo, leave_one_release_out=loro
    )
