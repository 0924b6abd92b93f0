"""The "kv-planner / Fleet capacity" dashboard: every vLLM workload on one page."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import stat, table
from grafana_foundation_sdk.builders import timeseries as tsb
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
    configured_by_workload,
    dashboard_link,
    limits_table,
    number_panels,
    pressure_url_for_row,
    recommended_by_workload,
    thresholds,
    ts_panel,
    variables,
    with_model,
)
from dashboards.params import Params

S = SELECTOR
_BY = "namespace, pod, model_name"


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def stat_panel(title: str, description: str, unit: str, expr: str, steps: db.ThresholdsConfig) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .decimals(0)
        .thresholds(steps)
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .text_mode(cm.BigValueTextMode.VALUE)
        .span(4)
        .height(4)
    )
    return add_targets(panel, [Query(expr, "", instant=True)])


def summary_stats(p: Params) -> list[stat.Panel]:
    bad_if_any = thresholds((None, "green"), (1, "red"))
    usage = f"max by (namespace, pod) ({n.REC_KV_USAGE}{{{S}}})"
    configured = configured_by_workload(n.EXP_MAX_NUM_SEQS)
    return [
        stat_panel(
            "vLLM pods",
            f"vLLM pods reporting metrics (series of the recording rule {n.REC_RUNNING}).",
            "none",
            f"count({n.REC_RUNNING}{{{S}}})",
            thresholds((None, "blue")),
        ),
        stat_panel(
            "Pods above the plan ceiling",
            f"Pods whose KV cache usage is above 1 - headroom = {_pct(p.plan_ceiling_ratio)} right now, "
            "i.e. running more sequences than planned.",
            "none",
            f"sum({usage} > bool {p.plan_ceiling_ratio:g})",
            bad_if_any,
        ),
        stat_panel(
            "Preemptions in range",
            "Requests vLLM preempted (recomputed for lack of KV blocks) during the selected time range, "
            "over all selected pods (increase of vllm:num_preemptions_total).",
            "none",
            f"sum(increase({n.VLLM_PREEMPTIONS}{{{S}}}[$__range]))",
            bad_if_any,
        ),
        stat_panel(
            "Requests waiting",
            f"Requests queued in vLLM right now over all selected pods ({n.REC_WAITING}).",
            "none",
            f"sum({n.REC_WAITING}{{{S}}})",
            thresholds((None, "green"), (1, "orange")),
        ),
        stat_panel(
            "Recommendations pending",
            "Workloads whose recommended --max-num-seqs (retuner) differs from the configured one." + EXPORTER_NOTE,
            "none",
            f"sum({recommended_by_workload()} != bool on (namespace, workload) {configured})",
            thresholds((None, "green"), (1, "orange")),
        ),
        stat_panel(
            "Pods the exporter cannot read",
            "vLLM pods whose /metrics the kv-planner exporter failed to scrape on its last attempt "
            "(kv_planner_target_up == 0)." + EXPORTER_NOTE,
            "none",
            f"sum(max by (namespace, pod) ({n.EXP_TARGET_UP}{{{POD_SELECTOR}}}) == bool 0)",
            bad_if_any,
        ),
    ]


# (header, unit, PromQL) of the workloads table; all aggregated by namespace, pod, model_name so
# Grafana's merge transformation joins them into one row per pod.
def _workload_columns(p: Params) -> list[tuple[str, str, str]]:
    usage = f"{n.REC_KV_USAGE}{{{S}}}"
    return [
        ("KV usage", "percentunit", f"max by ({_BY}) ({usage})"),
        ("Peak KV usage", "percentunit", f"max by ({_BY}) (max_over_time({usage}[$__range]))"),
        ("Headroom left", "percentunit", f"1 - max by ({_BY}) (max_over_time({usage}[$__range]))"),
        ("Preemptions", "none", f"sum by ({_BY}) (increase({n.VLLM_PREEMPTIONS}{{{S}}}[$__range]))"),
        ("Running", "none", f"max by ({_BY}) ({n.REC_RUNNING}{{{S}}})"),
        ("Waiting", "none", f"max by ({_BY}) ({n.REC_WAITING}{{{S}}})"),
        ("Planned blocks", "none", with_model(f"max by (namespace, pod) ({n.EXP_BLOCKS_PLANNED}{{{POD_SELECTOR}}})")),
        ("Actual blocks", "none", f"max by ({_BY}) ({n.EXP_BLOCKS_TOTAL}{{{S}}})"),
        ("max_num_seqs", "none", with_model(f"max by (namespace, pod) ({n.EXP_MAX_NUM_SEQS}{{{POD_SELECTOR}}})")),
    ]


def workloads_table(p: Params) -> table.Panel:
    columns = _workload_columns(p)
    rename = {f"Value #{chr(ord('A') + i)}": header for i, (header, _, _) in enumerate(columns)}
    panel = (
        table.Panel()
        .title("vLLM workloads")
        .description(
            "One row per vLLM pod over the selected time range: KV usage now and at its peak, headroom "
            "left below a full cache at the peak (1 - peak usage), preemptions, running and waiting "
            "requests, planned vs actual KV blocks per engine, and --max-num-seqs as configured. The "
            "block and limit columns need the kv-planner exporter. Click a pod for its KV cache pressure "
            "dashboard."
        )
        .datasource(DATASOURCE)
        .unit("none")
        .span(24)
        .height(10)
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True}, "renameByName": rename},
            )
        )
        .thresholds(thresholds((None, "green"), (p.plan_ceiling_ratio, "orange"), (p.kv_near_full_ratio, "red")))
        .override_by_name(
            "pod",
            [
                dm.DynamicConfigValue(
                    id_val="links",
                    value=[{"title": "KV cache pressure of ${__data.fields.pod}", "url": pressure_url_for_row()}],
                )
            ],
        )
    )
    for header, unit, _ in columns:
        if unit != "none":
            panel = panel.override_by_name(header, [dm.DynamicConfigValue(id_val="unit", value=unit)])
    return add_targets(panel, [Query(expr, "", instant=True) for _, _, expr in columns], table=True)


def plans_table() -> table.Panel:
    panel = (
        table.Panel()
        .title("Plans")
        .description(
            "The plan the kv-planner webhook wrote on each pod (annotation kv-planner.io/plan): workload, "
            "model, the GPU it was planned for, GPUs per pod and the vLLM release (kv_planner_plan_info)."
            + EXPORTER_NOTE
        )
        .datasource(DATASOURCE)
        .unit("none")
        .span(12)
        .height(8)
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True, "Value": True, "__name__": True}},
            )
        )
    )
    info = f"max by (namespace, pod, {n.EXP_PLAN_INFO_LABELS}) ({n.EXP_PLAN_INFO}{{{POD_SELECTOR}}})"
    return add_targets(panel, [Query(with_model(info), "", instant=True)], table=True)


def trends(p: Params) -> list[tsb.Panel]:
    headroom = (
        ts_panel(
            "Headroom left",
            "1 - KV cache usage per pod: the share of KV blocks still free. Below the line "
            f"(headroom = {_pct(p.headroom)}) the pod runs beyond its plan; at 0 vLLM preempts.",
            "percentunit",
            [Query(f"1 - max by (namespace, pod) ({n.REC_KV_USAGE}{{{S}}})", "{{namespace}}/{{pod}}")],
            w=12,
        )
        .min(0)
        .max(1)
        .thresholds(thresholds((None, "red"), (p.headroom, "green")))
    )
    headroom = headroom.thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.LINE))
    preemptions = ts_panel(
        "Preemptions by model",
        f"Requests preempted per second, summed per namespace and model ({n.REC_PREEMPTIONS}).",
        "reqps",
        [
            Query(
                f"sum by (namespace, model_name) ({n.REC_PREEMPTIONS}{{{S}}})",
                "{{namespace}}/{{model_name}}",
            )
        ],
        w=12,
    ).min(0)
    return [headroom, preemptions]


def build(p: Params) -> dm.Dashboard:
    d = base_dashboard(
        "kv-planner / Fleet capacity",
        FLEET_UID,
        "Every vLLM workload: model, GPU, planned capacity, headroom left, recent preemptions and pending "
        "recommendations. Needs the kv-planner Prometheus rules; columns that say so need the exporter.",
    )
    d = variables(d)
    d = d.link(
        dashboard_link(
            "KV cache pressure", PRESSURE_UID, "Usage, preemptions, queue, plan and latency of selected pods"
        )
    )
    d = d.with_row(db.Row("Fleet"))
    for panel in summary_stats(p):
        d = d.with_panel(panel)
    d = d.with_panel(workloads_table(p))
    d = d.with_row(db.Row("Trends"))
    for ts in trends(p):
        d = d.with_panel(ts)
    d = d.with_row(db.Row("Limits and plans"))
    d = d.with_panel(limits_table(w=12, h=8))
    d = d.with_panel(plans_table())
    return number_panels(d.build())
