"""The "kv-planner / KV cache pressure" dashboard: one namespace / model / pod at a time."""

from __future__ import annotations

from grafana_foundation_sdk.builders import bargauge, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from dashboards import names as n
from dashboards.common import (
    DATASOURCE,
    EXPORTER_NOTE,
    FLEET_UID,
    POD_SELECTOR,
    PRESSURE_UID,
    SELECTOR,
    Query,
    add_targets,
    base_dashboard,
    dashboard_link,
    limits_table,
    number_panels,
    recommended_by_workload,
    thresholds,
    ts_panel,
    variables,
    with_model,
)
from dashboards.params import Params

S = SELECTOR
QUANTILES = (0.5, 0.9, 0.99)


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def usage_thresholds(p: Params) -> db.ThresholdsConfig:
    return thresholds((None, "green"), (p.plan_ceiling_ratio, "orange"), (p.kv_near_full_ratio, "red"))


def cache_row(p: Params) -> list[timeseries.Panel | bargauge.Panel]:
    usage = f"{n.REC_KV_USAGE}{{{S}}}"
    usage_panel = (
        ts_panel(
            "KV cache usage",
            "Fraction of the pod's KV cache blocks in use (vLLM's vllm:kv_cache_usage_perc, "
            "vllm:gpu_cache_usage_perc in older releases, through the recording rule "
            f"{n.REC_KV_USAGE}); the fullest data-parallel engine of each pod. Orange line: the "
            f"plan's ceiling, 1 - headroom = {_pct(p.plan_ceiling_ratio)}; above it the pod runs more "
            f"sequences than planned. Red line: KVPlannerKVCacheNearFull fires above "
            f"{_pct(p.kv_near_full_ratio)} for {p.kv_near_full_for}.",
            "percentunit",
            [Query(f"max by (namespace, pod, model_name) ({usage})", "{{namespace}}/{{pod}}")],
            w=12,
        )
        .min(0)
        .max(1)
        .thresholds(usage_thresholds(p))
        .thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.LINE))
    )
    dist_queries = [
        Query(
            f"max by (namespace, pod) (quantile_over_time({q:g}, {usage}[$__range]))",
            f"p{q * 100:g} {{{{pod}}}}",
            instant=True,
        )
        for q in (0.5, 0.95)
    ] + [Query(f"max by (namespace, pod) (max_over_time({usage}[$__range]))", "max {{pod}}", instant=True)]
    distribution = (
        bargauge.Panel()
        .title("KV cache usage distribution")
        .description(
            "Median, 95th percentile and maximum of each pod's KV cache usage over the selected time "
            "range (quantile_over_time of the recorded usage). A high median means steady load near "
            "capacity; a high maximum with a low median means bursts."
        )
        .datasource(DATASOURCE)
        .unit("percentunit")
        .min(0)
        .max(1)
        .thresholds(usage_thresholds(p))
        .display_mode(cm.BarGaugeDisplayMode.GRADIENT)
        .orientation(cm.VizOrientation.HORIZONTAL)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .span(6)
        .height(8)
    )
    distribution = add_targets(distribution, dist_queries)
    preemptions = ts_panel(
        "Preemption rate",
        "Requests preempted per second (5-minute rate of vllm:num_preemptions_total, recording rule "
        f"{n.REC_PREEMPTIONS}). vLLM preempts (frees and later recomputes) running requests when no "
        "KV block is free; any sustained rate means the scheduler admits more sequences than the cache "
        f"holds. KVPlannerPreemptionsSustained fires above {p.preemption_rate:g}/s for "
        f"{p.preemptions_for}.",
        "reqps",
        [Query(f"sum by (namespace, pod, model_name) ({n.REC_PREEMPTIONS}{{{S}}})", "{{namespace}}/{{pod}}")],
        w=6,
    ).min(0)
    return [usage_panel, distribution, preemptions]


def plan_row(p: Params) -> list[timeseries.Panel | table.Panel]:
    blocks = ts_panel(
        "KV blocks: used, total and planned",
        "KV cache blocks per engine: in use (total x usage), allocated by vLLM at startup "
        "(num_gpu_blocks of vllm:cache_config_info, re-exposed as kv_planner_kv_blocks_total) and "
        "planned by the kv-planner webhook (annotation kv-planner.io/planned-num-gpu-blocks, dashed)." + EXPORTER_NOTE,
        "short",
        [
            Query(
                f"max by (namespace, pod) ({n.EXP_BLOCKS_TOTAL}{{{S}}} * {n.EXP_KV_USAGE}{{{S}}})",
                "used {{pod}}",
            ),
            Query(f"max by (namespace, pod) ({n.EXP_BLOCKS_TOTAL}{{{S}}})", "total {{pod}}"),
            Query(f"max by (namespace, pod) ({n.EXP_BLOCKS_PLANNED}{{{POD_SELECTOR}}})", "planned {{pod}}"),
        ],
        w=12,
        dashed=("C",),
    ).min(0)
    low, high = round(1 - p.plan_deviation, 6), round(1 + p.plan_deviation, 6)
    ratio = (
        ts_panel(
            "Actual / planned KV blocks",
            "vLLM's allocated KV blocks divided by the planned number (kv_planner_kv_blocks_plan_ratio). "
            f"Lines at {_pct(low)} and {_pct(high)}: KVPlannerKVBlocksDeviateFromPlan fires outside them "
            f"for {p.plan_deviation_for}. Below the plan the pod holds fewer sequences than its limits "
            "assume." + EXPORTER_NOTE,
            "percentunit",
            [Query(f"max by (namespace, pod) ({n.EXP_BLOCKS_PLAN_RATIO}{{{S}}})", "{{namespace}}/{{pod}}")],
            w=6,
        )
        .thresholds(thresholds((None, "red"), (low, "green"), (high, "red")))
        .thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.LINE))
    )
    limits = limits_table(w=6, h=8)
    return [blocks, ratio, limits]


def scheduler_row() -> list[timeseries.Panel]:
    running = ts_panel(
        "Running requests vs max_num_seqs",
        "Requests in vLLM's running batch (vllm:num_requests_running summed over engines, recording "
        f"rule {n.REC_RUNNING}) against --max-num-seqs as configured per pod and as recommended by the "
        "retuner per workload (dashed; these two need the kv-planner exporter). Running well below the "
        "limit while requests wait means the KV cache, not the limit, is the bottleneck.",
        "short",
        [
            Query(f"{n.REC_RUNNING}{{{S}}}", "running {{pod}}"),
            Query(f"max by (namespace, pod) ({n.EXP_MAX_NUM_SEQS}{{{POD_SELECTOR}}})", "max_num_seqs {{pod}}"),
            Query(recommended_by_workload(), "recommended {{workload}}"),
        ],
        w=8,
        dashed=("B", "C"),
    ).min(0)
    waiting = ts_panel(
        "Waiting requests",
        "Requests queued in vLLM, not yet scheduled (vllm:num_requests_waiting summed over engines, "
        f"recording rule {n.REC_WAITING}). Includes preempted requests waiting to be recomputed. "
        "A queue while the KV cache is full means the pod is at capacity.",
        "short",
        [Query(f"{n.REC_WAITING}{{{S}}}", "{{namespace}}/{{pod}}")],
        w=8,
    ).min(0)
    prefix = (
        ts_panel(
            "Prefix cache hit ratio",
            "Share of prompt tokens served from vLLM's prefix cache over 5 minutes "
            "(vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, or the gpu_prefix_cache_* "
            f"names in older releases; recording rule {n.REC_PREFIX_HIT}). Cached prefixes save KV blocks "
            "and prefill time.",
            "percentunit",
            [Query(f"{n.REC_PREFIX_HIT}{{{S}}}", "{{namespace}}/{{pod}}")],
            w=8,
        )
        .min(0)
        .max(1)
    )
    return [running, waiting, prefix]


def _quantiles(metric_rate: str, legend_prefix: str = "") -> list[Query]:
    return [
        Query(
            f"histogram_quantile({q:g}, sum by (namespace, model_name, le) ({metric_rate}))",
            f"{legend_prefix}p{q * 100:g} {{{{namespace}}}}/{{{{model_name}}}}",
        )
        for q in QUANTILES
    ]


def lengths_row() -> list[timeseries.Panel]:
    per_pod = f"max by (namespace, pod) ({n.EXP_MAX_MODEL_LEN}{{{POD_SELECTOR}}})"
    max_len = Query(
        f"max by (namespace, model_name) ({with_model(per_pod)})", "max_model_len {{namespace}}/{{model_name}}"
    )
    prompt = ts_panel(
        "Prompt length quantiles",
        "Prompt length in tokens, 50th/90th/99th percentile per model, from vLLM's "
        "vllm:request_prompt_tokens histogram (finished requests). Dashed: --max-model-len as "
        "configured (needs the kv-planner exporter). These are the lengths to plan with "
        "(`planner recommend --workload`).",
        "short",
        [*_quantiles(f"rate({n.VLLM_PROMPT_TOKENS}_bucket{{{S}}}[$__rate_interval])"), max_len],
        w=12,
        dashed=("D",),
    ).min(0)
    generation = ts_panel(
        "Generation length quantiles",
        "Generated tokens per request, 50th/90th/99th percentile per model, from vLLM's "
        "vllm:request_generation_tokens histogram (finished requests). Prompt plus generation is what "
        "a sequence holds in the KV cache at its end. Dashed: --max-model-len (needs the exporter).",
        "short",
        [*_quantiles(f"rate({n.VLLM_GENERATION_TOKENS}_bucket{{{S}}}[$__rate_interval])"), max_len],
        w=12,
        dashed=("D",),
    ).min(0)
    return [prompt, generation]


def latency_row() -> list[timeseries.Panel]:
    ttft = ts_panel(
        "Time to first token",
        "Time from arrival to the first generated token, 50th/90th/99th percentile per model "
        "(vllm:time_to_first_token_seconds). It includes queueing, so it grows when requests wait for "
        "KV blocks.",
        "s",
        _quantiles(f"rate({n.VLLM_TTFT}_bucket{{{S}}}[$__rate_interval])"),
        w=12,
    ).min(0)
    itl = ts_panel(
        "Inter-token latency",
        "Time between generated tokens, 50th/90th/99th percentile per model over 5 minutes "
        "(vllm:inter_token_latency_seconds, vllm:time_per_output_token_seconds before 0.10.2; "
        f"recording rule {n.REC_ITL_BUCKETS}). It grows with the batch size and with recompute after "
        "preemptions.",
        "s",
        _quantiles(f"{n.REC_ITL_BUCKETS}{{{S}}}"),
        w=12,
    ).min(0)
    return [ttft, itl]


def requests_row(p: Params) -> list[timeseries.Panel]:
    finished = ts_panel(
        "Finished requests by reason",
        "Requests finished per second by vLLM's finish reason (vllm:request_success_total, recording "
        f"rule {n.REC_FINISHED}): stop (end of answer), length (max_tokens or --max-model-len reached), "
        "abort (vLLM aborted it), error, repetition.",
        "reqps",
        [
            Query(
                f"sum by (namespace, pod, finished_reason) ({n.REC_FINISHED}{{{S}}})",
                "{{finished_reason}} {{pod}}",
            )
        ],
        w=8,
    ).min(0)
    length = (
        ts_panel(
            "Stopped by length",
            "Share of finished requests that stopped at a length limit (finish_reason=length, recording "
            f"rule {n.REC_LENGTH_STOPPED}): their max_tokens, or --max-model-len when prompt plus output "
            "reached it, which truncates the answer. KVPlannerRequestsStoppedByLength (info) fires above "
            f"{_pct(p.length_stop_ratio)} for {p.length_stop_for}.",
            "percentunit",
            [Query(f"max by (namespace, pod) ({n.REC_LENGTH_STOPPED}{{{S}}})", "{{namespace}}/{{pod}}")],
            w=8,
        )
        .min(0)
        .max(1)
    )
    throughput = ts_panel(
        "Token throughput",
        "Prompt tokens processed and tokens generated per second (vllm:prompt_tokens_total, "
        "vllm:generation_tokens_total). Prompt tokens include recomputation after preemptions.",
        "short",
        [
            Query(
                f"sum by (namespace, pod) (rate({n.VLLM_PROMPT_TOKENS_TOTAL}{{{S}}}[$__rate_interval]))",
                "prompt {{pod}}",
            ),
            Query(
                f"sum by (namespace, pod) (rate({n.VLLM_GENERATION_TOKENS_TOTAL}{{{S}}}[$__rate_interval]))",
                "generated {{pod}}",
            ),
        ],
        w=8,
    ).min(0)
    queue = ts_panel(
        "Queue time and end-to-end latency",
        "Time finished requests spent waiting in vLLM's queue (vllm:request_queue_time_seconds) and "
        "from arrival to the last token (vllm:e2e_request_latency_seconds), 50th/90th/99th percentile "
        "per model. Queue time that grows with KV usage means requests wait for KV blocks.",
        "s",
        [
            *_quantiles(f"rate({n.VLLM_QUEUE_TIME}_bucket{{{S}}}[$__rate_interval])", "queue "),
            *_quantiles(f"rate({n.VLLM_E2E_LATENCY}_bucket{{{S}}}[$__rate_interval])", "e2e "),
        ],
        w=12,
    ).min(0)
    waiting = ts_panel(
        "Waiting for capacity vs deferred",
        "Waiting requests by reason (vllm:num_requests_waiting_by_reason, vLLM 0.20.2 and later): "
        "capacity = no room in the KV cache or the batch; deferred = held back for another reason "
        "(e.g. waiting for remote KV). Only capacity waits are fixed by more KV blocks or replicas.",
        "short",
        [
            Query(
                f"sum by (namespace, pod, reason) ({n.VLLM_WAITING_BY_REASON}{{{S}}})",
                "{{reason}} {{pod}}",
            )
        ],
        w=12,
    ).min(0)
    return [finished, length, throughput, queue, waiting]


def build(p: Params) -> dm.Dashboard:
    d = base_dashboard(
        "kv-planner / KV cache pressure",
        PRESSURE_UID,
        "KV cache usage, preemptions, queueing, plan vs actual blocks, limits, request lengths and "
        "latency of vLLM pods. Panels on vLLM's own metrics work without the kv-planner exporter; "
        "panels that say so need it. Needs the kv-planner Prometheus rules.",
    )
    d = variables(d)
    d = d.link(
        dashboard_link("Fleet capacity", FLEET_UID, "Every vLLM workload: model, GPU, capacity, headroom, preemptions")
    )
    rows: list[tuple[str, list[timeseries.Panel | bargauge.Panel | table.Panel]]] = [
        ("Cache pressure", [*cache_row(p)]),
        ("Scheduler", [*scheduler_row()]),
        ("Plan vs actual", [*plan_row(p)]),
        ("Request lengths", [*lengths_row()]),
        ("Latency", [*latency_row()]),
        ("Requests", [*requests_row(p)]),
    ]
    for title, panels in rows:
        d = d.with_row(db.Row(title))
        for panel in panels:
            d = d.with_panel(panel)
    return number_panels(d.build())
