"""Turn a workload's observations into a ``--max-num-seqs`` recommendation. Pure: no I/O, no clock.

Per observation the workload is in one of three conditions:

* **pressure**: vLLM preempted requests since the last observation, or KV usage is at or above
  ``high_usage``;
* **slack**: usage at or below ``low_usage`` *and* requests are queued, with no preemption;
* otherwise **steady**.

A change needs the same condition on ``persist`` consecutive observations (the gap between the two
usage thresholds is the hysteresis band) and ``min_dwell_s`` since the previous change. Steps are
bounded: a cut keeps at least ``1 - max_step_down`` of the current value, a raise adds at most
``max_step_up`` of it (at least 1). The target comes from the observed length distributions and vLLM's
real block count (:mod:`admission.retuner.advice`): on pressure the recommendation drops to that risk
bound (or by a quarter when the bound does not explain the pressure); on slack it rises toward it,
never above it and never above the policy ceiling.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from admission.retuner.settings import RetunerSettings

Condition = Literal["pressure", "slack", "steady", "unknown"]
Action = Literal["lower", "raise", "hold"]

# Stable reasons (Kubernetes Event reasons and the `reason` of decisions).
PREEMPTIONS_PERSIST = "PreemptionsPersist"
KV_CACHE_NEAR_FULL = "KvCacheNearFull"
KV_CACHE_SLACK = "KvCacheSlackWithQueue"
HOLD_STEADY = "Steady"
HOLD_NOT_PERSISTENT = "NotPersistent"
HOLD_DWELL = "WithinMinimumDwell"
HOLD_NO_DATA = "InsufficientData"
HOLD_AT_BOUND = "AtBound"


class WorkloadSignals(BaseModel):
    """One observation of a workload (all its pods and engines together)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preemptions: float = Field(description="preemptions since the previous observation (resets handled)")
    usage: float | None = Field(description="highest KV usage over the workload's engines")
    waiting: float = 0.0
    configured: int | None = None
    risk_limit: int | None = Field(default=None, description="risk-bounded max_num_seqs from the planner")
    requests: float = Field(default=0.0, description="finished requests behind the length histograms")


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    reason: str
    current: int | None
    recommended: int | None
    message: str


class WorkloadState(BaseModel):
    """What the retuner remembers about one workload between observations."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    recommended: int | None = None
    last_configured: int | None = None
    last_change_at: float | None = None
    conditions: deque[tuple[Condition, str]] = Field(default_factory=lambda: deque(maxlen=64))


def classify(signals: WorkloadSignals, settings: RetunerSettings) -> tuple[Condition, str]:
    if signals.preemptions > 0:
        return "pressure", PREEMPTIONS_PERSIST
    if signals.usage is None:
        return "unknown", HOLD_NO_DATA
    if signals.usage >= settings.high_usage:
        return "pressure", KV_CACHE_NEAR_FULL
    if signals.usage <= settings.low_usage and signals.waiting > 0:
        return "slack", KV_CACHE_SLACK
    return "steady", HOLD_STEADY


def _bounded(settings: RetunerSettings, value: int) -> int:
    upper = settings.max_seqs if settings.max_seqs is not None else value
    return max(settings.min_seqs, min(value, upper))


def decide(state: WorkloadState, signals: WorkloadSignals, settings: RetunerSettings, now: float) -> Decision:
    """Update ``state`` with one observation and say what to recommend."""
    condition, reason = classify(signals, settings)
    state.conditions.append((condition, reason))
    if signals.configured is not None and signals.configured != state.last_configured:
        # A new configuration (a rollout, ours or an operator's) restarts from what actually runs.
        state.last_configured = signals.configured
        state.recommended = signals.configured
    current = state.recommended or signals.configured
    if current is None and signals.risk_limit is not None:
        current = signals.risk_limit
    if current is None:
        return Decision(
            action="hold",
            reason=HOLD_NO_DATA,
            current=None,
            recommended=None,
            message="neither the configured --max-num-seqs nor a risk bound is known",
        )
    state.recommended = current

    def hold(why: str, message: str) -> Decision:
        return Decision(action="hold", reason=why, current=current, recommended=current, message=message)

    if condition in ("steady", "unknown"):
        return hold(reason, f"{condition}: keep --max-num-seqs {current}")
    recent = list(state.conditions)[-settings.persist :]
    if len(recent) < settings.persist or any(c != condition for c, _ in recent):
        return hold(
            HOLD_NOT_PERSISTENT,
            f"{condition} seen {sum(c == condition for c, _ in recent)} of {settings.persist} observations",
        )
    if state.last_change_at is not None and now - state.last_change_at < settings.min_dwell_s:
        return hold(
            HOLD_DWELL,
            f"last change {now - state.last_change_at:.0f} s ago (minimum dwell {settings.min_dwell_s:.0f} s)",
        )
    if condition == "pressure":
        return _lower(state, signals, settings, now, current, reason)
    return _raise(state, signals, settings, now, current)


def _lower(
    state: WorkloadState, signals: WorkloadSignals, settings: RetunerSettings, now: float, current: int, reason: str
) -> Decision:
    if signals.risk_limit is not None and signals.risk_limit < current:
        target = signals.risk_limit
        why = f"the observed lengths allow {signals.risk_limit} at risk {settings.target_risk:g}"
    else:
        target = current - max(1, math.ceil(current * 0.25))
        why = "the length histograms do not explain the pressure; cutting by a quarter"
    floor_step = math.ceil(current * (1 - settings.max_step_down))
    new = _bounded(settings, max(target, floor_step))
    if new >= current:
        return Decision(
            action="hold",
            reason=HOLD_AT_BOUND,
            current=current,
            recommended=current,
            message=f"{reason} but --max-num-seqs {current} is at the policy floor",
        )
    state.recommended, state.last_change_at = new, now
    state.conditions.clear()
    return Decision(
        action="lower",
        reason=reason,
        current=current,
        recommended=new,
        message=f"{reason}: lower --max-num-seqs {current} -> {new} ({why})",
    )


def _raise(
    state: WorkloadState, signals: WorkloadSignals, settings: RetunerSettings, now: float, current: int
) -> Decision:
    if signals.risk_limit is None or signals.requests < settings.min_requests:
        return Decision(
            action="hold",
            reason=HOLD_NO_DATA,
            current=current,
            recommended=current,
            message="queue with low usage, but too few finished requests to size a raise",
        )
    ceiling = signals.risk_limit if settings.max_seqs is None else min(signals.risk_limit, settings.max_seqs)
    step = current + max(1, math.floor(current * settings.max_step_up))
    new = min(ceiling, step)
    if new <= current:
        return Decision(
            action="hold",
            reason=HOLD_AT_BOUND,
            current=current,
            recommended=current,
            message=f"queue with low usage, but {current} is already at the risk bound {ceiling}",
        )
    state.recommended, state.last_change_at = new, now
    state.conditions.clear()
    return Decision(
        action="raise",
        reason=KV_CACHE_SLACK,
        current=current,
        recommended=new,
        message=f"{KV_CACHE_SLACK}: raise --max-num-seqs {current} -> {new} "
        f"(risk bound {signals.risk_limit} at {settings.target_risk:g})",
    )
