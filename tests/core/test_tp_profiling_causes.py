"""Causes of the budget's over-prediction under tensor parallelism, as the vLLM release that has them does it
(issue 12: g013, Qwen2.5-14B-Instruct on two A100-40GB with vLLM 0.7.2's V0 engine, was over-predicted by
11.5% from its 1.54 GiB of non-torch memory and a 0.64 GiB larger activation peak).

Every expectation cites the file of vLLM's source it was read in (``pip download vllm==X.Y.Z --no-deps``).
"""

from __future__ import annotations

from planner.calibration.dataset import dataset_records
from planner.calibration.records import StartupRecord
from planner.calibration.validate import resolve_record_model, serving_args
from planner.gpus.catalog import lookup_gpu
from planner.memory.activation import eager_width
from planner.memory.coefficients import GiB
from planner.models.catalog import lookup_model
from planner.plan.build import predict

RECORDS = {r.id: r for r in dataset_records()}


def _record(record_id: str) -> StartupRecord:
    return RECORDS[record_id]


def _predict(record: StartupRecord, **env: str):  # type: ignore[no-untyped-def]
    spec, online = resolve_record_model(record, lookup_model)
    args = serving_args(record, online_quantization=online)
    if env:
        args = args.model_copy(update={"env": {**args.env, **env}})
    return predict(spec, lookup_gpu(record.gpu or ""), args, vllm_version=record.vllm_version)


# Cause 1: the V0 forward under TP. Each RowParallelLinear output is all-reduced out of place
# (0.7.2 distributed/parallel_state.py GroupCoordinator._all_reduce_out_place -> device_communicators/pynccl.py
# all_reduce: out_tensor = torch.empty_like(in_tensor)) while its input is still referenced, and qwen2.py's
# Qwen2MLP keeps gate_up in a local through down_proj (llama.py's LlamaMLP rebinds x and frees it).


def test_v0_peak_under_tp_holds_the_all_reduce_output_and_qwen2s_gate_up() -> None:
    qwen = lookup_model("Qwen/Qwen2.5-14B-Instruct")
    h, i = qwen.hidden_size, qwen.intermediate_size
    # layer input, residual, post-attention hidden, down_proj's output (+ its all-reduced copy) + gate_up + act
    assert eager_width(qwen, 1) == 4 * h + 3 * i
    assert eager_width(qwen, 2) == 5 * h + 3 * i / 2
    llama = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    h, i = llama.hidden_size, llama.intermediate_size
    # llama.py: the peak is the activation's output next to gate_up, as the #10517 logs measure
    # (test_profiling_causes.py); at TP=8 the down projection and its all-reduce copy are larger.
    assert eager_width(llama, 1) == 3 * h + 3 * i
    assert eager_width(llama, 2) == 3 * h + 3 * i / 2
    assert eager_width(llama, 8) == 5 * h + i / 8

    record = _record("g013")  # both ranks log "PyTorch activation peak memory takes 2.84GiB"
    assert record.activation_peak_gib == 2.84 and record.engine == "v0" and record.tensor_parallel_size == 2
    prediction = _predict(record)
    tokens = prediction.resolved.max_num_batched_tokens
    assert tokens == 32768  # chunked prefill off at a 32K context: the profile batch is the whole context
    peak = prediction.engine.memory[0].activation_peak_bytes
    assert abs(peak / (record.activation_peak_gib * GiB) - 1) < 0.01
    # the TP=1-style live set (3 x hidden + 3 x intermediate / tp) would miss a fifth of it
    assert tokens * (3 * qwen.hidden_size + 3 * qwen.intermediate_size / 2) * 2 < 0.8 * record.activation_peak_gib * GiB
