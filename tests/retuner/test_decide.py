"""The retuner's control law: estimate, persistence, hysteresis, dwell, bounded steps, ceiling, probes.

Signals below describe a cache of 2,177 usable blocks and requests that end at 128 blocks: the capacity
with 0.1 kept free is floor(2177 x 0.9 / 128) = 15.
"""

from __future__ import annotations

import pytest

from admission.retuner.decide import (
    HOLD_AT_BOUND,
    HOLD_DWELL,
    HOLD_NO_DATA,
    HOLD_NOT_PERSISTENT,
    HOLD_ROLLOUT,
    HOLD_STEADY,
    HOLD_UNCHANGED,
    KV_CACHE_NEAR_FULL,
    KV_CACHE_SLACK,
    PREEMPTIONS_PERSIST,
    PROBE_PREEMPTED,
    Decision,
    WorkloadSignals,
    WorkloadState,
    decide,
)
from admission.retuner.settings import RetunerSettings

SETTINGS = RetunerSettings(persist=3, min_dwell_s=600, min_requests=10)
BLOCKS, FOOTPRINT, CAPACITY = 2177, 128.0, 15


def signals(**kw: object) -> WorkloadSignals:
    base: dict[str, object] = dict(
        preemptions=0,
        usage=0.7,
        waiting=40,
        configured=64,
        usable_blocks=BLOCKS,
        footprint_blocks=FOOTPRINT,
        occupancy_blocks=90.0,
        requests=500,
    )
    base.update(kw)
    return WorkloadSignals(**base)  # type: ignore[arg-type]


def pressure(**kw: object) -> WorkloadSignals:
    return signals(**{"preemptions": 5, "usage": 0.99, **kw})


def slack(**kw: object) -> WorkloadSignals:
    return signals(**{"configured": 4, "usage": 0.2, **kw})


def run(
    observations: list[WorkloadSignals],
    settings: RetunerSettings = SETTINGS,
    *,
    start: float = 0.0,
    every: float = 60.0,
    state: WorkloadState | None = None,
) -> list[Decision]:
    state = state if state is not None else WorkloadState()
    return [decide(state, s, settings, start + i * every) for i, s in enumerate(observations)]


def test_persistent_preemptions_lower_toward_the_estimated_capacity_in_a_bounded_step() -> None:
    decisions = run([pressure(configured=24)] * 3)
    assert [d.action for d in decisions] == ["hold", "hold", "lower"]
    assert decisions[0].reason == HOLD_NOT_PERSISTENT
    last = decisions[2]
    assert (last.reason, last.current, last.recommended, last.capacity) == (PREEMPTIONS_PERSIST, 24, 15, 15)
    assert last.footprint_blocks == FOOTPRINT
    assert run([pressure()] * 3)[-1].recommended == 32  # 64 -> at most half in one step


def test_the_footprint_is_floored_by_the_occupancy_seen() -> None:
    # Lengths say 128 blocks, but sequences were seen holding 160 each: capacity floor(1959.3 / 160) = 12.
    decisions = run([pressure(configured=24, occupancy_blocks=160.0)] * 3)
    assert decisions[-1].footprint_blocks == 160.0 and decisions[-1].recommended == 12


def test_a_single_blip_does_nothing() -> None:
    decisions = run([pressure(), signals(waiting=0), pressure(), pressure()])
    assert all(d.action == "hold" for d in decisions)


def test_the_band_between_capacity_and_a_full_cache_is_steady() -> None:
    # 16 runs above the capacity (15) with a queue, no preemption, usage below 0.95: nothing moves.
    decisions = run([signals(configured=16, usage=0.94)] * 6)
    assert {d.reason for d in decisions} == {HOLD_STEADY} and {d.recommended for d in decisions} == {16}


def test_near_full_without_preemptions_also_lowers() -> None:
    decisions = run([signals(configured=20, usage=0.97)] * 3)
    assert (decisions[-1].action, decisions[-1].reason, decisions[-1].recommended) == ("lower", KV_CACHE_NEAR_FULL, 15)


def test_a_cut_for_a_cache_kept_near_full_is_a_ceiling_too() -> None:
    quick, state = SETTINGS.model_copy(update={"min_dwell_s": 0}), WorkloadState()
    assert run([signals(configured=20, usage=0.97)] * 3, quick, state=state)[-1].recommended == 15
    assert state.ceiling == 20
    # Requests got a little shorter (97 blocks: capacity 20, within the noise band that keeps the
    # ceiling): a raise from 16 stops below the value that filled the cache.
    later = run([slack(configured=16, footprint_blocks=97.0)] * 3, quick, start=1000.0, state=state)
    assert (later[-1].capacity, later[-1].recommended) == (20, 19)


def test_unexplained_pressure_cuts_a_quarter() -> None:
    # Preemptions at 12, where the estimate says 15 fit: the estimate is wrong for this load.
    assert run([pressure(configured=12)] * 3)[-1].recommended == 9
    assert run([pressure(configured=12, footprint_blocks=None)] * 3)[-1].recommended == 9


def test_no_ratchet_at_an_unchanged_configuration() -> None:
    # Recommend mode: nobody applies the advice, the same pressure goes on for an hour.
    decisions = run([pressure()] * 60, RetunerSettings(persist=3, min_dwell_s=0, min_requests=10))
    assert [d.recommended for d in decisions[2:]] == [32] * 58
    assert {d.reason for d in decisions[3:]} == {HOLD_UNCHANGED}
    assert [d.action for d in decisions].count("lower") == 1


def test_dwell_holds_a_change_of_advice_not_the_advice() -> None:
    state = WorkloadState()
    first = run([pressure(configured=24)] * 3, state=state)
    assert first[-1].recommended == 15
    # The load gets heavier at the same configuration (sequences now hold 192 blocks): capacity 10,
    # but the advice changed 60 s ago.
    later = run([pressure(configured=24, footprint_blocks=192.0)] * 2, start=180.0, state=state)
    assert later[-1].reason == HOLD_DWELL and later[-1].recommended == 15
    after = run([pressure(configured=24, footprint_blocks=192.0)], start=800.0, state=state)
    assert after[-1].action == "lower" and after[-1].recommended == 12  # half of 24 at most


def test_slack_raises_in_bounded_steps_up_to_the_capacity() -> None:
    decisions = run([slack()] * 3)
    assert (decisions[-1].action, decisions[-1].reason, decisions[-1].recommended) == ("raise", KV_CACHE_SLACK, 5)
    assert run([slack(configured=12)] * 3)[-1].recommended == 15  # 12 + 3 = 15 = the capacity
    assert run([slack(configured=14)] * 3)[-1].recommended == 15  # 14 + 3 capped at the capacity
    at_capacity = run([slack(configured=15)] * 3)
    assert {d.reason for d in at_capacity} == {HOLD_STEADY}  # no slack at the capacity: nothing to do


def test_slack_without_a_length_estimate_holds() -> None:
    assert run([slack(footprint_blocks=None)] * 3)[-1].reason == HOLD_NO_DATA
    assert run([slack(requests=3)] * 3)[-1].reason == HOLD_NO_DATA  # fewer than min_requests finished
    # Occupancy alone is a lower bound of the peak: never a reason to raise.
    assert run([slack(footprint_blocks=None, occupancy_blocks=10.0)] * 3)[-1].reason == HOLD_NO_DATA


def test_the_length_estimate_survives_a_rollout_until_new_pods_have_their_own() -> None:
    state, quick = WorkloadState(), SETTINGS.model_copy(update={"min_dwell_s": 0})
    run([slack()] * 3, quick, state=state)
    # New pods at 5: their histograms are empty, the load is the same.
    decisions = run([slack(configured=5, requests=0, footprint_blocks=None)] * 3, quick, start=180.0, state=state)
    assert decisions[-1].capacity == CAPACITY and decisions[-1].recommended == 6


def test_a_probe_that_preempts_rolls_back_at_once_and_becomes_a_ceiling() -> None:
    settings = RetunerSettings(persist=3, min_dwell_s=600, min_requests=10)
    state = WorkloadState()
    run([slack(configured=10)] * 3, settings, state=state)  # 10 clean three times: known good; raise to 12
    assert state.recommended == 12 and state.last_good == 10
    # The rollout to 12 happens; the first observation there has preemptions (the estimate was wrong).
    decision = decide(state, slack(configured=12, preemptions=3), settings, 200.0)
    assert (decision.action, decision.reason, decision.recommended, decision.rollback) == (
        "lower",
        PROBE_PREEMPTED,
        10,
        True,
    )
    assert state.ceiling == 12
    # Back at 10 and clean again, with a queue: the next probe stops below the ceiling.
    later = run([slack(configured=10)] * 3, settings, start=2000.0, state=state)
    assert later[-1].action == "raise" and later[-1].recommended == 11
    # A lighter load (footprint well below the one that preempted) clears the ceiling.
    lighter = run([slack(configured=11, footprint_blocks=64.0)] * 3, settings, start=4000.0, state=state)
    assert state.ceiling is None and lighter[-1].recommended == 13


def test_preemptions_outside_a_probe_need_persistence() -> None:
    state = WorkloadState()
    decisions = run([pressure(configured=20)] * 2, state=state)
    assert all(d.action == "hold" for d in decisions) and not state.probing


def test_policy_bounds_win() -> None:
    bounded = RetunerSettings(persist=1, min_seqs=48, max_seqs=66, min_dwell_s=0, min_requests=10)
    assert run([pressure()], bounded)[-1].recommended == 48
    assert run([slack(configured=50, footprint_blocks=16.0, occupancy_blocks=8.0)], bounded)[-1].recommended == 62
    assert run([slack(configured=60, footprint_blocks=16.0, occupancy_blocks=8.0)], bounded)[-1].recommended == 66
    floor = RetunerSettings(persist=1, min_seqs=64, min_requests=10)
    assert run([pressure()], floor)[-1].reason == HOLD_AT_BOUND


def test_a_new_configuration_restarts_from_what_runs() -> None:
    state = WorkloadState()
    run([pressure()] * 3, state=state)
    assert state.recommended == 32
    decision = decide(state, signals(configured=24, waiting=0), SETTINGS, 1000.0)
    assert (decision.current, decision.recommended) == (24, 24)


def test_a_rollout_under_way_is_evidence_for_neither_configuration() -> None:
    state = WorkloadState()
    run([pressure(configured=64)] * 2, state=state)
    # Old pods at 64 still preempting next to new pods at 32: nothing is learned about 32 from it.
    mixed = run([pressure(configured=32, mixed=True)] * 5, start=120.0, state=state)
    assert {d.reason for d in mixed} == {HOLD_ROLLOUT} and state.ceiling == 64 and state.configured == 64
    after = decide(state, signals(configured=32), SETTINGS, 600.0)
    assert (after.current, after.recommended, after.reason) == (32, 32, HOLD_STEADY)


def test_unknown_configuration_holds() -> None:
    assert run([pressure(configured=None)])[0].reason == HOLD_NO_DATA


def test_inconsistent_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        RetunerSettings(min_seqs=10, max_seqs=5)
