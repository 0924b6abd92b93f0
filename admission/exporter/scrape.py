"""Fetch every target's ``/metrics`` concurrently, each inside the time left of the scrape budget.

A target that hangs, refuses, answers 500, sends too much or sends something that is not a vLLM page
becomes a *down* observation with a reason; the others are unaffected. Nothing here raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import httpx

from admission.exporter.normalize import parse_page
from admission.observations.model import ErrorReason, TargetObservation
from admission.observations.targets import Target
from planner.errors import ScrapeError

ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class _Failed(Exception):
    def __init__(self, reason: ErrorReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: ErrorReason = reason
        self.detail = detail


async def _fetch(client: httpx.AsyncClient, url: str, max_bytes: int) -> str:
    try:
        async with client.stream("GET", url, headers={"Accept": ACCEPT}) as response:
            if response.status_code != 200:
                raise _Failed("http_status", f"HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise _Failed("too_large", f"more than {max_bytes} bytes")
    except httpx.TimeoutException as error:
        raise _Failed("timeout", f"timed out ({type(error).__name__})") from None
    except httpx.HTTPError as error:
        raise _Failed("connect", f"{type(error).__name__}: {error}") from None
    return body.decode("utf-8", errors="replace")


async def scrape_one(
    client: httpx.AsyncClient, target: Target, *, deadline: float, timeout_s: float, max_bytes: int
) -> TargetObservation:
    started = time.monotonic()
    remaining = min(timeout_s, deadline - started)

    def down(reason: ErrorReason, detail: str) -> TargetObservation:
        return TargetObservation(
            target=target, up=False, error=reason, detail=detail, duration_s=time.monotonic() - started
        )

    if remaining <= 0:
        return down("budget", "no time left in the scrape budget")
    try:
        text = await asyncio.wait_for(_fetch(client, target.url, max_bytes), remaining)
    except asyncio.TimeoutError:
        return down("timeout", f"no complete answer within {remaining:.2f} s")
    except _Failed as failure:
        return down(failure.reason, failure.detail)
    try:
        engines, missing = parse_page(text)
    except ScrapeError as error:
        reason: ErrorReason = "not_vllm" if "no vLLM metrics" in error.message else "parse"
        return down(reason, error.message)
    return TargetObservation(
        target=target, up=True, engines=engines, missing=missing, duration_s=time.monotonic() - started
    )


async def scrape_all(
    client: httpx.AsyncClient,
    targets: Sequence[Target],
    *,
    budget_s: float,
    timeout_s: float,
    max_bytes: int,
    concurrency: int,
) -> list[TargetObservation]:
    deadline = time.monotonic() + budget_s
    gate = asyncio.Semaphore(max(1, concurrency))

    async def guarded(target: Target) -> TargetObservation:
        async with gate:
            return await scrape_one(client, target, deadline=deadline, timeout_s=timeout_s, max_bytes=max_bytes)

    return list(await asyncio.gather(*(guarded(t) for t in targets)))
