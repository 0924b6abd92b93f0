"""Causes of the budget's over-prediction under tensor parallelism, as the vLLM release that has them does it
(issue 12: g013, Qwen2.5-14B-Instruct on two A100-40GB with vLLM 0.7.2's V0 engine, was over-predicted by
11.5% from its 1.54 GiB of non-torch memory and a 0.64 GiB larger activation peak).

Every expectation cites the file of vLLM's source it was read in (``pip download vllm==X.Y.Z --no-deps``).
"""

from __future__ import annotations

import pytest

from planner.calibration.dataset import dataset_records
from planner.calibration.logs import parse_startup_log
from planner.calibration.records import StartupRecord
from planner.calibration.validate import record_env, resolve_record_model, serving_args, validate_records
from planner.gpus.catalog import lookup_gpu
from planner.memory.activation import eager_width
from planner.memory.coefficients import DEFAULT_COEFFICIENTS, GiB
from planner.models.catalog import lookup_model
from planner.plan import make_plan
from planner.plan.build import predict
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release

RECORDS = {r.id: r for r in dataset_records()}


def _record(record_id: str) -> StartupRecord:
    return RECORDS[record_id]


def _predict(record: StartupRecord, **env: str):  # type: ignore[no-untyped-def]
    spec, online = resolve_record_model(record, lookup_model)
    args = serving_args(record, online_quantization=online)
    if env:
        args = args.model_copy(update={"env": {**args.env, **env}})
    return predict(spec, lookup_gpu(record.gpu or ""), args, vllm_version=record.vllm_version)


def _full_error(record: StartupRecord) -> float:
    report = validate_records([record], lookup_model=lookup_model, lookup_gpu=lookup_gpu).records[0]
    assert report.full is not None and report.full.error is not None
    return report.full.error


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


# Cause 2: NCCL's channel buffers. At TP > 1 vLLM has two communicators for the TP group: PyNcclCommunicator
# (parallel_state.py GroupCoordinator, init_worker_distributed_environment) and torch's ProcessGroupNCCL on the
# device group, first used by the profile run's logits gather (V0 logits_processor.py _gather_logits ->
# torch.distributed.gather; V1 base_device_communicator.py all_gather -> all_gather_into_tensor). Up to 0.10.1
# vLLM sets NCCL_CUMEM_ENABLE=0 (0.7.2 vllm/__init__.py, 0.8.5-0.10.1.1 env_override.py, 0.6.3.post1/0.6.4.post1
# worker/worker_base.py), and NCCL without cuMem connects every channel's ring and tree in ncclCommInitRank
# (NCCL init.cc: runtimeConn = cuMemSupport && NCCL_RUNTIME_CONNECT; before 2.22 always), after those releases'
# baseline snapshot (worker/worker.py and v1/worker/gpu_worker.py init_device snapshot before
# init_worker_distributed_environment). 0.10.2's env_override.py no longer sets it: NCCL connects on first use.


@pytest.mark.parametrize(
    ("version", "at_init"),
    [
        ("0.6.3.post1", True),
        ("0.6.4.post1", True),
        ("0.7.2", True),
        ("0.8.5", True),
        ("0.9.2", True),
        ("0.10.1.1", True),
        ("0.10.2", False),
        ("0.11.0", False),
        ("0.33.0", False),
    ],
)
def test_releases_up_to_0101_keep_nccls_channel_buffers_from_communicator_creation(version: str, at_init: bool) -> None:
    assert resolve_release(version)[1].nccl_buffers_at_init is at_init


def test_with_gpu_p2p_the_channel_buffers_are_non_torch_memory() -> None:
    """g013 (0.7.2, two A100-40GB with P2P: custom all-reduce on, 'Registering 3395 cuda graph addresses') logs
    non_torch_memory 1.54 GiB on both ranks; r065 and d101 (0.10.1 / 0.10.1.1, two A100-80GB in pods whose
    driver reports no P2P: 'Custom allreduce is disabled because your platform lacks GPU P2P capability') fit
    the baseline terms alone: NCCL's shared-memory transport keeps its buffers in host memory."""
    c = DEFAULT_COEFFICIENTS
    g013 = _record("g013")
    assert g013.non_torch_gib == 1.54
    stage = _predict(g013).engine.memory[0]
    assert stage.non_torch_bytes == c.cuda_workspace_bytes + c.nccl_bytes_plain + c.nccl_bytes_p2p_at_init
    assert abs(stage.non_torch_bytes / GiB - g013.non_torch_gib) < 0.01
    assert abs(_full_error(g013)) < 0.01  # was +11.5%
    # The same startup without P2P keeps only the baseline terms.
    no_p2p = _predict(g013, NCCL_P2P_DISABLE="1").engine.memory[0]
    assert no_p2p.non_torch_bytes == c.cuda_workspace_bytes + c.nccl_bytes_plain
    for record_id in ("r065", "d101"):
        record = _record(record_id)
        assert record.gpu_p2p is False and record_env(record)["NCCL_P2P_DISABLE"] == "1"
        assert _predict(record).engine.nccl_at_init_bytes == 0
        assert abs(_full_error(record)) < 0.01
        # planned with P2P they would lose the whole figure (r065 by 12%, d101 by 5%)
        with_p2p = _record(record_id).model_copy(update={"gpu_p2p": None})
        assert _full_error(with_p2p) < -0.03


def test_the_channel_buffers_are_not_planned_where_another_term_holds_them() -> None:
    # From 0.10.2 NCCL connects on first use, which nccl_bytes_plain measures.
    g013 = _record("g013")
    later = _predict(g013.model_copy(update={"vllm_version": "0.10.2"}))
    assert later.engine.nccl_at_init_bytes == 0
    # NVSwitch/NVLS systems: the measured NVLS figure already plans the 0.10.0 TP=8 H100 startups within 0.2%.
    for record_id in ("c006", "c007"):
        record = _record(record_id)
        assert _predict(record).engine.nccl_at_init_bytes == 0
        assert abs(_full_error(record)) < 0.005
    # A TP group across nodes runs NCCL's network transport: the tp_across_nodes band, not this term.
    assert _predict(_record("d102")).engine.nccl_at_init_bytes == 0
    # One GPU: no communicator.
    spec, gpu = lookup_model("Qwen/Qwen2.5-14B-Instruct"), lookup_gpu("A100-40GB")
    single = predict(spec, gpu, ServingArgs(max_model_len=8192), vllm_version="0.7.2")
    assert single.engine.nccl_at_init_bytes == 0


def test_the_band_keeps_the_channel_buffers_again_on_both_sides() -> None:
    """One startup measures the figure; NCCL sizes it by channels and a rank's peers (interconnect, TP), and a
    node without P2P keeps it in host memory: the band holds it once more below and above the prediction."""
    spec, gpu = lookup_model("Qwen/Qwen2.5-14B-Instruct"), lookup_gpu("A100-40GB")
    args = ServingArgs(tensor_parallel_size=2, max_model_len=32768, dtype="float16")
    plan = make_plan(spec, gpu, args, vllm_version="0.7.2", with_alternatives=False)
    assert plan.margin is not None
    term = next(t for t in plan.margin.terms if t.name == "nccl_at_init")
    assert term.low_bytes == term.high_bytes == DEFAULT_COEFFICIENTS.nccl_bytes_p2p_at_init
    later = make_plan(spec, gpu, args, vllm_version="0.10.2", with_alternatives=False)
    assert later.margin is not None and all(t.name != "nccl_at_init" for t in later.margin.terms)


def test_a_startup_log_without_p2p_is_read_as_such() -> None:
    text = "\n".join(
        [
            "INFO 09-03 00:35:55 [api_server.py:1805] vLLM API server version 0.10.1.1",
            "(VllmWorker TP0 pid=1430) WARNING 09-03 00:36:44 [custom_all_reduce.py:147] Custom allreduce is "
            "disabled because your platform lacks GPU P2P capability or P2P test failed. To silence this "
            "warning, specify disable_custom_all_reduce=True explicitly.",
            "(VllmWorker TP0 pid=1430) INFO 09-03 00:40:53 [gpu_worker.py:276] Available KV cache memory: 12.02 GiB",
        ]
    )
    assert parse_startup_log(text).gpu_p2p is False
    assert parse_startup_log(text.splitlines()[::2]).gpu_p2p is None
