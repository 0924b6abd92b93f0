"""Building blocks shared by both dashboards, on grafana-foundation-sdk's typed builders.

The SDK's builders and models are generated from Grafana's own dashboard schema (here the Grafana
11.6 schema, ``schemaVersion`` 41), so field names and enum values cannot drift from what Grafana
reads. Everything Grafana would otherwise fill in on import (panel ids, grid positions, datasource
references) is set explicitly so the JSON is stable and reviewable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from dashboards import names as n

EXPORTER_NOTE = " Needs the kv-planner exporter."

# Every panel and variable query goes through the dashboard's `datasource` variable, so one import
# works against any Prometheus-compatible datasource (Prometheus, Thanos, Mimir).
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label filter of the template variables for series with a model_name label (vLLM's, the per-engine
# exporter series, the recording rules). `.*`, the "All" value of namespace and model, also matches
# series without the label.
SELECTOR = 'namespace=~"$namespace", model_name=~"$model", pod=~"$pod"'
# For the exporter's per-pod series (namespace, pod, workload; no model_name). The pod variable has no
# custom "All" value, so "All" is the list of pods of the selected models, and the model filter holds.
POD_SELECTOR = 'namespace=~"$namespace", pod=~"$pod"'

PRESSURE_UID = "kv-planner-kv-cache-pressure"
FLEET_UID = "kv-planner-fleet-capacity"
TAGS = ["kv-planner", "vllm"]

# The template variables list the pods of this recording rule: every pod whose vLLM Prometheus scrapes
# (all releases emit vllm:num_requests_running with model_name), plus pods only the exporter reads.
_VARIABLE_METRIC = n.REC_RUNNING


def model_of_pod() -> str:
    """1 per (namespace, pod, model_name): multiply a per-pod series by it to add its model_name."""
    return f"group by (namespace, pod, model_name) ({n.REC_RUNNING}{{{SELECTOR}}})"


def with_model(per_pod: str) -> str:
    """A series aggregated by (namespace, pod), labelled with the pod's model_name as well."""
    return f"{per_pod} * on (namespace, pod) group_left (model_name) {model_of_pod()}"


def recommended_by_workload() -> str:
    """The retuner's --max-num-seqs (per namespace and workload) for workloads of the selected pods."""
    return (
        f"max by (namespace, workload) ({n.EXP_MAX_NUM_SEQS_RECOMMENDED} "
        f"and on (namespace, workload) {n.EXP_TARGET_UP}{{{POD_SELECTOR}}})"
    )


def configured_by_workload(metric: str) -> str:
    return f"max by (namespace, workload) ({metric}{{{POD_SELECTOR}}})"


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str
    instant: bool = False


def target(q: Query, ref_id: str, *, table: bool = False) -> prom.Dataquery:
    t = prom.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(ref_id)
    t = t.editor_mode(pm.QueryEditorMode.CODE)
    t = t.instant() if q.instant else t.range()
    if table:
        t = t.format(pm.PromQueryFormat.TABLE)
    return t


class _TargetsPanel(Protocol):
    def with_target(self: _P, target: cogbuilder.Builder[cogvariants.Dataquery]) -> _P: ...


_P = TypeVar("_P", bound=_TargetsPanel)


def ref_id(index: int) -> str:
    return chr(ord("A") + index)


def add_targets(panel: _P, queries: Sequence[Query], *, table: bool = False) -> _P:
    """Add queries as targets A, B, C, ... (override_by_query refers to these ids)."""
    for i, q in enumerate(queries):
        panel = panel.with_target(target(q, ref_id(i), table=table))
    return panel


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    """Absolute threshold steps; the first step's value is None (Grafana's -Infinity)."""
    return (
        db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def dashed_line() -> list[dm.DynamicConfigValue]:
    """Override properties that draw a series as a dashed line: limits and plans, not measurements."""
    return [
        dm.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
        dm.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    ]


def legend() -> cb.VizLegendOptions:
    return (
        cb.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.TABLE)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )


def tooltip() -> cb.VizTooltipOptions:
    return cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)


def variables(dashboard: db.Dashboard, *, with_pod: bool = True) -> db.Dashboard:
    """datasource, namespace, model and pod variables (each narrows the next)."""
    dashboard = dashboard.with_variable(
        db.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .description("Prometheus (or compatible) datasource that scrapes vLLM and the kv-planner exporter.")
    )
    chain = [
        ("namespace", "Namespace", f"label_values({_VARIABLE_METRIC}, namespace)"),
        ("model", "Model", f'label_values({_VARIABLE_METRIC}{{namespace=~"$namespace"}}, model_name)'),
    ]
    if with_pod:
        chain.append(
            (
                "pod",
                "Pod",
                f'label_values({_VARIABLE_METRIC}{{namespace=~"$namespace", model_name=~"$model"}}, pod)',
            )
        )
    for name, label, query in chain:
        variable = (
            db.QueryVariable(name)
            .label(label)
            .description(f"{label} of the vLLM pods to show (from {_VARIABLE_METRIC}).")
            .datasource(DATASOURCE)
            .query(query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .current(dm.VariableOption(selected=True, text="All", value="$__all"))
        )
        if name != "pod":
            variable = variable.all_value(".*")
        dashboard = dashboard.with_variable(variable)
    return dashboard


def dashboard_link(title: str, uid: str, tooltip_text: str) -> db.DashboardLink:
    """A link to the other kv-planner dashboard that keeps the time range and the variables."""
    return (
        db.DashboardLink(title)
        .type(dm.DashboardLinkType.LINK)
        .url(f"/d/{uid}")
        .tooltip(tooltip_text)
        .icon("dashboard")
        .include_vars(True)
        .keep_time(True)
    )


def pressure_url_for_row() -> str:
    """Data link from a table row (namespace, pod) to the KV cache pressure dashboard."""
    return (
        f"/d/{PRESSURE_UID}?${{datasource:queryparam}}&var-namespace=${{__data.fields.namespace}}"
        "&var-model=$__all&var-pod=${__data.fields.pod}&${__url_time_range}"
    )


def ts_panel(
    title: str,
    description: str,
    unit: str,
    queries: list[Query],
    *,
    w: int,
    h: int = 8,
    dashed: tuple[str, ...] = (),
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(w)
        .height(h)
        .legend(legend())
        .tooltip(tooltip())
        .line_width(1)
        .fill_opacity(10)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)
    )
    panel = add_targets(panel, queries)
    for ref in dashed:
        panel = panel.override_by_query(ref, dashed_line())
    return panel


def number_panels(dashboard: dm.Dashboard) -> dm.Dashboard:
    """Give rows and panels ids 1, 2, ... in layout order (Grafana needs them unique per dashboard)."""
    for number, panel in enumerate(dashboard.panels or [], start=1):
        panel.id_val = number
    return dashboard


def base_dashboard(title: str, uid: str, description: str) -> db.Dashboard:
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .time("now-3h", "now")
        .refresh("30s")
        .timezone("browser")
    )


def encode(dashboard: dm.Dashboard) -> str:
    """Deterministic JSON text of a dashboard (sorted keys, two-space indent, trailing newline)."""
    text = JSONEncoder(sort_keys=True, indent=2).encode(dashboard)
    # Round-trip through the json module so the output does not depend on the SDK's encoder details.
    return json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def limits_table(*, w: int, h: int) -> table.Panel:
    """Per workload: --max-num-seqs configured vs recommended, the risk bound, --max-model-len."""
    queries = [
        Query(configured_by_workload(n.EXP_MAX_NUM_SEQS), "", instant=True),
        Query(recommended_by_workload(), "", instant=True),
        Query(
            f"max by (namespace, workload) ({n.EXP_RISK_BOUND} "
            f"and on (namespace, workload) {n.EXP_TARGET_UP}{{{POD_SELECTOR}}})",
            "",
            instant=True,
        ),
        Query(configured_by_workload(n.EXP_MAX_MODEL_LEN), "", instant=True),
    ]
    panel = (
        table.Panel()
        .title("Configured vs recommended limits")
        .description(
            "Per workload: --max-num-seqs as configured (largest over its pods), the retuner's "
            "recommendation (from observed preemptions, KV usage and request lengths, never above what "
            "the plan says fits), the largest --max-num-seqs whose KV overflow risk stays within the "
            "target for the observed lengths, and --max-model-len as configured. A recommendation that "
            "differs from the configured value is pending." + EXPORTER_NOTE
        )
        .datasource(DATASOURCE)
        .unit("short")
        .span(w)
        .height(h)
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": {
                        "Value #A": "max_num_seqs",
                        "Value #B": "recommended",
                        "Value #C": "risk bound",
                        "Value #D": "max_model_len",
                    },
                },
            )
        )
    )
    return add_targets(panel, queries, table=True)
