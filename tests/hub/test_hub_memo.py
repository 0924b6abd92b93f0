"""The in-memory memo and the one-lookup-per-model rule behind the webhook's budget."""

from __future__ import annotations

import threading

import pytest
from hub_fake_server import FakeHub

from planner.errors import GatedModelError, HubUnavailableError, ModelNotFoundError, ResolutionTimeoutError
from planner.hub.memo import BRANCH_TTL_S, NEGATIVE_TTL_S, Memo, SingleFlight, run_with_deadline, ttl_for
from planner.hub.resolve import resolve_model


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_entries_expire_and_only_definitive_failures_are_kept() -> None:
    clock = Clock()
    memo: Memo[str] = Memo(max_entries=2, clock=clock)
    memo.put("branch", "a", ttl_for("main"))
    memo.put("commit", "b", ttl_for("0123456789abcdef0123456789abcdef01234567"))
    clock.now += BRANCH_TTL_S
    assert memo.get("branch") is None and memo.get("commit") == "b"

    memo.put_failure("down", HubUnavailableError("down"))  # transient: never memoized
    assert memo.get("down") is None
    memo.put_failure("missing", ModelNotFoundError("missing"))
    with pytest.raises(ModelNotFoundError):
        memo.get("missing")
    clock.now += NEGATIVE_TTL_S
    assert memo.get("missing") is None

    memo.put("x", "1", None)
    memo.put("y", "2", None)
    memo.put("z", "3", None)  # least recently used goes
    assert memo.get("x") is None and memo.get("z") == "3"


def test_one_lookup_per_key_and_a_bounded_number_in_flight() -> None:
    flights: SingleFlight[int] = SingleFlight(max_in_flight=1)
    gate = threading.Event()
    calls: list[int] = []

    def job() -> int:
        calls.append(1)
        gate.wait(10)
        return 7

    first = flights.submit("k", job)
    assert flights.submit("k", job) is first  # joined, not started again
    with pytest.raises(HubUnavailableError, match="already waiting"):
        flights.submit("other", job)
    with pytest.raises(ResolutionTimeoutError, match="not resolved within"):
        run_with_deadline(flights, "k", job, 0.05, what="org/model")
    gate.set()
    assert first.result(timeout=10) == 7 and calls == [1]
    assert run_with_deadline(flights, "k2", lambda: 3, 10, what="x") == 3


def test_a_missing_model_is_not_looked_up_again_at_every_admission(hub: FakeHub) -> None:
    with pytest.raises(ModelNotFoundError):
        resolve_model("acme/typo", timeout=5)
    requests = hub.count()
    with pytest.raises(ModelNotFoundError):
        resolve_model("acme/typo", timeout=5)
    assert hub.count() == requests
    # A different token is a different question (a gated answer does not leak across credentials).
    with pytest.raises((ModelNotFoundError, GatedModelError)):
        resolve_model("acme/typo", timeout=5, token="hf_x")
    assert hub.count() > requests
