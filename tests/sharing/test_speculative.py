"""Speculative decoding: drafter weights, KV layers and lookahead slots, per release as vLLM's source does it.

Each rule names the wheel and file it was read from (planner/plan/speculative.py has the table).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.calibration.dataset import parse_lines
from planner.errors import InvalidArgumentError
from planner.gpus.catalog import lookup_gpu
from planner.hub.resolve import resolve_model
from planner.plan import make_plan
from planner.plan.speculative import SpeculativeSettings, lookahead_tokens, parse_speculative_config
from planner.vllm.args import ServingArgs
from planner.vllm.releases import Version

DATA = Path(__file__).parent / "data"
GiB = 1 << 30
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _settings(method: str, k: int = 3) -> SpeculativeSettings:
    return SpeculativeSettings(method=method, num_speculative_tokens=k, model="x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("release", "method", "expected", "where"),
    [
        # vllm 0.8.5 v1/core/sched/scheduler.py: Scheduler.__init__ (use_eagle(): eagle, eagle3)
        ("0.8.5", "eagle", 3, "0.8.5 v1/core/sched/scheduler.py"),
        ("0.8.5", "ngram", 0, "0.8.5 v1/core/sched/scheduler.py"),
        # vllm 0.11.0 config/speculative.py: use_eagle() = eagle, eagle3, mtp
        ("0.11.0", "mtp", 3, "0.11.0 config/speculative.py: SpeculativeConfig.use_eagle"),
        ("0.11.0", "eagle3", 3, "0.11.0 v1/core/sched/scheduler.py"),
        # vllm 0.15.1 v1/core/sched/scheduler.py: uses_draft_model() -> lookahead k
        ("0.15.1", "draft_model", 3, "0.15.1 v1/core/sched/scheduler.py"),
        ("0.19.0", "draft_model", 3, "0.19.0 v1/core/sched/scheduler.py"),
        # vllm 0.26.0 v1/core/sched/scheduler.py: dflash k + 1, dspark k
        ("0.26.0", "dflash", 4, "0.26.0 v1/core/sched/scheduler.py"),
        ("0.26.0", "dspark", 3, "0.26.0 v1/core/sched/scheduler.py"),
        # vllm 0.33.0 config/vllm.py: VllmConfig.num_lookahead_tokens
        ("0.33.0", "dflash", 4, "0.33.0 config/vllm.py: num_lookahead_tokens"),
        ("0.33.0", "eagle", 3, "0.33.0 config/vllm.py: num_lookahead_tokens"),
        ("0.33.0", "suffix", 0, "0.33.0 config/vllm.py: num_lookahead_tokens"),
    ],
)
def test_lookahead_slots_per_release(release: str, method: str, expected: int, where: str) -> None:
    assert lookahead_tokens(_settings(method), Version.parse(release)) == expected, where


def test_draft_model_refused_before_0_15() -> None:
    """vllm 0.14.0 config/speculative.py: __post_init__ raises NotImplementedError for draft models."""
    text = json.dumps({"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4})
    with pytest.raises(InvalidArgumentError, match="draft model is not supported"):
        parse_speculative_config(text, Version.parse("0.14.0"))
    assert parse_speculative_config(text, Version.parse("0.15.1")).method == "draft_model"


@pytest.mark.parametrize(
    ("config", "method"),
    [
        ({"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}, "eagle"),
        ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}, "eagle3"),
        ({"model": "[ngram]", "num_speculative_tokens": 2}, "ngram"),
        ({"method": "deepseek_mtp", "num_speculative_tokens": 1}, "mtp"),
        ({"method": "mtp"}, "mtp"),
    ],
)
def test_method_detection_as_vllm_0_19(config: dict[str, object], method: str) -> None:
    """vllm 0.19.0 config/speculative.py: __post_init__ (names with "eagle-" / "eagle3", *_mtp -> mtp)."""
    assert parse_speculative_config(json.dumps(config), Version.parse("0.19.0")).method == method


def test_bad_speculative_config_is_a_clear_error() -> None:
    for text in ("{not json", "[1, 2]", json.dumps({"num_speculative_tokens": 2}), json.dumps({"method": "x"})):
        with pytest.raises(InvalidArgumentError):
            parse_speculative_config(text, Version.parse("0.19.0"))


def test_real_eagle3_startup_weights_reproduced() -> None:
    """speculators PR #166 (vLLM main of 2025-10-30): Llama-3.1-8B + EAGLE3 head, "Model loading took
    15.8114 GiB". The target alone is 14.99 GiB (its exact parameter count); the EAGLE3 head shares the
    embeddings and keeps its own 32k-vocab LM head, as the log says."""
    (record,) = parse_lines((DATA / "spec-decode-startups.jsonl").read_text(), "spec-decode-startups.jsonl")
    d = record.deployment
    model = resolve_model(d.model, offline=True).spec
    args = ServingArgs(
        max_model_len=d.max_model_len, gpu_memory_utilization=d.utilization, speculative_config=d.speculative_config
    )
    plan = make_plan(model, lookup_gpu(d.gpu), args, vllm_version=d.vllm)
    assert record.measured.weights_gib is not None
    assert abs(plan.memory.weights_bytes / GiB - record.measured.weights_gib) < 0.05  # 0.3%
    alone = make_plan(
        model, lookup_gpu(d.gpu), args.model_copy(update={"speculative_config": None}), vllm_version=d.vllm
    )
    assert abs(alone.memory.weights_bytes / GiB - record.measured.weights_gib) > 0.7  # the drafter is the difference


def test_draft_model_layers_join_every_block() -> None:
    """A draft model's KV layers are in the KV-cache spec (vllm 0.19.0 v1/worker/gpu_model_runner.py:
    get_kv_cache_spec): one block costs the target's and the draft's pages. Llama-3.2-1B: 16 layers x
    8 KV heads x 64 x 2 x 2 B = 32 KiB per token; Llama-3.1-8B: 128 KiB per token."""
    target = resolve_model(LLAMA, offline=True).spec
    draft = resolve_model("meta-llama/Llama-3.2-1B-Instruct", offline=True).spec
    gpu = lookup_gpu("H100-80GB")
    config = json.dumps({"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4})
    args = ServingArgs(max_model_len=8192, gpu_memory_utilization=0.9, enforce_eager=True)
    base = make_plan(target, gpu, args, vllm_version="0.19.0")
    spec = make_plan(
        target, gpu, args.model_copy(update={"speculative_config": config}), vllm_version="0.19.0", draft=draft
    )
    assert spec.speculative is not None and spec.speculative.kv_bytes_per_token == 32 * 1024
    assert spec.kv_cache.bytes_per_block == 16 * (128 + 32) * 1024
    assert spec.speculative.lookahead_tokens == 4 and spec.speculative.kv_layers == 16
    assert spec.memory.weights_bytes == base.memory.weights_bytes + spec.speculative.weights_bytes
    kv_bytes = spec.memory.kv_cache_bytes
    assert spec.kv_cache.num_gpu_blocks == kv_bytes // spec.kv_cache.bytes_per_block
    assert not any("not modelled" in w for w in spec.warnings)


def test_ngram_costs_no_gpu_memory() -> None:
    target = resolve_model(LLAMA, offline=True).spec
    gpu = lookup_gpu("H100-80GB")
    args = ServingArgs(max_model_len=8192)
    config = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})
    base = make_plan(target, gpu, args, vllm_version="0.19.0")
    ngram = make_plan(target, gpu, args.model_copy(update={"speculative_config": config}), vllm_version="0.19.0")
    assert ngram.kv_cache.num_gpu_blocks == base.kv_cache.num_gpu_blocks
    assert ngram.speculative is not None and ngram.speculative.lookahead_tokens == 0


def test_mtp_adds_the_checkpoints_mtp_layers() -> None:
    """MTP modules are target-shaped layers (n_predict = num_nextn_predict_layers)."""
    target = resolve_model("deepseek-ai/DeepSeek-V3", offline=True).spec
    assert target.mtp_layers == 1
    gpu = lookup_gpu("H200-141GB")
    args = ServingArgs(max_model_len=8192, tensor_parallel_size=8)
    config = json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": 1})
    base = make_plan(target, gpu, args, vllm_version="0.19.0")
    mtp = make_plan(target, gpu, args.model_copy(update={"speculative_config": config}), vllm_version="0.19.0")
    assert mtp.speculative is not None and mtp.speculative.kv_layers == 1
    layers = base.model.num_layers
    assert mtp.kv_cache.bytes_per_block == base.kv_cache.bytes_per_block * (layers + 1) // layers
    assert mtp.memory.weights_bytes > base.memory.weights_bytes


def test_check_reports_the_drafter_in_numbers() -> None:
    from planner.policy.check import check_policy, run_check
    from planner.policy.manifests import read_documents
    from planner.policy.planning import CoreBackend

    manifest = """
apiVersion: v1
kind: Pod
metadata: {name: spec, namespace: ml}
spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  containers:
  - name: vllm
    image: vllm/vllm-openai:v0.19.0
    args: [--model, meta-llama/Llama-3.1-8B-Instruct, --max-model-len, "8192",
           --speculative-config, '{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}']
    resources: {limits: {nvidia.com/gpu: 1}}
"""
    policy = check_policy({"mutation": "off", "modelLookup": {"offline": True}})
    report = run_check(read_documents(manifest, "m"), policy=policy, backend=CoreBackend())
    (entry,) = [e for e in report.workloads if e.vllm]
    assert entry.plan is not None and entry.plan.speculative is not None
    assert entry.plan.speculative.kv_layers == 16  # the draft model resolved and sized
    (note,) = [m for m in entry.messages if m.startswith("KVP201")]
    assert "draft_model" in note and "not modelled" not in note
