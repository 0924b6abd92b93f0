"""The decision pool's paths, driven with real worker processes that do what each job says
(fake_worker.py): a review that starves, overruns, crashes its worker or gets an unreadable or a second
reply; a worker that dies while idle, or outgrows its memory bound in a late review; a cancelled review;
shutdown with a review in flight. After each the pool is back at full strength, the restarts carry the
right reason, and the next review (another tenant's) is decided."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from admission.webhook import pool as pool_module
from admission.webhook.pool import DecisionPool, Undecided, WorkerFailed
from admission.webhook.worker import Job, Reply
from planner.policy.model import Policy
from planner.policy.planning import CoreBackend
from tests.webhook import fake_worker

pytestmark = pytest.mark.timeout(120)
POLICY = Policy().for_namespace("default")
Scenario = Callable[[DecisionPool], Awaitable[None]]


@pytest.fixture(autouse=True)
def fake_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "serve", fake_worker.serve)
    monkeypatch.setattr(pool_module, "_LATE_LIMIT", 1.0)


def _job(command: str) -> Callable[[int], Job]:
    return lambda version: Job(command.encode(), "json", "mutate", POLICY, 1, None)


async def _decide(pool: DecisionPool, command: str, budget: float = 5.0, tenant: str = "a") -> Reply:
    return await pool.decide(_job(command), tenant, budget)


async def _eventually(check: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the pool did not get back to full strength"
        await asyncio.sleep(0.05)


def _run(scenario: Scenario, size: int = 1) -> list[str]:
    """Run ``scenario`` on a fresh pool; check the pool recovers and decides the next review; return the
    restarts' reasons."""

    async def main() -> list[str]:
        reasons: list[str] = []
        pool = DecisionPool(size, CoreBackend, start_timeout=60, on_restart=reasons.append)
        await asyncio.get_running_loop().run_in_executor(None, pool.start)
        try:
            await scenario(pool)
            await _eventually(lambda: len(pool._idle) == size and pool.alive() == size)
            reply = await _decide(pool, "echo:next", tenant="another")
            assert reply.body.startswith(b"echo:next|"), reply
        finally:
            pool.close()
        return reasons

    return asyncio.run(main())


def test_a_starved_review_s_worker_comes_back() -> None:
    async def scenario(pool: DecisionPool) -> None:
        with pytest.raises(Undecided) as undecided:
            await _decide(pool, "sleep:0.6", budget=0.2)
        assert undecided.value.kind == "starved"

    assert _run(scenario) == []


@pytest.mark.parametrize(
    ("command", "reasons"),
    [
        # Before: the worker went back to the pool after its late reply though it had exited (it outgrew
        # its memory bound), and the next review, any tenant's, was allowed unchecked.
        ("recycle:0.6", ["memory"]),
        # Before: the exception ended the callback that returns the worker, and the pool lost it for good.
        ("garbage:0.6", ["overrun"]),
        # Still running when the late limit ends: the worker is not waited for any longer.
        ("sleep:3", ["overrun"]),
    ],
    ids=["past-the-memory-bound", "unreadable", "past-the-late-limit"],
)
def test_a_late_review_s_worker_is_replaced_when_it_cannot_serve_again(command: str, reasons: list[str]) -> None:
    async def scenario(pool: DecisionPool) -> None:
        with pytest.raises(Undecided):
            await _decide(pool, command, budget=0.2)

    assert _run(scenario) == reasons


def test_an_overrunning_review_s_worker_is_killed_at_its_budget() -> None:
    async def scenario(pool: DecisionPool) -> None:
        with pytest.raises(Undecided) as undecided:  # (unbounded, it would get the reply after 30 s)
            await _decide(pool, "burn:30", budget=0.3)
        assert undecided.value.kind == "overrun"

    assert _run(scenario) == ["overrun"]


@pytest.mark.parametrize("command", ["exit", "garbage"])
def test_a_crash_or_an_unreadable_reply_is_a_failed_worker(command: str) -> None:
    async def scenario(pool: DecisionPool) -> None:
        with pytest.raises(WorkerFailed):
            await _decide(pool, command)

    assert _run(scenario) == ["failed"]


def test_a_second_reply_is_never_another_review_s_answer() -> None:
    async def scenario(pool: DecisionPool) -> None:
        first = await _decide(pool, "twice")
        assert first.body.startswith(b"first|")
        with pytest.raises(WorkerFailed):  # (the worker's second frame answers the job before: refused)
            await _decide(pool, "echo:victim", tenant="victim")

    assert _run(scenario) == ["failed"]


@pytest.mark.parametrize("used_before", [True, False])
def test_a_worker_that_dies_while_idle_costs_no_review(used_before: bool) -> None:
    async def scenario(pool: DecisionPool) -> None:
        if used_before:  # (its streams are open: the loop sees the end of the socket)
            await _decide(pool, "echo:before")
        worker = pool._idle[0]
        worker.process.kill()
        worker.process.join(5)
        if used_before:
            await _eventually(lambda: worker.reader is not None and worker.reader.at_eof())
        reply = await _decide(pool, "echo:after", tenant="victim")
        assert reply.body.startswith(b"echo:after|")

    assert _run(scenario) == ["failed"]


def test_a_cancelled_review_s_worker_is_replaced() -> None:
    async def scenario(pool: DecisionPool) -> None:
        review = asyncio.ensure_future(_decide(pool, "sleep:1"))
        await asyncio.sleep(0.2)
        review.cancel()
        with pytest.raises(asyncio.CancelledError):
            await review

    assert _run(scenario) == ["failed"]


def test_shutdown_with_a_review_in_flight_is_a_failed_review_not_a_crash() -> None:
    async def main() -> list[str]:
        reasons: list[str] = []
        pool = DecisionPool(1, CoreBackend, start_timeout=60, on_restart=reasons.append)
        await asyncio.get_running_loop().run_in_executor(None, pool.start)
        review = asyncio.ensure_future(_decide(pool, "sleep:2"))
        await asyncio.sleep(0.3)
        pool.close()
        with pytest.raises(WorkerFailed):
            await review
        assert pool.alive() == 0
        return reasons

    assert asyncio.run(main()) == []
