"""The retuner's decision rule: persistence, hysteresis, dwell, bounded steps, the risk bound, policy bounds."""

from __future__ import annotations

import pytest

from admission.retuner.decide import (
    HOLD_AT_BOUND,
    HOLD_DWELL,
    HOLD_NO_DATA,
    HOLD_NOT_PERSISTENT,
    KV_CACHE_NEAR_FULL,
    KV_CACHE_SLACK,
    PREEMPTIONS_PERSIST,
    Decision,
    WorkloadSignals,
    WorkloadState,
    decide,
)
from admission.retuner.settings import RetunerSettings

SETTINGS = RetunerSettings(persist=3, min_dwell_s=600, min_requests=10)


def pressure(**kw: object) -> WorkloadSignals:
    base: dict[str, object] = dict(preemptions=5, usage=0.99, waiting=10, configured=64, risk_limit=40, requests=500)
    base.update(kw)
    return WorkloadSignals(**base)  # type: ignore[arg-type]


def slack(**kw: object) -> WorkloadSignals:
    base: dict[str, object] = dict(preemptions=0, usage=0.3, waiting=12, configured=64, risk_limit=100, requests=500)
    base.update(kw)
    return WorkloadSignals(**base)  # type: ignore[arg-type]


def run(
    signals: list[WorkloadSignals],
    settings: RetunerSettings = SETTINGS,
    *,
    start: float = 0.0,
    every: float = 60.0,
    state: WorkloadState | None = None,
) -> list[Decision]:
    state = state or WorkloadState()
    return [decide(state, s, settings, start + i * every) for i, s in enumerate(signals)]


def test_persistent_preemptions_lower_to_the_risk_bound() -> None:
    decisions = run([pressure()] * 3)
    assert [d.action for d in decisions] == ["hold", "hold", "lower"]
    assert decisions[0].reason == HOLD_NOT_PERSISTENT
    assert (decisions[2].reason, decisions[2].current, decisions[2].recommended) == (PREEMPTIONS_PERSIST, 64, 40)


def test_a_single_blip_does_nothing() -> None:
    decisions = run([pressure(), slack(waiting=0, usage=0.7), pressure(), pressure()])
    assert all(d.action == "hold" for d in decisions)


def test_hysteresis_band_between_the_thresholds_is_steady() -> None:
    middle = WorkloadSignals(preemptions=0, usage=0.8, waiting=50, configured=64, risk_limit=100, requests=500)
    assert all(d.action == "hold" for d in run([middle] * 6))


def test_near_full_without_preemptions_also_lowers() -> None:
    decisions = run([pressure(preemptions=0, usage=0.97)] * 3)
    assert decisions[-1].action == "lower" and decisions[-1].reason == KV_CACHE_NEAR_FULL


def test_cuts_are_bounded_and_dwell_is_respected() -> None:
    state = WorkloadState()
    decisions = run([pressure(risk_limit=4)] * 3, state=state)
    assert decisions[-1].recommended == 32  # at most half of 64 in one step
    # Pressure goes on: nothing changes for min_dwell_s, then the next bounded step.
    later = run([pressure(risk_limit=4)] * 3, start=180.0, every=60.0, state=state)
    assert [d.reason for d in later] == [HOLD_NOT_PERSISTENT, HOLD_NOT_PERSISTENT, HOLD_DWELL]
    again = run([pressure(risk_limit=4)] * 2, start=700.0, every=60.0, state=state)
    assert again[0].reason == HOLD_DWELL  # 580 s after the change at t=120
    assert again[1].action == "lower" and again[1].recommended == 16


def test_pressure_the_histograms_do_not_explain_still_lowers_a_quarter() -> None:
    decisions = run([pressure(risk_limit=None)] * 3)
    assert decisions[-1].recommended == 48


def test_slack_raises_toward_but_never_above_the_risk_bound() -> None:
    decisions = run([slack(risk_limit=70)] * 3)
    assert decisions[-1].action == "raise" and decisions[-1].reason == KV_CACHE_SLACK
    assert decisions[-1].recommended == 70  # 64 + 25% would be 80: capped at the bound
    state = WorkloadState()
    capped = run([slack(risk_limit=1000)] * 3, state=state)
    assert capped[-1].recommended == 80  # bounded step


def test_slack_at_the_bound_or_without_data_holds() -> None:
    assert run([slack(risk_limit=64)] * 3)[-1].reason == HOLD_AT_BOUND
    assert run([slack(risk_limit=None)] * 3)[-1].reason == HOLD_NO_DATA
    assert run([slack(requests=3)] * 3)[-1].reason == HOLD_NO_DATA


def test_policy_bounds_win() -> None:
    bounded = RetunerSettings(persist=1, min_seqs=48, max_seqs=66, min_dwell_s=0)
    assert run([pressure(risk_limit=4)], bounded)[-1].recommended == 48
    assert run([slack(risk_limit=500)], bounded)[-1].recommended == 66
    floor = RetunerSettings(persist=1, min_seqs=64)
    assert run([pressure()], floor)[-1].reason == HOLD_AT_BOUND


def test_a_new_configuration_restarts_from_what_runs() -> None:
    state = WorkloadState()
    run([pressure()] * 3, state=state)
    assert state.recommended == 40
    decision = decide(state, pressure(configured=24, preemptions=0, usage=0.6), SETTINGS, 1000.0)
    assert (decision.current, decision.recommended) == (24, 24)


def test_unknown_configuration_uses_the_risk_bound() -> None:
    decision = run([pressure(configured=None)])[0]
    assert decision.current == 40
    assert run([pressure(configured=None, risk_limit=None)])[0].reason == HOLD_NO_DATA


@pytest.mark.parametrize("bad", [dict(low_usage=0.96, high_usage=0.95), dict(min_seqs=10, max_seqs=5)])
def test_inconsistent_settings_are_rejected(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetunerSettings(**bad)  # type: ignore[arg-type]
