"""``planner validate``: the planner against real vLLM startup reports, three ways per record.

* ``layout``: fed the logged KV memory, does the planner reproduce vLLM's blocks, tokens and
  concurrency? "Exact" when the logged blocks (or tokens) lie within what the planner computes for the
  logged KV memory +- 0.005 GiB (the rounding of the printed figure).
* ``budget``: fed the logged weights, how close is the predicted KV memory?
* ``full``: from the GPU's catalog memory and the planner's own weights, how close is it?

Only an unknown model (after trying ``base_model``), GPU or vLLM version makes a record unsupported.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from planner.calibration.records import StartupRecord
from planner.errors import KvPlannerError, UnknownModelError, UnknownVllmVersionError
from planner.gpus.spec import GpuSpec
from planner.kv.capacity import capacity
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, MemoryCoefficients
from planner.models.quantization import scheme_quantization
from planner.models.spec import ModelSpec
from planner.plan.build import Prediction, predict
from planner.units import GiB
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release

ModelLookup = Callable[[str], ModelSpec]
GpuLookup = Callable[[str], GpuSpec]
ROUNDING_GIB = 0.005


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LayoutResult(_Out):
    num_gpu_blocks: int
    tokens: int
    max_concurrency: float
    logged_gpu_blocks: int | None
    logged_tokens: int | None
    logged_max_concurrency: float | None
    exact: bool | None


class BudgetResult(_Out):
    kv_cache_memory_gib: float
    logged_kv_cache_memory_gib: float
    error: float


class FullResult(_Out):
    kv_cache_memory_gib: float
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_counted: bool
    logged_kv_cache_memory_gib: float | None
    error: float | None
    term_errors_gib: dict[str, float]


class RecordResult(_Out):
    id: str
    model: str
    supported: bool
    reason: str | None = None
    layout: LayoutResult | None = None
    budget: BudgetResult | None = None
    full: FullResult | None = None


class ErrorStats(_Out):
    count: int
    median: float | None
    p90: float | None
    max: float | None
    abs_median: float | None
    abs_max: float | None


class Summary(_Out):
    records: int
    supported: int
    layout_exact: int
    layout_scored: int
    budget: ErrorStats
    full: ErrorStats


class ValidationReport(_Out):
    records: list[RecordResult]
    summary: Summary


def serving_args(record: StartupRecord, *, online_quantization: bool) -> ServingArgs:
    return ServingArgs(
        max_model_len=record.max_model_len,
        max_num_seqs=record.max_num_seqs,
        max_num_batched_tokens=record.max_num_batched_tokens,
        gpu_memory_utilization=record.gpu_memory_utilization,
        kv_cache_dtype=record.kv_cache_dtype or "auto",
        block_size=record.block_size,
        tensor_parallel_size=record.tensor_parallel_size or 1,
        pipeline_parallel_size=record.pipeline_parallel_size or 1,
        nnodes=record.nodes or 1,
        dtype=record.dtype or "auto",
        quantization=record.quantization if online_quantization else None,
        enforce_eager=bool(record.enforce_eager),
        enable_prefix_caching=record.enable_prefix_caching,
        async_scheduling=record.async_scheduling,
        max_cudagraph_capture_size=record.max_cudagraph_capture_size,
        env=record_env(record),
        mxfp4_backend=record.mxfp4_backend,
        language_model_only=bool(record.language_model_only),
    )


def record_env(record: StartupRecord) -> dict[str, str]:
    # Long contexts in these reports were accepted by the vLLM that ran them.
    env = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    if record.flashinfer_sampler is False:
        # Without FlashInfer vLLM takes the same PyTorch path as with the sampler switched off.
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    if record.gpu_p2p is False:
        # GPUs without P2P (vLLM: "lacks GPU P2P capability"): NCCL takes its shared-memory transport, whose
        # buffers are host memory, as NCCL_P2P_DISABLE=1 makes it (planner/memory/nontorch.py).
        env["NCCL_P2P_DISABLE"] = "1"
    if record.model_runner_v2 is not None:
        # The startup forced the runner (VLLM_USE_V2_MODEL_RUNNER=0/1): the memory terms follow the runner.
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if record.model_runner_v2 else "0"
    return env


def resolve_record_model(record: StartupRecord, lookup: ModelLookup) -> tuple[ModelSpec, bool]:
    """(spec, online quantization). A quantized variant missing from the catalog is planned as its
    base model with the record's weight scheme."""
    try:
        return lookup(record.model), record.quantization is not None and record.base_model is None
    except UnknownModelError:
        if not record.base_model:
            raise
    base = lookup(record.base_model)
    scheme = scheme_quantization(record.quantization) if record.quantization else None
    update: dict[str, object] = {"id": record.model, "checkpoint_bytes": None}
    if scheme is not None:
        update["quantization"] = scheme
    return base.model_copy(update=update), False


def _layout(
    record: StartupRecord,
    spec: ModelSpec,
    gpu: GpuSpec,
    args: ServingArgs,
    baseline: Prediction,
    coefficients: MemoryCoefficients,
) -> LayoutResult | None:
    if record.kv_cache_memory_gib is None:
        return None
    # The logged figure is the first stage's; other stages keep their predicted difference to it.
    predicted = [stage.kv_bytes for stage in baseline.engine.memory]

    def run(kv_gib: float) -> tuple[int, int, float]:
        logged = int(kv_gib * GiB)
        override = [logged + (p - predicted[0]) for p in predicted]
        pred = predict(
            spec, gpu, args, vllm_version=record.vllm_version, coefficients=coefficients, available_override=override
        )
        length = record.max_concurrency_len or pred.max_model_len
        tokens, concurrency = capacity(pred.layout, length, pred.release.tokens_formula)
        return pred.layout.num_gpu_blocks, tokens, concurrency

    blocks, tokens, concurrency = run(record.kv_cache_memory_gib)
    low = run(record.kv_cache_memory_gib - ROUNDING_GIB)
    high = run(record.kv_cache_memory_gib + ROUNDING_GIB)
    exact: bool | None
    if record.gpu_blocks is not None:
        exact = low[0] <= record.gpu_blocks <= high[0]
    elif record.kv_cache_tokens is not None:
        exact = low[1] <= record.kv_cache_tokens <= high[1]
    else:
        exact = None
    return LayoutResult(
        num_gpu_blocks=blocks,
        tokens=tokens,
        max_concurrency=round(concurrency, 4),
        logged_gpu_blocks=record.gpu_blocks,
        logged_tokens=record.kv_cache_tokens,
        logged_max_concurrency=record.max_concurrency_x,
        exact=exact,
    )


def _budget(record: StartupRecord, baseline: Prediction) -> BudgetResult | None:
    if record.weights_gib is None or record.kv_cache_memory_gib is None:
        return None
    stage = baseline.engine.memory[0]
    kv = stage.kv_bytes + stage.weights_bytes - int(record.weights_gib * GiB)
    kv_gib = kv / GiB
    return BudgetResult(
        kv_cache_memory_gib=round(kv_gib, 3),
        logged_kv_cache_memory_gib=record.kv_cache_memory_gib,
        error=round((kv_gib - record.kv_cache_memory_gib) / record.kv_cache_memory_gib, 5),
    )


def _full(record: StartupRecord, baseline: Prediction) -> FullResult:
    stage = baseline.engine.memory[0]
    kv_gib = stage.kv_bytes / GiB
    logged = record.kv_cache_memory_gib
    terms = {
        "weights": (stage.weights_bytes, record.weights_gib),
        "activation_peak": (stage.activation_peak_bytes, record.activation_peak_gib),
        "non_torch": (stage.non_torch_bytes, record.non_torch_gib),
        "cuda_graph": (stage.cuda_graph_bytes, record.cuda_graph_gib),
    }
    return FullResult(
        kv_cache_memory_gib=round(kv_gib, 3),
        weights_gib=round(stage.weights_bytes / GiB, 3),
        activation_peak_gib=round(stage.activation_peak_bytes / GiB, 3),
        non_torch_gib=round(stage.non_torch_bytes / GiB, 3),
        cuda_graph_gib=round(stage.cuda_graph_bytes / GiB, 3),
        cuda_graph_counted=stage.cuda_graph_counted,
        logged_kv_cache_memory_gib=logged,
        error=round((kv_gib - logged) / logged, 5) if logged else None,
        term_errors_gib={name: round(p / GiB - v, 3) for name, (p, v) in terms.items() if v is not None},
    )


def validate_record(
    record: StartupRecord,
    *,
    lookup_model: ModelLookup,
    lookup_gpu: GpuLookup,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
) -> RecordResult:
    def unsupported(reason: str) -> RecordResult:
        return RecordResult(id=record.id, model=record.model, supported=False, reason=reason)

    try:
        resolve_release(record.vllm_version)
        spec, online = resolve_record_model(record, lookup_model)
    except (UnknownModelError, UnknownVllmVersionError, LookupError) as error:
        return unsupported(_one_line(error))
    layout_only: str | None = None
    if (record.nodes or 1) > 1:
        # vllm 0.10.1.1 distributed/device_communicators/custom_all_reduce.py: "Custom allreduce is disabled
        # because this process group spans across nodes"; NCCL then runs over the network with buffers the
        # memory model does not have (issue 12 cause d). The blocks still follow from the logged memory.
        layout_only = (
            f"layout only: tensor parallelism across {record.nodes} nodes (its non-torch memory is not modelled; "
            "the margin keeps the largest miss measured)"
        )
    try:
        gpu = lookup_gpu(record.gpu or "")
    except LookupError as error:
        depends = gpu_dependence(spec, record)
        if depends is not None:
            return unsupported(f"{_one_line(error)} (and the layout depends on the GPU: {depends})")
        if record.kv_cache_memory_gib is None:
            return unsupported(_one_line(error))
        gpu, layout_only = stand_in_gpu(record), layout_only or f"layout only: {_one_line(error)}"
    args = serving_args(record, online_quantization=online)
    try:
        baseline = predict(spec, gpu, args, vllm_version=record.vllm_version, coefficients=coefficients)
    except KvPlannerError as error:
        return RecordResult(
            id=record.id, model=record.model, supported=True, reason=f"planner refused the settings: {error}"
        )
    if layout_only is not None:
        # Fed the logged KV memory, the blocks do not depend on the GPU here: no budget, no full prediction.
        return RecordResult(
            id=record.id,
            model=record.model,
            supported=True,
            reason=layout_only,
            layout=_layout(record, spec, gpu, args, baseline, coefficients),
        )
    return RecordResult(
        id=record.id,
        model=record.model,
        supported=True,
        layout=_layout(record, spec, gpu, args, baseline, coefficients),
        budget=_budget(record, baseline),
        full=_full(record, baseline),
    )


def _one_line(error: BaseException) -> str:
    """The message and its hint (e.g. why a model lookup failed), on one line."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def gpu_dependence(spec: ModelSpec, record: StartupRecord) -> str | None:
    """Why this record's KV layout depends on the GPU (None: fed the logged KV memory, it does not)."""
    if spec.mla is not None and record.block_size is None:
        return "MLA: the attention backend, and so the block size, is chosen per GPU architecture"
    if "M" in spec.layer_pattern:
        return "Mamba/linear attention: the block alignment depends on the GPU architecture"
    if ("S" in spec.layer_pattern or "C" in spec.layer_pattern) and record.max_num_batched_tokens is None:
        return "sliding windows keep max_num_batched_tokens in flight, whose default depends on the GPU's memory"
    if (record.kv_cache_dtype or "auto").startswith("fp8") and resolve_release(record.vllm_version)[1].v0_available:
        return "fp8 KV cache: whether vLLM falls back to V0 depends on FlashAttention 3 (the GPU)"
    return None


def stand_in_gpu(record: StartupRecord) -> GpuSpec:
    """A GPU for layout-only checks: the logged total memory, Hopper features (unused by the layout)."""
    total = record.total_gpu_memory_gib or 80.0
    return GpuSpec(
        name=f"unlisted ({record.gpu or 'not logged'})",
        vendor="nvidia",
        memory_bytes=int(total * GiB),
        memory_source="the startup record",
        bandwidth_bytes_per_s=1,
        architecture="hopper",
        compute_capability="9.0",
        fp8=True,
    )


def _stats(errors: list[float]) -> ErrorStats:
    if not errors:
        return ErrorStats(count=0, median=None, p90=None, max=None, abs_median=None, abs_max=None)
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    absolute = sorted(abs(e) for e in errors)
    return ErrorStats(
        count=len(errors),
        median=round(statistics.median(errors), 5),
        p90=round(p90, 5),
        max=round(max(errors), 5),
        abs_median=round(statistics.median(absolute), 5),
        abs_max=round(absolute[-1], 5),
    )


def summarize(results: list[RecordResult]) -> Summary:
    scored = [r.layout for r in results if r.layout is not None and r.layout.exact is not None]
    return Summary(
        records=len(results),
        supported=sum(1 for r in results if r.supported),
        layout_exact=sum(1 for layout in scored if layout.exact),
        layout_scored=len(scored),
        budget=_stats([r.budget.error for r in results if r.budget is not None]),
        full=_stats([r.full.error for r in results if r.full is not None and r.full.error is not None]),
    )


def validate_records(
    records: Sequence[StartupRecord | str],
    *,
    lookup_model: ModelLookup,
    lookup_gpu: GpuLookup,
    coefficients: MemoryCoefficients = DEFAULT_COEFFICIENTS,
) -> ValidationReport:
    """One result per input line; a line that is not a record (a string: its error) is unsupported."""
    results = []
    for record in records:
        if isinstance(record, str):
            where, _, problem = record.partition(": ")
            results.append(RecordResult(id=where, model="", supported=False, reason=problem or record))
        else:
            results.append(
                validate_record(record, lookup_model=lookup_model, lookup_gpu=lookup_gpu, coefficients=coefficients)
            )
    return ValidationReport(records=results, summary=summarize(results))
