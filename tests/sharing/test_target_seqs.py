"""Inverse sizing (``planner recommend --target-seqs``): the smallest KV budget for N sequences.

Round trip: the recommended ``--kv-cache-memory-bytes`` fed back into ``recommend`` gives at least N
sequences with the headroom; 1% less does not. Models from the catalog; vLLM releases with the flag
(0.10.2+, ``vllm 0.10.2 v1/worker/gpu_worker.py: determine_available_memory``) and without (0.10.0:
the smallest ``--gpu-memory-utilization`` instead).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.gpus.catalog import lookup_gpu
from planner.hub.resolve import resolve_model
from planner.plan import make_plan
from planner.plan.inverse import blocks_for_worst_case, smallest_budget, worst_case_seqs
from planner.plan.recommend import safe_cache, worst_case_max_num_seqs
from planner.vllm.args import ServingArgs
from planner.workload import parse_workload, risk_bounded_concurrency

RUNNER = CliRunner()
PROFILE = {"prompt_tokens": {"p50": 800, "p99": 12000}, "output_tokens": {"p50": 200, "p99": 2000}}


def _recommend(*flags: str) -> dict:
    result = RUNNER.invoke(app, ["recommend", *flags, "--output", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    ("model", "gpu", "context", "target", "version"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", "H100-80GB", "32768", 20, "0.19.0"),
        ("meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", "8192", 50, "0.33.0"),
        ("Qwen/Qwen2.5-7B-Instruct", "L40S", "16384", 7, "0.11.0"),
    ],
)
def test_cli_round_trip(model: str, gpu: str, context: str, target: int, version: str) -> None:
    base = ["--model", model, "--gpu", gpu, "--max-model-len", context, "--vllm-version", version]
    advised = _recommend(*base, "--target-seqs", str(target))
    budget = advised["budget"]
    kv_bytes = budget["kv_cache_memory_bytes"]
    assert budget["target_seqs"] == target and kv_bytes == budget["num_gpu_blocks"] * budget["bytes_per_block"]
    assert budget["left_for_co_tenants_bytes"] > 0
    back = _recommend(*base, "--kv-cache-memory-bytes", str(kv_bytes))
    assert back["kv_cache"]["num_gpu_blocks"] == budget["num_gpu_blocks"]
    assert back["recommendation"]["max_num_seqs"] >= target  # >= N with the 10% headroom
    less = _recommend(*base, "--kv-cache-memory-bytes", str(int(kv_bytes * 0.99)))
    assert less["recommendation"]["max_num_seqs"] < target


def test_release_without_the_flag_gets_the_smallest_utilization() -> None:
    model = resolve_model("Qwen/Qwen2.5-7B-Instruct", offline=True).spec
    gpu = lookup_gpu("A100-80GB")

    def plan_fn(args: ServingArgs):
        return make_plan(model, gpu, args, vllm_version="0.10.0", with_alternatives=False)

    advice, _ = smallest_budget(
        plan_fn, ServingArgs(max_model_len=16384), target_seqs=30, headroom=0.1, kv_bytes_flag=False
    )
    assert advice.kv_cache_memory_bytes is None and "--kv-cache-memory-bytes" not in advice.vllm_args
    util = advice.gpu_memory_utilization
    assert util is not None
    # vLLM profiles: the target must hold at the low end of the KV band, not only as predicted (F6)
    at = safe_cache(plan_fn(ServingArgs(max_model_len=16384, gpu_memory_utilization=util)))
    below = safe_cache(plan_fn(ServingArgs(max_model_len=16384, gpu_memory_utilization=round(util - 0.01, 2))))
    assert worst_case_max_num_seqs(at, 0.1) >= 30 > worst_case_max_num_seqs(below, 0.1)


def test_workload_target_is_risk_bounded_and_smaller_than_worst_case() -> None:
    model = resolve_model("Qwen/Qwen2.5-7B-Instruct", offline=True).spec
    gpu = lookup_gpu("H100-80GB")
    profile = parse_workload(PROFILE)

    def plan_fn(args: ServingArgs):
        return make_plan(model, gpu, args, vllm_version="0.19.0", with_alternatives=False)

    args = ServingArgs(max_model_len=32768)
    advice, _ = smallest_budget(plan_fn, args, target_seqs=64, headroom=0.1, kv_bytes_flag=True, profile=profile)
    worst, _ = smallest_budget(plan_fn, args, target_seqs=64, headroom=0.1, kv_bytes_flag=True)
    assert advice.basis == "workload" and advice.kv_cache_memory_bytes is not None
    assert advice.kv_cache_memory_bytes < worst.kv_cache_memory_bytes  # short requests need less than 32k each

    def seqs(kv_bytes: int) -> int:
        kv = plan_fn(args.model_copy(update={"kv_cache_memory_bytes": kv_bytes})).kv_cache
        return risk_bounded_concurrency(kv, profile, headroom=0.1, with_curve=False).max_num_seqs

    assert seqs(advice.kv_cache_memory_bytes) >= 64 > seqs(int(advice.kv_cache_memory_bytes * 0.99))


@pytest.mark.parametrize("per", [1, 7, 2048, 4097])
@pytest.mark.parametrize("headroom", [0.0, 0.1, 0.33])
@pytest.mark.parametrize("target", [1, 3, 256, 1000])
def test_blocks_for_worst_case_is_the_smallest(per: int, headroom: float, target: int) -> None:
    blocks = blocks_for_worst_case(target, per, headroom)
    assert worst_case_seqs(blocks, per, headroom) >= target > worst_case_seqs(blocks - 1, per, headroom)


def test_target_risk_without_workload_is_a_usage_error() -> None:
    result = RUNNER.invoke(
        app,
        ["recommend", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "H100-80GB", "--target-risk", "0.01"],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_target_beyond_the_gpu_is_reported_not_hidden() -> None:
    flags = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A100-80GB", "--max-model-len", "8192"]
    result = RUNNER.invoke(app, ["recommend", *flags, "--target-seqs", "100", "--output", "json"])
    # 175 GiB of KV cache on an 80 GB card: the plan at that budget does not fit (exit 1, as README says),
    # and it says why instead of planning the cache as if the card held it.
    assert result.exit_code == 1, result.output
    plan = json.loads(result.output)
    assert plan["fits"] is False and "out of memory" in plan["fit_error"]
    assert plan["budget"]["fits_on_gpu"] is False
    assert any(w.startswith("KVP208") for w in plan["warnings"])


def test_policy_target_seqs_fills_the_budget_in_check() -> None:
    """``targetSeqs`` in the policy: ``planner check`` fills the same budget recommend computes."""
    from planner.policy.check import check_policy, run_check
    from planner.policy.manifests import read_documents
    from planner.policy.planning import CoreBackend

    manifest = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat, namespace: ml}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.19.0
        args: [--model, Qwen/Qwen2.5-7B-Instruct, --max-model-len, "32768"]
        resources: {limits: {nvidia.com/gpu: 1}}
"""
    policy = check_policy({"mutation": "fill", "targetSeqs": 20})
    report = run_check(read_documents(manifest, "m"), policy=policy, backend=CoreBackend())
    (entry,) = [e for e in report.workloads if e.vllm]
    words = [str(op["value"]) for op in entry.patch if str(op["path"]).endswith("/args/-")]
    flags = dict(zip(words[::2], words[1::2], strict=True))
    expected = _recommend(
        "--model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--gpu",
        "H100-80GB",
        "--max-model-len",
        "32768",
        "--vllm-version",
        "0.19.0",
        "--target-seqs",
        "20",
    )["budget"]
    assert int(flags["--kv-cache-memory-bytes"]) == expected["kv_cache_memory_bytes"]
    assert flags["--max-num-seqs"] == "20"
    assert float(flags["--gpu-memory-utilization"]) == expected["gpu_memory_utilization"]
    assert entry.decision == "mutate" and "KVP027" in entry.codes


def test_policy_without_target_seqs_does_not_fill_a_budget() -> None:
    from planner.policy.model import parse_policy

    assert parse_policy({"targetSeqs": 8}).target_seqs == 8
    assert parse_policy({}).for_namespace("x").target_seqs is None
