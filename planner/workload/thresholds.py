"""Thresholds for the rest of the stack, from the risk-bounded concurrency (docs/workload.md).

Users set these by hand today; kv-planner derives them from the same numbers as ``--max-num-seqs``:

* ``keda``: a KEDA ``ScaledObject`` with two ``prometheus`` triggers (requests in flight per replica,
  mean KV-cache usage);
* ``hpa``: an ``autoscaling/v2`` HorizontalPodAutoscaler on the same two signals as Pods metrics
  (served by prometheus-adapter; the adapter rules are printed as a comment);
* ``gaie``: a Gateway API Inference Extension / llm-d ``EndpointPickerConfig`` whose
  ``concurrency-detector`` caps requests in flight per endpoint at ``max_num_seqs``;
* ``kubeai``: the ``spec.targetRequests`` (and replica bounds) of a KubeAI ``Model``.

One replica = one vLLM engine unless ``engines_per_replica`` says otherwise (data parallel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerInputError
from planner.vllm.metrics_catalog import exposed_name
from planner.workload.concurrency import ConcurrencyAdvice

_RUNNING, _WAITING = exposed_name("running"), exposed_name("waiting")
_USAGE, _USAGE_OLD = exposed_name("kv_cache_usage"), exposed_name("gpu_cache_usage")

EmitTarget = Literal["keda", "hpa", "gaie", "kubeai"]
EMIT_TARGETS: tuple[EmitTarget, ...] = ("keda", "hpa", "gaie", "kubeai")


class ThresholdOptions(BaseModel):
    """Where the thresholds go: names, selectors and autoscaling bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="vllm", description="the scaled workload (Deployment, Model) name")
    namespace: str | None = None
    model_name: str | None = Field(default=None, description="vLLM's model_name label (the served name)")
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    target_utilization: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="scale out when a replica averages this share of its safe concurrency: new replicas "
        "take minutes to load weights, the rest absorbs growth meanwhile",
    )
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=10, ge=1)
    engines_per_replica: int = Field(default=1, ge=1, description="vLLM engines (data parallel) per pod")
    scale_target_kind: str = "Deployment"
    scale_target_api_version: str = "apps/v1"


class Thresholds(BaseModel):
    """The numbers behind every emitted manifest (``--output json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(description="risk-bounded requests running per engine (the hard limit)")
    max_concurrency_per_replica: int = Field(description="max_num_seqs x engines per replica")
    target_concurrency_per_replica: int = Field(description="autoscaling target: requests in flight/replica")
    target_kv_usage: float = Field(description="mean KV-cache usage (0-1) expected at the target concurrency")
    kv_usage_limit: float = Field(description="1 - headroom: usage above this eats the planned headroom")
    max_token_concurrency: int = Field(
        description="prompt tokens in flight per replica at max_num_seqs (GAIE tokens mode)"
    )
    context_length_range: str = Field(description='llm-d "llm-d.ai/context-length-range" label value')


def compute_thresholds(advice: ConcurrencyAdvice, options: ThresholdOptions | None = None) -> Thresholds:
    opts = options or ThresholdOptions()
    if advice.max_num_seqs < 1:
        raise PlannerInputError(
            "no concurrency is safe for this workload on this plan (max_num_seqs = 0): nothing to emit",
            hint="lower max_model_len, raise the target risk or give the KV cache more memory",
        )
    per_replica = advice.max_num_seqs * opts.engines_per_replica
    target = max(1, math.floor(per_replica * opts.target_utilization))
    target_per_engine = target / opts.engines_per_replica
    usable = max(1, advice.usable_blocks)
    usage = target_per_engine * advice.mean_blocks_per_sequence / usable
    return Thresholds(
        max_num_seqs=advice.max_num_seqs,
        max_concurrency_per_replica=per_replica,
        target_concurrency_per_replica=target,
        target_kv_usage=round(min(1.0, usage), 3),
        kv_usage_limit=round(1.0 - advice.headroom, 3),
        max_token_concurrency=max(1, math.floor(per_replica * advice.mean_prompt_tokens)),
        context_length_range=f"0-{advice.max_model_len}",
    )


def _selector(opts: ThresholdOptions) -> str:
    labels = []
    if opts.namespace:
        labels.append(f'namespace="{opts.namespace}"')
    if opts.model_name:
        labels.append(f'model_name="{opts.model_name}"')
    return "{" + ",".join(labels) + "}" if labels else ""


def _metadata(opts: ThresholdOptions, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "kv-planner"}
    return meta


def _usage_query(sel: str) -> str:
    # vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc (0.10.2 both, 0.12 only the new one).
    return f"avg({_USAGE}{sel} or {_USAGE_OLD}{sel})"


def keda_scaled_object(t: Thresholds, opts: ThresholdOptions) -> dict[str, Any]:
    sel = _selector(opts)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _metadata(opts, f"{opts.name}-kv-planner"),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": opts.scale_target_api_version,
                "kind": opts.scale_target_kind,
                "name": opts.name,
            },
            "minReplicaCount": opts.min_replicas,
            "maxReplicaCount": opts.max_replicas,
            "triggers": [
                {
                    # AverageValue: KEDA divides the sum by the replica count.
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": opts.prometheus_url,
                        "query": f"sum({_RUNNING}{sel}) + sum({_WAITING}{sel})",
                        "threshold": str(t.target_concurrency_per_replica),
                    },
                },
                {
                    # Value: the query is already an average over engines.
                    "type": "prometheus",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": opts.prometheus_url,
                        "query": _usage_query(sel),
                        "threshold": f"{t.target_kv_usage:g}",
                    },
                },
            ],
        },
    }


def hpa(t: Thresholds, opts: ThresholdOptions) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(opts, f"{opts.name}-kv-planner"),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": opts.scale_target_api_version,
                "kind": opts.scale_target_kind,
                "name": opts.name,
            },
            "minReplicas": max(1, opts.min_replicas),
            "maxReplicas": opts.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "vllm_requests_in_flight"},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": str(t.target_concurrency_per_replica),
                        },
                    },
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "vllm_kv_cache_usage_perc"},
                        "target": {"type": "AverageValue", "averageValue": f"{t.target_kv_usage:g}"},
                    },
                },
            ],
        },
    }


_ADAPTER_RULES = (
    """\
# prometheus-adapter rules (Helm values `rules.custom`) that serve the two Pods metrics above:
# - seriesQuery: 'vllm:num_requests_running{namespace!="",pod!=""}'
#   resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
#   name: {matches: "^vllm:num_requests_running$", as: "vllm_requests_in_flight"}
#   metricsQuery: '"""
    + (
        "sum(vllm:num_requests_running{<<.LabelMatchers>>} + vllm:num_requests_waiting{<<.LabelMatchers>>})"
        " by (<<.GroupBy>>)'\n"
    )
    + """\
# - seriesQuery: 'vllm:kv_cache_usage_perc{namespace!="",pod!=""}'
#   resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
#   name: {matches: "^vllm:kv_cache_usage_perc$", as: "vllm_kv_cache_usage_perc"}
#   metricsQuery: 'avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"""
)


def endpoint_picker_config(t: Thresholds, opts: ThresholdOptions) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            {
                "name": "kv-planner-concurrency",
                "type": "concurrency-detector",
                "parameters": {
                    "concurrencyMode": "requests",
                    "maxConcurrency": t.max_concurrency_per_replica,
                    "maxTokenConcurrency": t.max_token_concurrency,
                    "headroom": 0.0,
                },
            },
        ],
        "saturationDetector": {"pluginRef": "kv-planner-concurrency"},
    }


def kubeai_model_patch(t: Thresholds, opts: ThresholdOptions) -> dict[str, Any]:
    return {
        "spec": {
            "targetRequests": t.target_concurrency_per_replica,
            "minReplicas": opts.min_replicas,
            "maxReplicas": opts.max_replicas,
        }
    }


def _header(target: EmitTarget, t: Thresholds, opts: ThresholdOptions) -> str:
    common = (
        f"# kv-planner: --max-num-seqs {t.max_num_seqs} per engine (risk-bounded); "
        f"target {t.target_concurrency_per_replica} requests in flight per replica "
        f"({opts.target_utilization:.0%}), mean KV usage there {t.target_kv_usage:.0%}.\n"
    )
    notes = {
        "keda": "# KEDA ScaledObject: scale out on requests in flight per replica or on mean KV usage.\n",
        "hpa": "# HorizontalPodAutoscaler (autoscaling/v2) on Pods metrics from prometheus-adapter.\n" + _ADAPTER_RULES,
        "gaie": "# Gateway API Inference Extension / llm-d EPP config: saturated at max_num_seqs requests in"
        " flight per endpoint.\n# Merge `plugins` and `saturationDetector` into your EndpointPickerConfig "
        "(keep your scorers and profiles).\n"
        f"# llm-d context-length-aware routing: label the pods llm-d.ai/context-length-range: "
        f'"{t.context_length_range}".\n',
        "kubeai": f"# KubeAI Model {opts.name}: merge into the Model "
        f"(kubectl patch model {opts.name} --type merge --patch-file FILE).\n"
        f"# Also pass --max-num-seqs={t.max_num_seqs} in the Model's spec.args "
        "(a merge patch would replace the whole args list).\n",
    }
    return common + notes[target]


_BUILDERS = {
    "keda": keda_scaled_object,
    "hpa": hpa,
    "gaie": endpoint_picker_config,
    "kubeai": kubeai_model_patch,
}


def render_thresholds(
    advice: ConcurrencyAdvice,
    emit: Sequence[str],
    options: ThresholdOptions | None = None,
) -> str:
    """Ready-to-apply YAML (one document per target, with comments) for ``emit`` targets."""
    opts = options or ThresholdOptions()
    unknown = [e for e in emit if e not in EMIT_TARGETS]
    if unknown or not emit:
        raise PlannerInputError(
            f"unknown --emit target(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(EMIT_TARGETS)}"
        )
    t = compute_thresholds(advice, opts)
    documents = []
    for target in dict.fromkeys(emit):  # keep order, drop repeats
        name: EmitTarget = target  # type: ignore[assignment]
        body = yaml.safe_dump(_BUILDERS[name](t, opts), sort_keys=False, width=200)
        documents.append(_header(name, t, opts) + body)
    return "---\n" + "---\n".join(documents)
