"""Turn a workload's observations into a ``--max-num-seqs`` recommendation. Pure: no I/O, no clock.

The control law (docs/retuner.md states it with its guarantees):

* **Estimate.** The peak KV footprint of one sequence, ``F`` blocks, is the larger of what the finished
  requests' exact mean lengths give and the highest blocks-per-running-sequence seen at this
  configuration (:mod:`admission.retuner.estimate`). The capacity is
  ``N = floor(usable_blocks x (1 - headroom) / F)``.
* **Conditions** per observation: *pressure* = new preemptions, or KV usage at or above ``high_usage``;
  *slack* = requests waiting, no preemption, usage below ``high_usage`` and the running configuration
  ``c`` below both ``N`` and the ceiling; otherwise *steady*. The band between ``N`` (headroom kept
  free) and a full cache is the hysteresis: nothing moves inside it.
* **Targets** depend only on ``c`` and the evidence, never on an earlier recommendation: on pressure
  ``N`` when it explains the pressure (``N < c``), else ``c`` minus a quarter; on slack
  ``min(c + max_step_up x c, N, ceiling - 1)``. Steps are bounded (a cut keeps ``1 - max_step_down`` of
  ``c``) and clamped to the policy's ``[min_seqs, max_seqs]``.
* **Ceiling.** Preemptions at ``c`` (or a cut for a cache kept near full) make ``c`` a ceiling: nothing
  at or above it is recommended again until the footprint falls below 3/4 of what it was then.
* **Probes.** A configuration above the last known-good one (clean for ``persist`` observations) is a
  probe. Preemptions during a probe roll back to the known-good value at once (no persistence, no
  dwell): a probe costs at most one observation interval of preemptions.
* **Persistence and dwell.** Other changes need the same condition on ``persist`` consecutive
  observations at this configuration and ``min_dwell_s`` since the previous change.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from admission.retuner.estimate import capacity
from admission.retuner.settings import RetunerSettings

Condition = Literal["pressure", "slack", "steady", "unknown"]
Action = Literal["lower", "raise", "hold"]

# Stable reasons (Kubernetes Event reasons and the `reason` of decisions).
PREEMPTIONS_PERSIST = "PreemptionsPersist"
KV_CACHE_NEAR_FULL = "KvCacheNearFull"
KV_CACHE_SLACK = "KvCacheSlackWithQueue"
PROBE_PREEMPTED = "ProbePreempted"
HOLD_STEADY = "Steady"
HOLD_NOT_PERSISTENT = "NotPersistent"
HOLD_DWELL = "WithinMinimumDwell"
HOLD_NO_DATA = "InsufficientData"
HOLD_AT_BOUND = "AtBound"
HOLD_UNCHANGED = "Unchanged"
HOLD_ROLLOUT = "RolloutInProgress"

# A ceiling is forgotten when the footprint falls below this fraction of the one it was set with.
CEILING_RESET = 0.75


class WorkloadSignals(BaseModel):
    """One observation of a workload (all its pods and engines together)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preemptions: float = Field(description="preemptions since the previous observation (resets handled)")
    usage: float | None = Field(description="highest KV usage over the workload's engines")
    waiting: float = 0.0
    configured: int | None = None
    usable_blocks: int | None = Field(default=None, description="num_gpu_blocks - 1 of the smallest engine")
    footprint_blocks: float | None = Field(
        default=None, description="peak blocks of one mean finished request (exact length means)"
    )
    occupancy_blocks: float | None = Field(default=None, description="blocks in use per running sequence, now")
    requests: float = Field(default=0.0, description="finished requests behind the length means")
    risk_limit: int | None = Field(default=None, description="risk-bounded max_num_seqs (informational)")
    mixed: bool = Field(default=False, description="pods run different --max-num-seqs (a rollout under way)")


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    reason: str
    current: int | None = Field(description="--max-num-seqs the workload runs with")
    recommended: int | None
    message: str
    capacity: int | None = Field(default=None, description="estimated sequences that fit with the headroom")
    footprint_blocks: float | None = Field(default=None, description="estimated peak blocks per sequence")
    rollback: bool = Field(default=False, description="a probe preempted: back to the known-good value")


class WorkloadState(BaseModel):
    """What the retuner remembers about one workload between observations."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    configured: int | None = None
    recommended: int | None = None
    last_change_at: float | None = None
    conditions: deque[tuple[Condition, str]] = Field(default_factory=lambda: deque(maxlen=64))
    occupancy_max: float | None = Field(default=None, description="at the running configuration")
    clean: int = Field(default=0, description="consecutive clean observations at the running configuration")
    last_good: int | None = Field(default=None, description="largest configuration seen clean for `persist`")
    probing: bool = False
    ceiling: int | None = Field(default=None, description="smallest configuration seen preempting")
    ceiling_footprint: float | None = None
    length_footprint: float | None = Field(
        default=None, description="the last footprint from enough finished requests (a property of the load)"
    )


def footprint(state: WorkloadState, signals: WorkloadSignals, settings: RetunerSettings) -> float | None:
    """Peak blocks per sequence: lengths (when enough requests finished), floored by the occupancy seen.

    The length figure is a property of the load, not of the configuration, so after a rollout the last
    trusted one is kept until the new pods have finished ``min_requests`` requests of their own.
    """
    if signals.footprint_blocks is not None and signals.requests >= settings.min_requests:
        state.length_footprint = signals.footprint_blocks
    if state.length_footprint is None:
        return None  # occupancy alone under-states the peak (sequences are mid-way): do not size on it
    return max(state.length_footprint, state.occupancy_max or 0.0)


def classify(
    signals: WorkloadSignals, settings: RetunerSettings, current: int, limit: int | None
) -> tuple[Condition, str]:
    if signals.preemptions > 0:
        return "pressure", PREEMPTIONS_PERSIST
    if signals.usage is None:
        return "unknown", HOLD_NO_DATA
    if signals.usage >= settings.high_usage:
        return "pressure", KV_CACHE_NEAR_FULL
    if signals.waiting > 0:
        if limit is None:
            return "unknown", HOLD_NO_DATA
        if current < limit:
            return "slack", KV_CACHE_SLACK
    return "steady", HOLD_STEADY


def _clamp(settings: RetunerSettings, value: int) -> int:
    upper = settings.max_seqs if settings.max_seqs is not None else value
    return max(settings.min_seqs, min(value, upper))


def _new_configuration(state: WorkloadState, configured: int) -> None:
    """A rollout (ours or anyone's): the evidence starts again at what actually runs."""
    state.probing = state.last_good is not None and configured > state.last_good
    state.configured = configured
    state.recommended = configured
    state.conditions.clear()
    state.occupancy_max = None
    state.clean = 0


def _track(
    state: WorkloadState, signals: WorkloadSignals, settings: RetunerSettings, current: int, size: float | None
) -> None:
    """Known-good configurations and the ceiling, from this observation."""
    if (
        state.ceiling is not None
        and size is not None
        and state.ceiling_footprint is not None
        and size < state.ceiling_footprint * CEILING_RESET
    ):
        # The load got substantially lighter (well beyond the noise of a mean over a few dozen
        # requests): the old ceiling says nothing about it.
        state.ceiling = state.ceiling_footprint = None
    if signals.preemptions > 0:
        state.clean = 0
        if state.ceiling is None or current < state.ceiling:
            state.ceiling, state.ceiling_footprint = current, size
        if state.last_good is not None and state.last_good >= current:
            state.last_good = None  # the load changed: what was good is no longer known to be
    elif signals.usage is not None and signals.usage < settings.high_usage:
        state.clean += 1
        if state.clean >= settings.persist:
            state.last_good = current
            state.probing = False


def decide(state: WorkloadState, signals: WorkloadSignals, settings: RetunerSettings, now: float) -> Decision:
    """Update ``state`` with one observation and say what to recommend."""
    if signals.mixed:
        # Old and new pods side by side: their preemptions cannot be told apart by configuration, so
        # this observation is evidence for neither. Wait until one configuration runs.
        return Decision(
            action="hold",
            reason=HOLD_ROLLOUT,
            current=state.configured,
            recommended=state.recommended,
            message="pods run different --max-num-seqs (a rollout is under way); observing again after it",
        )
    if signals.configured is not None and signals.configured != state.configured:
        _new_configuration(state, signals.configured)
    current = signals.configured if signals.configured is not None else state.configured
    if current is None:
        return Decision(
            action="hold",
            reason=HOLD_NO_DATA,
            current=None,
            recommended=state.recommended,
            message="the configured --max-num-seqs is not known",
        )
    if state.recommended is None:
        state.recommended = current
    if signals.occupancy_blocks is not None:
        state.occupancy_max = max(state.occupancy_max or 0.0, signals.occupancy_blocks)
    size = footprint(state, signals, settings)
    _track(state, signals, settings, current, size)
    limit = capacity(signals.usable_blocks, size, settings.headroom) if (size and signals.usable_blocks) else None
    condition, reason = classify(signals, settings, current, _raise_limit(state, settings, limit))
    state.conditions.append((condition, reason))
    standing = state.recommended

    def decision(action: Action, why: str, recommended: int, message: str, *, rollback: bool = False) -> Decision:
        return Decision(
            action=action,
            reason=why,
            current=current,
            recommended=recommended,
            message=message,
            capacity=limit,
            footprint_blocks=size,
            rollback=rollback,
        )

    def hold(why: str, message: str) -> Decision:
        return decision("hold", why, standing, message)

    def change(target: int, why: str, message: str, *, rollback: bool = False) -> Decision:
        if target == standing:
            return hold(HOLD_UNCHANGED, f"{message} (already recommended)")
        state.recommended, state.last_change_at = target, now
        return decision("lower" if target < standing else "raise", why, target, message, rollback=rollback)

    if state.probing and signals.preemptions > 0 and state.last_good is not None and state.last_good < current:
        good = state.last_good
        return change(
            good,
            PROBE_PREEMPTED,
            f"{PROBE_PREEMPTED}: --max-num-seqs {current} preempted; back to {good}, the last value without "
            f"preemptions ({current} is now a ceiling)",
            rollback=True,
        )
    if condition in ("steady", "unknown"):
        return hold(reason, f"{condition}: keep --max-num-seqs {standing}")
    recent = list(state.conditions)[-settings.persist :]
    if len(recent) < settings.persist or any(c != condition for c, _ in recent):
        return hold(
            HOLD_NOT_PERSISTENT,
            f"{condition} seen {sum(c == condition for c, _ in recent)} of {settings.persist} observations",
        )
    if condition == "pressure":
        target, why = _lower_target(settings, current, limit, size)
        if target < current and (state.ceiling is None or current < state.ceiling):
            # Persistent pressure without preemptions (a cache kept near full) is a ceiling too.
            state.ceiling, state.ceiling_footprint = current, size
    else:
        target, why = _raise_target(state, settings, current, limit)
    if target == current and target == standing:
        return hold(HOLD_AT_BOUND, f"{reason}, but --max-num-seqs {current} is at its bound ({why})")
    if target != standing and state.last_change_at is not None and now - state.last_change_at < settings.min_dwell_s:
        return hold(
            HOLD_DWELL,
            f"last change {now - state.last_change_at:.0f} s ago (minimum dwell {settings.min_dwell_s:.0f} s)",
        )
    verb = "lower" if target < current else "raise"
    return change(target, reason, f"{reason}: {verb} --max-num-seqs {current} -> {target} ({why})")


def _raise_limit(state: WorkloadState, settings: RetunerSettings, limit: int | None) -> int | None:
    """The highest value a raise may reach: capacity, below the ceiling, within the policy."""
    if limit is None:
        return None
    if state.ceiling is not None:
        limit = min(limit, state.ceiling - 1)
    if settings.max_seqs is not None:
        limit = min(limit, settings.max_seqs)
    return limit


def _lower_target(settings: RetunerSettings, current: int, limit: int | None, size: float | None) -> tuple[int, str]:
    if limit is not None and limit < current:
        target = limit
        why = f"{size:.0f} blocks per sequence at its peak: {limit} fit with {settings.headroom:g} kept free"
    else:
        target = current - max(1, math.ceil(current * 0.25))
        why = "the estimate does not explain the pressure; cutting by a quarter"
    floor_step = math.ceil(current * (1 - settings.max_step_down))
    if target < floor_step:
        target, why = floor_step, f"{why}; bounded step"
    return _clamp(settings, target), why


def _raise_target(state: WorkloadState, settings: RetunerSettings, current: int, limit: int | None) -> tuple[int, str]:
    ceiling = _raise_limit(state, settings, limit)
    assert ceiling is not None  # slack is only classified with a capacity estimate
    step = current + max(1, math.floor(current * settings.max_step_up))
    target = min(step, ceiling)
    why = f"capacity {limit}" + (f", ceiling {state.ceiling}" if state.ceiling is not None else "")
    return _clamp(settings, max(target, current)), why
