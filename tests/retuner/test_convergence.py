"""The retuner finds the real limit on the simulator, from above and from below, and never ratchets.

The deployment of issue 15: Llama-3.1-8B-Instruct on an L4, vLLM 0.19.0, 8K context (1,799 KV blocks as planned today),
64 users each sending 1,024 + 1,024-token requests back to back. The true no-preemption limit is found
here by a sweep of ``--max-num-seqs``; the retuner, in apply mode, starting from 64 (preempting) and
from 4 (a long queue with KV to spare), must end within [0.85, 1.0] x that limit, and a rerun at its
recommendation must not preempt. In recommend mode (the advice is never applied, so the pressure
stays) the advice must not move once given.

One observation per 60 s of the engine's virtual time (the default ``--retune-interval``), with the
default persistence and steps; ``min_dwell_s=0`` only so that a test does not need 15 observations
per change (the dwell has its own tests in test_decide.py).
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from admission.retuner import Retuner, RetunerSettings
from admission.retuner.decide import Decision
from tests.retuner.closed_loop import ClosedLoop, planned

INTERVAL = 60.0
KEY = ("ml", "llama")
CLEAN_RUN_S = 360.0  # > 5 request lifetimes (~65 s each on the L4's speed model)


def _clean(max_num_seqs: int) -> bool:
    loop = ClosedLoop(max_num_seqs, seed=max_num_seqs)
    loop.run(CLEAN_RUN_S, stop_on_preemption=True)
    return loop.preemptions == 0


@lru_cache(maxsize=1)
def true_limit() -> int:
    """The largest --max-num-seqs that runs this load without preemption (sweeping up from 8)."""
    assert _clean(8), "the sweep must start from a value that does not preempt"
    n = 8
    while _clean(n + 1):
        n += 1
        assert n < 64, "64 preempts in the issue's deployment"
    return n


def _apply_until_settled(start: int, *, max_windows: int = 48, settled: int = 6) -> tuple[int, list[Decision]]:
    """Apply mode: every change is a rollout (a new pod); stop after ``settled`` windows in a row that
    hold because nothing needs to move (steady, or at a bound)."""
    # No writer here: the test plays the rollout itself (a new pod at the recommended value).
    retuner = Retuner(RetunerSettings(mode="apply", min_dwell_s=0, interval_s=INTERVAL, namespaces=("ml",)))
    config, generation, quiet = start, 0, 0
    loop = ClosedLoop(config, seed=generation)
    decisions: list[Decision] = []
    for window in range(max_windows):
        loop.run(INTERVAL)
        decision = retuner.observe(loop.snapshot(f"llama-{generation}"), now=window * INTERVAL)[KEY]
        decisions.append(decision)
        assert decision.recommended is not None
        if decision.recommended != config:
            config, generation, quiet = decision.recommended, generation + 1, 0
            loop = ClosedLoop(config, seed=generation)
        elif decision.reason in ("Steady", "AtBound"):
            quiet += 1
            if quiet >= settled:
                break
        else:
            quiet = 0
    return config, decisions


@pytest.mark.slow
@pytest.mark.parametrize("start", [64, 4])
def test_apply_mode_settles_near_the_true_limit_from_above_and_below(start: int) -> None:
    limit = true_limit()
    # The usable blocks (one is vLLM's null block) / 128 blocks per finished request: the sweep agrees with
    # the arithmetic (17 when the plan had 2,178 blocks, issue 15's sweep).
    assert limit == (planned().num_gpu_blocks - 1) // 128
    final, decisions = _apply_until_settled(start)
    assert 0.85 * limit <= final <= limit, [(d.current, d.recommended, d.reason) for d in decisions]
    changes = [d for d in decisions if d.action != "hold"]
    # Monotone: from above only cuts, from below only raises (no overshoot, no oscillation) ...
    assert {d.action for d in changes} == {"lower" if start > limit else "raise"}
    # ... in bounded steps: a cut keeps half, a raise adds at most a quarter (at least one).
    for d in changes:
        assert d.current is not None and d.recommended is not None
        assert d.recommended >= d.current // 2 and d.recommended <= d.current + max(1, d.current // 4)
    # The estimate comes from the exact mean lengths: 1,024 + 1,024 - 1 tokens = 128 blocks of 16.
    assert decisions[-1].footprint_blocks == pytest.approx(128, abs=0.01)
    # A fresh server at the recommendation takes the same load without preempting.
    assert _clean(final)


@pytest.mark.slow
@pytest.mark.parametrize("configured", [64, 24])
def test_recommend_mode_advice_stays_put_under_constant_pressure(configured: int) -> None:
    retuner = Retuner(RetunerSettings(mode="recommend", interval_s=INTERVAL))
    loop = ClosedLoop(configured)
    advice: list[int | None] = []
    for window in range(12):
        loop.run(INTERVAL)
        advice.append(retuner.observe(loop.snapshot("llama-0"), now=window * INTERVAL)[KEY].recommended)
    assert loop.preemptions > 0  # the pressure never went away: nobody applied the advice
    first = next(i for i, value in enumerate(advice) if value != configured)
    assert first == 2  # the default persistence: three observations with preemptions
    assert set(advice[first:]) == {advice[first]}, advice  # no ratchet
    # The advice is the bounded step from what runs toward the estimated capacity with 0.1 free
    # (15 when the plan had 2,178 blocks).
    capacity = int((planned().num_gpu_blocks - 1) * 0.9 // 128)
    assert advice[first] == max(capacity, -(-configured // 2))
