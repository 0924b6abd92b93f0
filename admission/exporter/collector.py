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
from admission.exporter.quantiles import QUANTILES, histogram_quantile, token_upper_bound
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
    signals = _Signals()

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
            _summary(prompt, labels, engine.prompt_tokens, engine.prompt_tokens_sum, target.max_model_len)
            _summary(generation, labels, engine.generation_tokens, engine.generation_tokens_sum, target.max_model_len)
            signals.add(labels, engine)
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
        *signals.families(),
    ]
    families.extend(_exporter_families(snapshot, state))
    return families


class _Signals:
    """What users look at next (issue 15): finish reasons, queue and end-to-end time, token throughput,
    prefix-cache hits, waiting by reason, speculative decoding, KV offload traffic. vLLM's counters are
    passed through per engine (rates and ratios are the rules' job); a family a page lacks is absent."""

    def __init__(self) -> None:
        self.finished = CounterMetricFamily(
            "kv_planner_requests_finished",
            "Finished requests by vLLM finish reason (vllm:request_success); length = hit max_tokens or "
            "--max-model-len.",
            labels=[*ENGINE, "finished_reason"],
        )
        self.queue = SummaryMetricFamily(
            "kv_planner_request_queue_time_seconds",
            "Time finished requests waited in vLLM's queue (vllm:request_queue_time_seconds _sum/_count).",
            labels=ENGINE,
        )
        self.e2e = SummaryMetricFamily(
            "kv_planner_e2e_request_latency_seconds",
            "End-to-end latency of finished requests (vllm:e2e_request_latency_seconds _sum/_count).",
            labels=ENGINE,
        )
        self.prompt = CounterMetricFamily(
            "kv_planner_prompt_tokens", "Prompt tokens processed (vllm:prompt_tokens).", labels=ENGINE
        )
        self.generation = CounterMetricFamily(
            "kv_planner_generation_tokens", "Tokens generated (vllm:generation_tokens).", labels=ENGINE
        )
        self.prefix_queries = CounterMetricFamily(
            "kv_planner_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (vllm:prefix_cache_queries, gpu_ before 0.12).",
            labels=ENGINE,
        )
        self.prefix_hits = CounterMetricFamily(
            "kv_planner_prefix_cache_hits",
            "Prompt tokens found in the prefix cache (vllm:prefix_cache_hits, gpu_ before 0.12).",
            labels=ENGINE,
        )
        self.waiting = GaugeMetricFamily(
            "kv_planner_requests_waiting_by_reason",
            "Waiting requests: capacity (no KV room) or deferred (vllm:num_requests_waiting_by_reason).",
            labels=[*ENGINE, "reason"],
        )
        self.drafts = CounterMetricFamily(
            "kv_planner_spec_decode_drafts", "Speculative-decoding drafts (vllm:spec_decode_num_drafts).", labels=ENGINE
        )
        self.draft_tokens = CounterMetricFamily(
            "kv_planner_spec_decode_draft_tokens",
            "Draft tokens proposed (vllm:spec_decode_num_draft_tokens).",
            labels=ENGINE,
        )
        self.accepted = CounterMetricFamily(
            "kv_planner_spec_decode_accepted_tokens",
            "Draft tokens accepted (vllm:spec_decode_num_accepted_tokens).",
            labels=ENGINE,
        )
        self.offload = CounterMetricFamily(
            "kv_planner_kv_offload_bytes",
            "KV bytes moved by the offloading connector: store = GPU to offload medium, load = back.",
            labels=[*ENGINE, "direction"],
        )

    def add(self, labels: list[str], engine: EngineObservation) -> None:
        for reason, count in sorted((engine.finished or {}).items()):
            self.finished.add_metric([*labels, reason], count)
        for family, total, finished in (
            (self.queue, engine.queue_time_sum_s, engine.queue_time_count),
            (self.e2e, engine.e2e_latency_sum_s, engine.e2e_latency_count),
        ):
            if finished is not None:
                family.add_metric(labels, count_value=int(finished), sum_value=total or 0.0)
        for counter, value in (
            (self.prompt, engine.prompt_tokens_processed),
            (self.generation, engine.generation_tokens_processed),
            (self.prefix_queries, engine.prefix_cache_queries),
            (self.prefix_hits, engine.prefix_cache_hits),
            (self.drafts, engine.spec_decode_drafts),
            (self.draft_tokens, engine.spec_decode_draft_tokens),
            (self.accepted, engine.spec_decode_accepted_tokens),
        ):
            if value is not None:
                counter.add_metric(labels, value)
        for reason, waiting in sorted((engine.waiting_by_reason or {}).items()):
            self.waiting.add_metric([*labels, reason], waiting)
        for direction, moved in sorted((engine.kv_offload_bytes or {}).items()):
            self.offload.add_metric([*labels, direction], moved)

    def families(self) -> list[Metric]:
        return [
            self.finished,
            self.queue,
            self.e2e,
            self.prompt,
            self.generation,
            self.prefix_queries,
            self.prefix_hits,
            self.waiting,
            self.drafts,
            self.draft_tokens,
            self.accepted,
            self.offload,
        ]


def _summary(
    family: SummaryMetricFamily,
    labels: list[str],
    buckets: list[tuple[float, float]] | None,
    total: float | None,
    max_model_len: int | None,
) -> None:
    if buckets is None:
        return
    count = bucket_count(buckets)
    family.add_metric(labels, count_value=int(count), sum_value=total or 0.0)
    upper = token_upper_bound(buckets, max_model_len)
    for q in QUANTILES:
        value = histogram_quantile(q, buckets, upper)
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
