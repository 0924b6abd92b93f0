"""Thresholds and durations shared by the rules and the dashboards.

One object holds every number, so the lines drawn on the dashboards are the thresholds the alerts use,
and tests can shorten the ``for:`` durations without editing the generator.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Prometheus duration syntax accepted by `for:` and rule-group `interval:` (single unit keeps it
# readable; promtool rejects anything else anyway).
Duration = Annotated[str, Field(pattern=r"^[0-9]+(ms|s|m|h|d|w|y)$")]
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]


class Params(BaseModel):
    """Every tunable number of the generated rules and dashboards (defaults ship in the chart)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Headroom as DESIGN.md defines it: the fraction of KV blocks the plan keeps free at the planned
    # concurrency. Usage above 1 - headroom means the pod runs beyond what it was planned for.
    headroom: float = Field(default=0.1, ge=0.0, lt=1.0)

    # Rule-group evaluation interval; None keeps Prometheus's global evaluation_interval.
    evaluation_interval: Duration | None = None

    # KVPlannerKVCacheNearFull: usage above this, for this long. vLLM starts preempting at 100%, and
    # usage counts cached-but-evictable prefix blocks as free, so 95% sustained means real pressure.
    kv_near_full_ratio: Ratio = 0.95
    kv_near_full_for: Duration = "15m"

    # KVPlannerPreemptionsSustained: preemptions per second (5-minute rate) above this, for this long.
    # Zero means "any preemption": the 5-minute rate only stays above zero for `for:` if vLLM keeps
    # preempting at least once every five minutes.
    preemption_rate: float = Field(default=0.0, ge=0.0)
    preemptions_for: Duration = "10m"

    # KVPlannerRequestsQueuedWhileCacheFull: requests waiting while usage is above this ratio.
    queue_kv_ratio: Ratio = 0.9
    queue_for: Duration = "5m"

    # KVPlannerRequestsStoppedByLength: share of finished requests with finish_reason=length above
    # this, for this long (info: it may be the clients' max_tokens, or a --max-model-len too short).
    length_stop_ratio: Ratio = 0.5
    length_stop_for: Duration = "30m"

    # KVPlannerKVBlocksDeviateFromPlan: |actual / planned - 1| above this (vLLM's block count is fixed
    # at startup, so a deviation is a planning error, not load).
    plan_deviation: float = Field(default=0.1, gt=0.0, lt=1.0)
    plan_deviation_for: Duration = "15m"

    # KVPlannerExporterDown: Prometheus cannot scrape the exporter (its `up` series, selected by job).
    exporter_job_regex: str = ".*kv-planner.*exporter.*"
    exporter_down_for: Duration = "5m"

    # KVPlannerTargetScrapeFailing: the exporter cannot read a vLLM pod's /metrics.
    target_down_for: Duration = "5m"

    # KVPlannerMaxNumSeqsRecommendationPending: the retuner's recommendation differs from the
    # configured --max-num-seqs for this long.
    recommendation_pending_for: Duration = "1h"

    @property
    def plan_ceiling_ratio(self) -> float:
        """KV usage the plan expects at its planned concurrency (1 - headroom)."""
        return round(1.0 - self.headroom, 6)


DEFAULT_PARAMS = Params()
