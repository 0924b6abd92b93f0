"""A cold torch.compile inside the profile run (issue 12, records g006-g010, n001, r020-r025), and FP8 MoE
workspaces on Ada.

vLLM compiles the model on its first call, which is the profile batch. From 0.10.2 (not 0.11.0) it compiles
with ``InductorStandaloneAdaptor`` (``compilation/backends.py`` make_compiler, ``VLLM_USE_STANDALONE_COMPILE``
on by default), and torch's ``_inductor/standalone_compile.py`` (2.8-2.13) turns on
``triton.autotune_at_compile_time``: ``_inductor/codegen/wrapper.py`` then runs each Triton kernel on random
copies of its inputs, the embedding gather on a copy of the whole embedding table. Every expectation below
cites the vLLM or torch file it was read in.
"""

from __future__ import annotations

import pytest

from planner.calibration.dataset import dataset_records
from planner.calibration.records import StartupRecord
from planner.calibration.validate import resolve_record_model, serving_args
from planner.gpus.catalog import lookup_gpu
from planner.memory.activation import compile_example_bytes, moe_workspace_bytes
from planner.memory.coefficients import GiB
from planner.models.catalog import lookup_model
from planner.models.spec import ModelSpec
from planner.plan.build import Prediction, margin_band, memory_report, predict
from planner.vllm.args import ServingArgs
from planner.vllm.releases import resolve_release

_RECORDS = {r.id: r for r in dataset_records()}


def _first_stage(record_id: str) -> tuple[StartupRecord, ModelSpec, Prediction]:
    record = _RECORDS[record_id]
    spec, online = resolve_record_model(record, lookup_model)
    prediction = predict(
        spec,
        lookup_gpu(record.gpu or ""),
        serving_args(record, online_quantization=online),
        vllm_version=record.vllm_version,
    )
    return record, spec, prediction


def test_releases_that_compile_with_autotuning_inputs() -> None:
    # 0.10.1.1 pins torch 2.7.1 (no standalone_compile: InductorAdaptor); 0.10.2 torch 2.8.0 with
    # VLLM_USE_STANDALONE_COMPILE "1"; 0.11.0 envs.py defaults it to "0"; 0.11.1 back to "1" (envs.py), kept
    # through 0.33 (0.12, 0.14, 0.16, 0.19, 0.22, 0.26, 0.29 compilation/backends.py read).
    flags = {v: resolve_release(v)[1].compile_autotune_examples for v in ("0.10.1.1", "0.10.2", "0.11.0", "0.11.1")}
    assert flags == {"0.10.1.1": False, "0.10.2": True, "0.11.0": False, "0.11.1": True}
    assert resolve_release("0.19.0")[1].compile_autotune_examples
    assert resolve_release("0.29.0")[1].compile_autotune_examples
    assert resolve_release("0.33.0")[1].compile_autotune_examples


def test_the_example_inputs_are_the_embedding_table_and_two_token_buffers() -> None:
    spec = lookup_model("google/gemma-4-26B-A4B-it")
    # 262,144 x 2,816 bf16 (a multiple of 64 already) + the gathered rows and their normed copy at 2,048 tokens
    assert compile_example_bytes(spec, tokens=2048, tp=1, dtype_bytes=2) == 262144 * 2816 * 2 + 2 * 2048 * 2816 * 2
    # vocab_parallel_embedding.py: the table is padded to 64 rows, then sharded by TP
    llama = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    assert compile_example_bytes(llama, tokens=0, tp=2, dtype_bytes=2) == 128256 // 2 * 4096 * 2


@pytest.mark.parametrize(
    ("record_id", "held_gib"),
    [
        # Model Runner V2, 0.29, FP8 MoE: the log's 'peak activation' less its graph estimate is the torch peak
        # less what is still allocated after profiling (utils/mem_utils.py transient_peak_headroom), and the
        # TritonExperts workspaces (2,048 x 8 x (2,816 + 2,816) x 2 bytes) are still allocated then.
        ("g006", 2048 * 8 * (2816 + 2816) * 2 / GiB),
        ("g007", 2048 * 8 * (2816 + 2816) * 2 / GiB),
        ("g009", 2048 * 8 * (2816 + 2816) * 2 / GiB),
        # 0.26 (torch peak increase) and 0.19: nothing is held, the peak is the table's copy.
        ("n001", 0.0),  # Qwen3-8B, H100, 151,936 x 4,096 bf16
        ("r020", 0.0),  # Llama-3.1-8B in float32: 128,256 x 4,096 x 4 bytes (the forward term plans 2.16)
        ("r024", 0.0),  # Llama-3.1-8B, PP=2, the first stage's log
    ],
)
def test_a_cold_compile_sets_the_logged_peak(record_id: str, held_gib: float) -> None:
    record, _, prediction = _first_stage(record_id)
    stage = prediction.engine.memory[0]
    assert stage.cold_compile_bytes > 0, "the compile's copy of the table is the first stage's peak"
    assert record.activation_peak_gib is not None
    planned = stage.activation_peak_bytes / GiB - held_gib
    assert abs(planned - record.activation_peak_gib) <= 0.011, (planned, record.activation_peak_gib)


def test_an_eager_start_compiles_nothing() -> None:
    """g010: --enforce-eager (config/vllm.py: compilation mode NONE) logs a 0.04 GiB peak at 512 tokens."""
    record, spec, prediction = _first_stage("g010")
    assert record.enforce_eager
    assert prediction.engine.memory[0].cold_compile_bytes == 0
    assert prediction.engine.memory[0].activation_peak_bytes < compile_example_bytes(
        spec, tokens=512, tp=1, dtype_bytes=2
    )


def _peak(model: str, gpu: str, version: str, **args: object) -> tuple[int, int]:
    prediction = predict(lookup_model(model), lookup_gpu(gpu), ServingArgs(**args), vllm_version=version)
    stage = prediction.engine.memory[0]
    return stage.activation_peak_bytes, stage.cold_compile_bytes


def test_where_the_compile_copies_no_table() -> None:
    base = {"max_model_len": 4096, "max_num_seqs": 16, "max_num_batched_tokens": 2048}
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    assert _peak(llama, "L40S", "0.29.0", **base)[1] > 0
    # compilation/backends.py make_compiler: InductorAdaptor autotunes at run time on the real tensors
    assert _peak(llama, "L40S", "0.29.0", **base, env={"VLLM_USE_STANDALONE_COMPILE": "0"})[1] == 0
    assert _peak(llama, "L40S", "0.11.0", **base)[1] == 0
    assert _peak(llama, "L40S", "0.29.0", **base, enforce_eager=True)[1] == 0
    # A model fed multimodal inputs is embedded outside the compiled graph (v1/worker/gpu/model_runner.py
    # uses_inputs_embeds; gpu_model_runner.py _preprocess); text-only (--language-model-only) it is inside.
    vision = "Qwen/Qwen3.5-4B"
    assert lookup_model(vision).vision is not None
    assert _peak(vision, "L40S", "0.29.0", **base)[1] == 0
    assert _peak(vision, "L40S", "0.29.0", **base, language_model_only=True)[1] > 0


def test_only_the_first_pipeline_stage_holds_the_embedding() -> None:
    spec, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100-80GB")
    args = ServingArgs(max_model_len=8192, max_num_seqs=1, pipeline_parallel_size=2)
    stages = predict(spec, gpu, args, vllm_version="0.19.0").engine.memory
    assert stages[0].cold_compile_bytes > 0
    assert stages[1].cold_compile_bytes == 0


def test_a_warm_compile_cache_is_the_bands_upper_side() -> None:
    """A warm cache loads the compiled graphs (no codegen, no autotuning block): vLLM then finds the copy's
    bytes more KV memory than the cold start planned, never less."""
    record, spec, prediction = _first_stage("g006")
    gpu = lookup_gpu(record.gpu or "")
    args = serving_args(record, online_quantization=False)
    band = margin_band(spec, gpu, args, prediction, memory_report(gpu, prediction, False), version_known=True)
    term = next(t for t in band.terms if t.name == "compile_cache")
    assert term.low_bytes == 0
    assert term.high_bytes == prediction.engine.memory[0].cold_compile_bytes
    # the table's copy (1.396 GiB) less the warm peak it replaces: V2's sampler warm-up (0.137) with the
    # FP8 workspaces still held (0.172), above the MoE forward term (0.277)
    assert abs(term.high_bytes / GiB - (1.396 - 0.137 - 0.172)) < 0.002
    eager = predict(spec, gpu, args.model_copy(update={"enforce_eager": True}), vllm_version=record.vllm_version)
    eager_band = margin_band(spec, gpu, args, eager, memory_report(gpu, eager, False), version_known=True)
    assert all(t.name != "compile_cache" for t in eager_band.terms)


def test_fp8_moe_workspaces_are_held_on_ada_from_029() -> None:
    """0.29.0 fused_moe/oracle/fp8.py select_fp8_moe_backend: below SM 9.0 only TRITON supports W8A8 FP8
    (FlashInfer, DeepGEMM and CUTLASS need 9.0+), compressed_tensors_moe_w8a8_fp8.py builds the modular
    kernel (make_fp8_moe_kernel) whose modular_kernel.py _allocate_buffers takes current_workspace_manager()
    buffers of experts/triton_moe.py workspace_shapes, never freed. So many sequences at few batched tokens
    peak at the sampler plus the workspaces; releases before 0.29 are not read (planned as before)."""
    assert resolve_release("0.29.0")[1].fp8_moe_workspace_held
    assert not resolve_release("0.28.0")[1].fp8_moe_workspace_held
    spec = lookup_model("google/gemma-4-26B-A4B-it")
    args = {
        "max_model_len": 4096,
        "max_num_seqs": 1024,
        "max_num_batched_tokens": 1024,
        "quantization": "fp8",
        "enforce_eager": True,
    }
    workspace = moe_workspace_bytes(spec, 1024, 1, 2)
    assert workspace == 1024 * 8 * (2816 + 2816) * 2
    ada = predict(spec, lookup_gpu("L40S"), ServingArgs(**args), vllm_version="0.29.0").engine.memory[0]
    hopper = predict(spec, lookup_gpu("H100-80GB"), ServingArgs(**args), vllm_version="0.29.0").engine.memory[0]
    # Hopper may pick FlashInfer or DeepGEMM experts (not read): planned without the workspaces, as before
    assert ada.activation_peak_bytes == hopper.activation_peak_bytes + workspace
