"""Thresholds for KEDA, HPA, GAIE/llm-d and KubeAI, printed as ready YAML and validated."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate as validate
import pytest
import yaml

from planner.errors import PlannerInputError
from planner.workload import ConcurrencyAdvice, capacity_for_blocks, parse_workload, risk_bounded_concurrency
from planner.workload.thresholds import ThresholdOptions, compute_thresholds, render_thresholds
from tests.conftest import missing, require_tool

NODE_MODULES = Path(__file__).resolve().parents[2] / ".tools" / "node" / "node_modules"
OPTIONS = ThresholdOptions(
    name="llama", namespace="ml", model_name="meta-llama/Llama-3.1-8B-Instruct", target_utilization=0.8, max_replicas=6
)


@pytest.fixture(scope="module")
def advice() -> ConcurrencyAdvice:
    profile = parse_workload(
        {
            "prompt_tokens": {"p50": 800, "p90": 3000, "p99": 12000},
            "output_tokens": {"p50": 200, "p90": 800, "p99": 2000},
        }
    )
    return risk_bounded_concurrency(capacity_for_blocks(30_000, 16, 32_768), profile, headroom=0.1)


def documents(advice: ConcurrencyAdvice, *targets: str, options: ThresholdOptions = OPTIONS) -> list[Any]:
    text = render_thresholds(advice, list(targets), options)
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_numbers(advice: ConcurrencyAdvice) -> None:
    t = compute_thresholds(advice, OPTIONS)
    assert t.max_num_seqs == advice.max_num_seqs
    assert t.target_concurrency_per_replica == math.floor(advice.max_num_seqs * 0.8)
    assert t.kv_usage_limit == 0.9
    expected_usage = t.target_concurrency_per_replica * advice.mean_blocks_per_sequence / advice.usable_blocks
    assert t.target_kv_usage == pytest.approx(expected_usage, abs=1e-3)
    dp = compute_thresholds(advice, OPTIONS.model_copy(update={"engines_per_replica": 2}))
    assert dp.max_concurrency_per_replica == 2 * advice.max_num_seqs
    assert dp.target_kv_usage == pytest.approx(t.target_kv_usage, abs=2e-3)  # per engine, same usage


def test_keda_scaled_object(advice: ConcurrencyAdvice) -> None:
    (scaled,) = documents(advice, "keda")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["kind"] == "ScaledObject"
    assert scaled["spec"]["scaleTargetRef"]["name"] == "llama"
    running, usage = scaled["spec"]["triggers"]
    t = compute_thresholds(advice, OPTIONS)
    assert running["type"] == "prometheus" and running["metricType"] == "AverageValue"
    assert running["metadata"]["threshold"] == str(t.target_concurrency_per_replica)
    assert (
        'vllm:num_requests_waiting{namespace="ml",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
        in (running["metadata"]["query"])
    )
    assert usage["metricType"] == "Value" and float(usage["metadata"]["threshold"]) == t.target_kv_usage
    assert "vllm:gpu_cache_usage_perc" in usage["metadata"]["query"]  # old vLLM name too


def test_keda_scaled_object_matches_the_crd(advice: ConcurrencyAdvice) -> None:
    node = require_tool("node")
    if not (NODE_MODULES / "@kubernetes-models" / "keda").is_dir():
        missing(f"{NODE_MODULES}/@kubernetes-models/keda", "scripts/install-test-tools installs the CRD validators")
    good = documents(advice, "keda")[0]
    broken = json.loads(json.dumps(good))
    broken["spec"]["triggers"][0]["metadata"]["threshold"] = 12  # must be a string in the CRD
    script = Path(__file__).with_name("validate_keda.mjs")
    proc = subprocess.run(
        [node, str(script), str(NODE_MODULES)],
        input=json.dumps([good, broken]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    results = json.loads(proc.stdout)
    assert results[0] == [], results[0]
    assert results[1] and "threshold" in results[1][0]


def test_hpa_is_a_valid_autoscaling_v2_object(advice: ConcurrencyAdvice) -> None:
    (hpa,) = documents(advice, "hpa")
    validate.validate(hpa, "1.29.0", strict=True)
    metrics = {m["pods"]["metric"]["name"]: m["pods"]["target"] for m in hpa["spec"]["metrics"]}
    t = compute_thresholds(advice, OPTIONS)
    assert metrics["vllm_requests_in_flight"]["averageValue"] == str(t.target_concurrency_per_replica)
    assert hpa["spec"]["maxReplicas"] == 6
    text = render_thresholds(advice, ["hpa"], OPTIONS)
    assert "prometheus-adapter rules" in text and 'as: "vllm_requests_in_flight"' in text


def test_gaie_endpoint_picker_config(advice: ConcurrencyAdvice) -> None:
    (config,) = documents(advice, "gaie")
    assert config["apiVersion"] == "inference.networking.x-k8s.io/v1alpha1"
    assert config["kind"] == "EndpointPickerConfig"
    (plugin,) = config["plugins"]
    assert plugin["type"] == "concurrency-detector"
    assert config["saturationDetector"]["pluginRef"] == plugin["name"]
    params = plugin["parameters"]
    assert params["concurrencyMode"] == "requests" and params["maxConcurrency"] == advice.max_num_seqs
    assert params["maxTokenConcurrency"] == math.floor(advice.max_num_seqs * advice.mean_prompt_tokens)
    assert params["headroom"] == 0.0


def test_kubeai_model_patch(advice: ConcurrencyAdvice) -> None:
    (patch,) = documents(advice, "kubeai")
    assert patch == {
        "spec": {
            "targetRequests": compute_thresholds(advice, OPTIONS).target_concurrency_per_replica,
            "minReplicas": 1,
            "maxReplicas": 6,
        }
    }
    assert f"--max-num-seqs={advice.max_num_seqs}" in render_thresholds(advice, ["kubeai"], OPTIONS)


def test_all_targets_in_one_stream_and_repeats_dropped(advice: ConcurrencyAdvice) -> None:
    docs = documents(advice, "keda", "hpa", "gaie", "kubeai", "keda")
    assert [d.get("kind", "patch") for d in docs] == [
        "ScaledObject",
        "HorizontalPodAutoscaler",
        "EndpointPickerConfig",
        "patch",
    ]


def test_errors(advice: ConcurrencyAdvice) -> None:
    with pytest.raises(PlannerInputError, match="unknown --emit"):
        render_thresholds(advice, ["istio"])
    with pytest.raises(PlannerInputError, match="unknown --emit"):
        render_thresholds(advice, [])
    none_fit = risk_bounded_concurrency(
        capacity_for_blocks(200, 16, 8192), parse_workload({"prompt_tokens": 4000, "output_tokens": 100})
    )
    with pytest.raises(PlannerInputError, match="nothing to emit"):
        render_thresholds(none_fit, ["keda"])
