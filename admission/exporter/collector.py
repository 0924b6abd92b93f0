"""The ``kv_planner_*`` metric families, rebuilt from a fresh snapshot on every scrape.

A custom prometheus_client collector (never long-lived Gauge objects): a pod that disappears stops
being exported, and a target that could not be read exports ``kv_planner_target_up 0`` and nothing
else, never stale numbers. Labels: ``namespace``, ``pod``, ``workload`` on per-pod series, plus
``model_name`` and ``engine`` on per-engine series; retuner series are per workload.

Two names of DESIGN.md need care to pass ``promtool check metrics``: ``kv_planner_kv_blocks_total`` is
a gauge-like value whose name ends in ``_total`` (reserved for counters), so it is exposed *untyped*;
the token-length quantiles carry a ``quantile`` label, so they are a *summary*
(``kv_planner_prompt_tokens_quantile{quantile}`` plus ``_sum``/``_count``).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

from admission.exporter.normalize import bucket_count
from admission.exporter.quantiles import QUANTILES, histogram_quantile
from admission.exporter.state import ExporterState
from admission.observations.model import EngineObservation, Snapshot, TargetObservation

POD = ["namespace", "pod", "workload"]
ENGINE = [*POD, "model_name", "engine"]
WORKLOAD = ["namespace", "workload"]


def _pod(obs: TargetObservation) -> list[str]:
    t = obs.target
    return [t.namespace, t.pod, t.workload]


def _engine(obs: TargetObservation, engine: EngineObservation) -> list[str]:
    return [*_pod(obs), engine.model_name, engine.engine]


class SnapshotCollector(Collector):
    def __init__(self, snapshot: Snapshot, state: ExporterState) -> None:
        self.snapshot = snapshot
        self.state = state

    def collect(self) -> Iterable[Metric]:
        yield from render(self.snapshot, self.state)


def render(snapshot: Snapshot, state: ExporterState) -> list[Metric]:
    up = GaugeMetricFamily("kv_planner_target_up", "1 if the vLLM target's /metrics was read, 0 if not.", labels=POD)
    duration = GaugeMetricFamily(
        "kv_planner_scrape_duration_seconds", "Time to fetch and parse the target's /metrics.", labels=POD
    )
    missing = GaugeMetricFamily(
        "kv_planner_signal_missing", "1 for each signal a reachable target does not expose.", labels=[*POD, "signal"]
    )
    info = GaugeMetricFamily(
        "kv_planner_vllm_engine_info",
        "A vLLM engine seen on the target; usage_metric names the vLLM family read.",
        labels=[*ENGINE, "usage_metric"],
    )
    usage = GaugeMetricFamily(
        "kv_planner_kv_cache_usage_ratio",
        "KV blocks in use / usable blocks (vLLM kv_cache_usage_perc), 0-1.",
        labels=ENGINE,
    )
    blocks = UnknownMetricFamily(
        "kv_planner_kv_blocks_total",
        "KV blocks vLLM allocated (num_gpu_blocks of vllm:cache_config_info). Untyped: not a counter.",
        labels=ENGINE,
    )
    block_size = GaugeMetricFamily("kv_planner_kv_block_size_tokens", "Tokens per KV block.", labels=ENGINE)
    planned = GaugeMetricFamily(
        "kv_planner_kv_blocks_planned",
        "KV blocks the plan predicted (kv-planner.io/planned-num-gpu-blocks).",
        labels=POD,
    )
    plan_ratio = GaugeMetricFamily(
        "kv_planner_kv_blocks_plan_ratio", "Actual KV blocks / planned KV blocks.", labels=ENGINE
    )
    preemptions = CounterMetricFamily(
        "kv_planner_preemptions", "Requests preempted (recomputed) by vLLM since it started.", labels=ENGINE
    )
    running = GaugeMetricFamily("kv_planner_requests_running", "Requests in vLLM's running batch.", labels=ENGINE)
    waiting = GaugeMetricFamily("kv_planner_requests_waiting", "Requests waiting in vLLM's queue.", labels=ENGINE)
    seqs = GaugeMetricFamily("kv_planner_max_num_seqs_configured", "The pod's --max-num-seqs.", labels=POD)
    plan_info = GaugeMetricFamily(
        "kv_planner_plan_info",
        "The pod's plan (kv-planner.io/plan): GPU, GPU count, vLLM release. Always 1.",
        labels=[*POD, "gpu", "gpu_count", "vllm_version"],
    )
    length = GaugeMetricFamily("kv_planner_max_model_len_configured", "The pod's --max-model-len.", labels=POD)
    prompt = SummaryMetricFamily(
        "kv_planner_prompt_tokens_quantile",
        "Prompt tokens per finished request (from vllm:request_prompt_tokens).",
        labels=ENGINE,
    )
    generation = SummaryMetricFamily(
        "kv_planner_generation_tokens_quantile",
        "Generated tokens per finished request (from vllm:request_generation_tokens).",
        labels=ENGINE,
    )
    errors = CounterMetricFamily(
        "kv_planner_scrape_errors", "Failed reads of a target, by reason.", labels=[*POD, "reason"]
    )

    for obs in snapshot.targets:
        pod = _pod(obs)
        up.add_metric(pod, 1.0 if obs.up else 0.0)
        duration.add_metric(pod, obs.duration_s)
        if not obs.up:
            continue
        for signal in obs.missing:
            missing.add_metric([*pod, signal], 1.0)
        target = obs.target
        if target.planned_num_gpu_blocks is not None:
            planned.add_metric(pod, float(target.planned_num_gpu_blocks))
        if target.max_num_seqs is not None:
            seqs.add_metric(pod, float(target.max_num_seqs))
        if target.gpu or target.vllm_version:
            plan_info.add_metric([*pod, target.gpu, str(target.gpu_count or ""), target.vllm_version], 1.0)
        if target.max_model_len is not None:
            length.add_metric(pod, float(target.max_model_len))
        for engine in obs.engines:
            labels = _engine(obs, engine)
            info.add_metric([*labels, engine.usage_metric or ""], 1.0)
            if engine.kv_cache_usage is not None:
                usage.add_metric(labels, engine.kv_cache_usage)
            if engine.num_gpu_blocks is not None:
                blocks.add_metric(labels, float(engine.num_gpu_blocks))
                if target.planned_num_gpu_blocks:
                    plan_ratio.add_metric(labels, engine.num_gpu_blocks / target.planned_num_gpu_blocks)
            if engine.block_size is not None:
                block_size.add_metric(labels, float(engine.block_size))
            if engine.preemptions_total is not None:
                preemptions.add_metric(labels, engine.preemptions_total)
            if engine.running is not None:
                running.add_metric(labels, engine.running)
            if engine.waiting is not None:
                waiting.add_metric(labels, engine.waiting)
            _summary(prompt, labels, engine.prompt_tokens, engine.prompt_tokens_sum)
            _summary(generation, labels, engine.generation_tokens, engine.generation_tokens_sum)
    for (namespace, pod_name, workload), reasons in state.scrape_errors().items():
        for reason, count in sorted(reasons.items()):
            errors.add_metric([namespace, pod_name, workload, reason], float(count))

    families: list[Metric] = [
        up,
        duration,
        errors,
        missing,
        info,
        usage,
        blocks,
        block_size,
        planned,
        plan_ratio,
        preemptions,
        running,
        waiting,
        seqs,
        plan_info,
        length,
        prompt,
        generation,
    ]
    families.extend(_exporter_families(snapshot, state))
    return families


def _summary(
    family: SummaryMetricFamily, labels: list[str], buckets: list[tuple[float, float]] | None, total: float | None
) -> None:
    if buckets is None:
        return
    count = bucket_count(buckets)
    family.add_metric(labels, count_value=int(count), sum_value=total or 0.0)
    for q in QUANTILES:
        value = histogram_quantile(q, buckets)
        if value is not None:
            family.add_sample(family.name, dict(zip([*ENGINE, "quantile"], [*labels, str(q)], strict=True)), value)


def _exporter_families(snapshot: Snapshot, state: ExporterState) -> list[Metric]:
    targets = GaugeMetricFamily("kv_planner_targets", "vLLM targets in this collection.", labels=["source"])
    targets.add_metric([snapshot.source], float(len(snapshot.targets)))
    dropped = GaugeMetricFamily("kv_planner_targets_dropped", "Targets left out because --max-targets was reached.")
    dropped.add_metric([], float(snapshot.dropped_targets))
    collect = GaugeMetricFamily("kv_planner_collect_duration_seconds", "Time to read every target for this scrape.")
    collect.add_metric([], snapshot.duration_s)
    budget = GaugeMetricFamily(
        "kv_planner_collect_budget_seconds",
        "Time allowed for this scrape (Prometheus' scrape timeout minus the offset).",
    )
    budget.add_metric([], snapshot.budget_s)
    source_up = GaugeMetricFamily(
        "kv_planner_source_up",
        "1 if the target source (static list, Kubernetes or the Prometheus API) was read.",
        labels=["source"],
    )
    source_up.add_metric([snapshot.source], 0.0 if snapshot.source_error else 1.0)
    out: list[Metric] = [targets, dropped, collect, budget, source_up]
    out.extend(state.extra_families())
    return out
